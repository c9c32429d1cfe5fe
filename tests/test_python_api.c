// test_python_api.c — the Python package (python/sparsering) through ctypes on the CPU, against the
// command line: a plan, a simulated step's report and timeline, a what-if table and a tuner search equal
// what bin/sparsering writes for the same flags; errors raise SparseringError with the C error's file,
// field and reason; 1000 rounds of calls leave the process's memory where it was; the CPU reference
// attention (MoBA's own block included) equals numpy's masked softmax and its gradients, and repeats bit for
// bit (sparse_attention's deterministic flag accepted, where torch is installed); the GPU calls refuse
// cleanly without a device, and gated patterns always; `pip install ./python` gives a package that works
// outside the repository. Each case is one run of tests/py/python_api.py (numpy and pandas:
// scripts/install-deps.sh), which prints "ok CASE".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

// Run one case of tests/py/python_api.py from the repository root with the package on PYTHONPATH.
static void python_case(const char *name) {
  char cmd[4096], *log = NULL;
  snprintf(cmd, sizeof cmd, "PYTHONPATH=$PWD/python SR_BIN=%s python3 tests/py/python_api.py %s 2>&1", test_bin_dir(),
           name);
  int rc = test_run(cmd, &log);
  if (rc != 0) test_fail(__FILE__, __LINE__, "python_api.py %s: exit %d:\n%s", name, rc, log ? log : "");
  char ok[256];
  snprintf(ok, sizeof ok, "ok %s", name);
  CHECK_STR_CONTAINS(log, ok);
  free(log);
}

TEST(python_plan_is_the_cli_plan_file_with_rank_tokens_and_transfers) { python_case("plan_equals_cli"); }
TEST(python_simulate_gives_the_cli_report_and_timeline) { python_case("simulate_equals_cli"); }
TEST(python_whatif_is_the_cli_csv) { python_case("whatif_equals_cli"); }
TEST(python_tune_gives_the_cli_csv_report_and_plan) { python_case("tune_equals_cli"); }
TEST(python_errors_raise_sparsering_error_with_file_field_and_reason) { python_case("errors_carry_file_field_and_reason"); }
TEST(python_1000_rounds_of_calls_do_not_grow_memory) { python_case("calls_do_not_leak"); }
TEST(python_attention_reference_equals_numpy_with_gradients) { python_case("attention_reference_matches_numpy"); }
TEST(python_cpu_attention_backward_repeats_bit_for_bit_and_accepts_deterministic) {
  python_case("cpu_backward_is_deterministic_and_accepts_the_flag");
}
TEST(python_gpu_attention_refuses_cleanly_without_a_device) { python_case("gpu_calls_need_a_device"); }
TEST(python_pip_install_gives_a_self_contained_package) { python_case("pip_install_is_self_contained"); }

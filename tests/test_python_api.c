// test_python_api.c — the Python package (python/sparsering) through ctypes on the CPU, against the
// command line: a plan, a simulated step's report and timeline, a what-if table and a tuner search equal
// what bin/sparsering writes for the same flags; errors raise SparseringError with the C error's file,
// field and reason; 1000 rounds of calls leave the process's memory where it was; the CPU reference
// attention (MoBA's own block included) equals numpy's masked softmax and its gradients, and repeats bit for
// bit (sparse_attention's deterministic flag accepted, where torch is installed); a shape's layer of a model is
// the planner's layer (the Hugging Face backend passes each module's layer_idx); the GPU calls refuse
// cleanly without a device, and gated patterns always; `pip install ./python` gives a package that works
// outside the repository; the other CPU commands (sparsering.commands: model, cluster, compare, show, pattern,
// replay, sweep, trace gen / stats / fit / import-minference, predict, repredict) and the executor's MPI jobs
// (attn, train, calibrate) give what the command line gives, checked against figures derived apart from them, and their bad input raises SparseringError naming the
// flag. Each case is one run of tests/py/python_api.py (numpy and pandas:
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
TEST(python_attention_layer_l_is_the_planners_layer_l_and_bad_layers_name_the_field) {
  python_case("attention_layers_are_the_planners_layers");
}
TEST(python_hf_backend_passes_each_modules_layer_and_keeps_every_layer_prepared) {
  python_case("hf_backend_gives_each_layer_its_pattern");
}
TEST(python_pip_install_gives_a_self_contained_package) { python_case("pip_install_is_self_contained"); }

// sparsering.commands: the other CPU commands, each against a figure derived apart from it
TEST(python_model_gives_the_cli_counts_and_the_sequence_flops) { python_case("model_equals_cli"); }
TEST(python_cluster_is_the_cli_cluster_json) { python_case("cluster_equals_cli"); }
TEST(python_compare_of_a_timeline_twice_as_slow_is_minus_half) { python_case("compare_gives_relative_errors"); }
TEST(python_show_gives_the_bytes_show_brief_prints) { python_case("show_step_bytes_equal_cli"); }
TEST(python_pattern_dense_keeps_every_causal_pair) { python_case("pattern_dense_keeps_every_causal_pair"); }
TEST(python_trace_gen_then_stats_gives_the_pattern_density) { python_case("trace_gen_then_stats_round_trip"); }
TEST(python_trace_import_minference_records_every_head) {
  python_case("trace_import_minference_gives_the_config_heads");
}
TEST(python_trace_fit_compares_recorded_with_fitted) { python_case("trace_fit_compares_recorded_with_fitted"); }
TEST(python_replay_step_is_the_simulated_trace_step) { python_case("replay_steps_are_simulated_steps"); }
TEST(python_sweep_rows_are_the_whatif_rows) { python_case("sweep_rows_are_whatif_rows"); }
TEST(python_predict_forward_and_backward_span_its_timeline) { python_case("predict_spans_its_timeline"); }
TEST(python_repredict_errors_are_its_predictions_against_the_logs) {
  python_case("repredict_errors_are_its_predictions");
}
TEST(python_command_errors_raise_sparsering_error_naming_the_flag) { python_case("command_errors_name_the_flag"); }

// the executor's MPI jobs: attn, train, calibrate under mpirun -np ranks (the cluster's GPUs by default), CPU backend
TEST(python_attn_job_runs_every_combination_on_the_clusters_ranks) {
  python_case("attn_job_runs_every_combination_on_the_clusters_ranks");
}
TEST(python_train_job_logs_the_cli_losses) { python_case("train_job_logs_the_cli_losses"); }
TEST(python_calibrate_job_writes_a_cluster_with_measured_links) {
  python_case("calibrate_job_writes_a_cluster_with_measured_links");
}
TEST(python_executor_job_errors_name_the_flag) { python_case("executor_job_errors_name_the_flag"); }

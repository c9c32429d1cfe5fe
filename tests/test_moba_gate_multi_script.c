// test_moba_gate_multi_script.c — scripts/gpu/moba_gate_multi_run.sh (MoBA's GPU gate on two GPUs against the host
// gate) on the CPU backend (SR_DRY=1: tiny-test, short lengths, the host gate on both sides): every stage runs and
// the summary table pairs each (layout, pattern) digest and each training loss of the two runs, all equal.
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

TEST(moba_gate_multi_dry_run_pairs_the_two_gates_digests_and_losses_in_its_table) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 SR_BIN=%s SR_LOGS=%s/mlogs OUT=%s/mout bash scripts/gpu/moba_gate_multi_run.sh 2>&1",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  const char *t = out ? strstr(out, "== summary") : NULL;
  CHECK(t != NULL);
  if (!t) t = "";
  // 3 layouts x 2 patterns, striped:32 x 2 patterns, 2 training steps
  const char *rows[] = {"contiguous/moba:256:4/layer0", "zigzag/moba:512:2/layer0", "striped:128/moba:256:4/layer0",
                        "striped:32/moba:512:2/layer0", "loss step 1", "loss step 2"};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) CHECK_STR_CONTAINS(t, rows[i]);
  CHECK_STR_CONTAINS(t, "2 of 2 ok");
  CHECK_STR_CONTAINS(t, "host gate         fwd ");
  CHECK_STR_CONTAINS(t, "== 10 equal, 0 DIFFER");
  CHECK(strstr(out, "TIMED OUT") == NULL);
  free(out);
}

// test_fpdt_multi_script.c — scripts/gpu/fpdt_multi_run.sh (FPDT on two GPUs of one host) on the CPU backend
// (SR_DRY=1, tiny-test at 1/256 of the lengths): the calibration, the layer table with Ulysses and FPDT each
// measured and predicted, FPDT's host copies, and the training step with activation offload all come out.
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

TEST(fpdt_multi_dry_run_tables_ulysses_and_fpdt_and_trains_a_step_with_offload) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 SR_BIN=%s SR_LOGS=%s/flogs OUT=%s/fout bash scripts/gpu/fpdt_multi_run.sh",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "-- calibrate: exit 0");
  CHECK_STR_CONTAINS(out, "-- l_ulysses_1M: exit 0");
  CHECK_STR_CONTAINS(out, "-- l_fpdt_1M: exit 0");
  // both layer runs in the table with a prediction beside them (9 columns: the error columns filled)
  const char *t = out ? strstr(out, "== table") : NULL;
  CHECK(t && strstr(t, "l_fpdt_1M ") && strstr(t, "l_ulysses_1M ") && strstr(t, "prediction error over 2 configurations"));
  CHECK_STR_CONTAINS(out, "fpdt:256+offload");  // 64K / 256: the chunk scales with the lengths
  CHECK_STR_CONTAINS(out, "host copies (a rank, last repetition)");
  CHECK_STR_CONTAINS(out, "-- t_fpdt_1M: exit 0");
  CHECK_STR_CONTAINS(out, "FPDT in 64K-token chunks offloaded, pattern vs-topp:0.95");
  CHECK_STR_CONTAINS(out, "activation offload on");
  CHECK_STR_CONTAINS(out, "predict: tiny-test fpdt seq 4096 W 2");
  CHECK(strstr(out, "failed") == NULL && strstr(out, "TIMED OUT") == NULL);
  free(out);
}

TEST(fpdt_multi_dry_run_train_layers_cuts_the_model_to_its_first_layers) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 TRAIN_LAYERS=1 TRAIN_PATTERN=dense SR_BIN=%s SR_LOGS=%s/flogs1 OUT=%s/fout1 bash "
                   "scripts/gpu/fpdt_multi_run.sh train",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "-- t_fpdt_1M: exit 0");
  CHECK_STR_CONTAINS(out, "tiny-test-1l.json, random init");
  CHECK_STR_CONTAINS(out, "predict: tiny-test-1l fpdt seq 4096 W 2");  // the model's name: the file's base name
  CHECK(strstr(out, "failed") == NULL && strstr(out, "TIMED OUT") == NULL);
  free(out);
}

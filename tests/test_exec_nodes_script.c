// test_exec_nodes_script.c — exec/gpu_run_nodes.sh (issue 9's runs for a 4- or 8-GPU host) on the CPU
// backend (SR_DRY=1): the correctness stage covers every layout x schedule x pattern at W = 4 and passes,
// the strong-scaling stage times both strategies at W = 2 and 4, each with its prediction, into the
// table, and the training stage runs a step of each strategy at W = 4 with its prediction (CSVs in the
// logs folder); so the script a GPU session runs has already run end to end here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

TEST(nodes_script_dry_run_checks_every_layout_and_schedule_and_tables_the_scaling_runs) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 NP=4 SR_BIN=%s SR_LOGS=%s/logs OUT=%s/out bash exec/gpu_run_nodes.sh 'a strong train'",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  if (!out) return;
  // 3 layouts x 4 schedules x 2 patterns, each checked against the float64 reference
  CHECK_EQ_INT(count(out, ") ok\n"), 24);
  CHECK(strstr(out, "failed") == NULL);
  CHECK(strstr(out, "attn contiguous | double-ring | vs-like:64:256:64: worst") != NULL);
  CHECK(strstr(out, "attn zigzag | usp | dense: worst") != NULL);
  const char *rows[] = {"strong_dense-ring_512K_w2", "strong_mtraining_512K_w2", "strong_dense-ring_512K_w4",
                        "strong_mtraining_512K_w4"};
  const char *table = strstr(out, "== table");
  CHECK(table != NULL);
  for (int i = 0; table && i < 4; i++) {
    const char *r = strstr(table, rows[i]);
    CHECK(r != NULL);
    if (r) CHECK(strncmp(strchr(r, ' '), " (no result)", 12) != 0);  // measured and predicted
  }
  CHECK(table && strstr(table, "prediction error over 4 configurations") != NULL);
  CHECK(strstr(out, "predict: tiny-test dense-ring seq 2048 W 4") != NULL);
  CHECK(strstr(out, "predict: tiny-test mtraining seq 2048 W 4") != NULL);
  char csv[800];
  snprintf(csv, sizeof csv, "%s/logs/t_mtraining_512K.csv", test_tmpdir());
  CHECK(test_file_exists(csv));
  free(out);
}

// test_exec_nodes_script.c — scripts/gpu/exec_nodes_run.sh (issue 9's runs for a 4- or 8-GPU host) on the CPU
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
           MPI_ENV "SR_DRY=1 NP=4 SR_BIN=%s SR_LOGS=%s/logs OUT=%s/out bash scripts/gpu/exec_nodes_run.sh 'a strong train'",
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
  CHECK(strstr(out, "predict: tiny-test striped-ring seq 2048 W 4") != NULL);
  CHECK(strstr(out, "predict: tiny-test mtraining seq 2048 W 4") != NULL);
  char csv[800];
  snprintf(csv, sizeof csv, "%s/logs/t_mtraining_512K.csv", test_tmpdir());
  CHECK(test_file_exists(csv));
  free(out);
}

// The table row of run `name` in the text after `from` (up to its line end) into dst; 0 when there is none.
static int table_row(const char *from, const char *name, char *dst, size_t size) {
  const char *r = from ? strstr(from, name) : NULL, *end = r ? strchr(r, '\n') : NULL;
  if (!r || !end || (size_t)(end - r) >= size) return 0;
  memcpy(dst, r, (size_t)(end - r));
  dst[end - r] = 0;
  return 1;
}

TEST(nodes_predict_repredicts_the_scaling_runs_as_the_runs_predicted_themselves) {
  // after stage cal every W's cluster is written from the calibrated one, so scripts/gpu/exec_nodes_predict.sh, which
  // re-predicts the logged runs on the same calibration, must reproduce each row of the run's own table
  char cmd[2048], *run = NULL, *re = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 NP=4 SR_BIN=%s SR_LOGS=%s/logs2 OUT=%s/out2 bash scripts/gpu/exec_nodes_run.sh 'cal strong'",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &run), 0);
  snprintf(cmd, sizeof cmd, "SR_BIN=%s OUT=%s/re bash scripts/gpu/exec_nodes_predict.sh %s/out2/h200-nodes-4-calibrated.json %s/logs2",
           test_bin_dir(), test_tmpdir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &re), 0);
  const char *rows[] = {"strong_dense-ring_512K_w2", "strong_mtraining_512K_w2", "strong_dense-ring_512K_w4",
                        "strong_mtraining_512K_w4"};
  for (int i = 0; i < 4; i++) {
    char a[256], b[256];
    CHECK(table_row(run ? strstr(run, "== table") : NULL, rows[i], a, sizeof a));
    CHECK(table_row(re ? strstr(re, "== table") : NULL, rows[i], b, sizeof b));
    CHECK_STR_CONTAINS(b, a);
    CHECK(strlen(a) > 60);  // measured and predicted columns, not "(no result)"
  }
  // a missing cluster file is an input error
  free(re), re = NULL;
  snprintf(cmd, sizeof cmd, "SR_BIN=%s bash scripts/gpu/exec_nodes_predict.sh %s/nonexistent.json %s/logs2 2>&1", test_bin_dir(),
           test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &re), 2);
  CHECK_STR_CONTAINS(re, "nonexistent.json");
  free(run), free(re);
}

TEST(cluster_nodes_writes_two_nodes_and_refuses_bad_input) {
  // scripts/cluster_nodes.py: 4 GPUs become 2 nodes of 2 that the planner loads; an odd count above 2 or a
  // malformed base file is an input error (exit 2) naming what was wrong, with nothing written
  char cmd[2048], out4[600], bad[600], *o = NULL;
  snprintf(out4, sizeof out4, "%s/c4.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, "python3 scripts/cluster_nodes.py models/clusters/h200-1x2.json 4 %s && %s/sparsering cluster --cluster %s",
           out4, test_bin_dir(), out4);
  CHECK_EQ_INT(test_run(cmd, &o), 0);
  CHECK_STR_CONTAINS(o, "2 nodes x 2 = 4");
  free(o), o = NULL;
  snprintf(cmd, sizeof cmd, "python3 scripts/cluster_nodes.py models/clusters/h200-1x2.json 3 %s/c3.json 2>&1", test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &o), 2);
  CHECK_STR_CONTAINS(o, "W = 3");
  free(o), o = NULL;
  snprintf(bad, sizeof bad, "%s/bad.json", test_tmpdir());
  FILE *f = fopen(bad, "w");
  if (f) fputs("{\"nodes\": 1,", f), fclose(f);
  snprintf(cmd, sizeof cmd, "python3 scripts/cluster_nodes.py %s 4 %s/never.json 2>&1", bad, test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &o), 2);
  CHECK_STR_CONTAINS(o, "bad.json");
  char never[700];
  snprintf(never, sizeof never, "%s/never.json", test_tmpdir());
  CHECK(!test_file_exists(never));
  free(o);
}

TEST(nodes_script_stops_when_a_correctness_run_fails) {
  // a correctness run that exits non-zero without printing "failed" (an input error, say) still stops
  // the script before any timing: a sparsering-exec that refuses everything stands in for it
  char dir[700], exe[800], cmd[2048], *out = NULL;
  snprintf(dir, sizeof dir, "%s/fakebin", test_tmpdir());
  snprintf(exe, sizeof exe, "%s/sparsering-exec", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s && printf '#!/bin/sh\\necho \"sparsering-exec attn: refused\" >&2\\nexit 2\\n' > %s && "
           "chmod +x %s", dir, exe, exe);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 NP=4 SR_BIN=%s SR_LOGS=%s/logs3 OUT=%s/out3 bash scripts/gpu/exec_nodes_run.sh 'a strong' 2>&1", dir,
           test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 1);
  CHECK_STR_CONTAINS(out, "correctness FAILED");
  CHECK(out && strstr(out, "strong_") == NULL);  // nothing timed after it
  free(out);
}

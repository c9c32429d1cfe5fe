// test_train_dist.c — `sparsering-exec train` under mpirun: W = 2 and 4 ranks (context parallelism,
// ZeRO-1, the CPU comm backend) give the same per-step loss as one process, to 1e-5 in float32, for
// dense and sparse patterns; chosen steps' attention patterns are recorded as a trace.
#include <stdlib.h>
#include <string.h>

#include "plan/pattern.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "traces/trace.h"

// Run training on `world` ranks (the fox text of tests/mpi_fixture.h); fills loss[0..steps) from the CSV; returns the
// exit status.
static int train_losses(int world, const char *layout, const char *pattern, int steps, double *loss, const char *extra) {
  char flags[1024], rows[8][64] = {{0}};
  if (steps > 8) {
    test_fail(__FILE__, __LINE__, "train_losses holds 8 steps, asked for %d", steps);
    return -1;
  }
  snprintf(flags, sizeof flags, "--layout %s --schedule ring --pattern %s %s", layout, pattern, extra);
  int rc = train_fox_columns(world, "tiny-test", flags, steps, 1, &rows[0][0], sizeof rows[0]);
  for (int i = 0; i < steps; i++) loss[i] = strtod(rows[i], NULL);
  return rc;
}

static void check_same_losses_x(int world, const char *layout, const char *pattern, const char *extra) {
  enum { STEPS = 3 };
  double one[STEPS] = {0}, many[STEPS] = {0};
  if (train_losses(1, "contiguous", pattern, STEPS, one, "") != 0) return;
  if (train_losses(world, layout, pattern, STEPS, many, extra) != 0) return;
  for (int s = 0; s < STEPS; s++) CHECK_NEAR(many[s], one[s], 1e-5);
  CHECK(one[STEPS - 1] < one[0]);  // the steps did train
}

static void check_same_losses(int world, const char *layout, const char *pattern) {
  check_same_losses_x(world, layout, pattern, "");
}

TEST(train_two_ranks_striped_match_one_process_loss) { check_same_losses(2, "striped:8", "dense"); }

TEST(train_four_ranks_zigzag_uneven_match_one_process_loss) { check_same_losses(4, "zigzag", "dense"); }

// A vertical-slash pattern (sinks 4, window 16, 8 vertical columns): the distributed sparse attention
// over 2 ranks trains exactly like the same pattern on one process.
TEST(train_two_ranks_sparse_pattern_match_one_process_loss) { check_same_losses(2, "striped:8", "vs-like:4:16:8"); }

// --fwd-runs: the forward on the runs form (scattered slashes as 64-key runs, plan/tiles_runs.c), the
// backward on the tile form; contiguous shards, whose tiles hold consecutive positions, so the VS heads'
// partial tiles become runs. The losses are those of one process on the tile form.
TEST(train_two_ranks_forward_on_runs_match_one_process_loss) {
  check_same_losses_x(2, "contiguous", "vs-topp:0.9", "--fwd-runs");
}

TEST(train_records_the_attention_pattern_of_chosen_steps_as_a_trace) {
  const char *dir = test_tmpdir();
  char trace[700], csv[700], cmd[4096];
  const char *cluster = mpi_h200_cluster(2);
  snprintf(trace, sizeof trace, "%s/run.trace.safetensors", dir);
  snprintf(csv, sizeof csv, "%s/run.csv", dir);
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 "
           "%s/sparsering-exec train --model tiny-test --cluster %s --seq 300 --layout striped:16 --schedule ring "
           "--pattern window:4:64 --data passkey --digits 3 --steps 3 --trace %s --trace-steps 1,3 --csv %s --quiet",
           test_bin_dir(), cluster, trace, csv);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "trace of 2 step(s)");
  free(out);
  trace_file tf;
  sr_error e = {0};
  CHECK_EQ_INT(trace_open(trace, &tf, &e), SR_OK);
  CHECK_EQ_INT(tf.info.steps, 2);
  CHECK_EQ_INT(tf.info.seq_len, 300);
  CHECK_EQ_INT(tf.info.layers, 2);
  CHECK_EQ_INT(tf.info.heads, 4);
  pattern p;
  CHECK_EQ_INT(trace_read_step(&tf, 1, &p, &e), SR_OK);
  head_pattern *h = pattern_head(&p, 1, 3);
  CHECK_EQ_INT(h->kind, PATTERN_WINDOW);
  CHECK_EQ_INT(h->sinks, 4);
  CHECK_EQ_INT(h->window, 64);
  pattern_free(&p);
  trace_close(&tf);
}

// Losses column of a train CSV (step order), as printed (%.17g: the exact double).
static int csv_losses(const char *path, char losses[][40], int max) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < max) {
    if (strncmp(line, "run,", 4) == 0) continue;
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL, *c3 = c2 ? strchr(c2 + 1, ',') : NULL;
    if (!c3) continue;
    snprintf(losses[n++], 40, "%.*s", (int)(c3 - c2 - 1), c2 + 1);
  }
  fclose(f);
  return n;
}

TEST(train_two_ranks_resume_from_a_checkpoint_continues_bit_for_bit) {
  const char *dir = test_tmpdir();
  char text[700], cmd[4096], base[3000];
  const char *cluster = mpi_h200_cluster(2);
  snprintf(text, sizeof text, "%s/fox.txt", dir);
  snprintf(cmd, sizeof cmd, "for i in 1 2 3 4 5 6 7 8; do printf 'the quick brown fox %%d. ' $i; done > %s", text);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(base, sizeof base,
           MPI_ENV "mpirun --oversubscribe -np 2 "
           "%s/sparsering-exec train --model tiny-test --cluster %s --seq 64 --layout striped:8 --schedule ring --data %s "
           "--lr 3e-3 --quiet",
           test_bin_dir(), cluster, text);
  snprintf(cmd, sizeof cmd, "%s --steps 4 --csv %s/full.csv", base, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "%s --steps 2 --ckpt %s/ckpt --csv %s/first.csv", base, dir, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "%s --steps 4 --resume %s/ckpt --csv %s/second.csv", base, dir, dir);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  char full[4][40], second[4][40], path[800];
  snprintf(path, sizeof path, "%s/full.csv", dir);
  CHECK_EQ_INT(csv_losses(path, full, 4), 4);
  snprintf(path, sizeof path, "%s/second.csv", dir);
  CHECK_EQ_INT(csv_losses(path, second, 4), 2);  // steps 3 and 4 only
  CHECK(strcmp(second[0], full[2]) == 0);
  CHECK(strcmp(second[1], full[3]) == 0);
  snprintf(path, sizeof path, "%s/ckpt/step-000000002/model.safetensors", dir);
  CHECK(test_file_exists(path));
}

TEST(train_plan_for_more_ranks_than_the_job_is_an_input_error) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster h200-1x2 --strategy dense-ring --seq 64 --steps 1 2>&1",
           test_bin_dir());
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "2 ranks, the job has 1");
  free(out);
}

TEST(train_unknown_backend_is_an_input_error) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec train --model tiny-test --backend tpu --seq 64 2>&1", test_bin_dir());
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--backend");
  free(out);
}

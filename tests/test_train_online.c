// test_train_online.c — MTraining's online vertical-slash estimation in the trainer, and the trainer's
// attention plans: the estimate keeps the column the last queries attend to and drops columns they
// ignore; the model calls the estimate hook once per layer per forward and never during recomputation;
// a vs-online run trains on one rank and is refused on two; plans built in threads train as sequential.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/model_cpu.h"
#include "train/train_online.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

TEST(train_online_estimate_keeps_the_column_the_last_queries_attend_to) {
  // Every query is u; key 137 is 10 u, every other key is small noise: every query at or after position 137
  // puts almost all its softmax mass on key 137, which the top-p selection must keep as a vertical.
  enum { T = 200, H = 2, HKV = 1, D = 16 };
  static float q[T * H * D], k[T * HKV * D];
  int64_t pos[T];
  uint64_t s = 99;
  for (int i = 0; i < T; i++) {
    pos[i] = i;
    for (int d = 0; d < D; d++) {
      for (int h = 0; h < H; h++) q[(i * H + h) * D + d] = 1.0f;
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      k[i * D + d] = 0.01f * (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
  }
  for (int d = 0; d < D; d++) k[137 * D + d] = 10.0f;
  pattern pat;
  sr_error e = {0};
  CHECK_EQ_INT(pattern_alloc(&pat, T, 1, H, &e), SR_OK);
  online_vs o;
  CHECK_EQ_INT(online_vs_from_spec(&o, "vs-online:0.9", &e), SR_OK);
  CHECK_EQ_INT(online_vs_estimate(&o, q, k, pos, T, H, HKV, D, &pat, 0, &e), SR_OK);
  for (int h = 0; h < H; h++) {
    head_pattern *hp = pattern_head(&pat, 0, h);
    CHECK_EQ_INT(hp->kind, PATTERN_VS);
    CHECK(pattern_keeps(hp, T - 1, 137));       // the attended column
    CHECK(!pattern_keeps(hp, T - 1, 5));        // no forced sinks: key 5 has no mass
    CHECK(!pattern_keeps(hp, T - 1, 100));      // ignored: offset 99 is beyond every estimating query's
  }
  pattern_free(&pat);
}

// Column and diagonal sums of one head over 100 keys when the last 64 queries (36..99) estimate: queries
// 37..99 put all their mass on key 37, query 36 spreads it evenly over keys 0..36.
static void scores_on_key37(float *vert, float *slash) {
  for (int i = 36; i < 100; i++) {
    if (i >= 37) {
      vert[37] += 1.0f;
      slash[i - 37] += 1.0f;
    } else {
      for (int j = 0; j <= i; j++) vert[j] += 1.0f / (float)(i + 1), slash[i - j] += 1.0f / (float)(i + 1);
    }
  }
}

// The selection of `spec` from those sums, as the GPU path hands them to online_vs_select: head 0 of pat.
static head_pattern *select_on_key37(const char *spec, pattern *pat) {
  static float vert[100], slash[100];
  memset(vert, 0, sizeof vert), memset(slash, 0, sizeof slash);
  scores_on_key37(vert, slash);
  sr_error e = {0};
  online_vs o;
  CHECK_EQ_INT(pattern_alloc(pat, 100, 1, 1, &e), SR_OK);
  CHECK_EQ_INT(online_vs_from_spec(&o, spec, &e), SR_OK);
  CHECK_EQ_INT(online_vs_select(&o, vert, slash, 1, pat, 0, &e), SR_OK);
  return pattern_head(pat, 0, 0);
}

TEST(train_online_fixed_budget_keeps_exactly_v_columns_and_s_diagonals) {
  // "vs-online:topk:V:S" takes the V highest columns and S highest diagonals whatever their mass (ties:
  // the lower index). Queries 37..99 attend key 37 alone; query 36 spreads over keys 0..36.
  pattern pat;
  head_pattern *hp = select_on_key37("vs-online:topk:3:2", &pat);
  CHECK_EQ_INT(hp->n_vertical, 3);
  CHECK_EQ_INT(hp->n_slash, 2);
  // column 37 holds 63 units, columns 0..36 query 36's 1/37 each (ties: the lowest two, 0 and 1)
  CHECK_EQ_INT(hp->vertical[0], 0);
  CHECK_EQ_INT(hp->vertical[1], 1);
  CHECK_EQ_INT(hp->vertical[2], 37);
  // offsets 0..36 hold 1 + 1/37, offsets 37..62 hold 1: the lowest two of the first group
  CHECK_EQ_INT(hp->slash[0], 0);
  CHECK_EQ_INT(hp->slash[1], 1);
  pattern_free(&pat);
}

TEST(train_online_spec_errors_name_the_pattern) {
  online_vs o;
  const char *bad[] = {"vs-online:1.5", "vs-online:topk:0:5", "vs-online:topk:5", "vs-online:topk:a:5", "vs-topp:0.9"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sr_error e = {0};
    CHECK_EQ_INT(online_vs_from_spec(&o, bad[i], &e), SR_EINPUT);
    CHECK(strstr(e.msg, "pattern") != NULL);
  }
}

TEST(train_online_select_from_scores_matches_the_reference_estimate) {
  // The GPU path hands float column / diagonal sums to online_vs_select; fed the same sums the reference
  // computes (here: every query on key 37 of 100), it must choose the same verticals.
  pattern pat;
  head_pattern *hp = select_on_key37("vs-online:0.9", &pat);
  // column 37 holds 63 of the 64 units of mass: top-p 0.9 keeps it alone
  CHECK_EQ_INT(hp->n_vertical, 1);
  CHECK_EQ_INT(hp->vertical[0], 37);
  pattern_free(&pat);
}

static int hook_calls;
static int count_hook(void *ctx, int layer, int64_t T, const float *q, const float *k, sr_error *e) {
  hook_calls++;
  return SR_OK;
}

TEST(train_online_hook_runs_once_per_layer_and_never_while_recomputing) {
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  model_cpu m;
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 32, 32, 1, &e), SR_OK);  // recomputation on
  model_init_random(&m, 1);
  m.attn.estimate = count_hook;  // forward / backward NULL: the local reference attention
  int32_t tok[32], tgt[32];
  int64_t pos[32];
  for (int i = 0; i < 32; i++) tok[i] = 'a' + i % 7, tgt[i] = 'a' + (i + 1) % 7, pos[i] = i;
  double loss;
  hook_calls = 0;
  CHECK_EQ_INT(model_forward_backward(&m, 32, tok, pos, tgt, 1, 1.0, &loss, NULL, &e), SR_OK);
  CHECK_EQ_INT(hook_calls, (int)c.num_layers);
  model_cpu_free(&m);
}

// A vs-online run on one rank, then the same plan on two ranks (refused: the estimate needs every key).
TEST(train_online_pattern_trains_on_one_rank_and_is_refused_on_two) {
  const char *dir = test_tmpdir();
  char cmd[4096];
  const char *c1 = mpi_h200_cluster(1), *c2 = "h200-1x2";
  char *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --layout striped:16 --schedule ring "
           "--pattern vs-online:0.9 --seq 300 --steps 2 --csv %s/o.csv 2>&1", test_bin_dir(), c1, dir);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "online vertical-slash estimates: 4");  // 2 layers x 2 steps
  free(out);
  out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec train --model tiny-test --cluster %s "
           "--layout striped:16 --schedule ring --pattern vs-online:0.9 --seq 300 --steps 1 --csv %s/o2.csv 2>&1",
           test_bin_dir(), c2, dir);
  CHECK(test_run(cmd, &out) != 0);  // each rank reports the input error, then the job is aborted
  CHECK_STR_CONTAINS(out, "online estimation trains on one rank");
  free(out);
}

// Plans built in parallel threads before the first step train exactly as plans built one by one.
TEST(train_plans_built_in_threads_give_the_sequential_losses) {
  const char *dir = test_tmpdir();
  char cmd[4096];
  const char *c1 = mpi_h200_cluster(1);
  for (int th = 1; th <= 2; th++) {
    snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --strategy mtraining "
             "--pattern vs-topp:0.95 --seq 512 --steps 2 --build-threads %d --csv %s/bt%d.csv --quiet 2>&1",
             test_bin_dir(), c1, th, dir, th);
    char *out = NULL;
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    CHECK_STR_CONTAINS(out, "2 attention plan(s) built before the first step");
    free(out);
  }
  snprintf(cmd, sizeof cmd, "cmp <(cut -d, -f2,3 %s/bt1.csv) <(cut -d, -f2,3 %s/bt2.csv)", dir, dir);
  char wrapped[4200];
  snprintf(wrapped, sizeof wrapped, "bash -c '%s'", cmd);
  CHECK_EQ_INT(test_run(wrapped, NULL), 0);
}

// Plans built ahead of their layer by threads (3 kept of 6 layers) train as every plan kept.
TEST(train_plans_built_ahead_give_the_losses_of_every_plan_kept) {
  const char *dir = test_tmpdir();
  char model[700], cmd[4096];
  const char *c1 = mpi_h200_cluster(1);
  snprintf(model, sizeof model, "%s/tiny6.json", dir);
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 6/' models/tiny-test.json > %s", model);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  const char *flags[2] = {"", "--attn-cache 3 --attn-prefetch 2 --build-threads 2"};
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model %s --cluster %s --strategy mtraining "
             "--pattern vs-topp:0.95 --seq 512 --steps 3 %s --csv %s/pa%d.csv --quiet 2>&1", test_bin_dir(), model, c1,
             flags[i], dir, i);
    char *out = NULL;
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    if (i == 1) CHECK_STR_CONTAINS(out, "3 kept of 6 layers");
    free(out);
  }
  snprintf(cmd, sizeof cmd, "bash -c 'cmp <(cut -d, -f2,3 %s/pa0.csv) <(cut -d, -f2,3 %s/pa1.csv)'", dir, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
}

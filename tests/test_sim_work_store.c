// test_sim_work_store.c — the shared accounting store (work.h): simulating with it gives exactly the
// results of simulating without it, whichever strategy, however often the store is reused, and when it
// is too small to hold anything; it holds one copy per distinct head and one entry per distinct (layout, layer).
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/sim.h"
#include "sim/tune.h"
#include "sim/work.h"
#include "tests/test.h"
#include "traces/trace.h"

// The points the store serves: every layout kind, every schedule, FPDT (its own chunk layout). Ulysses
// over all GPUs and FPDT need GPUs <= tiny-test's 4 heads, so they run on 2 GPUs, the others on 8.
static const tune_point points[] = {
    {.layout = LAYOUT_CONTIGUOUS, .granularity = 1, .schedule = SCHED_RING, .recompute = 1, .zero = 1, .kv_bytes = 2},
    {.layout = LAYOUT_ZIGZAG, .granularity = 1, .schedule = SCHED_RING, .recompute = 0, .zero = 1, .kv_bytes = 2,
     .skip_empty_sends = 1},
    {.layout = LAYOUT_STRIPED, .granularity = 64, .schedule = SCHED_DOUBLE_RING, .inner = 1, .recompute = 1, .zero = 0,
     .kv_bytes = 1},
    {.layout = LAYOUT_STRIPED, .granularity = 128, .schedule = SCHED_RING, .recompute = 1, .zero = 1, .kv_bytes = 2},
    {.layout = LAYOUT_CONTIGUOUS, .granularity = 1, .schedule = SCHED_ULYSSES, .recompute = 1, .zero = 1, .kv_bytes = 2},
    {.layout = LAYOUT_STRIPED, .granularity = 128, .schedule = SCHED_USP, .ulysses = 2, .recompute = 1, .zero = 1,
     .kv_bytes = 2},
    {.layout = LAYOUT_CONTIGUOUS, .granularity = 1, .schedule = SCHED_ULYSSES, .fpdt_chunk = 1024, .fpdt_offload = 1,
     .recompute = 1, .zero = 1, .kv_bytes = 2},
};
#define N_POINTS ((int)(sizeof points / sizeof points[0]))

static int build(const tune_point *pt, const char *pattern_src, plan *p, pattern *pat, sr_error *e) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  int all_heads = pt->schedule == SCHED_ULYSSES;
  snprintf(s.cluster, sizeof s.cluster, "%s", all_heads ? "h200-1x2" : "h200-1x8");
  s.seq = 8192;
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern_src);
  s.seed = 11;
  tune_point_apply(pt, &s);
  int rc = plan_build(&s, p, e);
  if (rc) return rc;
  if (pat && (rc = pattern_source_load(s.pattern, &p->model, s.seq, s.seed, 0, pat, e))) plan_free(p);
  return rc;
}

// Every field of the result except the two wall-clock timings, compared bit for bit.
static int same_result(const sim_result *a, const sim_result *b) {
  sim_result x = *a, y = *b;
  x.sim_wall_s = y.sim_wall_s = 0;
  x.account_wall_s = y.account_wall_s = 0;
  return memcmp(&x, &y, sizeof x) == 0;
}

static void check_store_matches_private(const char *pattern_src, int64_t max_bytes, int passes) {
  sr_error e;
  work_store *st = NULL;
  CHECK_EQ_INT(work_store_open(max_bytes, &st, &e), SR_OK);
  if (!st) return;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int pass = 0; pass < passes; pass++)
    for (int k = 0; k < N_POINTS; k++) {
      plan p;
      pattern pat;
      CHECK_EQ_INT(build(&points[k], pattern_src, &p, &pat, &e), SR_OK);
      sim_result a, b;
      memset(&a, 0xa5, sizeof a);  // padding too: sim_run clears the whole struct
      memset(&b, 0x5a, sizeof b);
      CHECK_EQ_INT(sim_run(&p, &pat, &o, &a, NULL, &e), SR_OK);
      CHECK_EQ_INT(sim_run_shared(&p, &pat, &o, st, &b, NULL, &e), SR_OK);
      CHECK(a.feasible && a.step_s > 0);
      CHECK(same_result(&a, &b));
      // The pattern is freed before the next point: the store keeps copies, not the heads.
      pattern_free(&pat);
      plan_free(&p);
    }
  if (max_bytes == 0) CHECK_EQ_INT((int)work_store_entries(st), 0);
  else CHECK(work_store_entries(st) > 0 && work_store_bytes(st) <= max_bytes);
  work_store_close(st);
}

TEST(sim_work_store_gives_the_results_of_private_accounting_on_sparse_patterns) {
  check_store_matches_private("vs-like:4:256:32", (int64_t)64 << 20, 2);
}

TEST(sim_work_store_gives_the_results_of_private_accounting_on_block_and_dense_patterns) {
  check_store_matches_private("block:0.3:64", (int64_t)64 << 20, 1);
  check_store_matches_private("dense", (int64_t)64 << 20, 1);
}

TEST(sim_work_store_too_small_to_hold_anything_changes_nothing) {
  check_store_matches_private("vs-like:4:256:32", 0, 1);
}

// One copy per distinct head, whatever the layouts; one entry per distinct layer and layout. Distinct
// heads and layers are counted by brute force (pairwise comparison of their index arrays), independently
// of the store's hashing.
static int heads_same(const head_pattern *a, const head_pattern *b) {
  return a->kind == b->kind && a->n_vertical == b->n_vertical && a->n_slash == b->n_slash &&
         !memcmp(a->vertical, b->vertical, (size_t)a->n_vertical * 4) && !memcmp(a->slash, b->slash, (size_t)a->n_slash * 4);
}

TEST(sim_work_store_holds_one_copy_per_distinct_head_and_one_entry_per_distinct_layer_and_layout) {
  sr_error e;
  plan p;
  pattern pat;
  CHECK_EQ_INT(build(&points[0], "vs-like:4:256:32", &p, &pat, &e), SR_OK);
  int n = pat.layers * pat.heads, distinct = 0, layers = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = heads_same(&pat.h[i], &pat.h[j]);
    distinct += !seen;
  }
  for (int l = 0; l < pat.layers; l++) {
    int seen = 0;
    for (int k = 0; k < l && !seen; k++) {
      seen = 1;
      for (int h = 0; h < pat.heads && seen; h++) seen = heads_same(pattern_head(&pat, l, h), pattern_head(&pat, k, h));
    }
    layers += !seen;
  }
  CHECK(distinct > 1);
  work_store *st = NULL;
  CHECK_EQ_INT(work_store_open((int64_t)64 << 20, &st, &e), SR_OK);
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  sim_result r;
  for (int rep = 0; rep < 2; rep++) CHECK_EQ_INT(sim_run_shared(&p, &pat, &o, st, &r, NULL, &e), SR_OK);
  CHECK_EQ_INT((int)work_store_heads(st), distinct);
  CHECK_EQ_INT((int)work_store_entries(st), layers);
  // A second layout adds its own entries, and no copy of a head.
  plan q;
  CHECK_EQ_INT(build(&points[1], "vs-like:4:256:32", &q, NULL, &e), SR_OK);
  CHECK_EQ_INT(sim_run_shared(&q, &pat, &o, st, &r, NULL, &e), SR_OK);
  CHECK_EQ_INT((int)work_store_heads(st), distinct);
  CHECK_EQ_INT((int)work_store_entries(st), 2 * layers);
  work_store_close(st);
  plan_free(&q);
  pattern_free(&pat);
  plan_free(&p);
}

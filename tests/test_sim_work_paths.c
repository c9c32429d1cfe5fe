// test_sim_work_paths.c — the simulator's per-rank work (work.h) on a striped layout whose period is shorter
// than the sequence, where accounting sums heads by residue and folds them once a layer, and counts the kept pairs
// in total only (the simulator sums them: tiles_accounter_pairs_per_cell): the per-rank work and the layer's kept
// pairs equal the generic tile scan's (an independent exact path), and the simulated step's density is the
// pattern's kept pairs counted from its indices.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/tune.h"
#include "sim/work.h"
#include "tests/test.h"
#include "traces/trace.h"

// tiny-test (4 heads, 2 layers) on 8 GPUs of one node, 8192 tokens striped by 128: a period of 8 tiles
// against 64 interior ones.
static int build(const char *pattern_src, plan *p, pattern *pat, sr_error *e) {
  plan_spec s;
  plan_spec_defaults(&s);
  int rc = plan_spec_apply_strategy(&s, "mtraining-flat", e);
  if (rc) return rc;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "h200-1x8");
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern_src);
  s.seq = 8192;
  s.seed = 5;  // mtraining-flat: striped by 128, one ring
  if ((rc = plan_build(&s, p, e))) return rc;
  if ((rc = pattern_source_load(s.pattern, &p->model, s.seq, s.seed, 0, pat, e))) plan_free(p);
  return rc;
}

// Each layer's work per (query rank, source rank), summed over heads, and its kept pairs against the generic scan's
// counts.
static void check_layers_match_generic(const char *pattern_src) {
  sr_error e;
  plan p;
  pattern pat;
  CHECK_EQ_INT(build(pattern_src, &p, &pat, &e), SR_OK);
  int W = p.layout.world, H = pat.heads;
  CHECK(p.layout.kind == LAYOUT_STRIPED && p.layout.granularity == 128 && W == 8);
  work_cache c;
  memset(&c, 0, sizeof c);
  CHECK_EQ_INT(work_cache_init(&c, &p.layout, &e), SR_OK);
  work_count *agg = calloc((size_t)W * W, sizeof *agg), *gen = calloc((size_t)H * W * W, sizeof *gen);
  for (int layer = 0; layer < pat.layers; layer++) {
    double pairs = -1, want = 0;
    CHECK_EQ_INT(work_layer(&c, &pat, layer, agg, &pairs, &e), SR_OK);
    CHECK_EQ_INT(tiles_account_generic(&pat, layer, &p.layout, gen, &e), SR_OK);
    for (int x = 0; x < W * W; x++) {
      work_count sum = {0};
      for (int h = 0; h < H; h++) work_add(&sum, &gen[(size_t)h * W * W + x]);
      CHECK_EQ_INT(agg[x].full, sum.full);
      CHECK_EQ_INT(agg[x].partial, sum.partial);
      CHECK_EQ_INT(agg[x].bars, sum.bars);
      CHECK_NEAR(agg[x].pairs, 0, 0);  // the cells hold none: the layer's are in `pairs`
      want += sum.pairs;
    }
    CHECK(want > 0);
    CHECK_NEAR(pairs, want, 0);
  }
  free(agg);
  free(gen);
  work_cache_free(&c);
  pattern_free(&pat);
  plan_free(&p);
}

TEST(per_rank_work_and_kept_pairs_equal_the_generic_scan_on_a_short_period) {
  check_layers_match_generic("vs-topp:0.95");
  check_layers_match_generic("vs-like:4:256:32");
  check_layers_match_generic("window:16:300");
}

// Layers accounted a thread a layer (work_layers, one fold a layer) give the counts and kept pairs of the layer whose
// heads are spread over threads (work_layer), whichever layers a batch holds and in whatever order.
TEST(layers_accounted_a_thread_a_layer_equal_one_layer_at_a_time) {
  sr_error e;
  plan p;
  pattern pat;
  CHECK_EQ_INT(build("vs-topp:0.95", &p, &pat, &e), SR_OK);
  int W = p.layout.world;
  work_cache c;
  memset(&c, 0, sizeof c);
  CHECK_EQ_INT(work_cache_init(&c, &p.layout, &e), SR_OK);
  work_count *one = calloc((size_t)W * W, sizeof *one), *two[2] = {calloc((size_t)W * W, sizeof(work_count)),
                                                                   calloc((size_t)W * W, sizeof(work_count))};
  int order[2] = {1, 0};
  double pairs[2] = {-1, -1};
  CHECK_EQ_INT(work_layers(&c, &pat, order, 2, two, pairs, &e), SR_OK);
  for (int k = 0; k < 2; k++) {
    double want = -1;
    CHECK_EQ_INT(work_layer(&c, &pat, order[k], one, &want, &e), SR_OK);
    CHECK(want > 0);
    CHECK_NEAR(pairs[k], want, 0);
    CHECK(memcmp(one, two[k], (size_t)W * W * sizeof *one) == 0);
  }
  free(one), free(two[0]), free(two[1]);
  work_cache_free(&c);
  pattern_free(&pat);
  plan_free(&p);
}

// A layer of heads whose pairs are counted per cell (block heads: the generic scan) beside heads counted in total.
TEST(per_rank_work_and_kept_pairs_equal_the_generic_scan_with_heads_of_every_kind) {
  check_layers_match_generic("adaspa:0.9");
  check_layers_match_generic("moba:512:3");
}

// The step's density is its kept pairs over the causal ones: the pattern's kept pairs counted from its indices
// (tune_head_pairs: columns plus diagonals less the pairs on both).
TEST(simulated_step_density_is_the_patterns_kept_pairs) {
  sr_error e;
  plan p;
  pattern pat;
  CHECK_EQ_INT(build("vs-topp:0.95", &p, &pat, &e), SR_OK);
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  sim_result r;
  CHECK_EQ_INT(sim_run(&p, &pat, &o, &r, NULL, &e), SR_OK);
  double kept = 0, N = (double)pat.n_tokens;
  for (int l = 0; l < pat.layers; l++)
    for (int h = 0; h < pat.heads; h++) kept += tune_head_pairs(pattern_head(&pat, l, h), pat.n_tokens);
  CHECK(r.step_s > 0);
  CHECK_NEAR(r.density, kept / ((double)pat.layers * pat.heads * N * (N + 1) / 2), 1e-15);
  pattern_free(&pat);
  plan_free(&p);
}

// test_sim_work_paths.c — the simulator's per-rank work (work.h) on a striped layout whose period is shorter
// than the sequence, where accounting sums heads by residue and folds them once a layer, and counts the pairs
// both the slashes and the verticals keep either by vertical or by offset tile: the per-rank work equals the
// generic tile scan's (an independent exact path), and the simulated step is the same whichever count runs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"
#include "plan/util.h"
#include "sim/sim.h"
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

// Each layer's work per (query rank, source rank), summed over heads, against the generic scan's counts.
static void check_layers_match_generic(const char *pattern_src, int by_tiles) {
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
  tiles_fast_overlap_by_tiles = by_tiles;
  for (int layer = 0; layer < pat.layers; layer++) {
    CHECK_EQ_INT(work_layer(&c, &pat, layer, agg, &e), SR_OK);
    CHECK_EQ_INT(tiles_account_generic(&pat, layer, &p.layout, gen, &e), SR_OK);
    for (int x = 0; x < W * W; x++) {
      work_count sum = {0};
      for (int h = 0; h < H; h++) work_add(&sum, &gen[(size_t)h * W * W + x]);
      CHECK_EQ_INT(agg[x].full, sum.full);
      CHECK_EQ_INT(agg[x].partial, sum.partial);
      CHECK_EQ_INT(agg[x].bars, sum.bars);
      CHECK_NEAR(agg[x].pairs, sum.pairs, 0);
    }
  }
  tiles_fast_overlap_by_tiles = 0;
  free(agg);
  free(gen);
  work_cache_free(&c);
  pattern_free(&pat);
  plan_free(&p);
}

TEST(per_rank_work_by_vertical_equals_the_generic_scan_on_a_short_period) {
  check_layers_match_generic("vs-topp:0.95", 1);
  check_layers_match_generic("vs-like:4:256:32", 1);
}

TEST(per_rank_work_by_offset_tile_equals_the_generic_scan_on_a_short_period) {
  check_layers_match_generic("vs-topp:0.95", 2);
  check_layers_match_generic("vs-like:4:256:32", 2);
}

// The whole step: the same time (to 1e-9, relative), attention time of the busiest rank and kept pairs.
TEST(simulated_step_is_the_same_whichever_way_the_overlap_is_counted) {
  sr_error e;
  plan p;
  pattern pat;
  CHECK_EQ_INT(build("vs-topp:0.95", &p, &pat, &e), SR_OK);
  sim_options o = {0, 0, 0, 0, 0, 0};
  sim_result r[2];
  for (int k = 0; k < 2; k++) {
    tiles_fast_overlap_by_tiles = k + 1;
    CHECK_EQ_INT(sim_run(&p, &pat, &o, &r[k], NULL, &e), SR_OK);
  }
  tiles_fast_overlap_by_tiles = 0;
  CHECK(r[0].step_s > 0);
  CHECK(fabs(r[1].step_s - r[0].step_s) <= 1e-9 * r[0].step_s);
  CHECK(fabs(r[1].attn_fwd_s - r[0].attn_fwd_s) <= 1e-9 * r[0].attn_fwd_s);
  CHECK(fabs(r[1].attn_bwd_s - r[0].attn_bwd_s) <= 1e-9 * r[0].attn_bwd_s);
  CHECK_NEAR(r[1].density, r[0].density, 0);
  CHECK_NEAR(r[1].exec_density, r[0].exec_density, 0);
  CHECK_NEAR(r[1].worker_imbalance, r[0].worker_imbalance, 0);
  pattern_free(&pat);
  plan_free(&p);
}

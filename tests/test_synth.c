// test_synth.c — synthetic patterns and pattern source strings: reproducibility, drift, the published
// budget mix, structure, sparsity targets, input errors naming the field, and the generator (GSL's
// mt19937 draw for draw), thread count and top-p's reuse of its calibration draw changing nothing.
#include <gsl/gsl_rng.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/rng.h"
#include "plan/synth.h"
#include "plan/synth_internal.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "tests/test.h"

static model_config shape(int layers, int heads) {
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_layers = layers;
  m.num_heads = heads;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  return m;
}

static int same_pattern(const pattern *a, const pattern *b) {
  if (a->layers != b->layers || a->heads != b->heads) return 0;
  for (int64_t x = 0; x < (int64_t)a->layers * a->heads; x++) {
    const head_pattern *p = &a->h[x], *q = &b->h[x];
    if (p->kind != q->kind || p->n_vertical != q->n_vertical || p->n_slash != q->n_slash || p->sinks != q->sinks ||
        p->window != q->window)
      return 0;
    if (p->n_vertical && memcmp(p->vertical, q->vertical, (size_t)p->n_vertical * 4)) return 0;
    if (p->n_slash && memcmp(p->slash, q->slash, (size_t)p->n_slash * 4)) return 0;
    if (p->kind == PATTERN_BLOCK && memcmp(p->mask, q->mask, (size_t)(p->n_blocks * p->row_words) * 8)) return 0;
  }
  return 1;
}

static void all_heads_valid(const pattern *p) {
  sr_error e;
  for (int64_t x = 0; x < (int64_t)p->layers * p->heads; x++)
    CHECK_EQ_INT(pattern_validate_head(&p->h[x], p->n_tokens, "synth", "head", &e), SR_OK);
}

TEST(every_spec_kind_builds_valid_heads_of_the_model_shape) {
  const char *specs[] = {"dense", "window:4:64", "vs-like:16:64:40", "vs-preset:qwen2.5-3b", "vs-topp:0.9",
                         "vs-online:0.95", "vs-online:topk:64:128", "vs-online:0.9:30:100", "vs-online:topk:64:128:8:16", "block:0.3", "block:0.2:64", "adaspa:0.8", "adaspa:0.5:32"};
  model_config m = shape(2, 4);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    sr_error e;
    pattern p;
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 3000, 7, 0, &p, &e), SR_OK);
    CHECK_EQ_INT(p.layers, 2);
    CHECK_EQ_INT(p.heads, 4);
    CHECK_EQ_INT(p.n_tokens, 3000);
    all_heads_valid(&p);
    pattern_free(&p);
  }
}

TEST(unknown_or_malformed_specs_are_input_errors_naming_pattern) {
  const char *bad[] = {"sparse", "window:4", "window:x:5", "vs-topp:1.5", "vs-topp:", "block:0", "block:0.5:0",
                       "vs-preset:llama", "vs-like:1:2", "adaspa:1", "trace:/tmp/x.safetensors", "",
                       "vs-online:topk:0:5", "vs-online:topk:4", "vs-online:topk:4:x", "vs-online:1", "vs-online:0.9:30",
                       "vs-online:0.9:-1:5", "vs-online:0.9:30:x", "vs-online:topk:4:4:1", "vs-online:0.9:1:2:3"};
  model_config m = shape(1, 2);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sr_error e;
    pattern p;
    CHECK_EQ_INT(pattern_from_spec(bad[i], &m, 1000, 1, 0, &p, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "pattern");
  }
}

// The check every plan runs (pattern_spec_check) builds a drawn source's budgets without drawing its heads: it accepts
// and rejects each source spec as building the pattern does, with the same message.
TEST(checking_a_spec_accepts_and_rejects_what_building_its_pattern_does) {
  const char *specs[] = {"vs-topp:0.9",          "vs-topp:1.5",          "vs-topp:",           "vs-topp:0.5:2",
                         "vs-preset:qwen2.5-3b", "vs-preset:llama",      "vs-online:0.95",     "vs-online:topk:64:128",
                         "vs-online:topk:0:5",   "vs-online:0.9:30:100", "vs-online:0.9:30:x", "vs-online:1",
                         "window:4:64",          "window:4",             "sparse"};
  model_config m = shape(2, 4);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    sr_error built, checked;
    sr_error_clear(&built), sr_error_clear(&checked);
    pattern p;
    int rb = pattern_from_spec(specs[i], &m, 1000, 0, 0, &p, &built);
    if (rb == SR_OK) pattern_free(&p);
    CHECK_EQ_INT(pattern_spec_check(specs[i], &m, 4000, &checked), rb);
    if (strcmp(checked.msg, built.msg) != 0) test_fail(__FILE__, __LINE__, "%s: \"%s\" != \"%s\"", specs[i], checked.msg, built.msg);
  }
}

TEST(vs_online_fixed_budget_stands_in_as_v_verticals_and_s_slashes_on_every_head) {
  // what the planner and the simulator see of "vs-online:topk:V:S" before any estimate ran
  model_config m = shape(3, 4);
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-online:topk:40:300", &m, 5000, 9, 0, &p, &e), SR_OK);
  for (int64_t x = 0; x < (int64_t)p.layers * p.heads; x++) {
    CHECK_EQ_INT(p.h[x].kind, PATTERN_VS);
    CHECK_EQ_INT(p.h[x].n_vertical, 40);
    CHECK_EQ_INT(p.h[x].n_slash, 300);
  }
  pattern_free(&p);
}

TEST(same_seed_and_step_give_identical_patterns_and_other_seeds_differ) {
  const char *specs[] = {"vs-preset:qwen2.5-3b", "vs-topp:0.9", "block:0.3", "adaspa:0.7", "vs-like:8:32:50"};
  model_config m = shape(2, 4);
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    sr_error e;
    pattern a, b, c;
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 4096, 42, 3, &a, &e), SR_OK);
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 4096, 42, 3, &b, &e), SR_OK);
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 4096, 43, 3, &c, &e), SR_OK);
    CHECK(same_pattern(&a, &b));
    CHECK(!same_pattern(&a, &c));
    pattern_free(&a);
    pattern_free(&b);
    pattern_free(&c);
  }
}

// Fraction of the union of two sorted index lists that is not shared.
static double changed_fraction(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
  int32_t i = 0, j = 0, common = 0;
  while (i < na && j < nb) {
    if (a[i] == b[j]) common++, i++, j++;
    else if (a[i] < b[j]) i++;
    else j++;
  }
  return 1.0 - (double)common / (double)(na + nb - common);
}

TEST(vs_patterns_drift_a_little_from_step_to_step_and_a_lot_over_many_steps) {
  model_config m = shape(1, 1);
  sr_error e;
  pattern s0, s1, s40;
  CHECK_EQ_INT(pattern_from_spec("vs-preset:qwen2.5-3b", &m, 1 << 16, 5, 10, &s0, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("vs-preset:qwen2.5-3b", &m, 1 << 16, 5, 11, &s1, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("vs-preset:qwen2.5-3b", &m, 1 << 16, 5, 50, &s40, &e), SR_OK);
  const head_pattern *a = &s0.h[0], *b = &s1.h[0], *c = &s40.h[0];
  CHECK_EQ_INT(a->n_slash, b->n_slash);  // budgets are per head, not per step
  double step = changed_fraction(a->slash, a->n_slash, b->slash, b->n_slash);
  double far = changed_fraction(a->slash, a->n_slash, c->slash, c->n_slash);
  // Only the drawn quarter drifts (the local window is three quarters of the budget). One step redraws one
  // of SYNTH_DRIFT_PERIOD groups of it: at most 1/4/20 of the set leaves and as much enters, so the changed
  // share of the union is at most 2 x 0.0125 / 1.0125 ~ 0.025. Forty steps redraw every group: up to the
  // whole quarter changes, 2 x 0.25 / 1.25 = 0.4 at most; chance re-draws of the same offsets keep it a
  // little under.
  CHECK(step > 0.0 && step < 0.03);
  CHECK(far > 0.3 && far <= 0.4);
  pattern_free(&s0);
  pattern_free(&s1);
  pattern_free(&s40);
}

TEST(qwen_preset_assigns_the_published_budget_mix_to_576_heads) {
  model_config m = shape(36, 16);
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-preset:qwen2.5-3b", &m, 16384, 1, 0, &p, &e), SR_OK);
  const int32_t mix[6][3] = {{1000, 6096, 310}, {3500, 100, 107}, {30, 800, 96}, {100, 800, 44}, {500, 700, 17}, {100, 750, 2}};
  for (int i = 0; i < 6; i++) {
    int n = 0;
    for (int64_t x = 0; x < 576; x++) n += p.h[x].n_vertical == mix[i][0] && p.h[x].n_slash == mix[i][1];
    CHECK_EQ_INT(n, mix[i][2]);
  }
  pattern_free(&p);
}

TEST(vs_budgets_are_clamped_to_the_sequence_and_keep_sinks_diagonal_and_local_window) {
  model_config m = shape(36, 16);
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-preset:qwen2.5-3b", &m, 2000, 1, 0, &p, &e), SR_OK);
  all_heads_valid(&p);
  int64_t full_slash = 0;
  for (int64_t x = 0; x < 576; x++) {
    const head_pattern *h = &p.h[x];
    CHECK(h->n_vertical <= 2000 && h->n_slash <= 2000);
    CHECK(h->n_vertical > 0 && h->vertical[0] == 0);                // the first token is a sink
    CHECK(h->n_slash > 0 && h->slash[0] == 0);                      // the diagonal
    int32_t window = h->n_slash * 3 / 4 > 1 ? h->n_slash * 3 / 4 : 1;  // the local window is kept whole
    CHECK(h->n_slash >= window && h->slash[window - 1] == window - 1);
    full_slash += h->n_slash == 2000;
  }
  CHECK_EQ_INT(full_slash, 310);  // the 6096-slash heads take every offset of a 2000-token sequence
  pattern_free(&p);
}

TEST(vs_like_mask_holds_sinks_window_and_cubic_verticals) {
  model_config m = shape(1, 2);
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-like:128:4096:1000", &m, 1 << 17, 1, 0, &p, &e), SR_OK);
  for (int h = 0; h < 2; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    CHECK_EQ_INT(hp->n_slash, 4096);
    CHECK_EQ_INT(hp->slash[4095], 4095);
    for (int k = 0; k < 128; k++) CHECK_EQ_INT(hp->vertical[k], k);
    CHECK(hp->n_vertical > 128 + 500 && hp->n_vertical <= 128 + 1000);
    // N u^3: half the draws fall below N/8 (some of them into the sinks) and 21% above N/2
    int64_t below = 0, above = 0, n = hp->n_vertical - 128;
    for (int32_t x = 128; x < hp->n_vertical; x++) {
      below += hp->vertical[x] < (1 << 17) / 8;
      above += hp->vertical[x] >= (1 << 17) / 2;
    }
    CHECK(below > n * 3 / 10);
    CHECK(above > n * 15 / 100 && above < n * 27 / 100);
  }
  pattern_free(&p);
}

TEST(topp_layer_sparsity_stays_within_87_to_99_6_percent) {
  double mean = 0;
  for (int l = 0; l < 200; l++) {
    double s = synth_topp_layer_sparsity(3, l, 0.9);
    CHECK(s >= 0.87 && s <= 0.996);
    mean += s / 200;
  }
  CHECK_NEAR(mean, 0.94, 0.01);
  CHECK(synth_topp_layer_sparsity(3, 0, 0.95) < synth_topp_layer_sparsity(3, 0, 0.9));  // more mass, denser
}

TEST(topp_pattern_density_follows_the_layer_targets) {
  model_config m = shape(6, 8);
  sr_error e;
  pattern p;
  int64_t n = 1 << 15;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &m, n, 9, 0, &p, &e), SR_OK);
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &l, &e), SR_OK);
  work_count *c = calloc(8, sizeof *c);
  for (int layer = 0; layer < 6; layer++) {
    CHECK_EQ_INT(tiles_account_layer(&p, layer, &l, c, &e), SR_OK);
    layer_summary s;
    tiles_layer_summary(&p, &l, c, &s);
    double target = 1 - synth_topp_layer_sparsity(9, layer, 0.9);
    CHECK(s.density > 0.7 * target && s.density < 1.3 * target);
  }
  free(c);
  layout_free(&l);
  pattern_free(&p);
}

// Kept blocks of row p of a block head.
static int64_t row_blocks(const head_pattern *h, int64_t p) {
  int64_t n = 0;
  for (int64_t w = 0; w < h->row_words; w++) n += __builtin_popcountll(h->mask[p * h->row_words + w]);
  return n;
}

TEST(block_pattern_keeps_the_diagonal_and_density_of_each_causal_row) {
  model_config m = shape(1, 3);
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("block:0.25:64", &m, 64 * 300, 2, 0, &p, &e), SR_OK);
  for (int h = 0; h < 3; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    CHECK_EQ_INT(hp->n_blocks, 300);
    int64_t bad = 0;
    for (int64_t r = 0; r < 300; r++) {
      int64_t want = (int64_t)llround(0.25 * (double)(r + 1));
      if (want < 1) want = 1;
      bad += row_blocks(hp, r) != want;
      bad += !((hp->mask[r * hp->row_words + r / 64] >> (r % 64)) & 1);  // diagonal block kept
      for (int64_t c = r + 1; c < 300; c++) bad += (int)((hp->mask[r * hp->row_words + c / 64] >> (c % 64)) & 1);
    }
    CHECK_EQ_INT(bad, 0);
  }
  pattern_free(&p);
}

TEST(adaspa_budgets_are_head_adaptive_and_keep_the_mean_sparsity) {
  model_config m = shape(3, 8);
  sr_error e;
  pattern p;
  double s = 0.8;
  CHECK_EQ_INT(pattern_from_spec("adaspa:0.8:64", &m, 64 * 400, 4, 0, &p, &e), SR_OK);
  for (int l = 0; l < 3; l++) {
    double mean = 0;
    int n_sparse = 0, n_dense = 0;
    for (int h = 0; h < 8; h++) {
      const head_pattern *hp = pattern_head(&p, l, h);
      double kept = 0, causal = 0;
      for (int64_t r = 0; r < hp->n_blocks; r++) kept += (double)row_blocks(hp, r), causal += (double)(r + 1);
      double density = kept / causal;
      mean += density / 8;
      n_sparse += fabs(density - (1 - (1 + s) / 2)) < 0.01;
      n_dense += fabs(density - (1 - (3 * s - 1) / 2)) < 0.01;
    }
    CHECK_EQ_INT(n_sparse, n_dense);  // n heads up, n heads down
    CHECK_NEAR(mean, 1 - s, 0.01);
  }
  pattern_free(&p);
}

TEST(online_spec_suffix_forces_sinks_and_window_and_defaults_to_none) {
  vs_est_opts o;
  sr_error e;
  CHECK_EQ_INT(pattern_spec_online_opts("vs-online:0.95", &o, &e), SR_OK);
  CHECK(o.sinks == 0 && o.window == 0);
  CHECK_EQ_INT(pattern_spec_online_opts("vs-online:0.95:30:100", &o, &e), SR_OK);
  CHECK(o.p == 0.95 && o.sinks == 30 && o.window == 100 && o.topk_v == 0);
  CHECK_EQ_INT(pattern_spec_online_opts("vs-online:topk:512:256:64:128", &o, &e), SR_OK);
  CHECK(o.topk_v == 512 && o.topk_s == 256 && o.sinks == 64 && o.window == 128);
}

TEST(only_vs_online_is_estimated_online_vs_topp_and_vs_preset_stand_in_for_it_and_the_rest_are_fixed) {
  CHECK_EQ_INT(pattern_spec_estimation("vs-online:0.9"), PATTERN_ONLINE);
  CHECK_EQ_INT(pattern_spec_estimation("vs-online:topk:40:60:30:100"), PATTERN_ONLINE);
  CHECK_EQ_INT(pattern_spec_estimation("vs-topp:0.95"), PATTERN_STAND_IN);
  CHECK_EQ_INT(pattern_spec_estimation("vs-preset:qwen2.5-3b"), PATTERN_STAND_IN);
  static const char *const fixed[] = {"dense", "window:4:64", "vs-like:4:64:8", "block:0.2", "adaspa:0.9",
                                      "trace:t.safetensors"};
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) CHECK_EQ_INT(pattern_spec_estimation(fixed[i]), PATTERN_FIXED);
}

// plan/rng.h is GSL's mt19937 draw for draw: raw outputs, uniform, uniform_pos and uniform_int, from seeds
// that include GSL's special case 0 (which it replaces by 4357) and the largest 32-bit seed.
TEST(synth_mt19937_draws_equal_gsl) {
  const unsigned long seeds[] = {0, 1, 4357, 0xffffffffu, 0x9e3779b9u, 123456789u};
  const uint32_t ns[] = {1, 2, 3, 4, 1000, 4096, 0x7fffffffu, 0xfffffffeu};
  gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937);
  for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
    sr_mt m;
    sr_mt_seed(&m, (uint32_t)seeds[i]);
    gsl_rng_set(g, seeds[i]);
    int bad = 0;
    for (int k = 0; k < 3000; k++) {
      switch (k % 4) {
        case 0: bad += sr_mt_next(&m) != (uint32_t)gsl_rng_get(g); break;
        case 1: bad += sr_mt_uniform(&m) != gsl_rng_uniform(g); break;
        case 2: bad += sr_mt_uniform_pos(&m) != gsl_rng_uniform_pos(g); break;
        default: {
          uint32_t n = ns[(k / 4) % (sizeof ns / sizeof *ns)];
          bad += sr_mt_uniform_int(&m, n) != (uint32_t)gsl_rng_uniform_int(g, n);
        }
      }
    }
    CHECK_EQ_INT(bad, 0);
  }
  gsl_rng_free(g);
}

// Generators seeded together (their seeded words computed up front, as far as asked) draw what GSL draws
// from each seed: any number of lanes in use, words computed for none, some or all of the first round.
TEST(synth_mt19937_seeded_in_lanes_draws_equal_gsl) {
  const uint32_t seeds[SR_MT_LANES] = {0, 1, 4357, 0xffffffffu, 0x9e3779b9u, 123456789u, 42, 7};
  const int words[] = {1, 2, 405, 500, 623, SR_MT_N};
  gsl_rng *g = gsl_rng_alloc(gsl_rng_mt19937);
  sr_mt lanes[SR_MT_LANES];
  int bad = 0;
  for (int used = 1; used <= SR_MT_LANES; used += 3)
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
      sr_mt_seed_lanes(lanes, seeds, used, words[w]);
      for (int l = 0; l < used; l++) {
        gsl_rng_set(g, seeds[l]);
        for (int k = 0; k < 1500; k++) bad += sr_mt_next(&lanes[l]) != (uint32_t)gsl_rng_get(g);
      }
    }
  CHECK_EQ_INT(bad, 0);
  gsl_rng_free(g);
}

// Heads are drawn in parallel: the pattern is the same for one thread and for several.
TEST(synth_patterns_do_not_depend_on_the_thread_count) {
  const char *specs[] = {"vs-topp:0.9", "vs-preset:qwen2.5-3b", "vs-like:8:100:40", "block:0.3:64", "adaspa:0.8"};
  model_config m = shape(3, 5);
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    pattern a, b;
    sr_error e;
    setenv("SR_THREADS", "1", 1);
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 5000, 9, 2, &a, &e), SR_OK);
    setenv("SR_THREADS", "3", 1);
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 5000, 9, 2, &b, &e), SR_OK);
    unsetenv("SR_THREADS");
    for (int x = 0; x < 15; x++) CHECK(pattern_heads_equal(&a.h[x], &b.h[x]));
    pattern_free(&a);
    pattern_free(&b);
  }
}

TEST(vs_like_with_more_verticals_than_a_head_can_hold_is_an_input_error) {
  // found by tests/fuzz/fuzz_pattern_spec.c: "vs-like:4:4:668880706420538933" asked malloc for 2.7e18 bytes, and
  // 2^62 verticals would have overflowed the size into a small allocation written past its end
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-like:4:4:668880706420538933", &m, 256, 0, 0, &p, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "at most 1048576");
  CHECK_EQ_INT(pattern_from_spec("vs-like:4:4:4611686018427387904", &m, 256, 0, 0, &p, &e), SR_EINPUT);
  CHECK_EQ_INT(pattern_from_spec("vs-like:4:4:16", &m, 256, 0, 0, &p, &e), SR_OK);
  pattern_free(&p);
}

// vs-topp draws each head twice: a calibration draw whose kept pairs correct the budgets, then the head.
// The final draw reads its verticals' candidates from the calibration's streams instead of drawing them
// again; drawing both in full (the method before) must give the same indices, on lengths from a few
// hundred tokens (dense heads: collisions, top-ups; groups the calibration never drew) to 512K, any drift period (one group, fewer groups
// than generators seeded together, more), steps and masses (the final budgets above and below the
// calibration's, so the streams are read past what the calibration drew).
TEST(topp_final_draw_from_the_calibration_streams_equals_drawing_both_afresh) {
  const int64_t lengths[] = {128, 300, 5000, 70001, 131072, 524288};
  const double masses[] = {0.5, 0.9, 0.95, 1 - 1e-10};
  const int drifts[] = {20, 0, 3, 64, 9};  // 128 tokens at the densest mass: 64 groups, some never drawn at first
  int cases = 0;
  for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++)
    for (size_t k = 0; k < sizeof masses / sizeof *masses; k++) {
      int64_t n = lengths[i];
      int layers = n > 100000 ? 1 : 3, heads = n > 100000 ? 6 : 5;
      synth_opts o = synth_defaults(1 + 7 * i + k, (int)(3 * k + i));
      o.drift_period = drifts[(i + k) % (sizeof drifts / sizeof *drifts)];
      pattern a, b;
      sr_error e;
      CHECK_EQ_INT(pattern_alloc(&a, n, layers, heads, &e), SR_OK);
      CHECK_EQ_INT(pattern_alloc(&b, n, layers, heads, &e), SR_OK);
      CHECK_EQ_INT(synth_vs_topp(&a, masses[k], &o, &e), SR_OK);
      CHECK_EQ_INT(synth_vs_topp_redrawn(&b, masses[k], &o, &e), SR_OK);
      if (!same_pattern(&a, &b)) test_fail(__FILE__, __LINE__, "n %lld mass %g: heads differ", (long long)n, masses[k]);
      cases++;
      pattern_free(&a);
      pattern_free(&b);
    }
  CHECK_EQ_INT(cases, 24);
}

// FNV-1a over every head's verticals, then its slashes, head after head.
static uint64_t pattern_checksum(const pattern *p) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t x = 0; x < (int64_t)p->layers * p->heads; x++) {
    for (int32_t i = 0; i < p->h[x].n_vertical; i++) h = (h ^ (uint32_t)p->h[x].vertical[i]) * 0x100000001b3ull;
    for (int32_t i = 0; i < p->h[x].n_slash; i++) h = (h ^ (uint32_t)p->h[x].slash[i]) * 0x100000001b3ull;
  }
  return h;
}

// The same heads as the code before the reuse drew them: its checksums (main at d0940c0, the pattern drawn
// by synth_vs_topp with synth_defaults(seed, step)), guarding the draw itself, which both methods share.
TEST(topp_patterns_equal_those_drawn_before_the_calibration_streams_were_reused) {
  const struct {
    int64_t n;
    int layers, heads;
    double mass;
    uint64_t seed;
    int step;
    int64_t verticals, slashes;
    uint64_t checksum;
  } cases[] = {
      {5000, 3, 5, 0.9, 9, 2, 1712, 2260, 0x6173225ef4df729full},
      {70001, 4, 8, 0.99, 3, 7, 110754, 162000, 0xae233f6f8652cc04ull},
      {131072, 2, 16, 0.5, 42, 25, 17804, 28391, 0x21208a1e7c9587d7ull},
      {4096, 2, 4, 0.999999, 5, 0, 1645, 1643, 0x681e848ac829f94bull},
      {524288, 2, 16, 0.95, 1, 0, 215468, 412536, 0xcd33b8e85f6a30e6ull},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    pattern p;
    sr_error e;
    synth_opts o = synth_defaults(cases[i].seed, cases[i].step);
    CHECK_EQ_INT(pattern_alloc(&p, cases[i].n, cases[i].layers, cases[i].heads, &e), SR_OK);
    CHECK_EQ_INT(synth_vs_topp(&p, cases[i].mass, &o, &e), SR_OK);
    int64_t nv = 0, ns = 0;
    for (int64_t x = 0; x < (int64_t)p.layers * p.heads; x++) nv += p.h[x].n_vertical, ns += p.h[x].n_slash;
    CHECK_EQ_INT(nv, cases[i].verticals);
    CHECK_EQ_INT(ns, cases[i].slashes);
    CHECK(pattern_checksum(&p) == cases[i].checksum);
    pattern_free(&p);
  }
}

// Heads drawn one at a time (the simulator draws a synthetic vertical-slash source as it accounts it) are the whole
// pattern's heads, bit for bit, in any order and from any slot, for every source drawn so; other sources are refused.
TEST(heads_drawn_one_at_a_time_equal_the_whole_patterns) {
  model_config m = shape(7, 5);
  const char *specs[] = {"vs-topp:0.95", "vs-preset:qwen2.5-3b", "vs-online:0.9", "vs-online:topk:40:70"};
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    sr_error e;
    pattern whole;
    pattern_drawer *d = NULL;
    CHECK(pattern_spec_by_heads(specs[i]));
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 3000, 11, 3, &whole, &e), SR_OK);
    CHECK_EQ_INT(pattern_drawer_open(specs[i], &m, 3000, 11, 3, 2, &d, &e), SR_OK);
    for (int x = m.num_layers * m.num_heads - 1; x >= 0; x--) {  // backwards, alternating slots
      int l = x / m.num_heads, h = x % m.num_heads;
      if (!pattern_heads_equal(pattern_drawer_head(d, x % 2, l, h), pattern_head(&whole, l, h)))
        test_fail(__FILE__, __LINE__, "%s: layer %d head %d differs drawn alone", specs[i], l, h);
    }
    pattern_drawer_close(d);
    pattern_free(&whole);
  }
  sr_error e;
  pattern_drawer *d = NULL;
  CHECK(!pattern_spec_by_heads("vs-like:4:64:16"));
  CHECK(pattern_drawer_open("vs-like:4:64:16", &m, 3000, 11, 0, 1, &d, &e) != SR_OK);
  CHECK(d == NULL);
}

// One layer drawn for itself (the attention API's layer of a model) is that layer of the whole pattern, bit for bit,
// for sources drawn a head at a time and for those drawn whole; a layer outside the model is an input error naming it.
TEST(one_layer_of_a_source_is_that_layer_of_the_whole_pattern) {
  model_config m = shape(6, 3);
  const char *specs[] = {"vs-topp:0.95", "vs-preset:qwen2.5-3b", "block:0.3:64", "adaspa:0.8:64", "vs-like:4:64:16",
                         "window:2:64", "dense"};
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    sr_error e;
    pattern whole;
    CHECK_EQ_INT(pattern_from_spec(specs[i], &m, 1500, 11, 2, &whole, &e), SR_OK);
    for (int l = 0; l < m.num_layers; l++) {
      pattern one;
      CHECK_EQ_INT(pattern_from_spec_layer(specs[i], &m, 1500, 11, 2, l, &one, &e), SR_OK);
      CHECK(one.layers == 1 && one.heads == m.num_heads && one.n_tokens == 1500);
      for (int h = 0; h < one.heads; h++)
        if (!pattern_heads_equal(pattern_head(&one, 0, h), pattern_head(&whole, l, h)))
          test_fail(__FILE__, __LINE__, "%s: layer %d head %d differs drawn for its layer", specs[i], l, h);
      pattern_free(&one);
    }
    pattern_free(&whole);
  }
  sr_error e;
  pattern one;
  for (int bad = -1; bad <= 6; bad += 7) {
    CHECK_EQ_INT(pattern_from_spec_layer("vs-topp:0.95", &m, 1500, 0, 0, bad, &one, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "layer");
    CHECK(one.h == NULL);
  }
}

// A sorted draw's marks read back (synth_take_bits) give the same indices, in order, and clear the same words on every
// path (AVX-512 VBMI2 where the CPU has it, else the portable one): bitmaps from empty to full words, more than 16,
// 32 and 48 bits a word, structural indices ending inside a word, a count reached before the bitmap's end.
TEST(synth_marks_read_back_equal_on_every_code_path) {
  enum { WORDS = 200 };
  uint64_t a[WORDS], b[WORDS];
  int32_t out_a[WORDS * 64 + 1], out_b[WORDS * 64 + 1];
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int bad = 0;
  for (int round = 0; round < 64; round++) {
    int dense = round % 8;  // 0: a bit in a few words ... 7: full words
    int64_t n_struct = round % 3 == 0 ? 0 : (round * 37) % 300, set = 0;
    for (int w = 0; w < WORDS; w++) {
      uint64_t x = 0;
      for (int k = 0; k < 64; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if ((s >> 40) % 64 < (uint64_t)(dense == 7 ? 64 : dense * dense)) x |= 1ull << k;
      }
      a[w] = w * 64 < n_struct ? ~0ull : x;  // the structural indices [0, n_struct) are set
      if ((w + 1) * 64 > n_struct && w * 64 < n_struct) a[w] |= ~0ull >> (64 - (n_struct & 63));
    }
    for (int w = 0; w < WORDS; w++)
      for (int k = 0; k < 64; k++) set += (a[w] >> k & 1) && w * 64 + k >= n_struct;
    int64_t count = n_struct + set - (round % 5 == 4 ? set / 2 : 0);  // some rounds stop early
    for (int64_t i = 0; i < n_struct; i++) out_a[i] = out_b[i] = (int32_t)i;
    memcpy(b, a, sizeof a);
    sr_isa_cap(SR_ISA_PLAIN);
    synth_take_bits(a, n_struct / 64, WORDS, n_struct, out_a, count);
    sr_isa_cap(SR_ISA_AVX512);
    synth_take_bits(b, n_struct / 64, WORDS, n_struct, out_b, count);
    bad += memcmp(a, b, sizeof a) != 0 || memcmp(out_a, out_b, (size_t)count * sizeof *out_a) != 0;
    for (int64_t i = n_struct + 1; i < count; i++) bad += out_a[i] <= out_a[i - 1];
  }
  CHECK_EQ_INT(bad, 0);
}

// A group's vertical candidates (synth_verticals) are the same on every path (AVX2, with the twist eight words at a
// time, and the portable one): from a fresh seed (the first round made on demand) and across several rounds, and the
// streams are left at the same word.
TEST(synth_verticals_equal_on_every_code_path) {
  const int64_t ms[] = {1, 7, 8, 9, 100, 311, 312, 313, 1000, 5000};
  static int32_t xa[5000], xb[5000];
  static uint64_t bits[(1 << 22) / 64 + 1];
  int bad = 0;
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    for (uint32_t seed = 1; seed < 4; seed++) {
      sr_mt a, b;
      sr_mt_seed(&a, seed * 2654435761u), sr_mt_seed(&b, seed * 2654435761u);
      for (int rep = 0; rep < 3; rep++) {  // the second and third draws start mid-stream
        int64_t n = rep == 1 ? 1000 : 1 << 22;
        sr_isa_cap(SR_ISA_PLAIN);
        synth_verticals(&a, n, xa, ms[i], bits);
        sr_isa_cap(SR_ISA_AVX512);
        synth_verticals(&b, n, xb, ms[i], bits);
        bad += memcmp(xa, xb, (size_t)ms[i] * sizeof *xa) != 0;
      }
      for (int k = 0; k < 700; k++) bad += sr_mt_next(&a) != sr_mt_next(&b);
    }
  CHECK_EQ_INT(bad, 0);
}

// test_trace_fit.c — what a trace says about balance (where its work sits) on hand-made heads, the generator
// fitted to a trace ("vs-fit:PATH"): exact budgets and leading runs at the recorded length, kept density at
// another length, heads mapped onto another model, runs as long and crowded places as full as recorded, and
// the goal: on every shipped trace each worker and step imbalance of the fit within 10% of the recording's at
// 8, 32 and 64 ranks; plus the commands.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "tests/test.h"
#include "traces/trace.h"

static int32_t *ints(int n, ...) {
  va_list ap;
  va_start(ap, n);
  int32_t *v = malloc((size_t)n * sizeof *v + 1);
  for (int i = 0; i < n; i++) v[i] = va_arg(ap, int);
  va_end(ap);
  return v;
}

// n = 1000. Columns 0, 5, 50, 500 hold 1000, 995, 950, 500 pairs (3445); the first 1% (v < 10) holds 1995,
// the first 10% (v < 100) 2945. Diagonals 0, 1, 200 hold 1000, 999, 800 (2799); below 128: 1999; half the mass
// (1399.5) is reached at d = 1, 90% (2519.1) and 99% only at d = 200.
TEST(trace_positions_place_columns_by_key_and_diagonals_by_offset) {
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 1000, 1, 1, &e), SR_OK);
  head_pattern *h = pattern_head(&p, 0, 0);
  h->kind = PATTERN_VS;
  h->vertical = ints(4, 0, 5, 50, 500), h->n_vertical = 4;
  h->slash = ints(3, 0, 1, 200), h->n_slash = 3;
  trace_position_stats x;
  CHECK_EQ_INT(trace_positions(&p, -1, &x, &e), SR_OK);
  CHECK_EQ_INT(x.heads, 1);
  CHECK_NEAR(x.vertical_pairs, 3445, 0);
  CHECK_REL(x.vertical_first[0], 1995.0 / 3445, 1e-12);
  CHECK_REL(x.vertical_first[1], 2945.0 / 3445, 1e-12);
  CHECK_NEAR(x.slash_pairs, 2799, 0);
  CHECK_REL(x.slash_local, 1999.0 / 2799, 1e-12);
  CHECK_NEAR(x.slash_q[0], 1, 0);
  CHECK_NEAR(x.slash_q[1], 200, 0);
  CHECK_NEAR(x.slash_q[2], 200, 0);
  pattern_free(&p);
}

// Two steps pooled: step 0 the head above, step 1 columns 5 and 900 (995 + 100 pairs) and diagonal 300 (700).
// Columns 4540 pairs, 2990 of them on the first 1% of keys (1995 + 995) and 3940 on the first 10% (2945 +
// 995); diagonals 3499, 1999 below 128; half (1749.5) reached at d = 1, 90% (3149.1) only at d = 300.
TEST(trace_positions_pool_the_steps_as_more_heads) {
  sr_error e;
  pattern p[2];
  for (int s = 0; s < 2; s++) {
    CHECK_EQ_INT(pattern_alloc(&p[s], 1000, 1, 1, &e), SR_OK);
    pattern_head(&p[s], 0, 0)->kind = PATTERN_VS;
  }
  head_pattern *a = pattern_head(&p[0], 0, 0), *b = pattern_head(&p[1], 0, 0);
  a->vertical = ints(4, 0, 5, 50, 500), a->n_vertical = 4;
  a->slash = ints(3, 0, 1, 200), a->n_slash = 3;
  b->vertical = ints(2, 5, 900), b->n_vertical = 2;
  b->slash = ints(1, 300), b->n_slash = 1;
  trace_position_stats x;
  CHECK_EQ_INT(trace_positions_steps(p, 2, -1, &x, &e), SR_OK);
  CHECK_EQ_INT(x.heads, 2);
  CHECK_NEAR(x.vertical_pairs, 4540, 0);
  CHECK_REL(x.vertical_first[0], 2990.0 / 4540, 1e-12);
  CHECK_REL(x.vertical_first[1], 3940.0 / 4540, 1e-12);
  CHECK_NEAR(x.slash_pairs, 3499, 0);
  CHECK_REL(x.slash_local, 1999.0 / 3499, 1e-12);
  CHECK_NEAR(x.slash_q[0], 1, 0);
  CHECK_NEAR(x.slash_q[1], 300, 0);
  pattern_free(&p[0]), pattern_free(&p[1]);
}

// Sinks 4 and window 10 at n = 1000: columns 0..3 (3994 pairs, all in the first 1%), diagonals 0..9 (9955
// pairs, all local); sum_{d <= x} (1000 - d) first reaches half (4977.5) at x = 4 (4990; x = 3: 3994).
TEST(trace_positions_of_a_window_head_are_its_sinks_and_its_window) {
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 1000, 1, 1, &e), SR_OK);
  head_pattern *h = pattern_head(&p, 0, 0);
  h->kind = PATTERN_WINDOW, h->sinks = 4, h->window = 10;
  trace_position_stats x;
  CHECK_EQ_INT(trace_positions(&p, 0, &x, &e), SR_OK);
  CHECK_NEAR(x.vertical_pairs, 3994, 0);
  CHECK_NEAR(x.vertical_first[0], 1, 0);
  CHECK_NEAR(x.slash_pairs, 9955, 0);
  CHECK_NEAR(x.slash_local, 1, 0);
  CHECK_NEAR(x.slash_q[0], 4, 0);
  pattern_free(&p);
}

// A one-step trace of vs-topp written into the test's folder.
static void write_trace(const char *path, int64_t n, const char *spec, int steps) {
  sr_error e;
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  trace_info in;
  memset(&in, 0, sizeof in);
  trace_info_set_model(&in, &m);
  in.seq_len = n, in.layers = (int)m.num_layers, in.heads = (int)m.num_heads, in.seed = 4;
  snprintf(in.source, sizeof in.source, "generator");
  snprintf(in.origin, sizeof in.origin, "%s", spec);
  trace_writer w;
  CHECK_EQ_INT(trace_writer_begin(&w, &in, &e), SR_OK);
  for (int s = 0; s < steps; s++) {
    pattern p;
    CHECK_EQ_INT(pattern_from_spec(spec, &m, n, 4, s, &p, &e), SR_OK);
    CHECK_EQ_INT(trace_writer_add_step(&w, &p, NULL, &e), SR_OK);
    pattern_free(&p);
  }
  CHECK_EQ_INT(trace_writer_finish(&w, path, &e), SR_OK);
  trace_writer_free(&w);
}

static int32_t leading_run(const int32_t *x, int32_t n) {
  int32_t i = 0;
  while (i < n && x[i] == i) i++;
  return i;
}

TEST(fitted_generator_keeps_budgets_and_leading_runs_at_the_recorded_length) {
  sr_error e;
  char path[600];
  snprintf(path, sizeof path, "%s/t.safetensors", test_tmpdir());
  write_trace(path, 5000, "vs-topp:0.9", 1);
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  pattern rec, fit;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &m, 5000, 4, 0, &rec, &e), SR_OK);
  CHECK_EQ_INT(trace_fit_pattern(path, &m, 5000, 1, 0, &fit, &e), SR_OK);
  for (int64_t x = 0; x < (int64_t)rec.layers * rec.heads; x++) {
    const head_pattern *a = &rec.h[x], *b = &fit.h[x];
    CHECK_EQ_INT(b->kind, PATTERN_VS);
    CHECK_EQ_INT(b->n_vertical, a->n_vertical);
    CHECK_EQ_INT(b->n_slash, a->n_slash);
    CHECK_EQ_INT(leading_run(b->vertical, b->n_vertical), leading_run(a->vertical, a->n_vertical));
    CHECK_EQ_INT(leading_run(b->slash, b->n_slash), leading_run(a->slash, a->n_slash));
    CHECK_EQ_INT(pattern_validate_head(b, 5000, "fit", "head", &e), SR_OK);
  }
  pattern_free(&rec), pattern_free(&fit);
}

// Budgets and the window scale with N, so a column or diagonal keeps ~ N pairs and density stays: at twice
// the length the fit's density is the recording's within 5% (sinks stay in tokens, collisions differ).
TEST(fitted_generator_keeps_density_at_another_length) {
  sr_error e;
  char path[600];
  snprintf(path, sizeof path, "%s/t.safetensors", test_tmpdir());
  write_trace(path, 4096, "vs-topp:0.9", 2);
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  pattern rec, fit;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &m, 4096, 4, 0, &rec, &e), SR_OK);
  CHECK_EQ_INT(trace_fit_pattern(path, &m, 8192, 1, 0, &fit, &e), SR_OK);
  double a = 0, b = 0;
  for (int64_t x = 0; x < (int64_t)rec.layers * rec.heads; x++) {
    a += trace_head_kept_pairs(&rec.h[x], 4096) / (4096.0 * 4097 / 2);
    b += trace_head_kept_pairs(&fit.h[x], 8192) / (8192.0 * 8193 / 2);
  }
  CHECK_REL(b, a, 0.05);
  pattern_free(&rec), pattern_free(&fit);
}

// tiny-test's 2 x 4 fitted heads drive tiny-25m's 8 x 8: head (l, h) takes fitted head (l 2 / 8, h 4 / 8),
// so its budgets per token are that head's.
TEST(fitted_generator_maps_heads_onto_another_model) {
  sr_error e;
  char path[600];
  snprintf(path, sizeof path, "%s/t.safetensors", test_tmpdir());
  write_trace(path, 4096, "vs-topp:0.9", 1);
  model_config small, big;
  CHECK_EQ_INT(model_load("tiny-test", &small, &e), SR_OK);
  CHECK_EQ_INT(model_load("tiny-25m", &big, &e), SR_OK);
  pattern rec, fit;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &small, 4096, 4, 0, &rec, &e), SR_OK);
  CHECK_EQ_INT(trace_fit_pattern(path, &big, 4096, 1, 0, &fit, &e), SR_OK);
  CHECK_EQ_INT(fit.layers, 8);
  CHECK_EQ_INT(fit.heads, 8);
  for (int l = 0; l < 8; l++)
    for (int h = 0; h < 8; h++) {
      const head_pattern *src = pattern_head(&rec, l * 2 / 8, h * 4 / 8), *dst = pattern_head(&fit, l, h);
      CHECK_EQ_INT(dst->n_vertical, src->n_vertical);
      CHECK_EQ_INT(dst->n_slash, src->n_slash);
    }
  pattern_free(&rec), pattern_free(&fit);
}

// A trace of tiny-test's 2 x 4 heads at n tokens, every head of every step the same VS head: no vertical
// and the given slash offsets (ascending).
static void write_hand_trace(const char *path, int64_t n, int steps, const int32_t *slash, int32_t n_slash) {
  sr_error e;
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  trace_info in;
  memset(&in, 0, sizeof in);
  trace_info_set_model(&in, &m);
  in.seq_len = n, in.layers = (int)m.num_layers, in.heads = (int)m.num_heads;
  snprintf(in.source, sizeof in.source, "generator");
  snprintf(in.origin, sizeof in.origin, "hand-built");
  trace_writer w;
  CHECK_EQ_INT(trace_writer_begin(&w, &in, &e), SR_OK);
  for (int s = 0; s < steps; s++) {
    pattern p;
    CHECK_EQ_INT(pattern_alloc(&p, n, in.layers, in.heads, &e), SR_OK);
    for (int64_t x = 0; x < (int64_t)p.layers * p.heads; x++) {
      head_pattern *h = &p.h[x];
      h->kind = PATTERN_VS;
      h->vertical = malloc(sizeof(int32_t)), h->n_vertical = 0;
      h->slash = malloc((size_t)n_slash * sizeof(int32_t)), h->n_slash = n_slash;
      memcpy(h->slash, slash, (size_t)n_slash * sizeof(int32_t));
    }
    CHECK_EQ_INT(trace_writer_add_step(&w, &p, NULL, &e), SR_OK);
    pattern_free(&p);
  }
  CHECK_EQ_INT(trace_writer_finish(&w, path, &e), SR_OK);
  trace_writer_free(&w);
}

// Share of the slash offsets beyond the leading run that lie in [lo, hi), over every head of the fit drawn
// at seeds 1 .. seeds (the draws are random; the mean over 8 heads x seeds is what the tests bound).
static double fitted_slash_share(const char *path, int64_t n, int seeds, int32_t lo, int32_t hi) {
  sr_error e;
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  double in = 0, all = 0;
  for (int seed = 1; seed <= seeds; seed++) {
    pattern fit;
    CHECK_EQ_INT(trace_fit_pattern(path, &m, n, (uint64_t)seed, 0, &fit, &e), SR_OK);
    for (int64_t x = 0; x < (int64_t)fit.layers * fit.heads; x++) {
      const head_pattern *h = &fit.h[x];
      for (int32_t i = leading_run(h->slash, h->n_slash); i < h->n_slash; i++) {
        all++;
        in += h->slash[i] >= lo && h->slash[i] < hi;
      }
    }
    pattern_free(&fit);
  }
  return all > 0 ? in / all : 0;
}

// Offset 0, then 32 runs of 8 (starts 200, 240, .., 1440) and 32 single offsets far out (4000, 4400, ..,
// 16400): 256 of the 288 offsets beyond the leading one (0.889) lie in [200, 1448). Pooled over the two steps,
// the starts' quantiles up to level 15/32 fall on the runs of 8 and segment 15 holds four of them and a single one
// (mean 6.6), the rest single offsets: a draw brings (15 x 8 + 6.6 + 16) / 32 offsets on average, 120 / 142.6 =
// 0.84 of them near. One mean length for all runs (4.5, drawn as 5) would put about half of them there.
TEST(fitted_runs_near_the_diagonal_are_as_long_as_the_recorded_ones) {
  int32_t slash[1 + 32 * 8 + 32], n = 0;
  slash[n++] = 0;
  for (int k = 0; k < 32; k++)
    for (int j = 0; j < 8; j++) slash[n++] = 200 + 40 * k + j;
  for (int k = 0; k < 32; k++) slash[n++] = 4000 + 400 * k;
  char path[600];
  snprintf(path, sizeof path, "%s/runs.safetensors", test_tmpdir());
  write_hand_trace(path, 20000, 2, slash, n);
  const double near = fitted_slash_share(path, 20000, 8, 200, 1448);
  CHECK(near > 0.80 && near < 0.889 + 0.02);
}

// Offset 0, 40 single offsets 2 apart (3000, 3002, .., 3078) and 40 far out (6000, 6300, .., 17700), the same
// in both steps. The quantiles of the pooled starts up to level 15/32 lie in [3000, 3074], so 15/32 = 0.469 of the draws
// land there, on 75 places: many land on an offset already taken. Taking the nearest free one keeps them
// within [2900, 3180); drawing again from the whole distribution would send half of them far out (about 0.40
// near, by simulation of both rules).
TEST(fitted_draws_that_meet_a_taken_offset_stay_near_it) {
  int32_t slash[81], n = 0;
  slash[n++] = 0;
  for (int k = 0; k < 40; k++) slash[n++] = 3000 + 2 * k;
  for (int k = 0; k < 40; k++) slash[n++] = 6000 + 300 * k;
  char path[600];
  snprintf(path, sizeof path, "%s/crowd.safetensors", test_tmpdir());
  write_hand_trace(path, 20000, 2, slash, n);
  const double near = fitted_slash_share(path, 20000, 16, 2900, 3180);
  CHECK(near > 0.469 - 0.02 && near < 0.469 + 0.02);
}

// 50 single offsets 2 apart near the diagonal (20, 22, .., 118) and 3950 far out (500, 507, ..): 1.25% of
// them below 128. Pooled over the two steps (each start twice) the quantiles at levels 1/512, 1/256, 1/128,
// 1/64, 1/32 are the starts 36, 50, 82, 584, 1025, so 1/128 of the draws fall below 82 and 1/128 x (128 - 82) /
// (584 - 82) more below 128: 0.85%. Levels 1/32 apart would interpolate 20 .. 1025 over the first 1/32: 0.34%.
TEST(fitted_generator_keeps_the_few_offsets_near_the_diagonal) {
  int32_t slash[4000], n = 0;
  for (int k = 0; k < 50; k++) slash[n++] = 20 + 2 * k;
  for (int k = 0; k < 3950; k++) slash[n++] = 500 + 7 * k;
  char path[600];
  snprintf(path, sizeof path, "%s/near.safetensors", test_tmpdir());
  write_hand_trace(path, 32768, 2, slash, n);
  const double near = fitted_slash_share(path, 32768, 4, 0, 128);
  CHECK(near > 0.0075 && near < 0.0125);
}

TEST(vs_fit_of_a_missing_trace_is_an_input_error_naming_it) {
  sr_error e = {0};
  model_config m;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  pattern p;
  CHECK_EQ_INT(pattern_source_load("vs-fit:/nonexistent/t.safetensors", &m, 1000, 0, 0, &p, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "/nonexistent/t.safetensors");
  CHECK_EQ_INT(pattern_source_load("vs-fit:", &m, 1000, 0, 0, &p, &e), SR_EINPUT);
  CHECK_EQ_INT(pattern_from_spec("vs-fit:x", &m, 1000, 0, 0, &p, &e), SR_EINPUT);  // the planner alone cannot read it
}

// A plan takes a fit as its pattern, and a balanced layout dealt by it (the planner reads it through traces/).
TEST(a_plan_takes_a_fitted_pattern_and_a_layout_balanced_by_it) {
  sr_error e;
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "qwen2.5-3b");
  snprintf(s.cluster, sizeof s.cluster, "h200-1x8");
  snprintf(s.pattern, sizeof s.pattern, "vs-fit:traces/samples/tiny25m-vs-topp-32k.safetensors");
  snprintf(s.layout, sizeof s.layout, "balanced");
  s.seq = 64 * 1024;  // another model and length than the trace's
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(p.layout.kind, LAYOUT_BALANCED);
  CHECK_EQ_INT(p.layout.n_tokens, 64 * 1024);
  plan_free(&p);
  snprintf(s.pattern, sizeof s.pattern, "vs-fit:");
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_EINPUT);
}

// The goal of the fit: on every shipped trace, each worker and step imbalance of contiguous, zigzag,
// striped:128 and balanced at 8, 32 and 64 ranks within 10% of the recording's.
TEST(fitted_imbalance_is_within_ten_percent_of_each_shipped_trace) {
  static const char *const names[] = {"tiny25m-vs-topp-32k", "tiny25m-dense-32k", "tiny25m-block-16k",
                                      "tiny-test-minference-8k", "tiny25m-trained-vs-online-p0.9-32k",
                                      "tiny25m-trained-vs-online-p0.5-32k"};
  static const char *const layouts[] = {"contiguous", "zigzag", "striped:128", "balanced"};
  const int ranks[] = {8, 32, 64};
  sr_error e;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "traces/samples/%s.safetensors", names[i]);
    trace_file t;
    CHECK_EQ_INT(trace_open(path, &t, &e), SR_OK);
    model_config m;
    memset(&m, 0, sizeof m);
    m.num_layers = t.info.layers, m.num_heads = t.info.heads;
    pattern rec, fit;
    CHECK_EQ_INT(trace_read_step(&t, 0, &rec, &e), SR_OK);
    CHECK_EQ_INT(trace_fit_pattern(path, &m, t.info.seq_len, 1, 0, &fit, &e), SR_OK);
    for (int k = 0; k < 4; k++)
      for (int w = 0; w < 3; w++) {
        layout la, lb;
        balance_figures a, b;
        CHECK_EQ_INT(balance_layout_named(&rec, layouts[k], ranks[w], &la, &e), SR_OK);
        CHECK_EQ_INT(balance_layout_named(&fit, layouts[k], ranks[w], &lb, &e), SR_OK);
        CHECK_EQ_INT(balance_of(&rec, &la, &a, &e), SR_OK);
        CHECK_EQ_INT(balance_of(&fit, &lb, &b, &e), SR_OK);
        if (fabs(b.worker / a.worker - 1) > 0.10 || fabs(b.step / a.step - 1) > 0.10)
          test_fail(__FILE__, __LINE__, "%s, %s at %d ranks: recorded %.4f/%.4f, fitted %.4f/%.4f", names[i],
                    layouts[k], ranks[w], a.worker, a.step, b.worker, b.step);
        layout_free(&la), layout_free(&lb);
      }
    pattern_free(&rec), pattern_free(&fit);
    trace_close(&t);
  }
}

// ---------------------------------------------------------------------------------------------
// the commands

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...) {
  char cmd[4096];
  int n = snprintf(cmd, sizeof cmd, "%s/sparsering ", test_bin_dir());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  return test_run(cmd, out);
}

TEST(trace_stats_shows_where_the_work_sits_and_the_imbalance_of_each_layout) {
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace stats traces/samples/tiny-test-minference-8k.safetensors --ranks 2,4"), 0);
  CHECK_STR_CONTAINS(out, "density per head");
  CHECK_STR_CONTAINS(out, "where the work sits");
  CHECK_STR_CONTAINS(out, "2 ranks: worker");
  CHECK_STR_CONTAINS(out, "4 ranks: worker");
  static const char *const layouts[] = {"contiguous", "zigzag", "striped:128", "balanced"};
  for (int i = 0; i < 4; i++) CHECK_STR_CONTAINS(out, layouts[i]);
  free(out);
  CHECK_EQ_INT(run(&out, "trace stats traces/samples/tiny-test-minference-8k.safetensors --ranks 0"), 2);
  free(out);
}

TEST(trace_fit_compares_fitted_with_recorded_figures_in_its_csv) {
  char *out = NULL, *csv = NULL, path[600];
  snprintf(path, sizeof path, "%s/fit.csv", test_tmpdir());
  CHECK_EQ_INT(run(&out, "trace fit traces/samples/tiny-test-minference-8k.safetensors --ranks 8 --csv %s", path), 0);
  CHECK_STR_CONTAINS(out, "8 of 8 imbalance figures within 10%");
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(csv, "figure,layout,ranks,recorded,fitted,rel_diff\n");
  CHECK_STR_CONTAINS(csv, "worker imbalance,balanced,8,");
  free(out), free(csv);
}

// A trace of several steps is also compared over all of them (the fit's target: it is fitted to every step).
TEST(trace_fit_compares_placement_over_all_recorded_steps) {
  char *out = NULL, *csv = NULL, path[600];
  snprintf(path, sizeof path, "%s/fit2.csv", test_tmpdir());
  CHECK_EQ_INT(run(&out, "trace fit traces/samples/tiny-test-minference-8k.safetensors --ranks 8 --csv %s", path), 0);
  CHECK_STR_CONTAINS(out, "over all 2 recorded steps");
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(csv, "\nvertical share (all steps),,0,");
  CHECK_STR_CONTAINS(csv, "\nslash p50 (tokens) (all steps),,0,");
  free(out), free(csv);
}

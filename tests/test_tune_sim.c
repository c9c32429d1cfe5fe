// test_tune_sim.c — the tuner with the simulator as its evaluator: the bounds it prunes with never
// exceed what the simulator finds, its answer equals exhaustive search, the chosen plan fits, the
// written plan reads back and simulates to the recorded prediction, and the kept-pair count behind the
// attention bound equals brute force.
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "sim/tune.h"
#include "tests/test.h"

// A 2 nodes x 2 GPUs A100-like cluster with little memory, so some points do not fit: tiny-test's
// weights are negligible and the 2 GiB reserve plus activations decide.
static const char *small_cluster(double mem_gib) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/small-2x2.json", test_tmpdir());
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 2, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"A100-small\", \"peak_tflops\": 312, "
           "\"hbm_gbps\": 1555, \"mem_gib\": %.4f, \"efficiency\": {\"gemm\": 0.75, \"attn_fwd_full\": 0.70, "
           "\"attn_fwd_partial\": 0.55, \"attn_fwd_bar\": 0.30, \"attn_bwd_full\": 0.55, \"attn_bwd_partial\": 0.45, "
           "\"attn_bwd_bar\": 0.25, \"mem\": 0.80}, \"comm_slowdown\": 1.05}, "
           "\"intra_node\": {\"gbps\": 300, \"latency_us\": 3.0}, "
           "\"inter_node\": {\"nics_per_node\": 2, \"nic_gbps\": 25, \"latency_us\": 5.0}, "
           "\"host\": {\"pcie_gbps\": 25, \"latency_us\": 10.0, \"mem_gib\": 64}}",
           mem_gib);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

static void base_spec(plan_spec *s, const char *cluster, int64_t seq, const char *pattern) {
  plan_spec_defaults(s);
  snprintf(s->model, sizeof s->model, "tiny-test");
  snprintf(s->cluster, sizeof s->cluster, "%s", cluster);
  s->seq = seq;
  snprintf(s->pattern, sizeof s->pattern, "%s", pattern);
  s->seed = 7;
}

// ---------------------------------------------------------------------------------------------

TEST(tune_head_pairs_equal_brute_force) {
  const int64_t n = 300;
  pattern p;
  sr_error e;
  CHECK_EQ_INT(pattern_alloc(&p, n, 1, 4, &e), SR_OK);
  head_pattern *w = pattern_head(&p, 0, 1), *v = pattern_head(&p, 0, 2), *b = pattern_head(&p, 0, 3);
  w->kind = PATTERN_WINDOW;
  w->sinks = 5;
  w->window = 40;
  static int32_t vert[] = {0, 3, 77, 150, 299}, slash[] = {0, 1, 64, 200};
  v->kind = PATTERN_VS;
  v->n_vertical = 5;
  v->vertical = vert;
  v->n_slash = 4;
  v->slash = slash;
  b->kind = PATTERN_BLOCK;
  b->block = 64;
  b->n_blocks = 5;
  b->row_words = 1;
  uint64_t mask[5] = {0x1, 0x3, 0x5, 0xE, 0x13};  // includes bits above the diagonal (ignored: causal)
  b->mask = mask;
  for (int h = 0; h < 4; h++) {
    double brute = 0;
    for (int64_t q = 0; q < n; q++)
      for (int64_t k = 0; k <= q; k++) brute += pattern_keeps(pattern_head(&p, 0, h), q, k);
    CHECK_NEAR(tune_head_pairs(pattern_head(&p, 0, h), n), brute, 0);
  }
  // The arrays are the test's own: detach them before pattern_free.
  v->vertical = v->slash = NULL;
  b->mask = NULL;
  pattern_free(&p);
}

// Every point of the full space of spec s simulated (no pruning): *t, *sp and *r for the caller to free (0 when the
// set-up failed; the failure is recorded).
static int simulate_space(plan_spec *s, tune_sim **t, tune_space *sp, tune_result *r) {
  sr_error e;
  CHECK_EQ_INT(tune_sim_open(s, 0, t, &e), SR_OK);
  if (!*t) return 0;
  *sp = (tune_space){0};
  CHECK_EQ_INT(tune_space_full(tune_sim_model(*t), tune_sim_cluster(*t), s->seq, sp, &e), SR_OK);
  tune_evaluator ev = tune_sim_evaluator(*t);
  tune_options o;
  tune_options_defaults(&o);
  o.no_prune = 1;
  o.robust_top = 0;
  CHECK_EQ_INT(tune_search(sp, &ev, NULL, &o, r, &e), SR_OK);
  return 1;
}

TEST(tune_bounds_never_exceed_the_simulation) {
  // Every point of the space, simulated: the step-time and memory lower bounds hold, on a sparse and
  // on the dense pattern (where the attention part of the bound is largest).
  const char *patterns[] = {"vs-topp:0.95", "dense"};
  for (int k = 0; k < 2; k++) {
    plan_spec s;
    base_spec(&s, small_cluster(80), 8192, patterns[k]);
    tune_sim *t;
    tune_space sp;
    tune_result r;
    if (!simulate_space(&s, &t, &sp, &r)) return;
    int n_sim = 0;
    for (int i = 0; i < sp.n; i++) {
      const tune_eval *v = &r.ev[i];
      if (v->status != TUNE_SIMULATED && v->status != TUNE_OOM) continue;
      n_sim++;
      if (!(v->lb_step_s <= v->step_s)) {
        char label[128];
        tune_point_label(&sp.pt[i], label, sizeof label);
        test_fail(__FILE__, __LINE__, "%s (%s): bound %.9g s > simulated %.9g s", label, patterns[k], v->lb_step_s,
                  v->step_s);
      }
      CHECK(v->lb_mem_bytes <= v->mem_bytes);
      CHECK(v->lb_step_s > 0);
    }
    CHECK(n_sim > 100);
    tune_result_free(&r);
    tune_space_free(&sp);
    tune_sim_close(t);
  }
}

// The bars' backward walk (sim/cost.h, cost_bar_walk) on the small cluster's GPU at walk_us a CTA and 64-row step.
static const char *walk_cluster(double walk_us) {
  static char path[1200];
  snprintf(path, sizeof path, "%s/small-2x2-walk.json", test_tmpdir());
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 2, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"A100-small\", \"peak_tflops\": 312, "
           "\"hbm_gbps\": 1555, \"mem_gib\": 80, \"bar_walk_us\": %g, \"efficiency\": {\"gemm\": 0.75, "
           "\"attn_fwd_full\": 0.70, \"attn_fwd_partial\": 0.55, \"attn_fwd_bar\": 0.30, \"attn_bwd_full\": 0.55, "
           "\"attn_bwd_partial\": 0.45, \"attn_bwd_bar\": 0.25, \"mem\": 0.80}, \"comm_slowdown\": 1.05}, "
           "\"intra_node\": {\"gbps\": 300, \"latency_us\": 3.0}, "
           "\"inter_node\": {\"nics_per_node\": 2, \"nic_gbps\": 25, \"latency_us\": 5.0}, "
           "\"host\": {\"pcie_gbps\": 25, \"latency_us\": 10.0, \"mem_gib\": 64}}",
           walk_us);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

TEST(tune_bounds_hold_where_the_bars_walk_dominates_and_count_it_on_the_ring) {
  // A walk of 0.1 s a step, far beyond any call's work: every point of the space (rings, USP, Ulysses, FPDT),
  // simulated, stays at or above its bound, with bars (window, vs-topp) and without (dense). On the contiguous
  // layout the window's 4 sinks are bars in every query tile of ranks 1-3 and in rank 0's past the window (tile 0
  // is no entry there): each rank's backward call on source 0 walks its 8192 / 4 / 128 = 16 query tiles, 2 x 16 x
  // 0.1 s = 3.2 s a layer; the ring kinds' bound counts it for both layers (6.4 s), a floor of every such step.
  const char *patterns[] = {"window:4:512", "vs-topp:0.95", "dense"};
  for (int k = 0; k < 3; k++) {
    plan_spec s;
    base_spec(&s, walk_cluster(1e5), 8192, patterns[k]);
    tune_sim *t;
    tune_space sp;
    tune_result r;
    if (!simulate_space(&s, &t, &sp, &r)) return;
    int n_sim = 0, n_walked = 0, kinds[3] = {0, 0, 0};  // ring kinds, USP and Ulysses, FPDT
    for (int i = 0; i < sp.n; i++) {
      const tune_eval *v = &r.ev[i];
      const tune_point *pt = &sp.pt[i];
      if (v->status != TUNE_SIMULATED && v->status != TUNE_OOM) continue;
      n_sim++;
      kinds[pt->fpdt_chunk > 0 ? 2 : pt->schedule == SCHED_RING || pt->schedule == SCHED_DOUBLE_RING ? 0 : 1]++;
      char label[128];
      tune_point_label(pt, label, sizeof label);
      if (!(v->lb_step_s <= v->step_s))
        test_fail(__FILE__, __LINE__, "%s (%s): bound %.9g s > simulated %.9g s", label, patterns[k], v->lb_step_s,
                  v->step_s);
      if (k == 0 && pt->fpdt_chunk == 0 && pt->layout == LAYOUT_CONTIGUOUS &&
          (pt->schedule == SCHED_RING || pt->schedule == SCHED_DOUBLE_RING)) {
        n_walked++;
        if (!(v->lb_step_s >= 2 * 2 * 16 * 0.1 * (1 - 1e-6)))
          test_fail(__FILE__, __LINE__, "%s (%s): bound %.9g s below the walk's 6.4 s", label, patterns[k], v->lb_step_s);
      }
    }
    CHECK(n_sim > 100);
    CHECK(kinds[0] > 0 && kinds[1] > 0 && kinds[2] > 0);
    if (k == 0) CHECK(n_walked > 0);
    tune_result_free(&r);
    tune_space_free(&sp);
    tune_sim_close(t);
  }
}

static int by_step_then_index(const void *a, const void *b) {
  const double *x = a, *y = b;  // pairs (step, index)
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

TEST(tune_with_the_simulator_equals_exhaustive_search) {
  // Dense attention, whose compute dominates the step, so the compute bound prunes; and GPU memory set
  // at the 97th percentile of the points' memory lower bounds, so memory binds whatever the memory
  // model's constants (the hungriest 3 % cannot fit) while the fast no-recomputation points still do.
  plan_spec s;
  base_spec(&s, small_cluster(80), 32768, "dense");
  tune_sim *t;
  sr_error e;
  CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_OK);
  if (!t) return;
  {
    tune_space all = {0};
    CHECK_EQ_INT(tune_space_full(tune_sim_model(t), tune_sim_cluster(t), s.seq, &all, &e), SR_OK);
    tune_evaluator ev0 = tune_sim_evaluator(t);
    double *lb = malloc((size_t)all.n * sizeof *lb);
    int n_lb = 0;
    for (int i = 0; i < all.n; i++) {
      tune_eval v;
      memset(&v, 0, sizeof v);
      CHECK_EQ_INT(ev0.bound(ev0.ctx, &all.pt[i], &v, &e), SR_OK);
      if (v.status != TUNE_INVALID) lb[n_lb++] = v.lb_mem_bytes;
    }
    qsort(lb, (size_t)n_lb, sizeof *lb, cmp_double);
    double cap_gib = n_lb ? lb[n_lb * 97 / 100] / 1073741824.0 : 80;
    free(lb);
    tune_space_free(&all);
    tune_sim_close(t);
    base_spec(&s, small_cluster(cap_gib), 32768, "dense");
    CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_OK);
    if (!t) return;
  }
  tune_space sp = {0};
  CHECK_EQ_INT(tune_space_full(tune_sim_model(t), tune_sim_cluster(t), s.seq, &sp, &e), SR_OK);
  tune_evaluator ev = tune_sim_evaluator(t);
  tune_options o;
  tune_options_defaults(&o);
  o.robust_top = 0;
  tune_result r;
  CHECK_EQ_INT(tune_search(&sp, &ev, NULL, &o, &r, &e), SR_OK);
  // Exhaustive: simulate every point directly and order the fitting ones by (step, index).
  double *fit = malloc((size_t)sp.n * 2 * sizeof *fit);
  int n_fit = 0, n_not = 0;
  for (int i = 0; i < sp.n; i++) {
    tune_eval v;
    memset(&v, 0, sizeof v);
    v.index = i;
    CHECK_EQ_INT(ev.simulate(ev.ctx, &sp.pt[i], 0, &v, &e), SR_OK);
    if (v.status == TUNE_INVALID) continue;
    if (!v.fits) {
      n_not++;
      CHECK(r.ev[i].status == TUNE_PRUNED_MEMORY || r.ev[i].status == TUNE_OOM);
      continue;
    }
    fit[2 * n_fit] = v.step_s;
    fit[2 * n_fit + 1] = i;
    n_fit++;
  }
  qsort(fit, (size_t)n_fit, 2 * sizeof *fit, by_step_then_index);
  CHECK(n_fit > 10);
  CHECK(n_not > 0);  // memory really is binding in this set-up
  CHECK(r.n_pruned_memory > 0);
  CHECK(r.n_pruned_bound > 0);
  CHECK_EQ_INT(r.best, (int)fit[1]);
  CHECK_EQ_INT(r.n_ranked, 10);
  for (int k = 0; k < r.n_ranked; k++) CHECK_EQ_INT(r.ranked[k], (int)fit[2 * k + 1]);
  // The chosen plan fits.
  CHECK(r.chosen >= 0 && r.ev[r.chosen].fits);
  CHECK(r.ev[r.chosen].mem_bytes <= r.ev[r.chosen].mem_capacity);
  free(fit);
  tune_result_free(&r);
  tune_space_free(&sp);
  tune_sim_close(t);
}

TEST(tune_plan_round_trips_through_the_file_and_the_simulator) {
  plan_spec s;
  base_spec(&s, "h200-1x2", 4096, "vs-topp:0.95");
  tune_sim *t;
  sr_error e;
  CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_OK);
  if (!t) return;
  tune_point pt = {.layout = LAYOUT_STRIPED, .granularity = 128, .schedule = SCHED_DOUBLE_RING, .inner = 1,
                   .recompute = 1, .zero = 1, .kv_bytes = 1};
  plan p, q;
  CHECK_EQ_INT(tune_sim_plan(t, &pt, &p, &e), SR_OK);
  CHECK(p.spec.predicted_step_s > 0);
  char path[1200];
  snprintf(path, sizeof path, "%s/best.json", test_tmpdir());
  CHECK_EQ_INT(plan_write(&p, path, &e), SR_OK);
  CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
  CHECK(q.spec.predicted_step_s == p.spec.predicted_step_s);
  CHECK(strcmp(q.spec.layout, "striped") == 0 && q.spec.granularity == 128 && q.spec.kv_bytes == 1);
  // Simulating the plan read back as `sparsering sim --plan` does (sim_plan, default options) gives
  // the recorded prediction, exactly.
  sim_result r;
  sim_options so = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_EQ_INT(sim_plan(&q, &so, &r, NULL, &e), SR_OK);
  CHECK(r.step_s == p.spec.predicted_step_s);
  plan_free(&p);
  plan_free(&q);
  tune_sim_close(t);
}

TEST(tune_sees_skipped_empty_sends_where_a_window_leaves_shards_untouched) {
  // The same ring point with skipping off and on: on a window over the contiguous layout, which leaves
  // most shards untouched, the skipped sends cost nothing, so it moves fewer bytes and steps faster;
  // dense attention over the zigzag layout needs every shard on every rank and the two tie.
  const char *patterns[] = {"window:0:256", "dense"};
  const layout_kind layouts[] = {LAYOUT_CONTIGUOUS, LAYOUT_ZIGZAG};
  for (int k = 0; k < 2; k++) {
    plan_spec s;
    base_spec(&s, small_cluster(80), 8192, patterns[k]);
    tune_sim *t;
    sr_error e;
    CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_OK);
    if (!t) return;
    tune_evaluator ev = tune_sim_evaluator(t);
    tune_eval v[2];
    for (int skip = 0; skip <= 1; skip++) {
      tune_point pt = {.layout = layouts[k], .granularity = 1, .schedule = SCHED_RING, .recompute = 1, .zero = 1,
                       .kv_bytes = 2, .skip_empty_sends = skip};
      memset(&v[skip], 0, sizeof v[skip]);
      CHECK_EQ_INT(ev.simulate(ev.ctx, &pt, 0, &v[skip], &e), SR_OK);
    }
    if (k == 0) {
      CHECK(v[1].step_s < v[0].step_s);
      CHECK(v[1].comm_bytes < v[0].comm_bytes);
    } else {
      CHECK(v[1].step_s == v[0].step_s);
      CHECK(v[1].comm_bytes == v[0].comm_bytes);
    }
    tune_sim_close(t);
  }
}

TEST(tune_sim_open_rejects_bad_inputs) {
  const char *bad[][3] = {{"no-such-model", "h200-1x2", "dense"}, {"tiny-test", "no-such-cluster", "dense"},
                          {"tiny-test", "h200-1x2", "no-such-pattern:1"}};
  for (int k = 0; k < 3; k++) {
    plan_spec s;
    base_spec(&s, bad[k][1], 4096, bad[k][2]);
    snprintf(s.model, sizeof s.model, "%s", bad[k][0]);
    tune_sim *t = NULL;
    sr_error e;
    CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_EINPUT);
    CHECK(t == NULL);
  }
}

// Points are evaluated on several threads at once (the evaluator is thread safe): every number of the
// result, its CSV, is the same for one thread and for several, with the robustness check's perturbed
// patterns built lazily by whichever thread needs them first.
static void progress_count(void *ctx, const tune_progress *p) {
  int *calls = ctx;
  (*calls)++;
  CHECK(p->done >= 0 && p->done <= p->n_points);
}

TEST(tune_search_gives_the_same_csv_for_any_thread_count) {
  plan_spec s;
  base_spec(&s, small_cluster(80), 8192, "vs-topp:0.9");
  char *csv[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    tune_sim *t;
    sr_error e;
    CHECK_EQ_INT(tune_sim_open(&s, 0, &t, &e), SR_OK);
    if (!t) return;
    tune_space sp = {0};
    CHECK_EQ_INT(tune_space_full(tune_sim_model(t), tune_sim_cluster(t), s.seq, &sp, &e), SR_OK);
    tune_evaluator ev = tune_sim_evaluator(t);
    tune_options o;
    tune_options_defaults(&o);
    o.threads = k == 0 ? 1 : 3;
    int calls = 0;
    o.progress = progress_count;
    o.progress_ctx = &calls;
    tune_result r;
    CHECK_EQ_INT(tune_search(&sp, &ev, NULL, &o, &r, &e), SR_OK);
    CHECK(calls >= 4);  // bounds, search (each batch), robustness, done
    CHECK_EQ_INT(tune_csv(&sp, &r, &csv[k], &e), SR_OK);
    tune_result_free(&r);
    tune_space_free(&sp);
    tune_sim_close(t);
  }
  CHECK(csv[0] && csv[1] && strcmp(csv[0], csv[1]) == 0);
  free(csv[0]);
  free(csv[1]);
}

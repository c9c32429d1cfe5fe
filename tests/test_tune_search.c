// test_tune_search.c — the tuner's search against exhaustive search, with a cost function of the test's
// own (a hash of the point's fields), so pruning, ranking, the robustness choice and the split over
// processes are checked independently of the simulator.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim/tune.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------------------------
// a toy evaluator

static uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t key_of(const tune_point *p) {
  uint64_t k = 0;
  const int64_t f[] = {p->layout, p->granularity, p->schedule, p->inner, p->ulysses, p->fpdt_chunk,
                       p->fpdt_offload, p->recompute, p->zero, p->kv_bytes, p->skip_empty_sends};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) k = mix(k ^ (uint64_t)f[i]);
  return k;
}

#define TOY_CAPACITY 80.0

// Step time in [1, 2) s on the base pattern; perturbed steps add up to 10 %.
static double toy_step(const tune_point *p, int step) {
  uint64_t k = key_of(p);
  double s = 1.0 + (double)(k % 1000) / 1000.0;
  if (step > 0) s *= 1.0 + (double)(mix(k ^ (uint64_t)step) % 100) / 1000.0;
  return s;
}
// Lower bound: between half and all of the step time.
static double toy_lb(const tune_point *p) { return toy_step(p, 0) * (0.5 + 0.5 * (double)(mix(key_of(p) * 7) % 1000) / 1000.0); }
// Memory in [10, 110) "bytes"; the bound is 95 % of it, so some points pass the bound and do not fit.
static double toy_mem(const tune_point *p) { return 10.0 + (double)(mix(key_of(p) * 3) % 100); }
// The "planner" rejects zigzag with fp8 KV.
static int toy_invalid(const tune_point *p) { return p->layout == LAYOUT_ZIGZAG && p->kv_bytes == 1; }

typedef struct {
  int n_bound, n_sim;
  int fail_point;  // simulate returns an input error for this point (-1: never)
} toy_ctx;

static int toy_bound(void *ctx, const tune_point *p, tune_eval *out, sr_error *e) {
  ((toy_ctx *)ctx)->n_bound++;
  if (toy_invalid(p)) {
    out->status = TUNE_INVALID;
    snprintf(out->note, sizeof out->note, "zigzag, fp8: rejected");
    return SR_OK;
  }
  out->lb_step_s = toy_lb(p);
  out->lb_mem_bytes = 0.95 * toy_mem(p);
  out->mem_capacity = TOY_CAPACITY;
  out->fits = out->lb_mem_bytes <= TOY_CAPACITY;
  return SR_OK;
}

static int toy_simulate(void *ctx, const tune_point *p, int step, tune_eval *out, sr_error *e) {
  toy_ctx *t = ctx;
  t->n_sim++;
  if (out->index == t->fail_point) return sr_input_error(e, "toy", "point", "%d cannot be simulated", out->index);
  out->step_s = toy_step(p, step);
  out->mem_bytes = toy_mem(p);
  out->mem_capacity = TOY_CAPACITY;
  out->fits = out->mem_bytes <= TOY_CAPACITY;
  out->worker_imbalance = 1.0 + (double)(key_of(p) % 7) / 100.0;
  out->step_imbalance = 1.0;
  return SR_OK;
}

static cluster_desc toy_cluster(int nodes, int gpn) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  c.nodes = nodes;
  c.gpus_per_node = gpn;
  return c;
}

// 2 nodes x 4 GPUs at 8192 tokens: 536 points (counted by hand in tune_space_full_counts_by_hand).
static void toy_space(tune_space *s) {
  cluster_desc c = toy_cluster(2, 4);
  model_config m;
  memset(&m, 0, sizeof m);
  sr_error e;
  CHECK_EQ_INT(tune_space_full(&m, &c, 8192, s, &e), SR_OK);
}

static int cmp_step_index(const void *a, const void *b, void *ctx) {
  const double *st = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (st[i] != st[j]) return st[i] < st[j] ? -1 : 1;
  return i - j;
}

// ---------------------------------------------------------------------------------------------
// the space

TEST(tune_space_full_counts_by_hand) {
  // 2 x 4 GPUs (W = 8), 8192 tokens. Layouts: contiguous, zigzag, striped G = 64, 128, 256
  // (G = 512 would leave 8192 / (8 x 512) = 2 < 4 stripes a rank) = 5. Ring kinds per layout: ring,
  // double ring inner 1, 2, 4 (divisors of 4 below 8), USP U = 2, 4 (divisors of 8 strictly between
  // 1 and 8) = 6, each x 16 options (recompute, ZeRO, bf16/fp8, skip). Ulysses: 8 options (no skip).
  // FPDT: chunks 1024 (= 128 x 8 > 8192 / 64), 2048, 4096 (= 8192 / 2), offload on/off, 8 options.
  tune_space s = {0};
  toy_space(&s);
  CHECK_EQ_INT(s.n, 5 * 6 * 16 + 8 + 3 * 2 * 8);
  int fpdt = 0, striped256 = 0, usp4 = 0;
  for (int i = 0; i < s.n; i++) {
    fpdt += s.pt[i].fpdt_chunk > 0;
    striped256 += s.pt[i].layout == LAYOUT_STRIPED && s.pt[i].granularity == 256;
    usp4 += s.pt[i].schedule == SCHED_USP && s.pt[i].ulysses == 4;
    if (s.pt[i].schedule == SCHED_ULYSSES) CHECK_EQ_INT(s.pt[i].skip_empty_sends, 0);
  }
  CHECK_EQ_INT(fpdt, 48);
  CHECK_EQ_INT(striped256, 6 * 16);
  CHECK_EQ_INT(usp4, 5 * 16);
  tune_space_free(&s);
}

TEST(tune_space_points_are_distinct) {
  tune_space s = {0};
  toy_space(&s);
  for (int i = 0; i < s.n; i++)
    for (int j = i + 1; j < s.n; j++) CHECK(memcmp(&s.pt[i], &s.pt[j], sizeof s.pt[i]) != 0);
  tune_space_free(&s);
}

TEST(tune_point_diff_names_only_what_differs) {
  tune_point a = {.layout = LAYOUT_STRIPED, .granularity = 128, .schedule = SCHED_DOUBLE_RING, .inner = 8,
                  .recompute = 1, .zero = 1, .kv_bytes = 2};
  tune_point b = a;
  char buf[256];
  tune_point_diff(&a, &b, buf, sizeof buf);
  CHECK(strcmp(buf, "-") == 0);
  b.granularity = 256;
  b.inner = 4;
  b.kv_bytes = 1;
  tune_point_diff(&a, &b, buf, sizeof buf);
  CHECK(strcmp(buf, "striped:256, inner=4, kv fp8") == 0);
}

TEST(tune_point_apply_sets_the_plan_options) {
  plan_spec s;
  plan_spec_defaults(&s);
  tune_point p = {.layout = LAYOUT_ZIGZAG, .granularity = 1, .schedule = SCHED_USP, .ulysses = 4, .recompute = 0,
                  .zero = 1, .kv_bytes = 1, .skip_empty_sends = 1};
  tune_point_apply(&p, &s);
  CHECK(strcmp(s.layout, "zigzag") == 0);
  CHECK(strcmp(s.schedule, "usp") == 0);
  CHECK_EQ_INT(s.ulysses, 4);
  CHECK_EQ_INT(s.inner, 0);
  CHECK_EQ_INT(s.recompute, 0);
  CHECK_EQ_INT(s.kv_bytes, 1);
  CHECK_EQ_INT(s.skip_empty_sends, 1);
  CHECK_EQ_INT(s.fpdt_chunk, 0);
}

// ---------------------------------------------------------------------------------------------
// the search against exhaustive search

TEST(tune_search_top_equals_exhaustive_search) {
  tune_space s = {0};
  toy_space(&s);
  // Exhaustive: every valid point that fits, by (step, index).
  double *st = malloc((size_t)s.n * sizeof *st);
  int *ok = malloc((size_t)s.n * sizeof *ok), n_ok = 0;
  for (int i = 0; i < s.n; i++) {
    st[i] = toy_step(&s.pt[i], 0);
    if (!toy_invalid(&s.pt[i]) && toy_mem(&s.pt[i]) <= TOY_CAPACITY) ok[n_ok++] = i;
  }
  qsort_r(ok, (size_t)n_ok, sizeof *ok, cmp_step_index, st);
  toy_ctx t = {0, 0, -1};
  tune_evaluator ev = {&t, toy_bound, toy_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);
  o.robust_top = 0;
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, &o, &r, &e), SR_OK);
  CHECK_EQ_INT(r.best, ok[0]);
  CHECK_EQ_INT(r.chosen, ok[0]);
  CHECK_EQ_INT(r.n_ranked, 10);
  for (int k = 0; k < r.n_ranked; k++) CHECK_EQ_INT(r.ranked[k], ok[k]);
  // Pruning did something, and every point is accounted for exactly once.
  CHECK(r.n_pruned_bound > 0);
  CHECK(r.n_pruned_memory > 0);
  CHECK(r.n_oom > 0);
  CHECK_EQ_INT(r.n_invalid + r.n_pruned_memory + r.n_pruned_bound + r.n_simulated, s.n);
  CHECK_EQ_INT(t.n_sim, r.n_simulated);
  CHECK_EQ_INT(t.n_bound, s.n);
  free(st);
  free(ok);
  tune_result_free(&r);
  tune_space_free(&s);
}

TEST(tune_search_chosen_plan_fits_in_memory) {
  tune_space s = {0};
  toy_space(&s);
  toy_ctx t = {0, 0, -1};
  tune_evaluator ev = {&t, toy_bound, toy_simulate, 0};
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, NULL, &r, &e), SR_OK);
  CHECK(r.chosen >= 0);
  CHECK(toy_mem(&s.pt[r.chosen]) <= TOY_CAPACITY);
  for (int k = 0; k < r.n_ranked; k++) CHECK(toy_mem(&s.pt[r.ranked[k]]) <= TOY_CAPACITY);
  // Points pruned by memory really do not fit; invalid points are the rejected ones.
  for (int i = 0; i < s.n; i++) {
    if (r.ev[i].status == TUNE_PRUNED_MEMORY) CHECK(toy_mem(&s.pt[i]) > TOY_CAPACITY);
    CHECK_EQ_INT(r.ev[i].status == TUNE_INVALID, toy_invalid(&s.pt[i]));
  }
  tune_result_free(&r);
  tune_space_free(&s);
}

TEST(tune_search_pruned_points_cannot_enter_the_top) {
  // Every point pruned by the bound is slower than the 10th of the ranking.
  tune_space s = {0};
  toy_space(&s);
  toy_ctx t = {0, 0, -1};
  tune_evaluator ev = {&t, toy_bound, toy_simulate, 0};
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, NULL, &r, &e), SR_OK);
  double tenth = r.ev[r.ranked[r.n_ranked - 1]].step_s;
  for (int i = 0; i < s.n; i++)
    if (r.ev[i].status == TUNE_PRUNED_BOUND) CHECK(toy_step(&s.pt[i], 0) > tenth);
  tune_result_free(&r);
  tune_space_free(&s);
}

TEST(tune_search_without_pruning_gives_the_same_answer) {
  tune_space s = {0};
  toy_space(&s);
  toy_ctx t1 = {0, 0, -1}, t2 = {0, 0, -1};
  tune_evaluator ev1 = {&t1, toy_bound, toy_simulate, 0}, ev2 = {&t2, toy_bound, toy_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);
  tune_result a, b;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev1, NULL, &o, &a, &e), SR_OK);
  o.no_prune = 1;
  CHECK_EQ_INT(tune_search(&s, &ev2, NULL, &o, &b, &e), SR_OK);
  CHECK_EQ_INT(b.n_pruned_bound, 0);
  CHECK(t2.n_sim > t1.n_sim);
  CHECK_EQ_INT(a.chosen, b.chosen);
  CHECK_EQ_INT(a.n_ranked, b.n_ranked);
  for (int k = 0; k < a.n_ranked; k++) CHECK_EQ_INT(a.ranked[k], b.ranked[k]);
  tune_result_free(&a);
  tune_result_free(&b);
  tune_space_free(&s);
}

TEST(tune_search_returns_an_evaluator_error) {
  tune_space s = {0};
  toy_space(&s);
  toy_ctx t = {0, 0, 17};
  for (; toy_invalid(&s.pt[t.fail_point]) || toy_mem(&s.pt[t.fail_point]) * 0.95 > TOY_CAPACITY;) t.fail_point++;
  tune_evaluator ev = {&t, toy_bound, toy_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);
  o.no_prune = 1;  // so the failing point is certainly simulated
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, &o, &r, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "cannot be simulated");
  tune_result_free(&r);
  tune_space_free(&s);
}

// test_tune_choice.c — the tuner's robustness choice (worst case wins among near-equal means) with
// step times given by hand, and the same answer and CSV for any number of cooperating processes
// (threads standing in for MPI ranks through the exchange interface).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim/tune.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------------------------
// robustness: three points with step times per perturbation step given by hand

// Point p's step time at steps 0..4. p0 is fastest on the base pattern but has a bad step (mean
// (4 x 1.00 + 1.20) / 5 = 1.04, worst 1.20); p1 is steady (mean (1.02 + 4 x 1.05) / 5 = 1.044, within
// 0.4 % of p0's mean, worst 1.05); p2 is slow (mean 1.10).
static const double hand_steps[3][5] = {
    {1.00, 1.00, 1.00, 1.00, 1.20},
    {1.02, 1.05, 1.05, 1.05, 1.05},
    {1.10, 1.10, 1.10, 1.10, 1.10},
};

static int hand_bound(void *ctx, const tune_point *p, tune_eval *out, sr_error *e) {
  out->lb_step_s = 0.5;
  out->mem_capacity = 1;
  out->fits = 1;
  return SR_OK;
}

static int hand_simulate(void *ctx, const tune_point *p, int step, tune_eval *out, sr_error *e) {
  out->step_s = hand_steps[out->index][step];
  out->mem_capacity = 1;
  out->fits = 1;
  return SR_OK;
}

static void hand_space(tune_space *s) {
  sr_error e;
  for (int i = 0; i < 3; i++) {
    tune_point p = {.layout = LAYOUT_STRIPED, .granularity = 64 << i, .schedule = SCHED_RING, .recompute = 1,
                    .zero = 1, .kv_bytes = 2};
    CHECK_EQ_INT(tune_space_add(s, &p, &e), SR_OK);
  }
}

TEST(tune_robustness_prefers_the_better_worst_case_within_the_margin) {
  tune_space s = {0};
  hand_space(&s);
  tune_evaluator ev = {NULL, hand_bound, hand_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);  // margin 2 %: p1's mean is within it, and its worst case 1.05 < 1.20
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, &o, &r, &e), SR_OK);
  CHECK_EQ_INT(r.best, 0);
  CHECK_EQ_INT(r.chosen, 1);
  CHECK_EQ_INT(r.n_robust, 3);
  CHECK_NEAR(r.robust[0].mean_s, 1.04, 1e-12);
  CHECK_NEAR(r.robust[0].worst_s, 1.20, 1e-12);
  CHECK_NEAR(r.robust[0].spread, 0.20 / 1.04, 1e-12);
  CHECK_NEAR(r.robust[1].mean_s, 1.044, 1e-12);
  CHECK_NEAR(r.robust[1].worst_s, 1.05, 1e-12);
  tune_result_free(&r);
  tune_space_free(&s);
}

TEST(tune_robustness_keeps_the_fastest_mean_outside_the_margin) {
  tune_space s = {0};
  hand_space(&s);
  tune_evaluator ev = {NULL, hand_bound, hand_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);
  o.robust_margin = 0.001;  // 1.044 > 1.04 x 1.001: p1 is no longer tied with p0
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, &o, &r, &e), SR_OK);
  CHECK_EQ_INT(r.chosen, 0);
  tune_result_free(&r);
  tune_space_free(&s);
}

TEST(tune_robustness_off_chooses_the_fastest) {
  tune_space s = {0};
  hand_space(&s);
  tune_evaluator ev = {NULL, hand_bound, hand_simulate, 0};
  tune_options o;
  tune_options_defaults(&o);
  o.robust_top = 0;
  tune_result r;
  sr_error e;
  CHECK_EQ_INT(tune_search(&s, &ev, NULL, &o, &r, &e), SR_OK);
  CHECK_EQ_INT(r.chosen, 0);
  CHECK_EQ_INT(r.n_robust, 0);
  tune_result_free(&r);
  tune_space_free(&s);
}

// ---------------------------------------------------------------------------------------------
// the same answer for any number of processes

// A cost with many near-ties so that pruning depends on batch order: step = 1 + (key mod 50) / 100.
static double par_step(const tune_point *p, int step) {
  uint64_t k = (uint64_t)(p->granularity * 31 + p->schedule * 7 + p->inner * 3 + p->ulysses * 5 + p->recompute * 11 +
                          p->zero * 13 + p->kv_bytes * 17 + p->skip_empty_sends * 19 + p->layout * 23 +
                          p->fpdt_chunk / 1024 * 29 + p->fpdt_offload * 37);
  return 1.0 + (double)((k * 2654435761u) % 50) / 100.0 + 0.001 * step * (double)(k % 3);
}

static int par_bound(void *ctx, const tune_point *p, tune_eval *out, sr_error *e) {
  out->lb_step_s = 0.8 * par_step(p, 0);
  out->lb_mem_bytes = (double)p->kv_bytes;
  out->mem_capacity = 4;
  out->fits = 1;
  if (p->schedule == SCHED_USP && p->ulysses == 4 && p->layout == LAYOUT_ZIGZAG) {
    out->status = TUNE_INVALID;
    snprintf(out->note, sizeof out->note, "zigzag, usp/4: \"rejected\"");
  }
  return SR_OK;
}

static int par_simulate(void *ctx, const tune_point *p, int step, tune_eval *out, sr_error *e) {
  out->step_s = par_step(p, step);
  out->mem_bytes = p->recompute ? 2 : 5;  // no recomputation does not fit
  out->mem_capacity = 4;
  out->fits = out->mem_bytes <= 4;
  out->worker_imbalance = 1.25;
  return SR_OK;
}

typedef struct {
  pthread_barrier_t bar;
  const void *slot[8];
} par_shared;

typedef struct {
  par_shared *sh;
  int rank, size;
  const tune_space *s;
  char *csv;
  int rc;
} par_thread;

static int par_allgather(void *ctx, const void *mine, void *all, size_t bytes, int count, sr_error *e) {
  par_thread *t = ctx;
  t->sh->slot[t->rank] = mine;
  pthread_barrier_wait(&t->sh->bar);
  for (int k = 0; k < t->size; k++) memcpy((char *)all + (size_t)k * count * bytes, t->sh->slot[k], (size_t)count * bytes);
  pthread_barrier_wait(&t->sh->bar);  // nobody frees `mine` before everyone has copied it
  return SR_OK;
}

static void *par_main(void *arg) {
  par_thread *t = arg;
  tune_evaluator ev = {NULL, par_bound, par_simulate, 0};
  tune_exchange x = {t->rank, t->size, t, par_allgather};
  tune_options o;
  tune_options_defaults(&o);
  o.batch = 5;
  tune_result r;
  sr_error e;
  t->rc = tune_search(t->s, &ev, &x, &o, &r, &e);
  if (!t->rc) t->rc = tune_csv(t->s, &r, &t->csv, &e);
  tune_result_free(&r);
  return NULL;
}

// The CSV of a search split over `size` threads (rank 0's; every rank's must be the same).
static char *csv_with(const tune_space *s, int size) {
  par_shared sh;
  pthread_barrier_init(&sh.bar, NULL, (unsigned)size);
  par_thread t[8];
  pthread_t th[8];
  for (int k = 0; k < size; k++) {
    t[k] = (par_thread){&sh, k, size, s, NULL, -1};
    pthread_create(&th[k], NULL, par_main, &t[k]);
  }
  for (int k = 0; k < size; k++) pthread_join(th[k], NULL);
  pthread_barrier_destroy(&sh.bar);
  for (int k = 0; k < size; k++) {
    CHECK_EQ_INT(t[k].rc, SR_OK);
    CHECK(t[k].csv && t[0].csv && strcmp(t[k].csv, t[0].csv) == 0);
    if (k) free(t[k].csv);
  }
  return t[0].csv;
}

TEST(tune_search_gives_the_same_csv_for_any_process_count) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  c.nodes = 2;
  c.gpus_per_node = 4;
  model_config m;
  memset(&m, 0, sizeof m);
  tune_space s = {0};
  sr_error e;
  CHECK_EQ_INT(tune_space_full(&m, &c, 8192, &s, &e), SR_OK);
  char *one = csv_with(&s, 1);
  CHECK(one != NULL);
  for (int size = 2; size <= 3 && one; size++) {
    char *many = csv_with(&s, size);
    CHECK(many && strcmp(one, many) == 0);
    free(many);
  }
  // The CSV has a header and one row per point, and quotes the note with a comma in it.
  int lines = 0;
  for (const char *q = one; q && *q; q++) lines += *q == '\n';
  CHECK_EQ_INT(lines, s.n + 1);
  CHECK_STR_CONTAINS(one, "\"zigzag, usp/4: \"\"rejected\"\"\"");
  CHECK_STR_CONTAINS(one, ",pruned-bound,");
  free(one);
  tune_space_free(&s);
}

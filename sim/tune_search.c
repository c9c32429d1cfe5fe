// tune_search.c — the tuner's search: bounds of every point, pruning, batched simulation split over
// processes, ranking, and the robustness check that picks the plan (see tune.h for why the answer is
// the same for any process count).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/tune.h"

const char *tune_status_name(int status) {
  switch (status) {
    case TUNE_INVALID: return "invalid";
    case TUNE_PRUNED_MEMORY: return "pruned-memory";
    case TUNE_PRUNED_BOUND: return "pruned-bound";
    case TUNE_SIMULATED: return "simulated";
    case TUNE_OOM: return "oom";
    default: return "unseen";
  }
}

void tune_options_defaults(tune_options *o) {
  memset(o, 0, sizeof *o);
  o->batch = 16;
  o->top = 10;
  o->robust_top = 5;
  o->robust_steps = 4;
  o->robust_margin = 0.02;
}

void tune_result_free(tune_result *r) {
  free(r->ev);
  free(r->ranked);
  free(r->rank_of);
  free(r->robust);
  memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------------------------------------
// jobs split over processes

enum { JOB_BOUND, JOB_SIMULATE };

typedef struct {
  int32_t point;
  int32_t step;
} tune_job;

// Run jobs[0..m) of one kind: job j runs on process j mod K, then every process receives every result,
// res[j] for job j. in[j] (may be NULL) is the record each job starts from. An evaluator error on any
// process is returned by all of them (after the exchange, so no process is left waiting).
static int run_jobs(const tune_space *s, const tune_evaluator *ev, const tune_exchange *x, int kind,
                    const tune_job *jobs, int m, const tune_eval *in, tune_eval *res, sr_error *e) {
  if (m == 0) return SR_OK;
  const int K = x && x->size > 0 ? x->size : 1, me = x && x->size > 0 ? x->rank : 0;
  const int per = (m + K - 1) / K;
  tune_eval *mine = calloc((size_t)per, sizeof *mine);
  tune_eval *all = calloc((size_t)per * K, sizeof *all);
  if (!mine || !all) {
    free(mine);
    free(all);
    return sr_internal_error(e, 0, "tune: out of memory for %d jobs", m);
  }
  for (int k = 0; k < per; k++) mine[k].index = -1;
  for (int k = 0; k < per; k++) {
    int j = k * K + me;
    if (j >= m) break;
    tune_eval *t = &mine[k];
    if (in) *t = in[j];
    else memset(t, 0, sizeof *t);
    t->index = jobs[j].point;
    sr_error err;
    sr_error_clear(&err);
    const tune_point *p = &s->pt[jobs[j].point];
    int rc = kind == JOB_BOUND ? ev->bound(ev->ctx, p, t, &err) : ev->simulate(ev->ctx, p, jobs[j].step, t, &err);
    if (rc) {
      t->err = rc;
      snprintf(t->note, sizeof t->note, "%s", err.msg);
    }
  }
  int rc = SR_OK;
  if (x && x->allgather && K > 1) rc = x->allgather(x->ctx, mine, all, sizeof *mine, per, e);
  else memcpy(all, mine, (size_t)per * sizeof *mine);
  if (!rc) {
    for (int j = 0; j < m; j++) res[j] = all[(size_t)(j % K) * per + j / K];
    for (int j = 0; j < m && !rc; j++)
      if (res[j].err) {
        e->code = res[j].err;
        snprintf(e->msg, sizeof e->msg, "%s", res[j].note);
        rc = res[j].err;
      }
  }
  free(mine);
  free(all);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// orderings

// Orders of point indices over the tune_eval array passed as the context (glibc's qsort_r).
static int by_bound(const void *a, const void *b, void *ctx) {
  const tune_eval *ev = ctx;
  const tune_eval *x = &ev[*(const int32_t *)a], *y = &ev[*(const int32_t *)b];
  if (x->lb_step_s != y->lb_step_s) return x->lb_step_s < y->lb_step_s ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int by_step(const void *a, const void *b, void *ctx) {
  const tune_eval *ev = ctx;
  const tune_eval *x = &ev[*(const int32_t *)a], *y = &ev[*(const int32_t *)b];
  if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

// ---------------------------------------------------------------------------------------------
// the search

// Pick among the re-evaluated leaders: the lowest mean wins unless another fitting leader's mean is
// within the margin of it and its worst case is lower; among those the lowest worst case wins.
static int32_t choose_robust(const tune_robust *rb, int n, double margin) {
  double best_mean = INFINITY;
  for (int t = 0; t < n; t++)
    if (rb[t].fits && rb[t].mean_s < best_mean) best_mean = rb[t].mean_s;
  int pick = -1;
  for (int t = 0; t < n; t++) {
    if (!rb[t].fits || rb[t].mean_s > best_mean * (1 + margin)) continue;
    if (pick < 0 || rb[t].worst_s < rb[pick].worst_s ||
        (rb[t].worst_s == rb[pick].worst_s && rb[t].mean_s < rb[pick].mean_s))
      pick = t;
  }
  return pick < 0 ? -1 : rb[pick].index;
}

static int robustness(const tune_space *s, const tune_evaluator *ev, const tune_exchange *x, const tune_options *o,
                      const int32_t *order, int n_fit, tune_result *r, sr_error *e) {
  int T = o->robust_top < n_fit ? o->robust_top : n_fit;
  int S = o->robust_steps;
  if (T <= 0 || S <= 0) return SR_OK;
  r->robust = calloc((size_t)T, sizeof *r->robust);
  tune_job *jobs = malloc((size_t)T * S * sizeof *jobs);
  tune_eval *res = calloc((size_t)T * S, sizeof *res);
  if (!r->robust || !jobs || !res) {
    free(jobs);
    free(res);
    return sr_internal_error(e, 0, "tune: out of memory for the robustness check");
  }
  for (int t = 0; t < T; t++)
    for (int k = 0; k < S; k++) jobs[t * S + k] = (tune_job){order[t], k + 1};
  int rc = run_jobs(s, ev, x, JOB_SIMULATE, jobs, T * S, NULL, res, e);
  if (!rc) {
    for (int t = 0; t < T; t++) {
      const tune_eval *base = &r->ev[order[t]];
      tune_robust *rb = &r->robust[t];
      rb->index = order[t];
      rb->fits = 1;
      double sum = base->step_s, worst = base->step_s, best = base->step_s;
      for (int k = 0; k < S; k++) {
        const tune_eval *v = &res[t * S + k];
        sum += v->step_s;
        if (v->step_s > worst) worst = v->step_s;
        if (v->step_s < best) best = v->step_s;
        if (!v->fits || v->status == TUNE_INVALID) rb->fits = 0;
      }
      rb->mean_s = sum / (S + 1);
      rb->worst_s = worst;
      rb->best_s = best;
      rb->spread = rb->mean_s > 0 ? (worst - best) / rb->mean_s : 0;
    }
    r->n_robust = T;
    // When no leader fits at every step the fastest on the base pattern stays chosen (the report says so).
    int32_t pick = choose_robust(r->robust, T, o->robust_margin);
    if (pick >= 0) r->chosen = pick;
  }
  free(jobs);
  free(res);
  return rc;
}

int tune_search(const tune_space *s, const tune_evaluator *ev, const tune_exchange *x, const tune_options *o,
                tune_result *r, sr_error *e) {
  double t0 = sr_now();
  memset(r, 0, sizeof *r);
  r->best = r->chosen = -1;
  tune_options od;
  if (!o) {
    tune_options_defaults(&od);
    o = &od;
  }
  const int n = s->n;
  const int B = o->batch > 0 ? o->batch : 1;
  r->n_points = n;
  r->ev = calloc((size_t)n + 1, sizeof *r->ev);
  r->rank_of = calloc((size_t)n + 1, sizeof *r->rank_of);
  tune_job *jobs = malloc(((size_t)n + 1) * sizeof *jobs);
  int32_t *order = malloc(((size_t)n + 1) * sizeof *order);
  tune_eval *in = calloc((size_t)B, sizeof *in), *res = calloc((size_t)B, sizeof *res);
  int rc = SR_OK;
  if (!r->ev || !r->rank_of || !jobs || !order || !in || !res) {
    rc = sr_internal_error(e, 0, "tune: out of memory for %d points", n);
    goto done;
  }
  // ---- bounds of every point, split over processes ----
  for (int i = 0; i < n; i++) jobs[i] = (tune_job){i, 0};
  if ((rc = run_jobs(s, ev, x, JOB_BOUND, jobs, n, NULL, r->ev, e))) goto done;
  int nc = 0;
  for (int i = 0; i < n; i++) {
    tune_eval *v = &r->ev[i];
    if (v->status == TUNE_INVALID) {
      r->n_invalid++;
    } else if (!v->fits) {
      v->status = TUNE_PRUNED_MEMORY;
      r->n_pruned_memory++;
    } else {
      order[nc++] = i;
    }
  }
  // ---- simulate in order of the lower bound, batch by batch ----
  // A point is pruned when its lower bound exceeds the K-th best step found in earlier batches
  // (K = the rows kept and re-checked): then K points are strictly faster, so it is in no top K, and
  // the ranking and the robustness check see exactly what exhaustive search would.
  int K = o->top > o->robust_top ? o->top : o->robust_top;
  if (K < 1) K = 1;
  double *kbest = malloc((size_t)K * sizeof *kbest);  // the K best fitting steps so far, ascending
  if (!kbest) {
    rc = sr_internal_error(e, 0, "tune: out of memory");
    goto done;
  }
  int n_kbest = 0;
  qsort_r(order, (size_t)nc, sizeof *order, by_bound, r->ev);
  for (int pos = 0; pos < nc; pos += B) {
    double threshold = n_kbest == K ? kbest[K - 1] : INFINITY;
    int m = 0;
    for (int k = pos; k < nc && k < pos + B; k++) {
      tune_eval *v = &r->ev[order[k]];
      if (!o->no_prune && v->lb_step_s > threshold) {
        v->status = TUNE_PRUNED_BOUND;
        r->n_pruned_bound++;
        continue;
      }
      in[m] = *v;
      jobs[m++] = (tune_job){order[k], 0};
    }
    if ((rc = run_jobs(s, ev, x, JOB_SIMULATE, jobs, m, in, res, e))) {
      free(kbest);
      goto done;
    }
    for (int k = 0; k < m; k++) {
      tune_eval *v = &r->ev[jobs[k].point];
      *v = res[k];
      if (v->status == TUNE_INVALID) {  // the simulator found the point cannot run (reason in note)
        r->n_invalid++;
        continue;
      }
      v->status = v->fits ? TUNE_SIMULATED : TUNE_OOM;
      r->n_simulated++;
      if (!v->fits) {
        r->n_oom++;
        continue;
      }
      // Insert into the K best (ties keep the earlier one first; only the values matter here).
      int at = n_kbest < K ? n_kbest++ : K;
      if (at == K) {
        if (v->step_s >= kbest[K - 1]) continue;
        at = K - 1;
      }
      while (at > 0 && kbest[at - 1] > v->step_s) {
        kbest[at] = kbest[at - 1];
        at--;
      }
      kbest[at] = v->step_s;
    }
  }
  free(kbest);
  // ---- ranking of the fitting points ----
  int n_fit = 0;
  for (int i = 0; i < n; i++)
    if (r->ev[i].status == TUNE_SIMULATED) order[n_fit++] = i;
  qsort_r(order, (size_t)n_fit, sizeof *order, by_step, r->ev);
  for (int k = 0; k < n_fit; k++) r->rank_of[order[k]] = k + 1;
  r->n_ranked = n_fit < o->top ? n_fit : (o->top > 0 ? o->top : 0);
  r->ranked = malloc(((size_t)r->n_ranked + 1) * sizeof *r->ranked);
  if (!r->ranked) {
    rc = sr_internal_error(e, 0, "tune: out of memory");
    goto done;
  }
  memcpy(r->ranked, order, (size_t)r->n_ranked * sizeof *order);
  r->best = n_fit > 0 ? order[0] : -1;
  r->chosen = r->best;
  // ---- robustness of the leaders ----
  rc = robustness(s, ev, x, o, order, n_fit, r, e);
done:
  free(jobs);
  free(order);
  free(in);
  free(res);
  r->search_wall_s = sr_now() - t0;
  return rc;
}

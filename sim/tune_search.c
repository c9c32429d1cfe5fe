// tune_search.c — the tuner's search: bounds of every point, pruning, batched simulation split over
// processes, ranking, and the robustness check that picks the plan (see tune.h for why the answer is
// the same for any process count).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
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

// One process's share of a batch: its jobs k = 0, 1, ... are jobs[k * K + me].
typedef struct {
  const tune_space *s;
  const tune_evaluator *ev;
  int kind, K, me, m;
  const tune_job *jobs;
  const tune_eval *in;
  tune_eval *mine;
} share;

// Evaluate one job of the share; an evaluator error is recorded in the job's record (and returned by
// run_jobs after the exchange), so the item itself always succeeds.
static int share_item(void *ctx, int k, int thread, sr_error *e) {
  share *sh = ctx;
  int j = k * sh->K + sh->me;
  tune_eval *t = &sh->mine[k];
  if (sh->in) *t = sh->in[j];
  else memset(t, 0, sizeof *t);
  t->index = sh->jobs[j].point;
  sr_error err;
  sr_error_clear(&err);
  const tune_point *p = &sh->s->pt[sh->jobs[j].point];
  int rc = sh->kind == JOB_BOUND ? sh->ev->bound(sh->ev->ctx, p, t, &err)
                                 : sh->ev->simulate(sh->ev->ctx, p, sh->jobs[j].step, t, &err);
  if (rc) {
    t->err = rc;
    snprintf(t->note, sizeof t->note, "%s", err.msg);
  }
  return SR_OK;
}

// Run jobs[0..m) of one kind: job j runs on process j mod K (its share split over `threads` threads when
// the evaluator allows it), then every process receives every result, res[j] for job j. in[j] (may be
// NULL) is the record each job starts from. An evaluator error on any process is returned by all of them
// (after the exchange, so no process is left waiting).
static int run_jobs(const tune_space *s, const tune_evaluator *ev, const tune_exchange *x, int kind, int threads,
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
  share sh = {s, ev, kind, K, me, m, jobs, in, mine};
  int n_mine = me < m ? (m - me + K - 1) / K : 0;
  int rc = sr_parallel_for(n_mine, ev->thread_safe ? threads : 1, share_item, &sh, e);
  if (!rc && x && x->allgather && K > 1) rc = x->allgather(x->ctx, mine, all, sizeof *mine, per, e);
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

static int threads_of(const tune_options *o) { return o->threads > 0 ? o->threads : sr_threads(); }

// Tell the progress callback where the search stands.
static void report_progress(const tune_options *o, const char *phase, const tune_result *r, int done, double t0,
                            double eta) {
  if (!o->progress) return;
  tune_progress p = {phase, r->n_points, done, r->n_simulated, r->n_pruned_memory + r->n_pruned_bound, -1, 0,
                     sr_now() - t0, eta};
  for (int i = 0; i < r->n_points; i++) {
    const tune_eval *v = &r->ev[i];
    if (v->status == TUNE_SIMULATED && (p.best < 0 || v->step_s < p.best_s)) {
      p.best = i;
      p.best_s = v->step_s;
    }
  }
  o->progress(o->progress_ctx, &p);
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
  int rc = run_jobs(s, ev, x, JOB_SIMULATE, threads_of(o), jobs, T * S, NULL, res, e);
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
  report_progress(o, "bounds", r, 0, t0, 0);
  if ((rc = run_jobs(s, ev, x, JOB_BOUND, threads_of(o), jobs, n, NULL, r->ev, e))) goto done;
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
  double t_search = sr_now();
  int robust_sims = (o->robust_top > 0 ? o->robust_top : 0) * (o->robust_steps > 0 ? o->robust_steps : 0);
  report_progress(o, "search", r, n - nc, t0, 0);
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
    if ((rc = run_jobs(s, ev, x, JOB_SIMULATE, threads_of(o), jobs, m, in, res, e))) {
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
    // ETA: the candidates left at the pace per candidate so far, then the robustness check's simulations
    // at the pace per simulated point.
    int seen = pos + B < nc ? pos + B : nc;
    double spent = sr_now() - t_search, per_sim = r->n_simulated > 0 ? spent / r->n_simulated : 0;
    report_progress(o, "search", r, n - nc + seen, t0, spent / seen * (nc - seen) + per_sim * robust_sims);
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
  report_progress(o, "robustness", r, n, t0, 0);
  rc = robustness(s, ev, x, o, order, n_fit, r, e);
  if (!rc) report_progress(o, "done", r, n, t0, 0);
done:
  free(jobs);
  free(order);
  free(in);
  free(res);
  r->search_wall_s = sr_now() - t0;
  return rc;
}

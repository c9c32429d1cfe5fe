// engine.c — the discrete-event engine (see engine.h): list scheduling of a task DAG on per-rank
// streams, with first-come-first-served shared resources.
#include "sim/engine.h"

#include <stdlib.h>
#include <string.h>

// ---- setup -----------------------------------------------------------------------------------

int engine_init(sim_engine *g, int n_ranks, int n_resources, const int *servers, sr_error *e) {
  memset(g, 0, sizeof *g);
  if (n_ranks < 1) return sr_input_error(e, NULL, "ranks", "need at least one rank, got %d", n_ranks);
  g->n_ranks = n_ranks;
  g->n_resources = n_resources;
  g->res_first = calloc((size_t)n_resources + 1, sizeof *g->res_first);
  int total = 0;
  for (int k = 0; k < n_resources; k++) {
    if (!servers || servers[k] < 1) {
      free(g->res_first);
      return sr_input_error(e, NULL, "resource", "resource %d needs at least one server", k);
    }
    total += servers[k];
  }
  g->server_free = calloc((size_t)total + 1, sizeof *g->server_free);
  g->stream_free = calloc((size_t)n_ranks * STREAM_COUNT, sizeof *g->stream_free);
  g->stream_last = malloc((size_t)n_ranks * STREAM_COUNT * sizeof *g->stream_last);
  if (!g->res_first || !g->server_free || !g->stream_free || !g->stream_last) {
    engine_free(g);
    return sr_internal_error(e, 0, "engine: out of memory for %d ranks", n_ranks);
  }
  for (int k = 0; k < n_resources; k++) g->res_first[k + 1] = g->res_first[k] + servers[k];
  for (int64_t i = 0; i < (int64_t)n_ranks * STREAM_COUNT; i++) g->stream_last[i] = -1;
  g->eager = n_resources == 0;
  return SR_OK;
}

void engine_lean(sim_engine *g) { g->lean = g->eager; }

void engine_count_busy(sim_engine *g, double *busy) { g->busy = busy; }


void engine_free(sim_engine *g) {
  free(g->res_first);
  free(g->server_free);
  free(g->stream_free);
  free(g->stream_last);
  free(g->tasks);
  free(g->deps);
  free(g->pending);
  free(g->succ_first);
  free(g->succ);
  free(g->heap);
  free(g->ready);
  free(g->end);
  memset(g, 0, sizeof *g);
}

void engine_clear(sim_engine *g) {
  g->n_tasks = 0;
  g->n_deps = 0;
  g->uses_resources = 0;
  for (int64_t i = 0; i < (int64_t)g->n_ranks * STREAM_COUNT; i++) g->stream_last[i] = -1;
}

// ---- building the DAG ------------------------------------------------------------------------

static double deps_end(const sim_engine *g, const sim_task *t);

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return 0;
  int64_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

// A lean engine's task: its start is the latest end of its dependencies and of its stream's last task (or the
// stream's free time from the chunks before), as deps_end takes it; only its end is kept.
static int32_t add_lean(sim_engine *g, int rank, timeline_stream stream, double dur, const int32_t *deps, int n_deps) {
  double ready = 0;
  for (int i = 0; i < n_deps; i++)
    if (deps[i] >= 0 && deps[i] < g->n_tasks && g->end[deps[i]] > ready) ready = g->end[deps[i]];
  return engine_add_after(g, rank, stream, dur, ready);
}

int engine_reserve_end(sim_engine *g, int64_t n) {
  if (g->n_tasks + n >= INT32_MAX - 1) return -1;
  return grow((void **)&g->end, &g->cap_end, g->n_tasks + n, sizeof *g->end);
}

int32_t engine_add(sim_engine *g, int rank, timeline_stream stream, double dur, int resource, int phase, int layer,
                   int step, const int32_t *deps, int n_deps) {
  if (g->lean) return add_lean(g, rank, stream, dur, deps, n_deps);
  if (g->n_tasks >= INT32_MAX - 1) return -1;
  // One extra slot for the implicit stream predecessor.
  if (grow((void **)&g->tasks, &g->cap_tasks, g->n_tasks + 1, sizeof *g->tasks) ||
      grow((void **)&g->deps, &g->cap_deps, g->n_deps + n_deps + 1, sizeof *g->deps))
    return -1;
  int32_t id = (int32_t)g->n_tasks++;
  sim_task *t = &g->tasks[id];
  t->dur = dur > 0 ? dur : 0;
  t->earliest = 0;
  t->start = t->end = 0;
  t->rank = rank;
  t->stream = (uint8_t)stream;
  t->phase = (uint8_t)phase;
  t->layer = layer;
  t->step = step;
  t->resource = (int16_t)(resource >= 0 && resource < g->n_resources ? resource : -1);
  if (t->resource >= 0) g->uses_resources = 1;
  t->dep_begin = g->n_deps;
  int n = 0;
  for (int i = 0; i < n_deps; i++)
    if (deps[i] >= 0 && deps[i] < id) g->deps[g->n_deps + n++] = deps[i];
  if (rank >= 0) {
    int32_t *last = &g->stream_last[(int64_t)rank * STREAM_COUNT + stream];
    if (*last >= 0) g->deps[g->n_deps + n++] = *last;
    else t->earliest = g->stream_free[(int64_t)rank * STREAM_COUNT + stream];
    *last = id;
    if (g->busy && stream == STREAM_COMPUTE && t->dur > 0) g->busy[rank] += t->dur;
  }
  t->n_deps = n;
  g->n_deps += n;
  if (g->eager) {  // every dependency is an earlier task, already scheduled
    t->start = deps_end(g, t);
    t->end = t->start + t->dur;
  }
  return id;
}

int32_t engine_barrier(sim_engine *g, const int32_t *deps, int n_deps) {
  return engine_add(g, -1, STREAM_COMPUTE, 0, -1, 0, -1, -1, deps, n_deps);
}

// ---- scheduling ------------------------------------------------------------------------------

static double deps_end(const sim_engine *g, const sim_task *t) {
  double r = t->earliest;
  for (int32_t i = 0; i < t->n_deps; i++) {
    double x = g->tasks[g->deps[t->dep_begin + i]].end;
    if (x > r) r = x;
  }
  return r;
}

// Take the earliest-free server of a resource at time `ready`; returns the start time.
static double take_server(sim_engine *g, int res, double ready, double dur) {
  int best = g->res_first[res];
  for (int s = best + 1; s < g->res_first[res + 1]; s++)
    if (g->server_free[s] < g->server_free[best]) best = s;
  double start = ready > g->server_free[best] ? ready : g->server_free[best];
  g->server_free[best] = start + dur;
  return start;
}

// Heap of task ids ordered by (ready time, id): the id breaks ties so runs are deterministic.
static int heap_less(const sim_engine *g, int32_t a, int32_t b) {
  return g->ready[a] < g->ready[b] || (g->ready[a] == g->ready[b] && a < b);
}

static void heap_push(sim_engine *g, int64_t *n, int32_t id) {
  int64_t i = (*n)++;
  g->heap[i] = id;
  while (i > 0) {
    int64_t p = (i - 1) / 2;
    if (!heap_less(g, g->heap[i], g->heap[p])) break;
    int32_t t = g->heap[i];
    g->heap[i] = g->heap[p];
    g->heap[p] = t;
    i = p;
  }
}

static int32_t heap_pop(sim_engine *g, int64_t *n) {
  int32_t top = g->heap[0];
  g->heap[0] = g->heap[--(*n)];
  int64_t i = 0;
  for (;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && heap_less(g, g->heap[l], g->heap[m])) m = l;
    if (r < *n && heap_less(g, g->heap[r], g->heap[m])) m = r;
    if (m == i) break;
    int32_t t = g->heap[i];
    g->heap[i] = g->heap[m];
    g->heap[m] = t;
    i = m;
  }
  return top;
}

// Event-driven pass: a task enters the heap when its last dependency ends; popping in ready-time order
// grants resources first come, first served. Any task not yet ready depends on one still in the heap,
// so its ready time is no earlier than the one popped: the grant order is exact.
static int run_events(sim_engine *g, sr_error *e) {
  int64_t n = g->n_tasks;
  if (n + 1 > g->cap_scratch) {
    // The four per-task scratch arrays share one capacity.
    int64_t c = g->cap_scratch ? g->cap_scratch : 1024;
    while (c < n + 1) c *= 2;
    int32_t *pd = realloc(g->pending, (size_t)c * sizeof *pd);
    if (pd) g->pending = pd;
    int32_t *sf = realloc(g->succ_first, (size_t)c * sizeof *sf);
    if (sf) g->succ_first = sf;
    int32_t *hp = realloc(g->heap, (size_t)c * sizeof *hp);
    if (hp) g->heap = hp;
    double *rd = realloc(g->ready, (size_t)c * sizeof *rd);
    if (rd) g->ready = rd;
    if (!pd || !sf || !hp || !rd) goto oom;
    g->cap_scratch = c;
  }
  if (grow((void **)&g->succ, &g->cap_succ, g->n_deps, sizeof *g->succ)) goto oom;
  memset(g->succ_first, 0, (size_t)(n + 1) * sizeof *g->succ_first);
  for (int64_t i = 0; i < g->n_deps; i++) g->succ_first[g->deps[i] + 1]++;
  for (int64_t i = 0; i < n; i++) g->succ_first[i + 1] += g->succ_first[i];
  for (int64_t i = 0; i < n; i++) g->pending[i] = g->succ_first[i];  // fill cursor
  for (int64_t i = 0; i < n; i++) {
    const sim_task *t = &g->tasks[i];
    for (int32_t k = 0; k < t->n_deps; k++) g->succ[g->pending[g->deps[t->dep_begin + k]]++] = (int32_t)i;
  }
  int64_t hn = 0;
  for (int64_t i = 0; i < n; i++) {
    g->pending[i] = g->tasks[i].n_deps;
    if (g->pending[i] == 0) {
      g->ready[i] = g->tasks[i].earliest;
      heap_push(g, &hn, (int32_t)i);
    }
  }
  int64_t done = 0;
  while (hn > 0) {
    int32_t id = heap_pop(g, &hn);
    sim_task *t = &g->tasks[id];
    double start = g->ready[id];
    if (t->resource >= 0) start = take_server(g, t->resource, start, t->dur);
    t->start = start;
    t->end = start + t->dur;
    done++;
    for (int32_t k = g->succ_first[id]; k < g->succ_first[id + 1]; k++) {
      int32_t s = g->succ[k];
      if (--g->pending[s] == 0) {
        g->ready[s] = deps_end(g, &g->tasks[s]);
        heap_push(g, &hn, s);
      }
    }
  }
  if (done != n) return sr_internal_error(e, 0, "engine: %lld of %lld tasks never became ready", (long long)(n - done), (long long)n);
  return SR_OK;
oom:
  return sr_internal_error(e, 0, "engine: out of memory for %lld tasks", (long long)n);
}

int engine_run(sim_engine *g, sr_error *e) {
  if (g->lean) {
    for (int64_t i = 0; i < (int64_t)g->n_ranks * STREAM_COUNT; i++)
      if (g->stream_last[i] >= 0) g->stream_free[i] = g->end[g->stream_last[i]];
    return SR_OK;
  }
  if (g->uses_resources) {
    int rc = run_events(g, e);
    if (rc) return rc;
  } else if (!g->eager) {
    // Dependencies always precede their task, so insertion order is a topological order.
    for (int64_t i = 0; i < g->n_tasks; i++) {
      sim_task *t = &g->tasks[i];
      t->start = deps_end(g, t);
      t->end = t->start + t->dur;
    }
  }
  for (int64_t i = 0; i < (int64_t)g->n_ranks * STREAM_COUNT; i++)
    if (g->stream_last[i] >= 0) g->stream_free[i] = g->tasks[g->stream_last[i]].end;
  return SR_OK;
}

// ---- queries ---------------------------------------------------------------------------------

double engine_makespan(const sim_engine *g) {
  double m = 0;
  for (int64_t i = 0; i < (int64_t)g->n_ranks * STREAM_COUNT; i++)
    if (g->stream_free[i] > m) m = g->stream_free[i];
  return m;
}

double engine_rank_free(const sim_engine *g, int rank) {
  double m = 0;
  for (int s = 0; s < STREAM_COUNT; s++)
    if (g->stream_free[(int64_t)rank * STREAM_COUNT + s] > m) m = g->stream_free[(int64_t)rank * STREAM_COUNT + s];
  return m;
}

void engine_align(sim_engine *g, double t) {
  for (int64_t i = 0; i < (int64_t)g->n_ranks * STREAM_COUNT; i++)
    if (g->stream_free[i] < t) g->stream_free[i] = t;
}

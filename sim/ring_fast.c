// ring_fast.c — ring passes on a lean engine (engine.h: no shared resources, end times only), the simulator's
// usual case: at a thousand ranks a pass is millions of tasks, and ring.c's bookkeeping (which task delivered
// which shard to whom, in W x W tables read one cache line a task; each step's link costs) cost more than the
// tasks themselves.
//
// What a pass waits for depends on the routes only, not on any time: so the routes are compiled once (the
// bookkeeping of ring.c's kv_part, grad_part and add_compute replayed on indices: for each task, the transfer
// whose arrival it waits for; each transfer's seconds; each step's comm seconds per rank, step_comm's), and a
// pass then walks flat arrays in time. Each task's start is the latest end of what ring.c would give it as
// dependencies (a maximum: exact in any order, times being non-negative), and it is added with engine_add_after
// in the order ring.c adds its tasks, so task counts, busy sums and every time are the same as ring.c's.
#include <stdlib.h>
#include <string.h>

#include "sim/cost.h"
#include "sim/ring.h"

// A transfer's seconds and stream: the same for every transfer of the same link and bytes, so a pass's tables hold an
// index into a table of them (a pass streams its tables: a double a task was a third of what it read).
typedef struct {
  double dur;
  int32_t stream;
  link_class link;  // its key
  int64_t bytes;
} link_cost;

static uint64_t cost_hash(link_class link, int64_t bytes) {
  uint64_t z = (uint64_t)bytes * 0x9e3779b97f4a7c15ull + (uint64_t)link;
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 29);
}

// A KV transfer that is a task: its sender and receiver, the transfer that brought the shard to its sender (an
// index into the pass's KV tasks; -1: its own shard, or none), and its seconds and stream (an index into costs).
typedef struct {
  int32_t from, to, have;
  uint32_t cost;
} kv_task;

// A dK/dV transfer that is a task. Nodes are these transfers and the barriers where an owner joins flushes of a
// shard, numbered as created: a transfer's node is the next number, and the barrier (when `bar` >= 0) the one after.
// Its sender, the node of the accumulator it adds to (-1: none), the node it joins in a barrier at the receiver
// (-1: none), and its seconds and stream (an index into costs).
typedef struct {
  int32_t from, dep, bar;
  uint32_t cost;
} grad_task;

struct ring_compiled {
  // the routes compiled (see ring_ctx_forget)
  const route *kv, *grad;
  int64_t n_kv, n_grad;
  int n_steps;
  int32_t *cdep;         // [n_steps * W] compute (s, r): the KV task it waits for (-1: none)
  kv_task *kv_t;         // the KV transfers that are tasks (not: invalid ranks, or no bytes, the receiver then as
  int64_t *kv_t_at;      //   ready as the sender), in ring.c's order; [n_steps + 1] those posted at step s
  grad_task *g_t;        // the dK/dV transfers that are tasks, in order; [n_steps + 1] those of step s
  int64_t *g_t_at;
  link_cost *costs;      // the transfers' distinct seconds and streams (n_costs of them; cost_of)
  int64_t n_costs, cap_costs;
  int64_t *cost_slot;    // [cost_slots] an open-addressed table of indices into costs by (link, bytes), -1: empty
  int64_t cost_slots;
  int32_t *done_node;    // [W] the owner's last node, joined at the pass's end (-1: none)
  int64_t n_nodes;
  double *comm[2];       // [n_steps * W] step_comm's seconds, forward and backward
  // scratch of a pass
  double *kv_end, *node_end;
  double *prev_t, *cur_t;
  int32_t *prev_id, *cur_id;
  double *free_at;       // [W * STREAM_COUNT] each stream's free time during a pass (add_task)
};

static void compiled_free(ring_compiled *c) {
  if (!c) return;
  free(c->cdep);
  free(c->kv_t);
  free(c->kv_t_at);
  free(c->g_t);
  free(c->g_t_at);
  free(c->costs);
  free(c->cost_slot);
  free(c->done_node);
  free(c->comm[0]);
  free(c->comm[1]);
  free(c->kv_end);
  free(c->node_end);
  free(c->prev_t);
  free(c->cur_t);
  free(c->prev_id);
  free(c->cur_id);
  free(c->free_at);
  free(c);
}

void ring_ctx_forget(ring_ctx *x) {
  compiled_free(x->compiled);
  x->compiled = NULL;
}

static int valid(const ring_ctx *x, int rank) { return rank >= 0 && rank < x->world; }

// The index in c->costs of a transfer of `bytes` over `link` (its seconds by ring_link_time, the same for the same
// link and bytes), added when new; UINT32_MAX when memory runs out.
static uint32_t cost_of(ring_ctx *x, ring_compiled *c, link_class link, int64_t bytes) {
  if (2 * (c->n_costs + 1) > c->cost_slots) {  // grow the table (at most half full) and rehash
    int64_t slots = c->cost_slots ? 2 * c->cost_slots : 1024, *t = malloc((size_t)slots * sizeof *t);
    if (!t) return UINT32_MAX;
    for (int64_t i = 0; i < slots; i++) t[i] = -1;
    free(c->cost_slot);
    c->cost_slot = t, c->cost_slots = slots;
    for (int64_t k = 0; k < c->n_costs; k++) {
      uint64_t h = cost_hash(c->costs[k].link, c->costs[k].bytes) & (uint64_t)(slots - 1);
      while (t[h] >= 0) h = (h + 1) & (uint64_t)(slots - 1);
      t[h] = k;
    }
  }
  uint64_t h = cost_hash(link, bytes) & (uint64_t)(c->cost_slots - 1);
  for (; c->cost_slot[h] >= 0; h = (h + 1) & (uint64_t)(c->cost_slots - 1)) {
    const link_cost *k = &c->costs[c->cost_slot[h]];
    if (k->link == link && k->bytes == bytes) return (uint32_t)c->cost_slot[h];
  }
  if (c->n_costs == c->cap_costs) {
    int64_t cap = c->cap_costs ? 2 * c->cap_costs : 64;
    link_cost *g = cap < UINT32_MAX ? realloc(c->costs, (size_t)cap * sizeof *g) : NULL;
    if (!g) return UINT32_MAX;
    c->costs = g, c->cap_costs = cap;
  }
  c->costs[c->n_costs] = (link_cost){ring_link_time(x->c, link, (double)bytes), (int32_t)ring_stream_of(link), link, bytes};
  c->cost_slot[h] = c->n_costs;
  return (uint32_t)c->n_costs++;
}

// ring.c's deliv bookkeeping on KV task indices: kv_part and add_compute in their order.
static int compile_kv(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dl) {
  int W = x->world;
  int64_t n = 0;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dl[i] = -1;
  for (int st = 0; st < rt->n_steps; st++) {
    for (int r = 0; r < W; r++) {
      int src = rt->kv_src[(int64_t)st * W + r];
      c->cdep[(int64_t)st * W + r] = valid(x, src) && src != r ? dl[(int64_t)r * W + src] : -1;
    }
    c->kv_t_at[st] = n;
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++) {
      const route *t = &rt->kv[i];
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard)) continue;
      int32_t have = t->shard != t->from ? dl[(int64_t)t->from * W + t->shard] : -1;
      if (t->bytes <= 0) {
        dl[(int64_t)t->to * W + t->shard] = have;
        continue;
      }
      uint32_t cost = cost_of(x, c, t->link, t->bytes);
      if (cost == UINT32_MAX) return -1;
      c->kv_t[n] = (kv_task){t->from, t->to, have, cost};
      dl[(int64_t)t->to * W + t->shard] = (int32_t)n++;
    }
  }
  c->kv_t_at[rt->n_steps] = n;
  return 0;
}

// ring.c's deliv_d bookkeeping (grad_part) on nodes.
static int compile_grad(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dd) {
  int W = x->world;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dd[i] = -1;
  int64_t nodes = 0, n = 0;
  for (int st = 0; st < rt->n_steps; st++) {
    c->g_t_at[st] = n;
    for (int64_t i = rt->grad_at[st]; i < rt->grad_at[st + 1]; i++) {
      const route *t = &rt->grad[i];
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard) || t->bytes <= 0) continue;
      uint32_t cost = cost_of(x, c, t->link, t->bytes);
      if (cost == UINT32_MAX) return -1;
      int32_t node = (int32_t)nodes++, *slot = &dd[(int64_t)t->to * W + t->shard];
      c->g_t[n++] = (grad_task){t->from, dd[(int64_t)t->from * W + t->shard], *slot, cost};
      *slot = *slot >= 0 ? (int32_t)nodes++ : node;  // a barrier joins the earlier flush and this one
    }
  }
  c->g_t_at[rt->n_steps] = n;
  for (int r = 0; r < W; r++) c->done_node[r] = dd[(int64_t)r * W + r];
  c->n_nodes = nodes;
  return 0;
}

static ring_compiled *compile(ring_ctx *x, const ring_routes *rt) {
  int W = x->world;
  size_t n = (size_t)rt->n_steps * W, nk = (size_t)rt->n_kv + 1, ng = (size_t)rt->n_grad + 1;
  ring_compiled *c = calloc(1, sizeof *c);
  int32_t *scratch = malloc((size_t)W * W * sizeof *scratch);
  if (!c || !scratch) goto oom;
  c->kv = rt->kv, c->grad = rt->grad, c->n_kv = rt->n_kv, c->n_grad = rt->n_grad, c->n_steps = rt->n_steps;
  c->cdep = malloc(n * sizeof *c->cdep);
  c->kv_t = malloc(nk * sizeof *c->kv_t);
  c->kv_t_at = malloc(((size_t)rt->n_steps + 1) * sizeof *c->kv_t_at);
  c->g_t = malloc(ng * sizeof *c->g_t);
  c->g_t_at = malloc(((size_t)rt->n_steps + 1) * sizeof *c->g_t_at);
  c->done_node = malloc((size_t)W * sizeof *c->done_node);
  c->comm[0] = malloc((n + 1) * sizeof *c->comm[0]);
  c->comm[1] = malloc((n + 1) * sizeof *c->comm[1]);
  c->kv_end = malloc(nk * sizeof *c->kv_end);
  c->node_end = malloc(2 * ng * sizeof *c->node_end);
  c->prev_t = malloc((size_t)W * sizeof *c->prev_t);
  c->cur_t = malloc((size_t)W * sizeof *c->cur_t);
  c->prev_id = malloc((size_t)W * sizeof *c->prev_id);
  c->cur_id = malloc((size_t)W * sizeof *c->cur_id);
  c->free_at = malloc((size_t)W * STREAM_COUNT * sizeof *c->free_at);
  if (!c->cdep || !c->kv_t || !c->kv_t_at || !c->g_t || !c->g_t_at || !c->done_node || !c->comm[0] || !c->comm[1] ||
      !c->kv_end || !c->node_end || !c->prev_t || !c->cur_t || !c->prev_id || !c->cur_id ||
      !c->free_at)
    goto oom;
  if (compile_kv(x, rt, c, scratch) || compile_grad(x, rt, c, scratch)) goto oom;
  for (int bwd = 0; bwd < 2; bwd++)
    for (int st = 0; st < rt->n_steps; st++) ring_step_comm(x, rt, st, bwd, c->comm[bwd] + (int64_t)st * W);
  free(scratch);
  return c;
oom:
  free(scratch);
  compiled_free(c);
  return NULL;
}

// The compiled form of rt, made when the context last ran other routes.
static ring_compiled *compiled_for(ring_ctx *x, const ring_routes *rt) {
  ring_compiled *c = x->compiled;
  if (c && c->kv == rt->kv && c->grad == rt->grad && c->n_kv == rt->n_kv && c->n_grad == rt->n_grad &&
      c->n_steps == rt->n_steps)
    return c;
  ring_ctx_forget(x);
  return x->compiled = compile(x, rt);
}

static inline double later(double a, double b) { return b > a ? b : a; }

// A pass's task on the lean engine: engine_add_after's id, start and end, but the stream's free time is kept in
// free_at (the pass's copy of every stream's, c->free_at) rather than read through the engine's end times, and the
// end is returned instead of stored: of a pass's millions of end times the engine only ever reads the streams' last
// (ring_fast_pass stores those when the pass ends) and the ranks' last computes (done, which are those), so the
// others are not written at all (20 MB a pass at a thousand ranks; the pass was bound by memory traffic).
static inline double add_task(sim_engine *g, ring_compiled *c, int rank, int stream, double dur, double ready,
                              int32_t *id) {
  *id = (int32_t)g->n_tasks++;
  double d = dur > 0 ? dur : 0, start = ready > 0 ? ready : 0;
  if (rank >= 0) {
    int64_t k = (int64_t)rank * STREAM_COUNT + stream;
    if (c->free_at[k] > start) start = c->free_at[k];
    g->stream_last[k] = *id;
    if (g->busy && stream == STREAM_COMPUTE && d > 0) g->busy[rank] += d;
    c->free_at[k] = start + d;
  }
  return start + d;
}

// One pass's steps: computes, KV transfers, and (bwd) dK/dV transfers and their owners' barriers. The engine has room
// for every task of the pass (ring_fast_pass reserved it).
static void run_steps(sim_engine *g, ring_ctx *x, const ring_routes *rt, ring_compiled *c, const double *compute, int bwd) {
  int W = x->world;
  int32_t id, node = 0;  // the next dK/dV node (compile_grad's numbering)
  for (int st = 0; st < rt->n_steps; st++) {
    const int32_t *src = rt->kv_src + (int64_t)st * W, *dep = c->cdep + (int64_t)st * W;
    const double *comp = x->step_s ? NULL : compute + (int64_t)st * W, *comm = c->comm[bwd] + (int64_t)st * W;
    const float *comp_s = x->step_s ? x->step_s + (int64_t)st * W : NULL;
    for (int r = 0; r < W; r++) {
      c->cur_id[r] = c->prev_id[r];
      c->cur_t[r] = c->prev_t[r];
      if (!valid(x, src[r])) continue;
      double t = cost_under_comm(comp_s ? (double)comp_s[r] : comp[r], comm[r], x->comm_slowdown);
      c->cur_t[r] = add_task(g, c, r, STREAM_COMPUTE, t, later(dep[r] >= 0 ? c->kv_end[dep[r]] : 0, c->prev_t[r]), &id);
      c->cur_id[r] = id;
    }
    for (int64_t i = c->kv_t_at[st]; i < c->kv_t_at[st + 1]; i++) {
      const kv_task *k = &c->kv_t[i];
      const link_cost *lc = &c->costs[k->cost];
      double ready = later(later(k->have >= 0 ? c->kv_end[k->have] : 0, c->prev_t[k->from]), c->prev_t[k->to]);
      c->kv_end[i] = add_task(g, c, k->from, lc->stream, lc->dur, ready, &id);
    }
    for (int64_t i = bwd ? c->g_t_at[st] : 0; bwd && i < c->g_t_at[st + 1]; i++) {
      const grad_task *d = &c->g_t[i];
      const link_cost *lc = &c->costs[d->cost];
      double ready = later(c->cur_t[d->from], d->dep >= 0 ? c->node_end[d->dep] : 0);
      double end = c->node_end[node] = add_task(g, c, d->from, lc->stream, lc->dur, ready, &id);
      node++;
      if (d->bar >= 0)  // the owner's earlier flush of this shard and this one, joined
        c->node_end[node++] = add_task(g, c, -1, STREAM_COMPUTE, 0, later(c->node_end[d->bar], end), &id);
    }
    memcpy(c->prev_id, c->cur_id, (size_t)W * sizeof *c->prev_id);
    memcpy(c->prev_t, c->cur_t, (size_t)W * sizeof *c->prev_t);
  }
}

int ring_fast_pass(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int bwd, const int32_t *start,
                   int32_t *done, sr_error *e) {
  int W = x->world;
  ring_compiled *c = compiled_for(x, rt);
  if (!c) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  for (int r = 0; r < W; r++) {
    c->prev_id[r] = start ? start[r] : -1;
    c->prev_t[r] = c->prev_id[r] >= 0 ? engine_end(g, c->prev_id[r]) : 0;
  }
  // Every task of the pass: the computes, the transfers, a barrier a transfer at most.
  int64_t first = g->n_tasks, most = (int64_t)rt->n_steps * W + (c->kv_t_at[rt->n_steps] - c->kv_t_at[0]) +
                                     (bwd ? 2 * (c->g_t_at[rt->n_steps] - c->g_t_at[0]) : 0);
  if (engine_reserve_end(g, most)) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  for (int64_t k = 0; k < (int64_t)W * STREAM_COUNT; k++)
    c->free_at[k] = g->stream_last[k] >= 0 ? g->end[g->stream_last[k]] : g->stream_free[k];
  run_steps(g, x, rt, c, compute, bwd);
  for (int64_t k = 0; k < (int64_t)W * STREAM_COUNT; k++)  // the streams' last tasks' ends (and so done's)
    if (g->stream_last[k] >= first) g->end[g->stream_last[k]] = c->free_at[k];
  for (int r = 0; r < W; r++) {
    done[r] = c->prev_id[r];
    if (!bwd || c->done_node[r] < 0) continue;
    // the owner is done when its last compute ended and every flush of its shard arrived
    done[r] = engine_add_after(g, -1, STREAM_COMPUTE, 0, later(c->prev_t[r], c->node_end[c->done_node[r]]));
    if (done[r] < 0) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  }
  return SR_OK;
}

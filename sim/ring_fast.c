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

struct ring_compiled {
  // the routes compiled (see ring_ctx_forget)
  const route *kv, *grad;
  int64_t n_kv, n_grad;
  int n_steps;
  int32_t *cdep;         // [n_steps * W] compute (s, r): the KV transfer it waits for (-1: none)
  uint8_t *kv_task;      // [n_kv] 1: a task; 0: nothing (invalid ranks, or no bytes: the receiver is as ready as the sender)
  int32_t *kv_have;      // [n_kv] the KV transfer that brought the shard to its sender (-1: its own, or none)
  double *kv_dur;        // [n_kv] seconds (ring_link_time)
  uint8_t *kv_stream;    // [n_kv]
  // dK/dV: nodes are the transfers and the barriers where an owner joins flushes, numbered as created
  int32_t *g_node;       // [n_grad] this transfer's node (-1: not a task)
  int32_t *g_dep;        // [n_grad] the node of the accumulator it adds to (-1: none)
  int32_t *g_bar;        // [n_grad] node it joins in a barrier at the receiver (node g_node + 1; -1: no barrier)
  double *g_dur;
  uint8_t *g_stream;
  int32_t *done_node;    // [W] the owner's last node, joined at the pass's end (-1: none)
  int64_t n_nodes;
  double *comm[2];       // [n_steps * W] step_comm's seconds, forward and backward
  // scratch of a pass
  double *kv_end, *node_end;
  double *prev_t, *cur_t;
  int32_t *prev_id, *cur_id;
};

static void compiled_free(ring_compiled *c) {
  if (!c) return;
  free(c->cdep);
  free(c->kv_task);
  free(c->kv_have);
  free(c->kv_dur);
  free(c->kv_stream);
  free(c->g_node);
  free(c->g_dep);
  free(c->g_bar);
  free(c->g_dur);
  free(c->g_stream);
  free(c->done_node);
  free(c->comm[0]);
  free(c->comm[1]);
  free(c->kv_end);
  free(c->node_end);
  free(c->prev_t);
  free(c->cur_t);
  free(c->prev_id);
  free(c->cur_id);
  free(c);
}

void ring_ctx_forget(ring_ctx *x) {
  compiled_free(x->compiled);
  x->compiled = NULL;
}

static int valid(const ring_ctx *x, int rank) { return rank >= 0 && rank < x->world; }

// ring.c's deliv bookkeeping on transfer indices: kv_part and add_compute in their order.
static void compile_kv(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dl) {
  int W = x->world;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dl[i] = -1;
  for (int st = 0; st < rt->n_steps; st++) {
    for (int r = 0; r < W; r++) {
      int src = rt->kv_src[(int64_t)st * W + r];
      c->cdep[(int64_t)st * W + r] = valid(x, src) && src != r ? dl[(int64_t)r * W + src] : -1;
    }
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++) {
      const route *t = &rt->kv[i];
      c->kv_task[i] = 0;
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard)) continue;
      int32_t have = t->shard != t->from ? dl[(int64_t)t->from * W + t->shard] : -1;
      if (t->bytes <= 0) {
        dl[(int64_t)t->to * W + t->shard] = have;
        continue;
      }
      c->kv_task[i] = 1;
      c->kv_have[i] = have;
      c->kv_dur[i] = ring_link_time(x->c, t->link, (double)t->bytes);
      c->kv_stream[i] = (uint8_t)ring_stream_of(t->link);
      dl[(int64_t)t->to * W + t->shard] = (int32_t)i;
    }
  }
}

// ring.c's deliv_d bookkeeping (grad_part) on nodes.
static void compile_grad(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dd) {
  int W = x->world;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dd[i] = -1;
  int64_t nodes = 0;
  for (int st = 0; st < rt->n_steps; st++)
    for (int64_t i = rt->grad_at[st]; i < rt->grad_at[st + 1]; i++) {
      const route *t = &rt->grad[i];
      c->g_node[i] = -1;
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard) || t->bytes <= 0) continue;
      c->g_dep[i] = dd[(int64_t)t->from * W + t->shard];
      c->g_node[i] = (int32_t)nodes++;
      c->g_dur[i] = ring_link_time(x->c, t->link, (double)t->bytes);
      c->g_stream[i] = (uint8_t)ring_stream_of(t->link);
      int32_t *slot = &dd[(int64_t)t->to * W + t->shard];
      c->g_bar[i] = *slot;
      *slot = *slot >= 0 ? (int32_t)nodes++ : c->g_node[i];
    }
  for (int r = 0; r < W; r++) c->done_node[r] = dd[(int64_t)r * W + r];
  c->n_nodes = nodes;
}

static ring_compiled *compile(ring_ctx *x, const ring_routes *rt) {
  int W = x->world;
  size_t n = (size_t)rt->n_steps * W, nk = (size_t)rt->n_kv + 1, ng = (size_t)rt->n_grad + 1;
  ring_compiled *c = calloc(1, sizeof *c);
  int32_t *scratch = malloc((size_t)W * W * sizeof *scratch);
  if (!c || !scratch) goto oom;
  c->kv = rt->kv, c->grad = rt->grad, c->n_kv = rt->n_kv, c->n_grad = rt->n_grad, c->n_steps = rt->n_steps;
  c->cdep = malloc(n * sizeof *c->cdep);
  c->kv_task = malloc(nk);
  c->kv_have = malloc(nk * sizeof *c->kv_have);
  c->kv_dur = malloc(nk * sizeof *c->kv_dur);
  c->kv_stream = malloc(nk);
  c->g_node = malloc(ng * sizeof *c->g_node);
  c->g_dep = malloc(ng * sizeof *c->g_dep);
  c->g_bar = malloc(ng * sizeof *c->g_bar);
  c->g_dur = malloc(ng * sizeof *c->g_dur);
  c->g_stream = malloc(ng);
  c->done_node = malloc((size_t)W * sizeof *c->done_node);
  c->comm[0] = malloc((n + 1) * sizeof *c->comm[0]);
  c->comm[1] = malloc((n + 1) * sizeof *c->comm[1]);
  c->kv_end = malloc(nk * sizeof *c->kv_end);
  c->node_end = malloc(2 * ng * sizeof *c->node_end);
  c->prev_t = malloc((size_t)W * sizeof *c->prev_t);
  c->cur_t = malloc((size_t)W * sizeof *c->cur_t);
  c->prev_id = malloc((size_t)W * sizeof *c->prev_id);
  c->cur_id = malloc((size_t)W * sizeof *c->cur_id);
  if (!c->cdep || !c->kv_task || !c->kv_have || !c->kv_dur || !c->kv_stream || !c->g_node || !c->g_dep || !c->g_bar ||
      !c->g_dur || !c->g_stream || !c->done_node || !c->comm[0] || !c->comm[1] || !c->kv_end || !c->node_end ||
      !c->prev_t || !c->cur_t || !c->prev_id || !c->cur_id)
    goto oom;
  compile_kv(x, rt, c, scratch);
  compile_grad(x, rt, c, scratch);
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

// One pass's steps: computes, KV transfers, and (bwd) dK/dV transfers and their owners' barriers.
static int run_steps(sim_engine *g, ring_ctx *x, const ring_routes *rt, ring_compiled *c, const double *compute, int bwd) {
  int W = x->world;
  for (int st = 0; st < rt->n_steps; st++) {
    const int32_t *src = rt->kv_src + (int64_t)st * W, *dep = c->cdep + (int64_t)st * W;
    const double *comp = compute + (int64_t)st * W, *comm = c->comm[bwd] + (int64_t)st * W;
    for (int r = 0; r < W; r++) {
      c->cur_id[r] = c->prev_id[r];
      c->cur_t[r] = c->prev_t[r];
      if (!valid(x, src[r])) continue;
      double t = cost_under_comm(comp[r], comm[r], x->comm_slowdown);
      int32_t id = engine_add_after(g, r, STREAM_COMPUTE, t, later(dep[r] >= 0 ? c->kv_end[dep[r]] : 0, c->prev_t[r]));
      if (id < 0) return -1;
      c->cur_id[r] = id;
      c->cur_t[r] = engine_end(g, id);
    }
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++) {
      if (!c->kv_task[i]) continue;
      const route *t = &rt->kv[i];
      double ready = later(later(c->kv_have[i] >= 0 ? c->kv_end[c->kv_have[i]] : 0, c->prev_t[t->from]), c->prev_t[t->to]);
      int32_t id = engine_add_after(g, t->from, (timeline_stream)c->kv_stream[i], c->kv_dur[i], ready);
      if (id < 0) return -1;
      c->kv_end[i] = engine_end(g, id);
    }
    for (int64_t i = bwd ? rt->grad_at[st] : 0; bwd && i < rt->grad_at[st + 1]; i++) {
      int32_t node = c->g_node[i];
      if (node < 0) continue;
      const route *t = &rt->grad[i];
      double ready = later(c->cur_t[t->from], c->g_dep[i] >= 0 ? c->node_end[c->g_dep[i]] : 0);
      int32_t id = engine_add_after(g, t->from, (timeline_stream)c->g_stream[i], c->g_dur[i], ready);
      if (id < 0) return -1;
      c->node_end[node] = engine_end(g, id);
      if (c->g_bar[i] >= 0) {  // the owner's earlier flush of this shard and this one, joined
        if ((id = engine_add_after(g, -1, STREAM_COMPUTE, 0, later(c->node_end[c->g_bar[i]], c->node_end[node]))) < 0)
          return -1;
        c->node_end[node + 1] = engine_end(g, id);
      }
    }
    memcpy(c->prev_id, c->cur_id, (size_t)W * sizeof *c->prev_id);
    memcpy(c->prev_t, c->cur_t, (size_t)W * sizeof *c->prev_t);
  }
  return 0;
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
  if (run_steps(g, x, rt, c, compute, bwd)) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  for (int r = 0; r < W; r++) {
    done[r] = c->prev_id[r];
    if (!bwd || c->done_node[r] < 0) continue;
    // the owner is done when its last compute ended and every flush of its shard arrived
    done[r] = engine_add_after(g, -1, STREAM_COMPUTE, 0, later(c->prev_t[r], c->node_end[c->done_node[r]]));
    if (done[r] < 0) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  }
  return SR_OK;
}

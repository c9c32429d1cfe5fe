// ring.c — task graphs of ring attention passes (see ring.h), read off a plan's routes (flat ring,
// double ring, USP's rings; plan/ring_plan.h), which are the transfers the executor posts. The
// dependency rules follow ring-flash-attention's loop: post a transfer at the start of its post step (a
// rendezvous: both ends have finished the step before, so the receiver's buffer is free), compute on
// the current KV, wait for the transfer before the step that needs it. Backward: a dK/dV accumulator
// leaves once the sender's compute of the step is done and the accumulator it adds to has arrived.
#include "sim/ring.h"

#include <stdlib.h>
#include <string.h>

#include "sim/cost.h"

#define LINK_CLASSES 4  // link_class values: none, intra, inter, host

// ---- context ---------------------------------------------------------------------------------

int ring_ctx_init(ring_ctx *x, int world, const cluster_desc *c, sr_error *e) {
  memset(x, 0, sizeof *x);
  x->world = world;
  x->c = c;
  x->nic_shared = c->nodes > 1 && c->nics_per_node < c->gpus_per_node;
  x->comm_slowdown = c->gpu.comm_slowdown;
  size_t n = (size_t)world * (size_t)world;
  x->deliv = malloc(n * sizeof *x->deliv);
  x->deliv_d = malloc(n * sizeof *x->deliv_d);
  x->prev = malloc((size_t)world * 2 * sizeof *x->prev);
  x->link_bytes = malloc((size_t)world * 2 * LINK_CLASSES * sizeof *x->link_bytes);
  if (!x->deliv || !x->deliv_d || !x->prev || !x->link_bytes) {
    ring_ctx_free(x);
    return sr_internal_error(e, 0, "ring: out of memory for %d ranks", world);
  }
  return SR_OK;
}

void ring_ctx_free(ring_ctx *x) {
  ring_ctx_forget(x);
  free(x->deliv);
  free(x->deliv_d);
  free(x->prev);
  free(x->link_bytes);
  x->deliv = x->deliv_d = x->prev = NULL;
  x->link_bytes = NULL;
}

static void reset(int32_t *a, int w) {
  for (int64_t i = 0; i < (int64_t)w * w; i++) a[i] = -1;
}

double ring_link_time(const cluster_desc *c, link_class link, double bytes) {
  switch (link) {
    case LINK_INTER: {
      // A GPU's share of its node's NICs when every GPU has one, else a whole NIC that the engine's
      // node resource shares between GPUs (see ring_ctx.nic_shared).
      link_desc l = c->nic;
      if (c->nics_per_node >= c->gpus_per_node && c->gpus_per_node > 0)
        l.gbps = c->nic.gbps * c->nics_per_node / c->gpus_per_node;
      return cost_p2p(&l, bytes);
    }
    case LINK_HOST: return cost_p2p(&c->host, bytes);
    case LINK_INTRA: return cost_p2p(&c->intra, bytes);
    default: return 0;
  }
}

timeline_stream ring_stream_of(link_class link) {
  return link == LINK_INTER ? STREAM_INTER : link == LINK_HOST ? STREAM_COPY : STREAM_INTRA;
}

static int32_t add_send(sim_engine *g, const ring_ctx *x, int r, link_class link, double bytes, int phase, int step,
                        const int32_t *deps, int n_deps) {
  double t = ring_link_time(x->c, link, bytes);
  int res = (link == LINK_INTER && x->nic_shared) ? cluster_node_of(x->c, r) : -1;
  return engine_add(g, r, ring_stream_of(link), t, res, phase, x->layer, step, deps, n_deps);
}

static int valid(const ring_ctx *x, int rank) { return rank >= 0 && rank < x->world; }

static int log_transfer(ring_ctx *x, const route *r, int backward) {
  sim_transfers *l = x->log;
  if (!l) return 0;
  if (l->n == l->cap) {
    int64_t cap = l->cap ? 2 * l->cap : 256;
    sim_transfer *t = realloc(l->t, (size_t)cap * sizeof *t);
    if (!t) return -1;
    l->t = t, l->cap = cap;
  }
  l->t[l->n++] = (sim_transfer){*r, x->layer, backward};
  return 0;
}

// A KV transfer: the sender must hold the shard (its own, or delivered earlier), and both ends must
// have begun the post step.
static int kv_part(sim_engine *g, ring_ctx *x, const route *t, int phase, int backward) {
  int W = x->world;
  if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard)) return 0;
  if (log_transfer(x, t, backward)) return -1;
  int32_t have = t->shard != t->from ? x->deliv[(int64_t)t->from * W + t->shard] : -1;
  if (t->bytes <= 0) {  // nothing on the wire: the receiver is as ready as the sender
    x->deliv[(int64_t)t->to * W + t->shard] = have;
    return 0;
  }
  int32_t deps[3] = {have, x->prev[t->from], x->prev[t->to]};
  int32_t id = add_send(g, x, t->from, t->link, (double)t->bytes, phase, t->post_at, deps, 3);
  if (id < 0) return -1;
  x->deliv[(int64_t)t->to * W + t->shard] = id;
  return 0;
}

// A dK/dV transfer (ACC or FLUSH): after the sender's compute of its step and after the accumulator it
// adds to has reached it.
static int grad_part(sim_engine *g, ring_ctx *x, const route *t, const int32_t *cur, int phase) {
  int W = x->world;
  if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard)) return 0;
  if (log_transfer(x, t, 1)) return -1;
  if (t->bytes <= 0) return 0;
  int32_t deps[2] = {cur[t->from], x->deliv_d[(int64_t)t->from * W + t->shard]};
  int32_t id = add_send(g, x, t->from, t->link, (double)t->bytes, phase, t->post_at, deps, 2);
  if (id < 0) return -1;
  // An owner receives a flush from every accumulator chain of its shard: it is done after all of them.
  int32_t *slot = &x->deliv_d[(int64_t)t->to * W + t->shard];
  if (*slot >= 0) {
    int32_t both[2] = {*slot, id};
    if ((id = engine_barrier(g, both, 2)) < 0) return -1;
  }
  *slot = id;
  return 0;
}

// Seconds of the transfers each rank posts at `step` (KV, and in the backward the dK/dV that leaves
// after it), for the compute they run beside: per level, bytes to the same link class are one message.
void ring_step_comm(ring_ctx *x, const ring_routes *rt, int step, int bwd, double *comm) {
  int W = x->world;
  int64_t *lb = x->link_bytes;
  for (int64_t i = 0; i < (int64_t)W * 2 * LINK_CLASSES; i++) lb[i] = -1;
  for (int pass = 0; pass < 1 + bwd; pass++) {
    const route *v = pass ? rt->grad : rt->kv;
    const int64_t *at = pass ? rt->grad_at : rt->kv_at;
    for (int64_t i = at[step]; i < at[step + 1]; i++) {
      if (!valid(x, v[i].from) || !valid(x, v[i].to)) continue;
      int64_t *b = &lb[((int64_t)v[i].from * 2 + (v[i].level ? 1 : 0)) * LINK_CLASSES + v[i].link];
      *b = (*b < 0 ? 0 : *b) + v[i].bytes;
    }
  }
  for (int r = 0; r < W; r++) {
    double t[2] = {0, 0};
    for (int lv = 0; lv < 2; lv++)
      for (int k = 0; k < LINK_CLASSES; k++) {
        int64_t b = lb[((int64_t)r * 2 + lv) * LINK_CLASSES + k];
        if (b >= 0) t[lv] += ring_link_time(x->c, (link_class)k, (double)b);
      }
    comm[r] = t[1] > t[0] ? t[1] : t[0];
  }
}

// Compute tasks of one step for every rank; cur[r] gets each rank's latest compute. comm[r]: seconds of
// the transfers r runs beside it (cost_under_comm slows the overlapped part).
static int add_compute(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, const double *comm,
                       int phase, int step, int32_t *cur) {
  int W = x->world;
  for (int r = 0; r < W; r++) {
    int src = rt->kv_src[(int64_t)step * W + r];
    cur[r] = x->prev[r];
    if (!valid(x, src)) continue;
    double t = cost_under_comm(compute[(int64_t)step * W + r], comm[r], x->comm_slowdown);
    int32_t deps[2] = {src != r ? x->deliv[(int64_t)r * W + src] : -1, x->prev[r]};
    cur[r] = engine_add(g, r, STREAM_COMPUTE, t, -1, phase, x->layer, step, deps, 2);
    if (cur[r] < 0) return -1;
  }
  return 0;
}

// ---- passes ----------------------------------------------------------------------------------

static int check_routes(const ring_ctx *x, const ring_routes *rt, sr_error *e) {
  if (rt->world != x->world)
    return sr_internal_error(e, 0, "ring: routes over %d ranks, context of %d", rt->world, x->world);
  return SR_OK;
}

int ring_forward(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int phase_compute,
                 int phase_send, const int32_t *start, int32_t *done, sr_error *e) {
  int W = x->world;
  if (check_routes(x, rt, e)) return e->code;
  if (g->lean && !x->log) return ring_fast_pass(g, x, rt, compute, 0, start, done, e);
  reset(x->deliv, W);
  int32_t *cur = x->prev + W;
  double *comm = malloc((size_t)W * sizeof *comm);
  if (!comm) goto oom;
  for (int r = 0; r < W; r++) x->prev[r] = start ? start[r] : -1;
  for (int st = 0; st < rt->n_steps; st++) {
    ring_step_comm(x, rt, st, 0, comm);
    if (add_compute(g, x, rt, compute, comm, phase_compute, st, cur)) goto oom;
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++)
      if (kv_part(g, x, &rt->kv[i], phase_send, 0)) goto oom;
    memcpy(x->prev, cur, (size_t)W * sizeof *cur);
  }
  for (int r = 0; r < W; r++) done[r] = x->prev[r];
  free(comm);
  return SR_OK;
oom:
  free(comm);
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

int ring_backward(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int phase_compute,
                  int phase_send, int phase_dkv, const int32_t *start, int32_t *done, sr_error *e) {
  int W = x->world;
  if (check_routes(x, rt, e)) return e->code;
  if (g->lean && !x->log) return ring_fast_pass(g, x, rt, compute, 1, start, done, e);
  reset(x->deliv, W);
  reset(x->deliv_d, W);
  int32_t *cur = x->prev + W;
  double *comm = malloc((size_t)W * sizeof *comm);
  if (!comm) goto oom;
  for (int r = 0; r < W; r++) x->prev[r] = start ? start[r] : -1;
  for (int st = 0; st < rt->n_steps; st++) {
    ring_step_comm(x, rt, st, 1, comm);
    if (add_compute(g, x, rt, compute, comm, phase_compute, st, cur)) goto oom;
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++)
      if (kv_part(g, x, &rt->kv[i], phase_send, 1)) goto oom;
    for (int64_t i = rt->grad_at[st]; i < rt->grad_at[st + 1]; i++)
      if (grad_part(g, x, &rt->grad[i], cur, phase_dkv)) goto oom;
    memcpy(x->prev, cur, (size_t)W * sizeof *cur);
  }
  for (int r = 0; r < W; r++) {
    int32_t deps[2] = {x->prev[r], x->deliv_d[(int64_t)r * W + r]};
    done[r] = deps[1] < 0 ? deps[0] : engine_barrier(g, deps, 2);
    if (deps[1] >= 0 && done[r] < 0) goto oom;
  }
  free(comm);
  return SR_OK;
oom:
  free(comm);
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

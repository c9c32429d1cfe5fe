// ring.c — task graphs of ring attention passes (see ring.h), read off the plan's schedule (flat
// ring, double ring, USP's ring). The dependency rules follow ring-flash-attention's loop: post the
// transfer of the next KV at the start of a step (a rendezvous: both ends have finished the previous
// step, so the receiver's second buffer is free), compute on the current KV, wait for the transfer
// before the step that needs it. Backward: a dK/dV partial leaves once the sender's compute of the
// step is done and the partial it adds to has arrived.
#include "sim/ring.h"

#include <stdlib.h>
#include <string.h>

#include "sim/cost.h"

// ---- context ---------------------------------------------------------------------------------

int ring_ctx_init(ring_ctx *x, const schedule *s, const cluster_desc *c, sr_error *e) {
  memset(x, 0, sizeof *x);
  x->s = s;
  x->c = c;
  x->nic_shared = c->nodes > 1 && c->nics_per_node < c->gpus_per_node;
  x->comm_slowdown = c->gpu.comm_slowdown;
  size_t n = (size_t)s->world * (size_t)s->world;
  x->deliv = malloc(n * sizeof *x->deliv);
  x->deliv_d = malloc(n * sizeof *x->deliv_d);
  x->prev = malloc((size_t)s->world * 2 * sizeof *x->prev);
  if (!x->deliv || !x->deliv_d || !x->prev) {
    ring_ctx_free(x);
    return sr_internal_error(e, 0, "ring: out of memory for %d ranks", s->world);
  }
  return SR_OK;
}

void ring_ctx_free(ring_ctx *x) {
  free(x->deliv);
  free(x->deliv_d);
  free(x->prev);
  x->deliv = x->deliv_d = x->prev = NULL;
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

static timeline_stream stream_of(link_class link) {
  return link == LINK_INTER ? STREAM_INTER : link == LINK_HOST ? STREAM_COPY : STREAM_INTRA;
}

static int32_t add_send(sim_engine *g, const ring_ctx *x, int r, link_class link, double bytes, int phase, int step,
                        const int32_t *deps, int n_deps) {
  double t = ring_link_time(x->c, link, bytes);
  int res = (link == LINK_INTER && x->nic_shared) ? cluster_node_of(x->c, r) : -1;
  return engine_add(g, r, stream_of(link), t, res, phase, x->layer, step, deps, n_deps);
}

static int valid(const ring_ctx *x, int rank) { return rank >= 0 && rank < x->s->world; }

// The KV part of a transfer: r must hold the shard, and both ends must have begun the step.
static int kv_part(sim_engine *g, ring_ctx *x, int r, const transfer *t, double bytes, int phase, int step) {
  int W = x->s->world;
  if (!valid(x, t->peer) || !valid(x, t->shard)) return 0;
  int32_t have = t->shard != r ? x->deliv[(int64_t)r * W + t->shard] : -1;
  if (bytes <= 0) {  // nothing on the wire: the receiver is as ready as the sender
    x->deliv[(int64_t)t->peer * W + t->shard] = have;
    return 0;
  }
  int32_t deps[3] = {have, x->prev[r], x->prev[t->peer]};
  int32_t id = add_send(g, x, r, t->link, bytes, phase, step, deps, 3);
  if (id < 0) return -1;
  x->deliv[(int64_t)t->peer * W + t->shard] = id;
  return 0;
}

// The dK/dV part: after r's compute of this step and after the partial it adds to has reached r.
static int grad_part(sim_engine *g, ring_ctx *x, int r, const transfer *t, const int32_t *cur, int phase, int step) {
  int W = x->s->world;
  if (!valid(x, t->peer) || !valid(x, t->grad_shard) || t->grad_bytes <= 0) return 0;
  int32_t deps[2] = {cur[r], x->deliv_d[(int64_t)r * W + t->grad_shard]};
  int32_t id = add_send(g, x, r, t->link, (double)t->grad_bytes, phase, step, deps, 2);
  if (id < 0) return -1;
  // A double ring's round base receives two partials of its shard (the other group's, over the outer
  // ring, and its own group's, over the inner ring): what it forwards next includes both.
  int32_t *slot = &x->deliv_d[(int64_t)t->peer * W + t->grad_shard];
  if (*slot >= 0) {
    int32_t both[2] = {*slot, id};
    if ((id = engine_barrier(g, both, 2)) < 0) return -1;
  }
  *slot = id;
  return 0;
}

// Compute tasks of one step for every rank; cur[r] gets each rank's latest compute.
static int add_compute(sim_engine *g, ring_ctx *x, const double *compute, int phase, int step, int bwd, int32_t *cur) {
  int W = x->s->world;
  for (int r = 0; r < W; r++) {
    const ring_step *rs = schedule_at(x->s, step, r);
    cur[r] = x->prev[r];
    if (!valid(x, rs->kv_src)) continue;
    // Comm kernels of this step run beside the compute (cost_under_comm slows the overlapped part).
    const transfer *a = bwd ? &rs->send_bwd : &rs->send, *b = bwd ? &rs->send_outer_bwd : &rs->send_outer;
    double comm = 0;
    if (valid(x, a->peer)) comm += ring_link_time(x->c, a->link, (double)a->bytes);
    if (valid(x, b->peer)) {
      double o = ring_link_time(x->c, b->link, (double)b->bytes);
      if (o > comm) comm = o;
    }
    double t = cost_under_comm(compute[(int64_t)step * W + r], comm, x->comm_slowdown);
    int32_t deps[2] = {rs->kv_src != r ? x->deliv[(int64_t)r * W + rs->kv_src] : -1, x->prev[r]};
    cur[r] = engine_add(g, r, STREAM_COMPUTE, t, -1, phase, x->layer, step, deps, 2);
    if (cur[r] < 0) return -1;
  }
  return 0;
}

// ---- passes ----------------------------------------------------------------------------------

int ring_forward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                 const int32_t *start, int32_t *done, sr_error *e) {
  const schedule *s = x->s;
  int W = s->world;
  reset(x->deliv, W);
  int32_t *cur = x->prev + W;
  for (int r = 0; r < W; r++) x->prev[r] = start ? start[r] : -1;
  for (int st = 0; st < s->n_steps; st++) {
    if (add_compute(g, x, compute, phase_compute, st, 0, cur)) goto oom;
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      if (kv_part(g, x, r, &rs->send, (double)rs->send.bytes, phase_send, st) ||
          kv_part(g, x, r, &rs->send_outer, (double)rs->send_outer.bytes, phase_send, st))
        goto oom;
    }
    memcpy(x->prev, cur, (size_t)W * sizeof *cur);
  }
  for (int r = 0; r < W; r++) done[r] = x->prev[r];
  return SR_OK;
oom:
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

int ring_backward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                  int phase_dkv, const int32_t *start, int32_t *done, sr_error *e) {
  const schedule *s = x->s;
  int W = s->world;
  reset(x->deliv, W);
  reset(x->deliv_d, W);
  int32_t *cur = x->prev + W;
  for (int r = 0; r < W; r++) x->prev[r] = start ? start[r] : -1;
  for (int st = 0; st < s->n_steps; st++) {
    if (add_compute(g, x, compute, phase_compute, st, 1, cur)) goto oom;
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      const transfer *a = &rs->send_bwd, *b = &rs->send_outer_bwd;
      if (kv_part(g, x, r, a, (double)(a->bytes - a->grad_bytes), phase_send, st) ||
          kv_part(g, x, r, b, (double)(b->bytes - b->grad_bytes), phase_send, st))
        goto oom;
    }
    // Inner hops first: a double ring's outer gradient hop forwards what the inner hop just brought.
    for (int r = 0; r < W; r++)
      if (grad_part(g, x, r, &schedule_at(s, st, r)->send_bwd, cur, phase_dkv, st)) goto oom;
    for (int r = 0; r < W; r++)
      if (grad_part(g, x, r, &schedule_at(s, st, r)->send_outer_bwd, cur, phase_dkv, st)) goto oom;
    memcpy(x->prev, cur, (size_t)W * sizeof *cur);
  }
  for (int r = 0; r < W; r++) {
    int32_t deps[2] = {x->prev[r], x->deliv_d[(int64_t)r * W + r]};
    done[r] = deps[1] < 0 ? deps[0] : engine_barrier(g, deps, 2);
    if (deps[1] >= 0 && done[r] < 0) goto oom;
  }
  return SR_OK;
oom:
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

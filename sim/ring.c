// ring.c — task graphs of ring attention passes (see ring.h). The dependency rules follow
// ring-flash-attention's loop: post send/recv of the next KV at the start of a step, compute on the
// current KV, wait for the transfer before the next step; backward also sends the accumulated dK/dV
// after each step's compute, and the last hop brings them back to their owner.
#include "sim/ring.h"

#include <stdlib.h>
#include <string.h>

#include "sim/cost.h"

// ---- context ---------------------------------------------------------------------------------

int ring_ctx_init(ring_ctx *x, const schedule *s, const cluster_desc *c, const int64_t *shard_tokens,
                  int64_t kv_row_bytes, int64_t dkv_row_bytes, sr_error *e) {
  memset(x, 0, sizeof *x);
  x->s = s;
  x->c = c;
  x->shard_tokens = shard_tokens;
  x->kv_row_bytes = kv_row_bytes;
  x->dkv_row_bytes = dkv_row_bytes;
  x->nic_shared = c->nodes > 1 && c->nics_per_node < c->gpus_per_node;
  x->comm_slowdown = c->gpu.comm_slowdown;
  size_t n = (size_t)s->world * (size_t)s->world;
  x->deliv = malloc(n * sizeof *x->deliv);
  x->deliv_d = malloc(n * sizeof *x->deliv_d);
  if (!x->deliv || !x->deliv_d) {
    ring_ctx_free(x);
    return sr_internal_error(e, 0, "ring: out of memory for %d ranks", s->world);
  }
  return SR_OK;
}

void ring_ctx_free(ring_ctx *x) {
  free(x->deliv);
  free(x->deliv_d);
  x->deliv = x->deliv_d = NULL;
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

static sim_stream stream_of(link_class link) {
  return link == LINK_INTER ? STREAM_INTER : link == LINK_HOST ? STREAM_COPY : STREAM_INTRA;
}

static int resource_of(const ring_ctx *x, link_class link, int rank) {
  return (link == LINK_INTER && x->nic_shared) ? cluster_node_of(x->c, rank) : -1;
}

// Add one transfer task of `bytes` from rank r to peer; deps as given.
static int32_t add_send(sim_engine *g, const ring_ctx *x, int r, link_class link, double bytes, int phase, int step,
                        const int32_t *deps, int n_deps) {
  double t = ring_link_time(x->c, link, bytes);
  return engine_add(g, r, stream_of(link), t, resource_of(x, link, r), phase, x->layer, step, deps, n_deps);
}

static link_class link_between(const cluster_desc *c, int a, int b) {
  return cluster_node_of(c, a) == cluster_node_of(c, b) ? LINK_INTRA : LINK_INTER;
}

// ---- forward ---------------------------------------------------------------------------------

int ring_forward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                 const int32_t *start, int32_t *done, sr_error *e) {
  const schedule *s = x->s;
  int W = s->world;
  reset(x->deliv, W);
  int32_t *prev = malloc((size_t)W * 2 * sizeof *prev);  // C(r, step-1), then C(r, step)
  if (!prev) return sr_internal_error(e, 0, "ring: out of memory");
  int32_t *cur = prev + W;
  for (int r = 0; r < W; r++) prev[r] = start ? start[r] : -1;
  for (int st = 0; st < s->n_steps; st++) {
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      cur[r] = prev[r];
      if (rs->kv_src < 0) continue;
      double comm = rs->send.peer >= 0 ? ring_link_time(x->c, rs->send.link, (double)rs->send.bytes) : 0;
      double t = cost_under_comm(compute[(int64_t)st * W + r], comm, x->comm_slowdown);
      int32_t deps[2] = {rs->kv_src != r ? x->deliv[(int64_t)r * W + rs->kv_src] : -1, prev[r]};
      cur[r] = engine_add(g, r, STREAM_COMPUTE, t, -1, phase_compute, x->layer, st, deps, 2);
      if (cur[r] < 0) goto oom;
    }
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      int p = rs->send.peer;
      if (p < 0 || p >= W || rs->send.shard < 0 || rs->send.shard >= W) continue;
      int32_t have = rs->send.shard != r ? x->deliv[(int64_t)r * W + rs->send.shard] : -1;
      if (rs->send.bytes <= 0) {  // skipped send: the shard is simply known to be there
        x->deliv[(int64_t)p * W + rs->send.shard] = have;
        continue;
      }
      int32_t deps[3] = {have, prev[r], prev[p]};
      int32_t id = add_send(g, x, r, rs->send.link, (double)rs->send.bytes, phase_send, st, deps, 3);
      if (id < 0) goto oom;
      x->deliv[(int64_t)p * W + rs->send.shard] = id;
    }
    memcpy(prev, cur, (size_t)W * sizeof *prev);
  }
  for (int r = 0; r < W; r++) done[r] = prev[r];
  free(prev);
  return SR_OK;
oom:
  free(prev);
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

// ---- backward --------------------------------------------------------------------------------

int ring_backward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                  int phase_dkv, const int32_t *start, int32_t *done, sr_error *e) {
  const schedule *s = x->s;
  int W = s->world;
  reset(x->deliv, W);
  reset(x->deliv_d, W);
  int32_t *prev = malloc((size_t)W * 2 * sizeof *prev);
  if (!prev) return sr_internal_error(e, 0, "ring: out of memory");
  int32_t *cur = prev + W;
  for (int r = 0; r < W; r++) prev[r] = start ? start[r] : -1;
  for (int st = 0; st < s->n_steps; st++) {
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      cur[r] = prev[r];
      if (rs->kv_src < 0) continue;
      double comm = 0;
      if (rs->send.peer >= 0) comm += ring_link_time(x->c, rs->send.link, (double)rs->send.bytes);
      if (rs->kv_src != r)
        comm += ring_link_time(x->c, link_between(x->c, r, rs->send.peer >= 0 ? rs->send.peer : rs->kv_src),
                               (double)x->shard_tokens[rs->kv_src] * (double)x->dkv_row_bytes);
      double t = cost_under_comm(compute[(int64_t)st * W + r], comm, x->comm_slowdown);
      int32_t deps[2] = {rs->kv_src != r ? x->deliv[(int64_t)r * W + rs->kv_src] : -1, prev[r]};
      cur[r] = engine_add(g, r, STREAM_COMPUTE, t, -1, phase_compute, x->layer, st, deps, 2);
      if (cur[r] < 0) goto oom;
    }
    // KV travels exactly as in the forward pass (same shards, same peers).
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      int p = rs->send.peer;
      if (p < 0 || p >= W || rs->send.shard < 0 || rs->send.shard >= W) continue;
      int32_t have = rs->send.shard != r ? x->deliv[(int64_t)r * W + rs->send.shard] : -1;
      if (rs->send.bytes <= 0) {
        x->deliv[(int64_t)p * W + rs->send.shard] = have;
        continue;
      }
      int32_t deps[3] = {have, prev[r], prev[p]};
      int32_t id = add_send(g, x, r, rs->send.link, (double)rs->send.bytes, phase_send, st, deps, 3);
      if (id < 0) goto oom;
      x->deliv[(int64_t)p * W + rs->send.shard] = id;
    }
    // dK/dV of the shard just computed on go to the shard's next holder, or home after its last use.
    for (int r = 0; r < W; r++) {
      const ring_step *rs = schedule_at(s, st, r);
      int sh = rs->kv_src;
      if (sh < 0 || sh == r) continue;
      // The KV went on from here to its next holder, who adds to dK/dV next; else they go home.
      int p = (rs->send.peer >= 0 && rs->send.shard == sh && rs->send.bytes > 0) ? rs->send.peer : -1;
      if (p < 0) p = sh;
      int32_t deps[2] = {cur[r], x->deliv_d[(int64_t)r * W + sh]};
      link_class link = link_between(x->c, r, p);
      int32_t id = add_send(g, x, r, link, (double)x->shard_tokens[sh] * (double)x->dkv_row_bytes, phase_dkv, st,
                            deps, 2);
      if (id < 0) goto oom;
      x->deliv_d[(int64_t)p * W + sh] = id;
    }
    memcpy(prev, cur, (size_t)W * sizeof *prev);
  }
  // A rank's backward pass ends when its own dK/dV are home and its last compute is done.
  for (int r = 0; r < W; r++) {
    int32_t home = x->deliv_d[(int64_t)r * W + r];
    if (home < 0) {
      done[r] = prev[r];
      continue;
    }
    int32_t deps[2] = {prev[r], home};
    done[r] = engine_barrier(g, deps, 2);
    if (done[r] < 0) goto oom;
  }
  free(prev);
  return SR_OK;
oom:
  free(prev);
  return sr_internal_error(e, 0, "ring: out of memory for the task graph");
}

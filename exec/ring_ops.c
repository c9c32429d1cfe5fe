// ring_ops.c — the point-to-point operations one member of a ring posts at a step, read off its ring
// plan (plan/ring_plan.h) as data: ring.c turns each into an MPI operation, and the tests hold the
// sends against the planner's routes, which the simulator costs.
#include "exec/dist_internal.h"

// Append op to ops[*n] unless max is reached (ops NULL: count only).
static int add(ring_op *ops, int *n, int max, ring_op op) {
  if (ops && *n >= max) return -1;
  if (ops) ops[*n] = op;
  (*n)++;
  return 0;
}

int ring_ops_kv(const ring_plan *rp, int me, int s, int kind, ring_op *ops, int max) {
  int n = 0, R = rp->R;
  if (s + 1 >= rp->n_steps) return 0;
  int64_t i1 = (int64_t)(s + 1) * R;
  int h = rp->from[i1 + me];
  if (h >= 0 && !rp->early[i1 + me] && add(ops, &n, max, (ring_op){h, 0, rp->src[i1 + me], s, kind, RING_BUF_KV_NEXT}))
    return -1;
  for (int g = 0; g < R; g++) {
    if (g == me || rp->from[i1 + g] != me || rp->early[i1 + g]) continue;
    ring_buf b = rp->from_own[i1 + g] ? RING_BUF_KV_OWN : RING_BUF_KV_CUR;
    if (add(ops, &n, max, (ring_op){g, 1, rp->src[i1 + g], s, kind, b})) return -1;
  }
  return n;
}

int ring_ops_early(const ring_plan *rp, int me, int s, int kind, ring_op *ops, int max) {
  int n = 0, R = rp->R;
  for (int t = s + 1; rp->n_early && t < rp->n_steps; t++)
    for (int g = 0; g < R; g++) {
      int64_t i = (int64_t)t * R + g;
      if (!rp->early[i] || rp->post_at[i] != s || (g != me && rp->from[i] != me)) continue;
      ring_op op = {g, 1, rp->src[i], t, RING_TAG_OUTER + kind, RING_BUF_KV_OWN};  // own shard to g
      if (g == me) op.peer = rp->from[i], op.is_send = 0, op.buf = RING_BUF_OUTER0 + rp->early[i] - 1;
      if (add(ops, &n, max, op)) return -1;
    }
  return n;
}

int ring_ops_grad(const ring_plan *rp, int me, int s, ring_op *ops, int max) {
  int n = 0, R = rp->R;
  int64_t i = (int64_t)s * R + me;
  int src = rp->src[i];
  if (src >= 0) {
    for (int g = 0; s + 1 < rp->n_steps && g < R; g++)
      if (g != me && rp->acc_from[(int64_t)(s + 1) * R + g] == me &&
          add(ops, &n, max, (ring_op){g, 1, src, s, RING_TAG_ACC, RING_BUF_ACC}))
        return -1;
    if (rp->flush[i] && src != me && add(ops, &n, max, (ring_op){src, 1, src, s, RING_TAG_FLUSH, RING_BUF_ACC}))
      return -1;
  }
  if (s + 1 < rp->n_steps) {
    int64_t i1 = (int64_t)(s + 1) * R + me;
    int af = rp->acc_from[i1];
    if (af >= 0 && af != me && add(ops, &n, max, (ring_op){af, 0, rp->src[i1], s, RING_TAG_ACC, RING_BUF_ACC_IN}))
      return -1;
  }
  return n;
}

int ring_ops_flush_recv(const ring_plan *rp, int me, ring_op *ops, int max) {
  int n = 0, R = rp->R;
  for (int s = 0; s < rp->n_steps; s++)
    for (int g = 0; g < R; g++)
      if (g != me && rp->flush[(int64_t)s * R + g] && rp->src[(int64_t)s * R + g] == me &&
          add(ops, &n, max, (ring_op){g, 0, me, s, RING_TAG_FLUSH, RING_BUF_FLUSH}))
        return -1;
  return n;
}

// ring.c — the ring walk of distributed attention on the CPU backend: at step s compute against the
// shard the ring plan names (tile index segment of that source), merging into the running fp32
// (O, LSE), while the shard of step s+1 is in flight (MPI_Isend/Irecv); backward sends dK/dV with
// their shard and flushes finished accumulators to the owner (ring_plan.h).
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

// Message tags: one per (step, kind), so concurrent messages between the same pair never mix.
enum { TAG_KV_FWD = 0, TAG_KV_BWD = 1, TAG_ACC = 2, TAG_FLUSH = 3 };
static int tag_of(int step, int kind) { return step * 4 + kind; }

static int64_t shard_rows(const struct dist_attn *a, int g) { return a->glay->rank_count[g]; }

static sa_shape step_shape(const struct dist_attn *a, int src) {
  sa_shape s = {a->n_q, shard_rows(a, src), a->nh, a->nkv, a->d, a->scale};
  return s;
}

// Test hook: at forward step `step`, rank fail_rank dies like a crashed node (SIGKILL) or, with
// fail_hang, stops making progress like a stuck GPU (the others' bounded waits must catch it).
static void maybe_fail(const struct dist_attn *a, int step) {
  if (a->c->rank != a->fail_rank || step != a->fail_step) return;
  if (!a->fail_hang) raise(SIGKILL);
  for (;;) pause();
}

static void record(struct dist_attn *a, int step, const char *phase, int stream, double t0, double t1) {
  if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, step, phase, stream, t0, t1);
}

// Add the KV sends of step s (for step s+1) and this rank's receive to a batch; returns the receive buffer.
static float *post_kv(struct dist_attn *a, int s, int kind, const float *cur, comm_p2p *ops, int *n) {
  const ring_plan *rp = &a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->nkv * a->d;
  float *rbuf = NULL;
  if (s + 1 >= rp->n_steps) return NULL;
  int64_t i1 = (int64_t)(s + 1) * R;
  int h = rp->from[i1 + me];
  if (h >= 0) {
    rbuf = cur == a->kv_buf[0] ? a->kv_buf[1] : a->kv_buf[0];
    comm_p2p op = {dist_ring_rank(a, h), 0, rbuf, 2 * shard_rows(a, rp->src[i1 + me]) * row, COMM_F32, tag_of(s, kind)};
    ops[(*n)++] = op;
  }
  for (int g = 0; g < R; g++) {
    if (g == me || rp->from[i1 + g] != me) continue;
    int shard = rp->src[i1 + g];
    const float *data = rp->from_own[i1 + g] ? a->kv_own : cur;
    comm_p2p op = {dist_ring_rank(a, g), 1, (void *)data, 2 * shard_rows(a, shard) * row, COMM_F32, tag_of(s, kind)};
    ops[(*n)++] = op;
  }
  return rbuf;
}

// The shard buffer of step s+1, given where it arrived (rbuf) or where it already is.
static const float *next_cur(const struct dist_attn *a, int s, const float *cur, float *rbuf) {
  int64_t i1 = (int64_t)(s + 1) * a->R + a->group;
  if (a->rp.from[i1] >= 0) return rbuf;
  if (a->rp.src[i1] == a->group) return a->kv_own;
  return cur;  // same shard kept in place, or idle
}

// ---------------------------------------------------------------------------------------------
// forward

int ring_fwd(struct dist_attn *a, const float *q, float *o, float *lse, sr_error *e) {
  const ring_plan *rp = &a->rp;
  int64_t nrow = (int64_t)a->nh * a->d;
  memset(o, 0, sizeof(float) * (size_t)(a->n_q * nrow));
  for (int64_t i = 0; i < a->n_q * a->nh; i++) lse[i] = -INFINITY;
  const float *cur = a->kv_own;
  for (int s = 0; s < rp->n_steps; s++) {
    maybe_fail(a, s);
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    float *rbuf = post_kv(a, s, TAG_KV_FWD, cur, ops, &n);
    comm_pending pend;
    double tc = sr_now();
    if (comm_p2p_start(a->c, ops, n, &pend, e)) return e->code;
    a->st.bytes_sent += pend.bytes_sent;
    int src = rp->src[(int64_t)s * a->R + a->group];
    double t0 = sr_now();
    if (src >= 0 && a->nh > 0) {
      sa_shape sh = step_shape(a, src);
      const float *k = cur, *v = cur + shard_rows(a, src) * a->nkv * a->d;
      int rc = sa_ref_fwd(&sh, q, k, v, a->qpos, a->kpos[src], &a->ti_view, src, a->masks + a->h_lo[a->gidx], o, lse);
      if (rc) return sr_internal_error(e, 0, "rank %d: sa_ref_fwd failed at step %d (code %d)", a->c->rank, s, rc);
    }
    double t1 = sr_now();
    if (comm_p2p_wait(a->c, &pend, e)) return e->code;
    double t2 = sr_now();
    if (src >= 0) record(a, s, "attn", TL_COMPUTE, t0, t1);
    if (n > 0) record(a, s, "kv_send", dist_batch_stream(a, ops, n), tc, t2);
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// backward

int ring_bwd(struct dist_attn *a, const float *q, const float *o, const float *lse, const float *dout, float *dq,
             float *dkv, sr_error *e) {
  const ring_plan *rp = &a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->nkv * a->d;
  int64_t own_elems = 2 * a->n_q * row;
  memset(dkv, 0, sizeof(float) * (size_t)own_elems);

  // Flushes of this rank's shard from members whose accumulator chains end elsewhere: post them all now.
  int n_flush = 0;
  for (int s = 0; s < rp->n_steps; s++)
    for (int g = 0; g < R; g++)
      if (g != me && rp->flush[(int64_t)s * R + g] && rp->src[(int64_t)s * R + g] == me) n_flush++;
  float *flush_buf = n_flush ? malloc(sizeof(float) * (size_t)(own_elems * n_flush)) : NULL;
  MPI_Request *freq = n_flush ? malloc(sizeof(MPI_Request) * (size_t)n_flush) : NULL;
  int32_t *fpeer = n_flush ? malloc(sizeof(int32_t) * (size_t)n_flush) : NULL;
  if (n_flush && (!flush_buf || !freq || !fpeer)) {
    free(flush_buf), free(freq), free(fpeer);
    return sr_internal_error(e, 0, "out of memory");
  }
  int fi = 0;
  for (int s = 0; s < rp->n_steps && n_flush; s++)
    for (int g = 0; g < R; g++)
      if (g != me && rp->flush[(int64_t)s * R + g] && rp->src[(int64_t)s * R + g] == me) {
        comm_p2p op = {dist_ring_rank(a, g), 0, flush_buf + own_elems * fi, own_elems, COMM_F32, tag_of(s, TAG_FLUSH)};
        comm_pending one;
        if (comm_p2p_start(a->c, &op, 1, &one, e)) goto fail;
        fpeer[fi] = one.peer[0];
        freq[fi++] = one.req[0];
      }

  const float *cur = a->kv_own;
  comm_pending apend = {0};  // accumulator sends of the previous step (and the receive for this step)
  double t_acc = 0;          // when that batch was posted (0: none)
  int acc_sid = TL_INTRA;
  int p = 0;
  for (int s = 0; s < rp->n_steps; s++) {
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    float *rbuf = post_kv(a, s, TAG_KV_BWD, cur, ops, &n);
    int kv_sid = dist_batch_stream(a, ops, n);
    comm_pending kpend;
    double tc = sr_now();
    if (comm_p2p_start(a->c, ops, n, &kpend, e)) goto fail;
    a->st.bytes_sent += kpend.bytes_sent;
    int64_t i = (int64_t)s * R + me;
    int src = rp->src[i];
    double t0 = sr_now(), t1 = t0;
    if (src >= 0) {
      int64_t elems = 2 * shard_rows(a, src) * row;
      float *P = a->acc[p];
      memset(P, 0, sizeof(float) * (size_t)elems);
      if (a->nh > 0) {
        sa_shape sh = step_shape(a, src);
        const float *k = cur, *v = cur + shard_rows(a, src) * row;
        int rc = sa_ref_bwd(&sh, q, k, v, o, lse, dout, a->qpos, a->kpos[src], &a->ti_view, src,
                            a->masks + a->h_lo[a->gidx], dq, P, P + shard_rows(a, src) * row);
        if (rc) {
          sr_internal_error(e, 0, "rank %d: sa_ref_bwd failed at step %d (code %d)", a->c->rank, s, rc);
          goto fail;
        }
      }
      t1 = sr_now();
      // Accumulators of the earlier holders of this shard: arrived during the compute, or kept here.
      if (comm_p2p_wait(a->c, &apend, e)) goto fail;
      if (t_acc > 0) record(a, s - 1, "dkv_send", acc_sid, t_acc, sr_now());
      t_acc = 0;
      int af = rp->acc_from[i];
      const float *in = af == me ? a->acc[1 - p] : af >= 0 ? a->acc_in[s % 2] : NULL;
      if (in)
        for (int64_t x = 0; x < elems; x++) P[x] += in[x];
    } else {
      if (comm_p2p_wait(a->c, &apend, e)) goto fail;
      if (t_acc > 0) record(a, s - 1, "dkv_send", acc_sid, t_acc, sr_now());
      t_acc = 0;
    }
    // Pass the accumulators on (or home), and receive the next step's.
    n = 0;
    if (src >= 0) {
      int64_t elems = 2 * shard_rows(a, src) * row;
      if (s + 1 < rp->n_steps)
        for (int g = 0; g < R; g++)
          if (g != me && rp->acc_from[(int64_t)(s + 1) * R + g] == me) {
            comm_p2p op = {dist_ring_rank(a, g), 1, a->acc[p], elems, COMM_F32, tag_of(s, TAG_ACC)};
            ops[n++] = op;
          }
      if (rp->flush[i]) {
        if (src == me) {
          for (int64_t x = 0; x < elems; x++) dkv[x] += a->acc[p][x];
        } else {
          comm_p2p op = {dist_ring_rank(a, src), 1, a->acc[p], elems, COMM_F32, tag_of(s, TAG_FLUSH)};
          ops[n++] = op;
        }
      }
    }
    if (s + 1 < rp->n_steps) {
      int64_t i1 = (int64_t)(s + 1) * R + me;
      int af = rp->acc_from[i1];
      if (af >= 0 && af != me) {
        comm_p2p op = {dist_ring_rank(a, af), 0, a->acc_in[(s + 1) % 2], 2 * shard_rows(a, rp->src[i1]) * row, COMM_F32,
                       tag_of(s, TAG_ACC)};
        ops[n++] = op;
      }
    }
    if (n > 0) t_acc = sr_now(), acc_sid = dist_batch_stream(a, ops, n);
    if (comm_p2p_start(a->c, ops, n, &apend, e)) goto fail;
    a->st.bytes_sent += apend.bytes_sent;
    if (comm_p2p_wait(a->c, &kpend, e)) goto fail;
    double t2 = sr_now();
    if (src >= 0) record(a, s, "attn_bwd", TL_COMPUTE, t0, t1);
    if (kpend.bytes_sent + kpend.bytes_recv > 0) record(a, s, "kv_send", kv_sid, tc, t2);
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
    if (src >= 0) p = 1 - p;
  }
  if (comm_p2p_wait(a->c, &apend, e)) goto fail;
  if (t_acc > 0) record(a, rp->n_steps - 1, "dkv_send", acc_sid, t_acc, sr_now());
  for (int f0 = 0; f0 < n_flush; f0 += COMM_MAX_BATCH * 2) {  // bounded waits, a batch at a time
    comm_pending all = {0};
    all.n_req = n_flush - f0 < COMM_MAX_BATCH * 2 ? n_flush - f0 : COMM_MAX_BATCH * 2;
    memcpy(all.req, freq + f0, sizeof(MPI_Request) * (size_t)all.n_req);
    memcpy(all.peer, fpeer + f0, sizeof(int32_t) * (size_t)all.n_req);
    if (comm_p2p_wait(a->c, &all, e)) goto fail;
  }
  if (n_flush) {
    for (int f = 0; f < n_flush; f++)
      for (int64_t x = 0; x < own_elems; x++) dkv[x] += flush_buf[own_elems * f + x];
  }
  free(flush_buf), free(freq), free(fpeer);
  return SR_OK;
fail:
  free(flush_buf), free(freq), free(fpeer);
  return e->code ? e->code : SR_EINTERNAL;
}

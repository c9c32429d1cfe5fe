// ring.c — the ring walk of distributed attention on the CPU backend: at step s compute against the
// shard the ring plan names (tile index segment of that source), merging into the running fp32
// (O, LSE), while the shard of step s+1 is in flight (MPI_Isend/Irecv); backward sends dK/dV with
// their shard and flushes finished accumulators to the owner (plan/ring_plan.h). Early inter-node
// transfers (the double ring's outer ring) are posted at the step the ring plan says, into the outer
// buffers, and waited for only before the step that computes on them. Every operation posted is one
// of ring_ops.c's (the planner's routes, which the simulator costs); this file adds buffers and counts.
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

static int tag_of(int step, int kind) { return step * 8 + kind; }

static int64_t shard_rows(const struct dist_attn *a, int g) { return a->glay->rank_count[g]; }

static sa_shape step_shape(const struct dist_attn *a, int src) {
  sa_shape s = {a->n_q, shard_rows(a, src), a->nh, a->nkv, a->d, a->scale, 0};
  return s;
}

// Test hook: at forward step `step`, rank fail_rank dies like a crashed node (SIGKILL) or, with
// fail_hang, stops making progress like a stuck GPU (the others' bounded waits must catch it).
static void maybe_fail(const struct dist_attn *a, int step) {
  if (a->c->rank != a->fail_rank || step != a->fail_step) return;
  if (!a->fail_hang) raise(SIGKILL);
  for (;;) pause();
}

static void record(struct dist_attn *a, int step, timeline_phase phase, timeline_stream stream, double t0, double t1) {
  if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, step, phase, stream, t0, t1);
}

// Add the ordinary KV operations of step s (for step s+1) to a batch; *rbuf gets the receive buffer.
static int post_kv(struct dist_attn *a, int s, int kind, const float *cur, comm_p2p *ops, int *n, float **rbuf,
                   sr_error *e) {
  ring_op ro[COMM_MAX_BATCH];
  int64_t row = (int64_t)a->nkv * a->d;
  int m = ring_ops_kv(a->rp, a->group, s, kind, ro, COMM_MAX_BATCH);
  *rbuf = NULL;
  if (m < 0)
    return sr_internal_error(e, 0, "rank %d: more than %d KV transfers at step %d", a->c->rank, COMM_MAX_BATCH, s);
  for (int i = 0; i < m; i++) {
    void *buf = ro[i].buf == RING_BUF_KV_OWN ? a->kv_own : (void *)cur;
    if (ro[i].buf == RING_BUF_KV_NEXT) buf = *rbuf = cur == a->kv_buf[0] ? a->kv_buf[1] : a->kv_buf[0];
    comm_p2p op = {dist_ring_rank(a, ro[i].peer), ro[i].is_send, buf, 2 * shard_rows(a, ro[i].shard) * row, COMM_F32,
                   tag_of(ro[i].tag_step, ro[i].tag_kind)};
    ops[(*n)++] = op;
  }
  return SR_OK;
}

// The shard buffer of step s+1, given where it arrived (rbuf) or where it already is.
static const float *next_cur(const struct dist_attn *a, int s, const float *cur, float *rbuf) {
  int64_t i1 = (int64_t)(s + 1) * a->R + a->group;
  if (a->rp->from[i1] >= 0) return a->rp->early[i1] ? a->kv_outer[a->rp->early[i1] - 1] : rbuf;
  if (a->rp->src[i1] == a->group) return a->kv_own;
  return cur;  // same shard kept in place, or idle
}

// ---------------------------------------------------------------------------------------------
// early (outer) transfers

typedef struct {
  comm_pending recv[2];   // the reception awaited in each outer buffer
  int target[2];          // the step that computes on it (-1: none)
  double t_post[2];
  comm_pending *sends;    // [n_steps] own-shard sends posted at each step
} outer_state;

static int outer_begin(struct dist_attn *a, outer_state *o, sr_error *e) {
  memset(o, 0, sizeof *o);
  o->target[0] = o->target[1] = -1;
  if (!a->rp->n_early) return SR_OK;
  o->sends = calloc((size_t)a->rp->n_steps, sizeof(comm_pending));
  return o->sends ? SR_OK : sr_internal_error(e, 0, "out of memory");
}

// Post the early transfers whose post step is s: this rank's reception and its own shard's sends.
static int outer_post(struct dist_attn *a, outer_state *o, int s, int kind, sr_error *e) {
  int64_t row = (int64_t)a->nkv * a->d;
  if (!a->rp->n_early) return SR_OK;
  ring_op ro[COMM_MAX_BATCH];
  comm_p2p ops[COMM_MAX_BATCH];
  int m = ring_ops_early(a->rp, a->group, s, kind, ro, COMM_MAX_BATCH), n = 0;
  if (m < 0)
    return sr_internal_error(e, 0, "rank %d: more than %d early sends at step %d", a->c->rank, COMM_MAX_BATCH, s);
  for (int i = 0; i < m; i++) {
    int64_t count = 2 * shard_rows(a, ro[i].shard) * row;
    int tag = tag_of(ro[i].tag_step, ro[i].tag_kind);
    if (!ro[i].is_send) {
      int b = ro[i].buf - RING_BUF_OUTER0;
      comm_p2p op = {dist_ring_rank(a, ro[i].peer), 0, a->kv_outer[b], count, COMM_F32, tag};
      o->t_post[b] = sr_now(), o->target[b] = ro[i].tag_step;
      if (comm_p2p_start(a->c, &op, 1, &o->recv[b], e)) return e->code;
    } else {
      comm_p2p op = {dist_ring_rank(a, ro[i].peer), 1, a->kv_own, count, COMM_F32, tag};
      ops[n++] = op;
    }
  }
  if (comm_p2p_start(a->c, ops, n, &o->sends[s], e)) return e->code;
  a->st.bytes_sent += o->sends[s].bytes_sent;
  return SR_OK;
}

// Before step s+1: the early reception it computes on has arrived.
static int outer_arrive(struct dist_attn *a, outer_state *o, int s, sr_error *e) {
  for (int b = 0; b < 2; b++)
    if (o->target[b] == s + 1) {
      if (comm_p2p_wait(a->c, &o->recv[b], e)) return e->code;
      record(a, s + 1, PHASE_KV_SEND, STREAM_INTER, o->t_post[b], sr_now());
      o->target[b] = -1;
    }
  return SR_OK;
}

// End of the call: the own-shard sends are done (the shard may change with the next call).
static int outer_end(struct dist_attn *a, outer_state *o, sr_error *e) {
  int rc = SR_OK;
  for (int s = 0; o->sends && s < a->rp->n_steps && rc == SR_OK; s++) rc = comm_p2p_wait(a->c, &o->sends[s], e);
  free(o->sends);
  o->sends = NULL;
  return rc;
}

// ---------------------------------------------------------------------------------------------
// forward

int ring_walk(struct dist_attn *a, timeline_phase phase, ring_visit visit, void *ctx, sr_error *e) {
  const ring_plan *rp = a->rp;
  const float *cur = a->kv_own;
  outer_state os;
  if (outer_begin(a, &os, e)) return e->code;
  for (int s = 0; s < rp->n_steps; s++) {
    maybe_fail(a, s);
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    float *rbuf;
    if (outer_post(a, &os, s, RING_TAG_KV_FWD, e) || post_kv(a, s, RING_TAG_KV_FWD, cur, ops, &n, &rbuf, e)) goto fail;
    comm_pending pend;
    double tc = sr_now();
    if (comm_p2p_start(a->c, ops, n, &pend, e)) goto fail;
    a->st.bytes_sent += pend.bytes_sent;
    int src = rp->src[(int64_t)s * a->R + a->group];
    double t0 = sr_now();
    if (src >= 0 && visit(a, s, src, cur, ctx, e)) goto fail;
    double t1 = sr_now();
    if (comm_p2p_wait(a->c, &pend, e) || outer_arrive(a, &os, s, e)) goto fail;
    double t2 = sr_now();
    if (src >= 0) record(a, s, phase, STREAM_COMPUTE, t0, t1);
    if (n > 0) record(a, s, PHASE_KV_SEND, dist_batch_stream(a, ops, n), tc, t2);
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
  }
  return outer_end(a, &os, e);
fail:
  free(os.sends);
  return e->code ? e->code : SR_EINTERNAL;
}

typedef struct {
  const float *q;
  float *o, *lse;
} fwd_step;

// One step of the forward: this rank's queries against the shard of source src, merged into (O, LSE).
static int fwd_visit(struct dist_attn *a, int s, int src, const float *kv, void *ctx, sr_error *e) {
  fwd_step *f = ctx;
  if (a->nh == 0) return SR_OK;
  sa_shape sh = step_shape(a, src);
  const float *k = kv, *v = kv + shard_rows(a, src) * a->nkv * a->d;
  const tile_index *ti = a->ti_fwd.n_runs ? &a->ti_fwd_view : &a->ti_view;  // plan.spec.fwd_runs
  int rc = sa_ref_fwd(&sh, f->q, k, v, a->qpos, a->kpos[src], ti, src, a->masks + a->h_lo[a->gidx], f->o, f->lse);
  return rc ? sr_internal_error(e, 0, "rank %d: sa_ref_fwd failed at step %d (code %d)", a->c->rank, s, rc) : SR_OK;
}

int ring_fwd(struct dist_attn *a, const float *q, float *o, float *lse, sr_error *e) {
  int64_t nrow = (int64_t)a->nh * a->d;
  memset(o, 0, sizeof(float) * (size_t)(a->n_q * nrow));
  for (int64_t i = 0; i < a->n_q * a->nh; i++) lse[i] = -INFINITY;
  fwd_step f = {q, o, lse};
  return ring_walk(a, PHASE_ATTN, fwd_visit, &f, e);
}

// ---------------------------------------------------------------------------------------------
// backward

int ring_bwd(struct dist_attn *a, const float *q, const float *o, const float *lse, const float *dout, float *dq,
             float *dkv, sr_error *e) {
  const ring_plan *rp = a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->nkv * a->d;
  int64_t own_elems = 2 * a->n_q * row;
  memset(dkv, 0, sizeof(float) * (size_t)own_elems);
  outer_state os = {0};  // before the first goto fail, which frees os.sends

  // Flushes of this rank's shard from members whose accumulator chains end elsewhere: post them all now.
  int n_flush = ring_ops_flush_recv(rp, me, NULL, 0);
  ring_op *fops = n_flush ? malloc(sizeof(ring_op) * (size_t)n_flush) : NULL;
  float *flush_buf = n_flush ? malloc(sizeof(float) * (size_t)(own_elems * n_flush)) : NULL;
  MPI_Request *freq = n_flush ? malloc(sizeof(MPI_Request) * (size_t)n_flush) : NULL;
  int32_t *fpeer = n_flush ? malloc(sizeof(int32_t) * (size_t)n_flush) : NULL;
  if (n_flush && (!fops || !flush_buf || !freq || !fpeer)) {
    free(fops), free(flush_buf), free(freq), free(fpeer);
    return sr_internal_error(e, 0, "out of memory");
  }
  ring_ops_flush_recv(rp, me, fops, n_flush);
  for (int fi = 0; fi < n_flush; fi++) {
    comm_p2p op = {dist_ring_rank(a, fops[fi].peer), 0, flush_buf + own_elems * fi, own_elems, COMM_F32,
                   tag_of(fops[fi].tag_step, fops[fi].tag_kind)};
    comm_pending one;
    if (comm_p2p_start(a->c, &op, 1, &one, e)) goto fail;
    fpeer[fi] = one.peer[0];
    freq[fi] = one.req[0];
  }

  const float *cur = a->kv_own;
  if (outer_begin(a, &os, e)) goto fail;
  comm_pending apend = {0};  // accumulator sends of the previous step (and the receive for this step)
  double t_acc = 0;          // when that batch was posted (0: none)
  timeline_stream acc_sid = STREAM_INTRA;
  int p = 0;
  for (int s = 0; s < rp->n_steps; s++) {
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    float *rbuf;
    if (outer_post(a, &os, s, RING_TAG_KV_BWD, e) || post_kv(a, s, RING_TAG_KV_BWD, cur, ops, &n, &rbuf, e)) goto fail;
    timeline_stream kv_sid = dist_batch_stream(a, ops, n);
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
      if (t_acc > 0) record(a, s - 1, PHASE_DKV_SEND, acc_sid, t_acc, sr_now());
      t_acc = 0;
      int af = rp->acc_from[i];
      const float *in = af == me ? a->acc[1 - p] : af >= 0 ? a->acc_in[s % 2] : NULL;
      if (in)
        for (int64_t x = 0; x < elems; x++) P[x] += in[x];
    } else {
      if (comm_p2p_wait(a->c, &apend, e)) goto fail;
      if (t_acc > 0) record(a, s - 1, PHASE_DKV_SEND, acc_sid, t_acc, sr_now());
      t_acc = 0;
    }
    // Pass the accumulators on (or home), and receive the next step's.
    if (src == me && rp->flush[i])  // a chain that ends at the owner: added here
      for (int64_t x = 0; x < 2 * shard_rows(a, src) * row; x++) dkv[x] += a->acc[p][x];
    ring_op ro[COMM_MAX_BATCH];
    int m = ring_ops_grad(rp, me, s, ro, COMM_MAX_BATCH);
    if (m < 0) {
      sr_internal_error(e, 0, "rank %d: more than %d accumulator transfers at step %d", a->c->rank, COMM_MAX_BATCH, s);
      goto fail;
    }
    n = 0;
    for (int k = 0; k < m; k++) {
      void *buf = ro[k].buf == RING_BUF_ACC ? a->acc[p] : a->acc_in[(s + 1) % 2];
      comm_p2p op = {dist_ring_rank(a, ro[k].peer), ro[k].is_send, buf, 2 * shard_rows(a, ro[k].shard) * row, COMM_F32,
                     tag_of(ro[k].tag_step, ro[k].tag_kind)};
      ops[n++] = op;
    }
    if (n > 0) t_acc = sr_now(), acc_sid = dist_batch_stream(a, ops, n);
    if (comm_p2p_start(a->c, ops, n, &apend, e)) goto fail;
    a->st.bytes_sent += apend.bytes_sent;
    if (comm_p2p_wait(a->c, &kpend, e) || outer_arrive(a, &os, s, e)) goto fail;
    double t2 = sr_now();
    if (src >= 0) record(a, s, PHASE_ATTN_BWD, STREAM_COMPUTE, t0, t1);
    if (kpend.bytes_sent + kpend.bytes_recv > 0) record(a, s, PHASE_KV_SEND, kv_sid, tc, t2);
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
    if (src >= 0) p = 1 - p;
  }
  if (comm_p2p_wait(a->c, &apend, e) || outer_end(a, &os, e)) goto fail;
  if (t_acc > 0) record(a, rp->n_steps - 1, PHASE_DKV_SEND, acc_sid, t_acc, sr_now());
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
  free(fops), free(flush_buf), free(freq), free(fpeer);
  return SR_OK;
fail:
  free(fops), free(flush_buf), free(freq), free(fpeer), free(os.sends);
  return e->code ? e->code : SR_EINTERNAL;
}

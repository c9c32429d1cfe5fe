// ulysses.c — the entry points of distributed attention (dist_attn.h) on the CPU backend, with the
// Ulysses all-to-all of USP/Ulysses schedules: inside a group of U ranks, scatter heads and gather
// tokens before the ring (each member then holds every token of the group for its heads), and the
// reverse after it (dK/dV of replicated KV heads are summed on the way back).
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

// Token rows of member j of this rank's group, and their offset in the group's local order.
static int64_t member_rows(const struct dist_attn *a, int j) { return a->p->layout.rank_count[a->group * a->U + j]; }
static int64_t member_off(const struct dist_attn *a, int j) {
  int64_t off = 0;
  for (int i = 0; i < j; i++) off += member_rows(a, i);
  return off;
}
// The all-to-all stays inside a node when the group's first and last ranks share one.
static timeline_stream a2a_stream(const struct dist_attn *a) {
  int first = a->group * a->U, last = first + a->U - 1;
  return cluster_node_of(&a->p->cluster, first) == cluster_node_of(&a->p->cluster, last) ? STREAM_INTRA : STREAM_INTER;
}
static int q_heads(const struct dist_attn *a, int j) { return a->h_lo[j + 1] - a->h_lo[j]; }
static int kv_heads(const struct dist_attn *a, int j) {
  return q_heads(a, j) ? a->kv_lo[a->U + j] - a->kv_lo[j] : 0;
}

typedef struct {
  int64_t *sc, *sd, *rc, *rd;
} a2a_counts;

static int counts_alloc(int world, a2a_counts *k) {
  k->sc = calloc((size_t)world * 4, sizeof(int64_t));
  if (!k->sc) return -1;
  k->sd = k->sc + world, k->rc = k->sd + world, k->rd = k->rc + world;
  return 0;
}

// [n_local, Htot, d] (heads of member j: [lo_j, lo_j + cnt_j)) -> [n_q, cnt_me, d] over the group.
static int scatter_heads(struct dist_attn *a, const float *x, int Htot, int kv, float *out, sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d;
  int me_cnt = kv ? kv_heads(a, a->gidx) : q_heads(a, a->gidx);
  a2a_counts k;
  int64_t total = 0;  // replicated KV heads go to several members
  for (int j = 0; j < U; j++) total += kv ? kv_heads(a, j) : q_heads(a, j);
  float *send = malloc(sizeof(float) * (size_t)sr_max64(1, a->n_local * total * d));
  if (!send || counts_alloc(a->c->world, &k)) {
    free(send);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t off = 0;
  for (int j = 0; j < U; j++) {
    int lo = kv ? a->kv_lo[j] : a->h_lo[j], cnt = kv ? kv_heads(a, j) : q_heads(a, j);
    for (int64_t t = 0; t < a->n_local; t++)
      memcpy(send + off + t * cnt * d, x + (t * Htot + lo) * d, sizeof(float) * (size_t)(cnt * d));
    k.sc[base + j] = a->n_local * cnt * d, k.sd[base + j] = off;
    off += a->n_local * cnt * d;
    k.rc[base + j] = member_rows(a, j) * me_cnt * d, k.rd[base + j] = member_off(a, j) * me_cnt * d;
  }
  int rc = comm_alltoallv(a->c, send, k.sc, k.sd, out, k.rc, k.rd, COMM_F32, e);
  a->st.bytes_sent += (off - k.sc[a->c->rank]) * 4;
  free(send), free(k.sc);
  return rc;
}

// [n_q, cnt_me, d] -> [n_local, Htot, d] (written, or added when add: replicated KV heads sum).
static int gather_heads(struct dist_attn *a, const float *in, int Htot, int kv, int add, float *x, sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d;
  int me_cnt = kv ? kv_heads(a, a->gidx) : q_heads(a, a->gidx);
  a2a_counts k;
  int64_t total = 0;
  for (int j = 0; j < U; j++) total += kv ? kv_heads(a, j) : q_heads(a, j);
  float *recv = malloc(sizeof(float) * (size_t)sr_max64(1, a->n_local * total * d));
  if (!recv || counts_alloc(a->c->world, &k)) {
    free(recv);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t off = 0;
  for (int j = 0; j < U; j++) {
    int cnt = kv ? kv_heads(a, j) : q_heads(a, j);
    k.sc[base + j] = member_rows(a, j) * me_cnt * d, k.sd[base + j] = member_off(a, j) * me_cnt * d;
    k.rc[base + j] = a->n_local * cnt * d, k.rd[base + j] = off;
    off += a->n_local * cnt * d;
  }
  int rc = comm_alltoallv(a->c, in, k.sc, k.sd, recv, k.rc, k.rd, COMM_F32, e);
  if (rc == SR_OK) {
    if (!add) memset(x, 0, sizeof(float) * (size_t)(a->n_local * Htot * d));
    for (int j = 0; j < U; j++) {
      int lo = kv ? a->kv_lo[j] : a->h_lo[j], cnt = kv ? kv_heads(a, j) : q_heads(a, j);
      const float *b = recv + k.rd[base + j];
      for (int64_t t = 0; t < a->n_local; t++)
        for (int64_t x_ = 0; x_ < (int64_t)cnt * d; x_++) x[(t * Htot + lo) * d + x_] += b[t * cnt * d + x_];
    }
  }
  for (int j = 0; j < U; j++) a->st.bytes_sent += j == a->gidx ? 0 : k.sc[base + j] * 4;
  free(recv), free(k.sc);
  return rc;
}

// LSE [H, n_local] -> [nh, n_q] (to_group) or back.
static int move_lse(struct dist_attn *a, const float *from, float *to, int to_group, sr_error *e) {
  int U = a->U, base = a->group * U, nh = q_heads(a, a->gidx);
  a2a_counts k;
  float *tmp = malloc(sizeof(float) * (size_t)sr_max64(1, sr_max64(a->n_q * nh, a->n_local * a->H)));
  if (!tmp || counts_alloc(a->c->world, &k)) {
    free(tmp);
    return sr_internal_error(e, 0, "out of memory");
  }
  int rc;
  if (to_group) {
    for (int j = 0; j < U; j++) {
      k.sc[base + j] = (int64_t)q_heads(a, j) * a->n_local, k.sd[base + j] = (int64_t)a->h_lo[j] * a->n_local;
      k.rc[base + j] = nh * member_rows(a, j), k.rd[base + j] = nh * member_off(a, j);
    }
    rc = comm_alltoallv(a->c, from, k.sc, k.sd, tmp, k.rc, k.rd, COMM_F32, e);
    for (int j = 0; j < U && rc == SR_OK; j++)
      for (int h = 0; h < nh; h++)
        memcpy(to + h * a->n_q + member_off(a, j), tmp + k.rd[base + j] + h * member_rows(a, j),
               sizeof(float) * (size_t)member_rows(a, j));
  } else {
    for (int j = 0; j < U; j++) {
      k.sc[base + j] = nh * member_rows(a, j), k.sd[base + j] = nh * member_off(a, j);
      for (int h = 0; h < nh; h++)
        memcpy(tmp + k.sd[base + j] + h * member_rows(a, j), from + h * a->n_q + member_off(a, j),
               sizeof(float) * (size_t)member_rows(a, j));
      k.rc[base + j] = (int64_t)q_heads(a, j) * a->n_local, k.rd[base + j] = (int64_t)a->h_lo[j] * a->n_local;
    }
    rc = comm_alltoallv(a->c, tmp, k.sc, k.sd, to, k.rc, k.rd, COMM_F32, e);
  }
  free(tmp), free(k.sc);
  return rc;
}

// This rank's K|V for its heads, packed [2, n_q, nkv, d] (the message format of the ring).
static int load_kv(struct dist_attn *a, const float *k, const float *v, sr_error *e) {
  int64_t plane = a->n_q * a->nkv * a->d;
  if (a->U == 1) {
    memcpy(a->kv_own, k, sizeof(float) * (size_t)plane);
    memcpy(a->kv_own + plane, v, sizeof(float) * (size_t)plane);
    return SR_OK;
  }
  if (scatter_heads(a, k, a->Hkv, 1, a->kv_own, e)) return e->code;
  return scatter_heads(a, v, a->Hkv, 1, a->kv_own + plane, e);
}

// ---------------------------------------------------------------------------------------------
// entry points

int dist_attn_fwd(dist_attn *a, const void *q_, const void *k, const void *v, void *o_, float *lse, sr_error *e) {
  if (a->be == DIST_CUDA) return dist_attn_cuda_fwd(a, q_, k, v, o_, lse, e);
  double t0 = sr_now();
  const float *q = q_;
  float *o = o_;
  int rc;
  if (a->U == 1) {  // vs-online, moba, token-topk: this forward's selection first (online_vs_cpu.c, online_gate_cpu.c)
    rc = (a->online_cpu && online_cpu_forward(a, q, k, e)) || (a->gate_cpu && gate_cpu_forward(a, q, k, e)) ||
         load_kv(a, k, v, e) || ring_fwd(a, q, o, lse, e);
  } else {
    double ta = sr_now();
    rc = scatter_heads(a, q, a->H, 0, a->qg, e) || load_kv(a, k, v, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, 0, PHASE_A2A, a2a_stream(a), ta, sr_now());
    rc = rc || ring_fwd(a, a->qg, a->og, a->lseg, e);
    ta = sr_now();
    rc = rc || gather_heads(a, a->og, a->H, 0, 0, o, e) || move_lse(a, a->lseg, lse, 0, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, a->rp.n_steps - 1, PHASE_A2A, a2a_stream(a), ta, sr_now());
  }
  a->st.bytes_saved += a->saved_fwd;
  a->st.shards_skipped += a->skipped;
  a->st.fwd_s += sr_now() - t0;
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

int dist_attn_bwd(dist_attn *a, const void *q_, const void *k, const void *v, const void *o_, const float *lse,
                  const void *dout_, float *dq, float *dk, float *dv, sr_error *e) {
  if (a->be == DIST_CUDA) return dist_attn_cuda_bwd(a, q_, k, v, o_, lse, dout_, dq, dk, dv, e);
  double t0 = sr_now();
  const float *q = q_, *o = o_, *dout = dout_;
  int64_t plane = a->n_q * a->nkv * a->d;
  int rc;
  if (a->U == 1) {
    memset(dq, 0, sizeof(float) * (size_t)(a->n_local * a->H * a->d));
    rc = load_kv(a, k, v, e) || ring_bwd(a, q, o, lse, dout, dq, a->dkvg, e);
    if (!rc) {
      memcpy(dk, a->dkvg, sizeof(float) * (size_t)plane);
      memcpy(dv, a->dkvg + plane, sizeof(float) * (size_t)plane);
    }
  } else {
    double ta = sr_now();
    rc = scatter_heads(a, q, a->H, 0, a->qg, e) || scatter_heads(a, o, a->H, 0, a->og, e) ||
         scatter_heads(a, dout, a->H, 0, a->dog, e) || move_lse(a, lse, a->lseg, 1, e) || load_kv(a, k, v, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, 0, PHASE_A2A, a2a_stream(a), ta, sr_now());
    if (!rc) memset(a->dqg, 0, sizeof(float) * (size_t)(a->n_q * a->nh * a->d));
    rc = rc || ring_bwd(a, a->qg, a->og, a->lseg, a->dog, a->dqg, a->dkvg, e);
    ta = sr_now();
    rc = rc || gather_heads(a, a->dqg, a->H, 0, 0, dq, e);
    if (!rc) {  // replicated KV heads: every member's partial dK/dV adds up at the token's owner
      memset(dk, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
      memset(dv, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
    }
    rc = rc || gather_heads(a, a->dkvg, a->Hkv, 1, 1, dk, e) || gather_heads(a, a->dkvg + plane, a->Hkv, 1, 1, dv, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, a->rp.n_steps - 1, PHASE_A2A, a2a_stream(a), ta, sr_now());
  }
  a->st.bytes_saved += a->saved_bwd;
  a->st.bwd_s += sr_now() - t0;
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

// ulysses.c — the entry points of distributed attention (dist_attn.h) on the CPU backend, with the
// Ulysses all-to-all of USP/Ulysses schedules: inside a group of U ranks, scatter heads and gather
// tokens before the ring (each member then holds every token of the group for its heads), and the
// reverse after it (dK/dV of replicated KV heads are summed on the way back).
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/fpdt.h"
#include "exec/online_adaspa.h"
#include "plan/util.h"

// The all-to-alls take `rows`: the tokens each member of this rank's group holds in this exchange (the plan's
// shards for Ulysses and USP, one chunk's parts for FPDT); member j's tokens come j-th in the group's order.
static int64_t rows_off(const int64_t *rows, int j) {
  int64_t off = 0;
  for (int i = 0; i < j; i++) off += rows[i];
  return off;
}
static const int64_t *plan_rows(const struct dist_attn *a) { return a->p->layout.rank_count + (int64_t)a->group * a->U; }
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

int ulysses_scatter(struct dist_attn *a, const int64_t *rows, const float *x, int Htot, int kv, float *out, sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d;
  int64_t mine = rows[a->gidx];
  int me_cnt = kv ? kv_heads(a, a->gidx) : q_heads(a, a->gidx);
  a2a_counts k;
  int64_t total = 0;  // replicated KV heads go to several members
  for (int j = 0; j < U; j++) total += kv ? kv_heads(a, j) : q_heads(a, j);
  float *send = malloc(sizeof(float) * (size_t)sr_max64(1, mine * total * d));
  if (!send || counts_alloc(a->c->world, &k)) {
    free(send);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t off = 0;
  for (int j = 0; j < U; j++) {
    int lo = kv ? a->kv_lo[j] : a->h_lo[j], cnt = kv ? kv_heads(a, j) : q_heads(a, j);
    for (int64_t t = 0; t < mine; t++)
      memcpy(send + off + t * cnt * d, x + (t * Htot + lo) * d, sizeof(float) * (size_t)(cnt * d));
    k.sc[base + j] = mine * cnt * d, k.sd[base + j] = off;
    off += mine * cnt * d;
    k.rc[base + j] = rows[j] * me_cnt * d, k.rd[base + j] = rows_off(rows, j) * me_cnt * d;
  }
  int rc = comm_alltoallv(a->c, send, k.sc, k.sd, out, k.rc, k.rd, COMM_F32, e);
  a->st.bytes_sent += (off - k.sc[a->c->rank]) * 4;
  free(send), free(k.sc);
  return rc;
}

int ulysses_gather(struct dist_attn *a, const int64_t *rows, const float *in, int Htot, int kv, int add, float *x,
                   sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d;
  int64_t mine = rows[a->gidx];
  int me_cnt = kv ? kv_heads(a, a->gidx) : q_heads(a, a->gidx);
  a2a_counts k;
  int64_t total = 0;
  for (int j = 0; j < U; j++) total += kv ? kv_heads(a, j) : q_heads(a, j);
  float *recv = malloc(sizeof(float) * (size_t)sr_max64(1, mine * total * d));
  if (!recv || counts_alloc(a->c->world, &k)) {
    free(recv);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t off = 0;
  for (int j = 0; j < U; j++) {
    int cnt = kv ? kv_heads(a, j) : q_heads(a, j);
    k.sc[base + j] = rows[j] * me_cnt * d, k.sd[base + j] = rows_off(rows, j) * me_cnt * d;
    k.rc[base + j] = mine * cnt * d, k.rd[base + j] = off;
    off += mine * cnt * d;
  }
  int rc = comm_alltoallv(a->c, in, k.sc, k.sd, recv, k.rc, k.rd, COMM_F32, e);
  if (rc == SR_OK) {
    if (!add)
      for (int64_t t = 0; t < mine; t++) memset(x + t * Htot * d, 0, sizeof(float) * (size_t)(Htot * d));
    for (int j = 0; j < U; j++) {
      int lo = kv ? a->kv_lo[j] : a->h_lo[j], cnt = kv ? kv_heads(a, j) : q_heads(a, j);
      const float *b = recv + k.rd[base + j];
      for (int64_t t = 0; t < mine; t++)
        for (int64_t x_ = 0; x_ < (int64_t)cnt * d; x_++) x[(t * Htot + lo) * d + x_] += b[t * cnt * d + x_];
    }
  }
  for (int j = 0; j < U; j++) a->st.bytes_sent += j == a->gidx ? 0 : k.sc[base + j] * 4;
  free(recv), free(k.sc);
  return rc;
}

int ulysses_lse(struct dist_attn *a, const int64_t *rows, int64_t ld, const float *from, float *to, int to_group,
                sr_error *e) {
  int U = a->U, base = a->group * U, nh = q_heads(a, a->gidx);
  int64_t mine = rows[a->gidx], n_group = rows_off(rows, U);
  a2a_counts k;
  float *tmp = malloc(sizeof(float) * (size_t)sr_max64(1, sr_max64(n_group * nh, mine * a->H)));
  if (!tmp || counts_alloc(a->c->world, &k)) {
    free(tmp);
    return sr_internal_error(e, 0, "out of memory");
  }
  int rc;
  if (to_group) {  // this rank's [H, mine] (rows ld apart), packed by member first
    int64_t off = 0;
    for (int j = 0; j < U; j++) {
      for (int h = a->h_lo[j]; h < a->h_lo[j + 1]; h++) memcpy(tmp + off + (h - a->h_lo[j]) * mine, from + h * ld,
                                                               sizeof(float) * (size_t)mine);
      k.sc[base + j] = (int64_t)q_heads(a, j) * mine, k.sd[base + j] = off;
      off += k.sc[base + j];
      k.rc[base + j] = nh * rows[j], k.rd[base + j] = nh * rows_off(rows, j);
    }
    float *recv = malloc(sizeof(float) * (size_t)sr_max64(1, n_group * nh));
    rc = recv ? comm_alltoallv(a->c, tmp, k.sc, k.sd, recv, k.rc, k.rd, COMM_F32, e) : sr_internal_error(e, 0, "out of memory");
    for (int j = 0; j < U && rc == SR_OK; j++)
      for (int h = 0; h < nh; h++)
        memcpy(to + h * n_group + rows_off(rows, j), recv + k.rd[base + j] + h * rows[j], sizeof(float) * (size_t)rows[j]);
    free(recv);
  } else {
    for (int j = 0; j < U; j++) {
      k.sc[base + j] = nh * rows[j], k.sd[base + j] = nh * rows_off(rows, j);
      for (int h = 0; h < nh; h++)
        memcpy(tmp + k.sd[base + j] + h * rows[j], from + h * n_group + rows_off(rows, j), sizeof(float) * (size_t)rows[j]);
      k.rc[base + j] = (int64_t)q_heads(a, j) * mine, k.rd[base + j] = (int64_t)a->h_lo[j] * mine;
    }
    float *recv = malloc(sizeof(float) * (size_t)sr_max64(1, mine * a->H));
    rc = recv ? comm_alltoallv(a->c, tmp, k.sc, k.sd, recv, k.rc, k.rd, COMM_F32, e) : sr_internal_error(e, 0, "out of memory");
    for (int h = 0; h < a->H && rc == SR_OK; h++) memcpy(to + h * ld, recv + h * mine, sizeof(float) * (size_t)mine);
    free(recv);
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
  if (ulysses_scatter(a, plan_rows(a), k, a->Hkv, 1, a->kv_own, e)) return e->code;
  return ulysses_scatter(a, plan_rows(a), v, a->Hkv, 1, a->kv_own + plane, e);
}

// ---------------------------------------------------------------------------------------------
// entry points

int dist_attn_fwd(dist_attn *a, const void *q_, const void *k, const void *v, void *o_, float *lse, sr_error *e) {
  if (a->fpdt) return fpdt_fwd(a, q_, k, v, o_, lse, e);
  if (a->be == DIST_CUDA) return dist_attn_cuda_fwd(a, q_, k, v, o_, lse, e);
  double t0 = sr_now();
  const float *q = q_;
  float *o = o_;
  int rc;
  if (a->U == 1) {  // vs-online, moba, token-topk: this forward's selection first (online_vs_cpu.c, online_gate_cpu.c);
                    // adaspa-online: its search on the loaded shards, and the reused mask's recall after
                    // (online_adaspa_cpu.c)
    rc = (a->online_cpu && online_cpu_forward(a, q, k, e)) || (a->gate_cpu && gate_cpu_forward(a, q, k, e)) ||
         load_kv(a, k, v, e) || (a->adaspa && adaspa_cpu_before(a, q, e)) || ring_fwd(a, q, o, lse, e) ||
         (a->adaspa && adaspa_cpu_after(a, lse, e));
  } else {
    double ta = sr_now();
    rc = ulysses_scatter(a, plan_rows(a), q, a->H, 0, a->qg, e) || load_kv(a, k, v, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, 0, PHASE_A2A, a2a_stream(a), ta, sr_now());
    rc = rc || ring_fwd(a, a->qg, a->og, a->lseg, e);
    ta = sr_now();
    rc = rc || ulysses_gather(a, plan_rows(a), a->og, a->H, 0, 0, o, e) ||
         ulysses_lse(a, plan_rows(a), a->n_local, a->lseg, lse, 0, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, a->rp->n_steps - 1, PHASE_A2A, a2a_stream(a), ta, sr_now());
  }
  a->st.bytes_saved += a->saved_fwd;
  a->st.shards_skipped += a->skipped;
  a->st.fwd_s += sr_now() - t0;
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

int dist_attn_bwd(dist_attn *a, const void *q_, const void *k, const void *v, const void *o_, const float *lse,
                  const void *dout_, float *dq, float *dk, float *dv, sr_error *e) {
  if (a->fpdt) return fpdt_bwd(a, q_, k, v, o_, lse, dout_, dq, dk, dv, e);
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
    const int64_t *rows = plan_rows(a);
    rc = ulysses_scatter(a, rows, q, a->H, 0, a->qg, e) || ulysses_scatter(a, rows, o, a->H, 0, a->og, e) ||
         ulysses_scatter(a, rows, dout, a->H, 0, a->dog, e) || ulysses_lse(a, rows, a->n_local, lse, a->lseg, 1, e) ||
         load_kv(a, k, v, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, 0, PHASE_A2A, a2a_stream(a), ta, sr_now());
    if (!rc) memset(a->dqg, 0, sizeof(float) * (size_t)(a->n_q * a->nh * a->d));
    rc = rc || ring_bwd(a, a->qg, a->og, a->lseg, a->dog, a->dqg, a->dkvg, e);
    ta = sr_now();
    rc = rc || ulysses_gather(a, plan_rows(a), a->dqg, a->H, 0, 0, dq, e);
    if (!rc) {  // replicated KV heads: every member's partial dK/dV adds up at the token's owner
      memset(dk, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
      memset(dv, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
    }
    rc = rc || ulysses_gather(a, plan_rows(a), a->dkvg, a->Hkv, 1, 1, dk, e) ||
         ulysses_gather(a, plan_rows(a), a->dkvg + plane, a->Hkv, 1, 1, dv, e);
    if (a->tl) timeline_add(a->tl, a->layer, a->c->rank, a->rp->n_steps - 1, PHASE_A2A, a2a_stream(a), ta, sr_now());
  }
  a->st.bytes_saved += a->saved_bwd;
  a->st.bwd_s += sr_now() - t0;
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

// ulysses_cuda.c — the Ulysses all-to-alls of the CUDA backend (dist_attn_cuda_state.h): ulysses.c's scatter
// (heads out, tokens in), gather (back, replicated KV heads summed) and LSE exchange on device buffers, packed
// and unpacked with strided copies through the workspace's staging buffer, sent as NCCL send/receive groups
// (comm_alltoallv). The ring's Ulysses and USP run them over the plan's shards, FPDT over one chunk's parts.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "exec/dist_cuda.h"

static int64_t rows_off(const int64_t *rows, int j) {
  int64_t off = 0;
  for (int i = 0; i < j; i++) off += rows[i];
  return off;
}
static int q_heads(const struct dist_attn *a, int j) { return a->h_lo[j + 1] - a->h_lo[j]; }
static int kv_heads(const struct dist_attn *a, int j) { return q_heads(a, j) ? a->kv_lo[a->U + j] - a->kv_lo[j] : 0; }
static int heads_of(const struct dist_attn *a, int j, int kv) { return kv ? kv_heads(a, j) : q_heads(a, j); }
static int head_lo(const struct dist_attn *a, int j, int kv) { return kv ? a->kv_lo[j] : a->h_lo[j]; }

// The all-to-all stays inside a node when the group's first and last ranks share one.
static timeline_stream a2a_stream(const struct dist_attn *a) {
  int first = a->group * a->U, last = first + a->U - 1;
  return cluster_node_of(&a->p->cluster, first) == cluster_node_of(&a->p->cluster, last) ? STREAM_INTRA : STREAM_INTER;
}

int dist_cuda_copy2d(struct dist_attn *a, void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t width,
                     int64_t rows, sr_error *e) {
  if (width <= 0 || rows <= 0) return SR_OK;
  CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)dpitch, src, (size_t)spitch, (size_t)width, (size_t)rows,
                             cudaMemcpyDeviceToDevice, CS(a)));
  return SR_OK;
}

// Per-peer counts over the whole world (zero outside the group); freed by the caller.
static int64_t *counts_new(const struct dist_attn *a, sr_error *e) {
  int64_t *k = calloc((size_t)a->c->world * 4, sizeof(int64_t));
  if (!k) sr_internal_error(e, 0, "out of memory");
  return k;
}

int ulysses_cuda_scatter(struct dist_attn *a, const int64_t *rows, void *stage, const void *x, int kv, comm_dtype dt,
                         void *out, sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d, es = comm_dtype_size(dt);
  int Htot = kv ? a->Hkv : a->H, me_cnt = heads_of(a, a->gidx, kv);
  int64_t mine = rows[a->gidx];
  int64_t *k = counts_new(a, e), *sc = k, *sd = k + a->c->world, *rc = sd + a->c->world, *rd = rc + a->c->world;
  if (!k) return e->code;
  int64_t off = 0;
  int r = SR_OK;
  for (int j = 0; j < U && r == SR_OK; j++) {
    int lo = head_lo(a, j, kv), cnt = heads_of(a, j, kv);
    r = dist_cuda_copy2d(a, (char *)stage + off * es, (int64_t)cnt * d * es, (const char *)x + (int64_t)lo * d * es,
                         (int64_t)Htot * d * es, (int64_t)cnt * d * es, mine, e);
    sc[base + j] = mine * cnt * d, sd[base + j] = off;
    off += mine * cnt * d;
    rc[base + j] = rows[j] * me_cnt * d, rd[base + j] = rows_off(rows, j) * me_cnt * d;
  }
  if (r == SR_OK) r = comm_alltoallv(a->c, stage, sc, sd, out, rc, rd, dt, e);
  a->st.bytes_sent += (off - sc[a->c->rank]) * es;
  free(k);
  return r;
}

int ulysses_cuda_gather(struct dist_attn *a, const int64_t *rows, void *stage, const void *in, int kv, comm_dtype dt,
                        int add, void *x, sr_error *e) {
  int U = a->U, base = a->group * U, d = a->d, es = comm_dtype_size(dt);
  int Htot = kv ? a->Hkv : a->H, me_cnt = heads_of(a, a->gidx, kv);
  int64_t mine = rows[a->gidx];
  int64_t *k = counts_new(a, e), *sc = k, *sd = k + a->c->world, *rc = sd + a->c->world, *rd = rc + a->c->world;
  if (!k) return e->code;
  int64_t off = 0;
  for (int j = 0; j < U; j++) {
    int cnt = heads_of(a, j, kv);
    sc[base + j] = rows[j] * me_cnt * d, sd[base + j] = rows_off(rows, j) * me_cnt * d;
    rc[base + j] = mine * cnt * d, rd[base + j] = off;
    off += mine * cnt * d;
  }
  int r = comm_alltoallv(a->c, in, sc, sd, stage, rc, rd, dt, e);
  for (int j = 0; j < U && r == SR_OK; j++) {
    int lo = head_lo(a, j, kv), cnt = heads_of(a, j, kv);
    const char *b = (const char *)stage + rd[base + j] * es;
    if (add) {
      cudaError_t ce = (cudaError_t)dist_cuda_add2d((float *)x + (int64_t)lo * d, (int64_t)Htot * d, (const float *)b,
                                                    (int64_t)cnt * d, mine, (int64_t)cnt * d, CS(a));
      CUDA_TRY(ce);
    } else {
      r = dist_cuda_copy2d(a, (char *)x + (int64_t)lo * d * es, (int64_t)Htot * d * es, b, (int64_t)cnt * d * es,
                           (int64_t)cnt * d * es, mine, e);
    }
  }
  for (int j = 0; j < U; j++) a->st.bytes_sent += j == a->gidx ? 0 : sc[base + j] * es;
  free(k);
  return r;
}

// This rank's LSE rows are [H, mine] with rows ld floats apart: contiguous when ld == mine (the plan's shards),
// a column block of the rank's LSE for an FPDT chunk, packed through the staging buffer then (send part first,
// receive part after it).
int ulysses_cuda_lse(struct dist_attn *a, const int64_t *rows, int64_t ld, void *stage, const float *from, float *to,
                     int to_group, sr_error *e) {
  float *tmp = stage;
  int U = a->U, base = a->group * U, nh = a->nh, W = a->c->world;
  int64_t mine = rows[a->gidx], n_group = rows_off(rows, U), packed = ld == mine ? 0 : mine * a->H;
  int64_t *k = counts_new(a, e), *sc = k, *sd = k + W, *rc = sd + W, *rd = rc + W;
  if (!k) return e->code;
  int r = SR_OK;
  if (to_group) {
    const float *send = from;
    if (packed) {
      r = dist_cuda_copy2d(a, tmp, mine * 4, from, ld * 4, mine * 4, a->H, e);
      send = tmp;
    }
    for (int j = 0; j < U; j++) {
      sc[base + j] = (int64_t)q_heads(a, j) * mine, sd[base + j] = (int64_t)a->h_lo[j] * mine;
      rc[base + j] = nh * rows[j], rd[base + j] = nh * rows_off(rows, j);
    }
    if (r == SR_OK) r = comm_alltoallv(a->c, send, sc, sd, tmp + packed, rc, rd, COMM_F32, e);
    for (int j = 0; j < U && r == SR_OK; j++)
      r = dist_cuda_copy2d(a, to + rows_off(rows, j), n_group * 4, tmp + packed + rd[base + j], rows[j] * 4,
                           rows[j] * 4, nh, e);
  } else {
    for (int j = 0; j < U && r == SR_OK; j++) {
      sc[base + j] = nh * rows[j], sd[base + j] = nh * rows_off(rows, j);
      r = dist_cuda_copy2d(a, tmp + sd[base + j], rows[j] * 4, from + rows_off(rows, j), n_group * 4, rows[j] * 4, nh, e);
      rc[base + j] = (int64_t)q_heads(a, j) * mine, rd[base + j] = (int64_t)a->h_lo[j] * mine;
    }
    float *recv = packed ? tmp + n_group * nh : to;  // the send part holds nh * n_group floats
    if (r == SR_OK) r = comm_alltoallv(a->c, tmp, sc, sd, recv, rc, rd, COMM_F32, e);
    if (r == SR_OK && packed) r = dist_cuda_copy2d(a, to, ld * 4, recv, mine * 4, mine * 4, a->H, e);
  }
  for (int j = 0; j < U; j++) a->st.bytes_sent += j == a->gidx ? 0 : sc[base + j] * 4;
  free(k);
  return r;
}

int ulysses_cuda_open(struct dist_attn *a, cuda_timer *t, int step, sr_error *e) {
  if (!a->tl) return -1;
  cudaEvent_t ev;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return -1;
  cudaEventRecord(ev, CS(a));
  cudaStreamWaitEvent((cudaStream_t)a->c->comm_stream, ev, 0);
  cudaEventDestroy(ev);
  (void)e;
  return cuda_timer_open(a, t, step, PHASE_A2A, a2a_stream(a));
}

#endif

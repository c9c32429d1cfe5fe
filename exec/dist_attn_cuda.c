// dist_attn_cuda.c — the CUDA backend of distributed attention (dist_attn.h): the same ring plan as
// the CPU backend (ring_plan.h), with device copies of the tile indices and masks, bf16 KV shards
// double-buffered in device memory, fp32 dK/dV partial sums, the sparse attention kernels
// (kernels/sparse_attn.h) on the compute stream and NCCL batches on the comm stream (comm.h): the
// batch that brings step s+1's shard is queued before step s's kernels, and the compute stream waits
// on its event only when step s+1 starts, so the transfer runs under the step's compute.
// Ring kinds only (ring, double ring); Ulysses and USP run on the CPU backend.
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_cuda.h"
#include "exec/online_vs_cuda.h"

typedef struct {
  sa_gpu_index ix;
  sa_gpu_index_t *ixt;        // [R] transposed index per source (backward)
  head_mask *masks;           // device masks [H]
  int64_t *qpos, **kpos;      // device positions
  void *kv_own, *kv_buf[2];   // bf16 [2, rows, Hkv, d]
  float *acc[2], *acc_in[2];  // fp32 [2, rows, Hkv, d]
  float *flush[2];            // fp32 flush receive buffers, per step parity: [max_flush][2, n_q, Hkv, d]
  int max_flush;
  float *o_run, *d_row;       // fp32 [n_q, H, d], [H, n_q]
} cuda_state;

#define CS(a) ((cudaStream_t)(a)->c->compute_stream)
#define CUDA_TRY(call)                                                                                   \
  do {                                                                                                   \
    cudaError_t r_ = (call);                                                                             \
    if (r_ != cudaSuccess)                                                                               \
      return sr_internal_error(e, 0, "rank %d: CUDA error %s at %s:%d", a->c->rank, cudaGetErrorString(r_), \
                               __FILE__, __LINE__);                                                      \
  } while (0)

static int64_t rows_of(const struct dist_attn *a, int g) { return a->glay->rank_count[g]; }

// ---------------------------------------------------------------------------------------------
// set-up

int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e) {
  if (a->U != 1)
    return sr_input_error(e, NULL, "--backend", "cuda runs ring and double-ring schedules; run %s with --backend cpu",
                          schedule_kind_name(a->p->schedule.kind));
  if (a->d != 64 && a->d != 128)
    return sr_input_error(e, NULL, "head_dim", "the CUDA kernels take head_dim 64 or 128, the model has %d", a->d);
  cuda_state *s = calloc(1, sizeof *s);
  if (!s) return sr_internal_error(e, 0, "out of memory");
  a->cuda = s;
  int R = a->R;
  s->ixt = calloc((size_t)R, sizeof(sa_gpu_index_t));
  s->kpos = calloc((size_t)R, sizeof(int64_t *));
  if (!s->ixt || !s->kpos) return sr_internal_error(e, 0, "out of memory");
  if (sa_gpu_index_upload(&a->ti, &s->ix, e) || sa_gpu_masks_upload(a->masks, a->H, &s->masks, e)) return e->code;
  for (int g = 0; g < R; g++) {
    tile_index_t tt;
    if (tiles_transpose(&a->ti, g, rows_of(a, g), &tt, e)) return e->code;
    int rc = sa_gpu_index_t_upload(&tt, a->H, a->Hkv, &s->ixt[g], e);
    tiles_transpose_free(&tt);
    if (rc) return rc;
    size_t pb = sizeof(int64_t) * (size_t)sr_max64(1, rows_of(a, g));
    CUDA_TRY(cudaMalloc((void **)&s->kpos[g], pb));
    CUDA_TRY(cudaMemcpy(s->kpos[g], a->kpos[g], sizeof(int64_t) * (size_t)rows_of(a, g), cudaMemcpyHostToDevice));
  }
  s->qpos = s->kpos[a->group];
  // Most flushes any step brings to this rank (ring without skipping: one, at the last step).
  for (int st = 0; st < a->rp.n_steps; st++) {
    int n = 0;
    for (int g = 0; g < R; g++)
      n += g != a->group && a->rp.flush[(int64_t)st * R + g] && a->rp.src[(int64_t)st * R + g] == a->group;
    if (n > s->max_flush) s->max_flush = n;
  }
  int64_t row = (int64_t)a->Hkv * a->d, slot = 2 * sr_max64(1, a->n_kmax) * row, own = 2 * sr_max64(1, a->n_q) * row;
  CUDA_TRY(cudaMalloc(&s->kv_own, (size_t)own * 2));
  for (int i = 0; i < 2; i++) {
    CUDA_TRY(cudaMalloc(&s->kv_buf[i], (size_t)slot * 2));
    CUDA_TRY(cudaMalloc((void **)&s->acc[i], (size_t)slot * 4));
    CUDA_TRY(cudaMalloc((void **)&s->acc_in[i], (size_t)slot * 4));
    if (s->max_flush) CUDA_TRY(cudaMalloc((void **)&s->flush[i], (size_t)(own * s->max_flush) * 4));
  }
  CUDA_TRY(cudaMalloc((void **)&s->o_run, sizeof(float) * (size_t)sr_max64(1, a->n_q * a->H * a->d)));
  CUDA_TRY(cudaMalloc((void **)&s->d_row, sizeof(float) * (size_t)sr_max64(1, a->n_q * a->H)));
  if (online_vs_wanted(a) && online_vs_setup(a, e)) return e->code;
  return SR_OK;
}

void dist_attn_cuda_release(struct dist_attn *a) {
  cuda_state *s = a->cuda;
  if (!s) return;
  cudaDeviceSynchronize();
  online_vs_release(a);
  sa_gpu_index_free(&s->ix);
  if (s->masks) sa_gpu_masks_free(s->masks, a->H);
  for (int g = 0; s->ixt && g < a->R; g++) sa_gpu_index_t_free(&s->ixt[g]);
  for (int g = 0; s->kpos && g < a->R; g++) cudaFree(s->kpos[g]);
  cudaFree(s->kv_own);
  for (int i = 0; i < 2; i++) cudaFree(s->kv_buf[i]), cudaFree(s->acc[i]), cudaFree(s->acc_in[i]), cudaFree(s->flush[i]);
  cudaFree(s->o_run), cudaFree(s->d_row);
  free(s->ixt), free(s->kpos), free(s);
  a->cuda = NULL;
}

// ---------------------------------------------------------------------------------------------
// timing: CUDA events, turned into host times when the call ends

typedef struct {
  int n, cap;
  cudaEvent_t origin;
  double origin_s;
  struct {
    cudaEvent_t a, b;
    int step, stream;
    const char *phase;
  } *ev;
} cuda_timer;

static int timer_start(struct dist_attn *a, cuda_timer *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  if (!a->tl) return SR_OK;
  CUDA_TRY(cudaStreamSynchronize(CS(a)));
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->comm_stream));
  CUDA_TRY(cudaEventCreate(&t->origin));
  t->origin_s = sr_now();  // both streams are idle, so the origin event completes now
  CUDA_TRY(cudaEventRecord(t->origin, CS(a)));
  return SR_OK;
}

// Record the opening event of an interval on stream `stream_id`; returns its slot (-1 when not timing).
static int timer_open(struct dist_attn *a, cuda_timer *t, int step, const char *phase, int stream_id) {
  if (!a->tl) return -1;
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    void *p = realloc(t->ev, sizeof(*t->ev) * (size_t)t->cap);
    if (!p) return -1;
    t->ev = p;
  }
  int i = t->n++;
  cudaEventCreate(&t->ev[i].a);
  cudaEventCreate(&t->ev[i].b);
  t->ev[i].step = step, t->ev[i].stream = stream_id, t->ev[i].phase = phase;
  cudaEventRecord(t->ev[i].a, stream_id != TL_COMPUTE ? (cudaStream_t)a->c->comm_stream : CS(a));
  return i;
}

static void timer_close(struct dist_attn *a, cuda_timer *t, int i) {
  if (i >= 0) cudaEventRecord(t->ev[i].b, t->ev[i].stream != TL_COMPUTE ? (cudaStream_t)a->c->comm_stream : CS(a));
}

static int timer_finish(struct dist_attn *a, cuda_timer *t, sr_error *e) {
  if (!a->tl) return SR_OK;
  CUDA_TRY(cudaStreamSynchronize(CS(a)));
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->comm_stream));
  for (int i = 0; i < t->n; i++) {
    float m0 = 0, m1 = 0;
    cudaEventElapsedTime(&m0, t->origin, t->ev[i].a);
    cudaEventElapsedTime(&m1, t->origin, t->ev[i].b);
    timeline_add(a->tl, a->layer, a->c->rank, t->ev[i].step, t->ev[i].phase, t->ev[i].stream, t->origin_s + m0 * 1e-3,
                 t->origin_s + m1 * 1e-3);
    cudaEventDestroy(t->ev[i].a), cudaEventDestroy(t->ev[i].b);
  }
  cudaEventDestroy(t->origin);
  free(t->ev);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// ring walk

static void maybe_fail(const struct dist_attn *a, int step) {
  if (a->c->rank != a->fail_rank || step != a->fail_step) return;
  if (!a->fail_hang) raise(SIGKILL);
  for (;;) pause();
}

// KV sends of step s (for step s+1) and this rank's receive; returns the receive buffer.
static void *post_kv(struct dist_attn *a, int s, const void *cur, comm_p2p *ops, int *n) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = &a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->Hkv * a->d;
  void *rbuf = NULL;
  if (s + 1 >= rp->n_steps) return NULL;
  int64_t i1 = (int64_t)(s + 1) * R;
  int h = rp->from[i1 + me];
  if (h >= 0) {
    rbuf = cur == st->kv_buf[0] ? st->kv_buf[1] : st->kv_buf[0];
    comm_p2p op = {dist_ring_rank(a, h), 0, rbuf, 2 * rows_of(a, rp->src[i1 + me]) * row, COMM_BF16, 0};
    ops[(*n)++] = op;
  }
  for (int g = 0; g < R; g++) {
    if (g == me || rp->from[i1 + g] != me) continue;
    const void *data = rp->from_own[i1 + g] ? st->kv_own : cur;
    comm_p2p op = {dist_ring_rank(a, g), 1, (void *)data, 2 * rows_of(a, rp->src[i1 + g]) * row, COMM_BF16, 0};
    ops[(*n)++] = op;
  }
  return rbuf;
}

static const void *next_cur(const struct dist_attn *a, int s, const void *cur, void *rbuf) {
  int64_t i1 = (int64_t)(s + 1) * a->R + a->group;
  if (a->rp.from[i1] >= 0) return rbuf;
  if (a->rp.src[i1] == a->group) return ((cuda_state *)a->cuda)->kv_own;
  return cur;
}

// Post a KV batch with its timing interval on the comm stream.
static int start_batch(struct dist_attn *a, cuda_timer *t, int s, const char *phase, comm_p2p *ops, int n,
                       comm_pending *p, sr_error *e) {
  int ti = -1;
  if (n > 0 && a->tl) {
    // The comm stream first waits for the compute queued so far, so the interval starts when the batch can.
    cudaEvent_t ev;
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(ev, CS(a)));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)a->c->comm_stream, ev, 0));
    cudaEventDestroy(ev);
    ti = timer_open(a, t, s, phase, dist_batch_stream(a, ops, n));
  }
  if (comm_p2p_start(a->c, ops, n, p, e)) return e->code;
  timer_close(a, t, ti);
  a->st.bytes_sent += p->bytes_sent;
  return SR_OK;
}

static void pack_own(struct dist_attn *a, const void *k, const void *v, cudaError_t *r) {
  cuda_state *st = a->cuda;
  size_t plane = (size_t)(a->n_q * a->Hkv * a->d) * 2;
  *r = cudaMemcpyAsync(st->kv_own, k, plane, cudaMemcpyDeviceToDevice, CS(a));
  if (*r == cudaSuccess) *r = cudaMemcpyAsync((char *)st->kv_own + plane, v, plane, cudaMemcpyDeviceToDevice, CS(a));
}

int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = &a->rp;
  double t0 = sr_now();
  cuda_timer tm;
  if (timer_start(a, &tm, e)) return e->code;
  cudaError_t r;
  pack_own(a, k, v, &r);
  CUDA_TRY(r);
  CUDA_TRY((cudaError_t)dist_cuda_fill(st->o_run, 0.0f, a->n_q * a->H * a->d, CS(a)));
  CUDA_TRY((cudaError_t)dist_cuda_fill(lse, -INFINITY, a->n_q * a->H, CS(a)));
  const sa_gpu_index *ix = &st->ix;  // vs-online: this forward's estimated pattern instead
  const head_mask *masks = st->masks;
  if (a->online && online_vs_forward(a, q, k, &ix, &masks, e)) return e->code;
  const void *cur = st->kv_own;
  for (int s = 0; s < rp->n_steps; s++) {
    maybe_fail(a, s);
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    void *rbuf = post_kv(a, s, cur, ops, &n);
    comm_pending pend;
    if (start_batch(a, &tm, s, "kv_send", ops, n, &pend, e)) return e->code;
    int src = rp->src[(int64_t)s * a->R + a->group];
    if (src >= 0) {
      sa_shape sh = {a->n_q, rows_of(a, src), a->H, a->Hkv, a->d, a->scale};
      const char *kk = cur, *vv = kk + rows_of(a, src) * a->Hkv * a->d * 2;
      int ti = timer_open(a, &tm, s, "attn", TL_COMPUTE);
      if (sa_fwd(&sh, q, kk, vv, st->qpos, st->kpos[src], ix, src, masks, NULL, NULL, st->o_run, lse, CS(a), e))
        return e->code;
      timer_close(a, &tm, ti);
    }
    if (comm_p2p_wait(a->c, &pend, e)) return e->code;
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
  }
  CUDA_TRY((cudaError_t)dist_cuda_to_bf16(o, st->o_run, a->n_q * a->H * a->d, CS(a)));
  if (timer_finish(a, &tm, e)) return e->code;
  a->st.bytes_saved += a->saved_fwd;
  a->st.shards_skipped += a->skipped;
  a->st.fwd_s += sr_now() - t0;
  return SR_OK;
}

int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = &a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->Hkv * a->d, plane = a->n_q * row;
  double t0 = sr_now();
  cuda_timer tm;
  if (timer_start(a, &tm, e)) return e->code;
  cudaError_t r;
  pack_own(a, k, v, &r);
  CUDA_TRY(r);
  if (sa_bwd_prepare(a->n_q, a->H, a->d, o, dout, st->d_row, CS(a), e)) return e->code;
  CUDA_TRY(cudaMemsetAsync(dq, 0, sizeof(float) * (size_t)(a->n_q * a->H * a->d), CS(a)));
  CUDA_TRY(cudaMemsetAsync(dk, 0, sizeof(float) * (size_t)plane, CS(a)));
  CUDA_TRY(cudaMemsetAsync(dv, 0, sizeof(float) * (size_t)plane, CS(a)));
  const sa_gpu_index *ix = &st->ix;  // vs-online: the last forward's pattern
  const sa_gpu_index_t *ixt = st->ixt;
  const head_mask *masks = st->masks;
  if (a->online && online_vs_backward(a, &ix, &ixt, &masks, e)) return e->code;
  const void *cur = st->kv_own;
  comm_pending apend = {0};
  int p = 0, n_flush_prev = 0, fpar = 0;
  for (int s = 0; s < rp->n_steps; s++) {
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    void *rbuf = post_kv(a, s, cur, ops, &n);
    comm_pending kpend;
    if (start_batch(a, &tm, s, "kv_send", ops, n, &kpend, e)) return e->code;
    int64_t i = (int64_t)s * R + me;
    int src = rp->src[i];
    int64_t elems = src >= 0 ? 2 * rows_of(a, src) * row : 0;
    if (src >= 0) {
      float *P = st->acc[p];
      CUDA_TRY(cudaMemsetAsync(P, 0, sizeof(float) * (size_t)elems, CS(a)));
      sa_shape sh = {a->n_q, rows_of(a, src), a->H, a->Hkv, a->d, a->scale};
      const char *kk = cur, *vv = kk + rows_of(a, src) * row * 2;
      int ti = timer_open(a, &tm, s, "attn_bwd", TL_COMPUTE);
      if (sa_bwd(&sh, q, kk, vv, lse, st->d_row, dout, st->qpos, st->kpos[src], ix, &ixt[src], src, masks, dq,
                 P, P + rows_of(a, src) * row, CS(a), e))
        return e->code;
      timer_close(a, &tm, ti);
    }
    // The accumulators (and flushes) of the previous batch have arrived once the compute stream waits on it.
    if (comm_p2p_wait(a->c, &apend, e)) return e->code;
    for (int f = 0; f < n_flush_prev; f++) {
      const float *fb = st->flush[fpar] + f * 2 * plane;
      CUDA_TRY((cudaError_t)dist_cuda_add(dk, fb, plane, CS(a)));
      CUDA_TRY((cudaError_t)dist_cuda_add(dv, fb + plane, plane, CS(a)));
    }
    n_flush_prev = 0;
    if (src >= 0) {
      int af = rp->acc_from[i];
      if (af == me) CUDA_TRY((cudaError_t)dist_cuda_add(st->acc[p], st->acc[1 - p], elems, CS(a)));
      else if (af >= 0) CUDA_TRY((cudaError_t)dist_cuda_add(st->acc[p], st->acc_in[s % 2], elems, CS(a)));
    }
    // Pass the accumulators on (or home); receive the next step's and the flushes of this step.
    n = 0;
    if (src >= 0) {
      if (s + 1 < rp->n_steps)
        for (int g = 0; g < R; g++)
          if (g != me && rp->acc_from[(int64_t)(s + 1) * R + g] == me) {
            comm_p2p op = {dist_ring_rank(a, g), 1, st->acc[p], elems, COMM_F32, 0};
            ops[n++] = op;
          }
      if (rp->flush[i]) {
        if (src == me) {
          CUDA_TRY((cudaError_t)dist_cuda_add(dk, st->acc[p], plane, CS(a)));
          CUDA_TRY((cudaError_t)dist_cuda_add(dv, st->acc[p] + plane, plane, CS(a)));
        } else {
          comm_p2p op = {dist_ring_rank(a, src), 1, st->acc[p], elems, COMM_F32, 0};
          ops[n++] = op;
        }
      }
    }
    if (s + 1 < rp->n_steps) {
      int64_t i1 = (int64_t)(s + 1) * R + me;
      int af = rp->acc_from[i1];
      if (af >= 0 && af != me) {
        comm_p2p op = {dist_ring_rank(a, af), 0, st->acc_in[(s + 1) % 2], 2 * rows_of(a, rp->src[i1]) * row, COMM_F32, 0};
        ops[n++] = op;
      }
    }
    fpar = s % 2;
    for (int g = 0; g < R; g++)
      if (g != me && rp->flush[(int64_t)s * R + g] && rp->src[(int64_t)s * R + g] == me) {
        comm_p2p op = {dist_ring_rank(a, g), 0, st->flush[fpar] + n_flush_prev * 2 * plane, 2 * plane, COMM_F32, 0};
        ops[n++] = op;
        n_flush_prev++;
      }
    if (start_batch(a, &tm, s, "dkv_send", ops, n, &apend, e)) return e->code;
    if (comm_p2p_wait(a->c, &kpend, e)) return e->code;
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
    if (src >= 0) p = 1 - p;
  }
  if (comm_p2p_wait(a->c, &apend, e)) return e->code;
  for (int f = 0; f < n_flush_prev; f++) {
    const float *fb = st->flush[fpar] + f * 2 * plane;
    CUDA_TRY((cudaError_t)dist_cuda_add(dk, fb, plane, CS(a)));
    CUDA_TRY((cudaError_t)dist_cuda_add(dv, fb + plane, plane, CS(a)));
  }
  if (timer_finish(a, &tm, e)) return e->code;
  a->st.bytes_saved += a->saved_bwd;
  a->st.bwd_s += sr_now() - t0;
  return SR_OK;
}

#else  // no CUDA in this build

int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}
void dist_attn_cuda_release(struct dist_attn *a) {}
int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}
int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}

#endif

// fpdt_cuda.c — FPDT on the CUDA backend (fpdt.h): the chunk indices, transposes, masks and positions on the
// device; chunk i's all-to-alls (ulysses_cuda.c) and kernels (kernels/sparse_attn.h) on the compute stream; with
// offload, the gathered KV chunks copied to pinned host memory on a copy-out stream and fetched back on a
// copy-in stream into two buffers, ordered by events only (the host never waits inside a call):
//   - a chunk's copy to the host starts once its all-to-all (or, on one rank, the caller's K and V) is done
//     (`gathered`, recorded on the compute stream); its event `offloaded[j]` ends it;
//   - the fetch of the k-th fetched pair into buffer k % 2 waits for `freed[k % 2]` (recorded after the compute
//     of pair k-2, the buffer's last reader) and for `offloaded[j]`; it is issued one pair ahead, before the
//     compute of pair k-1 is queued, so it runs under that compute; its event `fetched[k % 2]` gates pair k;
//   - several ranks gather a chunk into one of two staging buffers before it goes to the host: the all-to-all
//     of chunk j waits for `offloaded[j-2]`, the last copy out of that buffer;
//   - a call ends with the compute stream waiting for the last copy out, so the next call (and its timer)
//     starts from idle copy streams and may reuse the pinned buffer.
// The scratch is the process's shared workspace (dist_workspace.h), its pinned host buffer included. The indices go
// up as the ring's do (fpdt_plan.c): compact bars where exact, expanded call by call into the workspace (a query
// chunk's lists before its pairs, a pair's transposed bar_q_idx before its backward), whose bars' scratch every
// pair's backward shares.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/fpdt.h"
#include "exec/dist_workspace.h"
#include "plan/tiles.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "exec/dist_cuda.h"

typedef struct {
  sa_gpu_index *ix, *ix_fwd;   // [u] query chunk i's index (this rank's heads); its forward form (cells 0: none)
  sa_gpu_index_t *ixt;         // [u * u] pair (i, j)'s transposed index, j <= i (backward)
  head_mask *masks;            // device masks [H]
  int64_t **pos;               // [u] device positions of chunk i's tokens
  dist_plan_bytes bytes;       // the above item by item (fpdt_plan_walk), with the workspace's bar terms
  int64_t plan_bytes;          // device bytes of the above
  ws_shape shape;
  int ws_joined;
  cudaStream_t h2d, d2h;       // copy-in (fetches) and copy-out (offloads) streams
  cudaEvent_t *offloaded;      // [u] chunk j's copy to the host done
  cudaEvent_t fetched[2], freed[2], gathered;
  uint8_t *recorded;           // [u] offloaded[j] recorded in this call
  // the workspace's buffers, between acquire and release of a call
  void *qg, *og, *dog, *stage, *kv_all, *kv_buf[2], *kv_stage[2], *host;
  float *dqg, *o_run, *lse_run, *d_row, *dkv;
  float *bar_scratch;          // the bars' partial dK|dV of a pair's backward
  int32_t *bars, *bars_t;      // a compact index's lists, a compact transpose's bar_q_idx, expanded for a chunk / pair
  int64_t fetches;             // pairs fetched in this pass, and issued
  int64_t issued;
} fpdt_cuda;

#define FC(a) ((fpdt_cuda *)(a)->fpdt->cuda)
#define BF 2  // bytes of a bf16 element

// ---------------------------------------------------------------------------------------------
// set-up

static int upload_positions(struct dist_attn *a, fpdt_cuda *s, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  for (int i = 0; i < f->u; i++) {
    size_t b = sizeof(int64_t) * (size_t)sr_max64(1, f->n[i]);
    CUDA_TRY(cudaMalloc((void **)&s->pos[i], b));
    CUDA_TRY(cudaMemcpy(s->pos[i], f->pos[i], b, cudaMemcpyHostToDevice));
  }
  return SR_OK;
}

// fpdt_plan_walk's uploads: query chunk i's index and forward form, pair (i, j)'s transpose (the ring's helpers).
static int put_index(void *arg, int i, const tile_bar_cols *cols, const tile_bar_cols *cols_fwd, sr_error *e) {
  struct dist_attn *a = arg;
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = f->cuda;
  if (dist_cuda_index_put(&f->view[i], cols, &s->ix[i], e)) return e->code;
  if (f->ti_fwd[i].n_runs && dist_cuda_index_put(&f->fwd_view[i], cols_fwd, &s->ix_fwd[i], e)) return e->code;
  return SR_OK;
}

static int put_pair(void *arg, int i, int j, const tile_index_t *tt, const sa_bar_chunks *bc, int compact,
                    sr_error *e) {
  struct dist_attn *a = arg;
  fpdt_cuda *s = a->fpdt->cuda;
  return dist_cuda_transpose_put_as(tt, bc, compact, &s->ixt[(int64_t)i * a->fpdt->u + j], e);
}

static int streams_events(struct dist_attn *a, fpdt_cuda *s, sr_error *e) {
  int u = a->fpdt->u;
  CUDA_TRY(cudaStreamCreateWithFlags(&s->h2d, cudaStreamNonBlocking));
  CUDA_TRY(cudaStreamCreateWithFlags(&s->d2h, cudaStreamNonBlocking));
  for (int j = 0; j < u; j++) CUDA_TRY(cudaEventCreateWithFlags(&s->offloaded[j], cudaEventDisableTiming));
  for (int b = 0; b < 2; b++) {
    CUDA_TRY(cudaEventCreateWithFlags(&s->fetched[b], cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&s->freed[b], cudaEventDisableTiming));
  }
  CUDA_TRY(cudaEventCreateWithFlags(&s->gathered, cudaEventDisableTiming));
  return SR_OK;
}

int fpdt_cuda_setup(struct dist_attn *a, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  if (a->d != 64 && a->d != 128)
    return sr_input_error(e, NULL, "head_dim", "the CUDA kernels take head_dim 64 or 128, the model has %d", a->d);
  fpdt_cuda *s = calloc(1, sizeof *s);
  if (!s) return sr_internal_error(e, 0, "out of memory");
  f->cuda = s;
  int u = f->u;
  s->ix = calloc((size_t)u, sizeof(sa_gpu_index));
  s->ix_fwd = calloc((size_t)u, sizeof(sa_gpu_index));
  s->ixt = calloc((size_t)u * u, sizeof(sa_gpu_index_t));
  s->pos = calloc((size_t)u, sizeof(int64_t *));
  s->offloaded = calloc((size_t)u, sizeof(cudaEvent_t));
  s->recorded = calloc((size_t)u, 1);
  if (!s->ix || !s->ix_fwd || !s->ixt || !s->pos || !s->offloaded || !s->recorded)
    return sr_internal_error(e, 0, "out of memory");
  if (sa_gpu_masks_upload(a->masks, a->H, &s->masks, e)) return e->code;
  fpdt_uploads up = {put_index, put_pair, a};
  int rc;
  if ((rc = upload_positions(a, s, e)) || (rc = fpdt_plan_walk(a, &up, &s->bytes, e)) || (rc = streams_events(a, s, e)))
    return rc;
  s->plan_bytes = dist_plan_bytes_total(&s->bytes);
  // the chunk buffers by the simulator's arithmetic too (kernels/workspace.h): the largest chunk, this rank's
  // largest part of one, every chunk's tokens; the bars' terms of the largest index and pair from the walk
  ws_shape *sh = &s->shape;
  if (ws_shape_of(a->p, a->c->rank, NULL, sh, e)) return e->code;
  sh->bar_scratch = s->bytes.bar_scratch, sh->bars = s->bytes.bars, sh->bars_t = s->bytes.bars_t;
  if (ws_attach(sh, e)) return e->code;
  s->ws_joined = 1;
  return SR_OK;
}

void fpdt_cuda_release(struct dist_attn *a) {
  fpdt_cuda *s = a->fpdt ? a->fpdt->cuda : NULL;
  if (!s) return;
  int u = a->fpdt->u;
  cudaDeviceSynchronize();
  for (int i = 0; s->ix && i < u; i++) {
    if (s->ix[i].cells) sa_gpu_index_free(&s->ix[i]);
    if (s->ix_fwd[i].cells) sa_gpu_index_free(&s->ix_fwd[i]);
    for (int j = 0; j <= i; j++)
      if (s->ixt[(int64_t)i * u + j].dev_bytes) sa_gpu_index_t_free(&s->ixt[(int64_t)i * u + j]);
  }
  for (int i = 0; s->pos && i < u; i++) cudaFree(s->pos[i]);
  if (s->masks) sa_gpu_masks_free(s->masks, a->H);
  if (s->h2d) cudaStreamDestroy(s->h2d);
  if (s->d2h) cudaStreamDestroy(s->d2h);
  for (int j = 0; s->offloaded && j < u; j++)
    if (s->offloaded[j]) cudaEventDestroy(s->offloaded[j]);
  for (int b = 0; b < 2; b++) {
    if (s->fetched[b]) cudaEventDestroy(s->fetched[b]);
    if (s->freed[b]) cudaEventDestroy(s->freed[b]);
  }
  if (s->gathered) cudaEventDestroy(s->gathered);
  if (s->ws_joined) ws_detach();
  free(s->ix), free(s->ix_fwd), free(s->ixt), free(s->pos), free(s->offloaded), free(s->recorded), free(s);
  a->fpdt->cuda = NULL;
}

void fpdt_cuda_bytes(const struct dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes, int64_t *host_bytes) {
  const fpdt_cuda *s = a->fpdt->cuda;
  *plan_bytes = s ? s->plan_bytes : 0;
  *shared_bytes = s ? ws_total_bytes(&s->shape) : 0;
  *host_bytes = s ? ws_host_total_bytes(&s->shape) : 0;
}

int fpdt_cuda_plan_items(const struct dist_attn *a, dist_plan_bytes *out) {
  const fpdt_cuda *s = a->fpdt ? a->fpdt->cuda : NULL;
  if (!s) return 0;
  *out = s->bytes;
  return 1;
}

// ---------------------------------------------------------------------------------------------
// chunks' KV: where they live, their trips to the host and back

typedef struct {
  const char *k, *v;
} kv_ptr;

static int64_t kv_plane_bytes(const struct dist_attn *a, int j) { return a->fpdt->n[j] * a->nkv * a->d * BF; }

static kv_ptr planes(const struct dist_attn *a, const void *base, int j) {
  kv_ptr p = {base, (const char *)base + kv_plane_bytes(a, j)};
  return p;
}

// Chunk j's KV on the GPU without offload: one rank's own K, V rows; the gathered copy for several ranks.
static kv_ptr resident(const struct dist_attn *a, const void *k, const void *v, int j) {
  struct fpdt_state *f = a->fpdt;
  if (f->W == 1) {
    int64_t off = f->loff[j] * a->Hkv * a->d * BF;
    kv_ptr p = {(const char *)k + off, (const char *)v + off};
    return p;
  }
  return planes(a, (char *)FC(a)->kv_all + 2 * f->koff[j] * a->nkv * a->d * BF, j);
}

static char *host_chunk(const struct dist_attn *a, int j) {
  return (char *)FC(a)->host + 2 * a->fpdt->koff[j] * a->nkv * a->d * BF;
}

// Gather chunk j's KV (several ranks: an all-to-all into a staging buffer or its resident slot) and, with
// offload, queue its copy to the host on the copy-out stream. Returns where the chunk now is on the GPU.
static int gather_kv(struct dist_attn *a, cuda_timer *tm, const void *k, const void *v, int j, kv_ptr *out,
                     sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  int64_t plane = kv_plane_bytes(a, j), kd = (int64_t)a->Hkv * a->d * BF;
  const int64_t *rows = f->rows + (int64_t)j * f->W;
  if (f->W == 1) {
    *out = resident(a, k, v, j);
  } else {
    char *dst = f->offload ? s->kv_stage[j % 2] : (char *)s->kv_all + 2 * f->koff[j] * a->nkv * a->d * BF;
    if (f->offload && j >= 2) CUDA_TRY(cudaStreamWaitEvent(CS(a), s->offloaded[j - 2], 0));  // the buffer's last copy
    int ti = ulysses_cuda_open(a, tm, j, e);
    if (ulysses_cuda_scatter(a, rows, s->stage, (const char *)k + f->loff[j] * kd, 1, COMM_BF16, dst, e) ||
        ulysses_cuda_scatter(a, rows, s->stage, (const char *)v + f->loff[j] * kd, 1, COMM_BF16, dst + plane, e))
      return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, tm, ti);
    *out = planes(a, dst, j);
  }
  if (!f->offload) return SR_OK;
  CUDA_TRY(cudaEventRecord(s->gathered, CS(a)));
  CUDA_TRY(cudaStreamWaitEvent(s->d2h, s->gathered, 0));
  int ti = cuda_timer_open_on(a, tm, j, PHASE_D2H, STREAM_COPY_OUT, s->d2h);
  char *h = host_chunk(a, j);
  CUDA_TRY(cudaMemcpyAsync(h, out->k, (size_t)plane, cudaMemcpyDeviceToHost, s->d2h));
  CUDA_TRY(cudaMemcpyAsync(h + plane, out->v, (size_t)plane, cudaMemcpyDeviceToHost, s->d2h));
  cuda_timer_close(a, tm, ti);
  CUDA_TRY(cudaEventRecord(s->offloaded[j], s->d2h));
  s->recorded[j] = 1;
  a->st.host_bytes_out += 2 * plane;
  return SR_OK;
}

// The pass's fetched pairs in compute order (pair k fetches KV chunk fj[k] into buffer k % 2).
typedef struct {
  int n;
  int *fj;
} fetch_list;

// Queue fetch k on the copy-in stream (once: `issued` counts them), after its buffer's last reader and its
// chunk's copy to the host; a chunk whose copy out is not queued yet waits for a later call of this.
static int issue(struct dist_attn *a, cuda_timer *tm, const fetch_list *fl, int64_t k, sr_error *e) {
  fpdt_cuda *s = FC(a);
  for (; s->issued <= k && s->issued < fl->n; s->issued++) {
    int64_t q = s->issued;
    int j = fl->fj[q], b = (int)(q % 2);
    if (!s->recorded[j]) break;
    CUDA_TRY(cudaStreamWaitEvent(s->h2d, s->freed[b], 0));
    CUDA_TRY(cudaStreamWaitEvent(s->h2d, s->offloaded[j], 0));
    int ti = cuda_timer_open_on(a, tm, j, PHASE_H2D, STREAM_COPY, s->h2d);
    CUDA_TRY(cudaMemcpyAsync(s->kv_buf[b], host_chunk(a, j), (size_t)(2 * kv_plane_bytes(a, j)), cudaMemcpyHostToDevice,
                             s->h2d));
    cuda_timer_close(a, tm, ti);
    CUDA_TRY(cudaEventRecord(s->fetched[b], s->h2d));
    a->st.host_bytes_in += 2 * kv_plane_bytes(a, j);
  }
  return SR_OK;
}

// The next fetched pair's KV: its fetch (and the one after it) queued, the compute stream waiting for it.
static int fetch_next(struct dist_attn *a, cuda_timer *tm, const fetch_list *fl, kv_ptr *out, sr_error *e) {
  fpdt_cuda *s = FC(a);
  int64_t k = s->fetches++;
  if (issue(a, tm, fl, k + 1, e)) return e->code;
  if (s->issued <= k) return sr_internal_error(e, 0, "rank %d: FPDT fetch %lld of chunk %d before its offload",
                                               a->c->rank, (long long)k, fl->fj[k]);
  CUDA_TRY(cudaStreamWaitEvent(CS(a), s->fetched[k % 2], 0));
  *out = planes(a, s->kv_buf[k % 2], fl->fj[k]);
  return SR_OK;
}

// After the compute of fetched pair k: its buffer may take the fetch of pair k + 2.
static int release_buffer(struct dist_attn *a, sr_error *e) {
  fpdt_cuda *s = FC(a);
  CUDA_TRY(cudaEventRecord(s->freed[(s->fetches - 1) % 2], CS(a)));
  return SR_OK;
}

static int pass_begin(struct dist_attn *a, fetch_list *fl, int bwd, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  s->fetches = s->issued = 0;
  memset(s->recorded, 0, (size_t)f->u);
  fl->n = 0;
  fl->fj = malloc(sizeof(int) * (size_t)(f->u * (f->u + 1) / 2 + 1));
  if (!fl->fj) return sr_internal_error(e, 0, "out of memory");
  if (!f->offload) return SR_OK;
  for (int x = 0; x < f->u; x++) {  // forward: query chunk i fetches 0..i-1; backward (i = u-1..0): i, then 0..i-1
    int i = bwd ? f->u - 1 - x : x;
    if (bwd) fl->fj[fl->n++] = i;
    for (int j = 0; j < i; j++) fl->fj[fl->n++] = j;
  }
  return SR_OK;
}

// End of a call: the compute stream waits for the last copy out (the copy-in stream's last fetch gated a compute).
static int pass_end(struct dist_attn *a, fetch_list *fl, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  free(fl->fj);
  if (f->offload) CUDA_TRY(cudaStreamWaitEvent(CS(a), FC(a)->offloaded[f->u - 1], 0));
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// forward

static int pair_fwd(struct dist_attn *a, cuda_timer *tm, const void *q, kv_ptr kv, const sa_gpu_index *ix, int i,
                    int j, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  if (a->nh == 0) return SR_OK;
  sa_shape sh = {f->n[i], f->n[j], a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
  int ti = cuda_timer_open(a, tm, i, PHASE_ATTN, STREAM_COMPUTE);
  if (sa_fwd(&sh, q, kv.k, kv.v, s->pos[i], s->pos[j], ix, j, s->masks + a->h_lo[a->gidx], NULL, NULL, s->o_run,
             s->lse_run, CS(a), e))
    return e->code;
  cuda_timer_close(a, tm, ti);
  return SR_OK;
}

// Chunk i's output and LSE back to the rank's rows (bf16 O, fp32 LSE).
static int scatter_out(struct dist_attn *a, cuda_timer *tm, void *o, float *lse, int i, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  int64_t hd = (int64_t)a->H * a->d, mine = f->rows[(int64_t)i * f->W + a->gidx];
  const int64_t *rows = f->rows + (int64_t)i * f->W;
  if (f->W == 1) {
    CUDA_TRY((cudaError_t)dist_cuda_to_bf16((char *)o + f->loff[i] * hd * BF, s->o_run, f->n[i] * hd, CS(a)));
    return dist_cuda_copy2d(a, lse + f->loff[i], a->n_local * 4, s->lse_run, mine * 4, mine * 4, a->H, e);
  }
  CUDA_TRY((cudaError_t)dist_cuda_to_bf16(s->og, s->o_run, f->n[i] * a->nh * a->d, CS(a)));
  int ti = ulysses_cuda_open(a, tm, i, e);
  if (ulysses_cuda_gather(a, rows, s->stage, s->og, 0, COMM_BF16, 0, (char *)o + f->loff[i] * hd * BF, e) ||
      ulysses_cuda_lse(a, rows, a->n_local, s->stage, s->lse_run, lse + f->loff[i], 0, e))
    return e->code ? e->code : SR_EINTERNAL;
  cuda_timer_close(a, tm, ti);
  return SR_OK;
}

static int fwd_pass(struct dist_attn *a, cuda_timer *tm, const void *q, const void *k, const void *v, void *o,
                    float *lse, fetch_list *fl, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  int64_t hd = (int64_t)a->H * a->d;
  for (int i = 0; i < f->u; i++) {
    const int64_t *rows = f->rows + (int64_t)i * f->W;
    const void *qi = (const char *)q + f->loff[i] * hd * BF;
    if (f->W > 1) {
      int ti = ulysses_cuda_open(a, tm, i, e);
      if (ulysses_cuda_scatter(a, rows, s->stage, qi, 0, COMM_BF16, s->qg, e)) return e->code;
      cuda_timer_close(a, tm, ti);
      qi = s->qg;
    }
    kv_ptr own;
    if (gather_kv(a, tm, k, v, i, &own, e)) return e->code;
    if (f->offload && issue(a, tm, fl, 0, e)) return e->code;  // the first fetch, once chunk 0 is on its way out
    CUDA_TRY((cudaError_t)dist_cuda_fill(s->o_run, 0.0f, f->n[i] * a->nh * a->d, CS(a)));
    CUDA_TRY((cudaError_t)dist_cuda_fill(s->lse_run, -INFINITY, f->n[i] * a->nh, CS(a)));
    // the forward form where it has one; compact bars: the chunk's lists written once for its pairs
    const sa_gpu_index *ix = s->ix_fwd[i].cells ? &s->ix_fwd[i] : &s->ix[i];
    sa_gpu_index expanded;
    if (a->nh > 0 && dist_cuda_bars_ready(a, ix, s->bars, s->shape.bars, &expanded, &ix, e)) return e->code;
    if (pair_fwd(a, tm, qi, own, ix, i, i, e)) return e->code;  // the diagonal first: the chunk just gathered
    for (int j = 0; j < i; j++) {
      kv_ptr kv = resident(a, k, v, j);
      if (f->offload && fetch_next(a, tm, fl, &kv, e)) return e->code;
      if (pair_fwd(a, tm, qi, kv, ix, i, j, e) || (f->offload && release_buffer(a, e))) return e->code;
    }
    if (scatter_out(a, tm, o, lse, i, e)) return e->code;
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// backward

typedef struct {
  const void *q, *o, *dout;
  float *dq;
  const sa_gpu_index *ix;  // its index as the kernels take it (compact bars: the lists expanded)
  sa_gpu_index expanded;
} bwd_chunk;

// Query chunk i's q, o, dO, LSE (and a zero dQ) as the kernels take them, and its D = rowsum(dO * O).
static int gather_bwd(struct dist_attn *a, cuda_timer *tm, const void *q, const void *o, const float *lse,
                      const void *dout, float *dq, int i, bwd_chunk *c, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  int64_t hd = (int64_t)a->H * a->d, mine = f->rows[(int64_t)i * f->W + a->gidx], off = f->loff[i] * hd;
  const int64_t *rows = f->rows + (int64_t)i * f->W;
  if (f->W == 1) {
    c->q = (const char *)q + off * BF, c->o = (const char *)o + off * BF, c->dout = (const char *)dout + off * BF;
    c->dq = dq + off;  // zeroed with the whole dQ
    if (dist_cuda_copy2d(a, s->lse_run, mine * 4, lse + f->loff[i], a->n_local * 4, mine * 4, a->H, e)) return e->code;
  } else {
    int ti = ulysses_cuda_open(a, tm, i, e);
    if (ulysses_cuda_scatter(a, rows, s->stage, (const char *)q + off * BF, 0, COMM_BF16, s->qg, e) ||
        ulysses_cuda_scatter(a, rows, s->stage, (const char *)o + off * BF, 0, COMM_BF16, s->og, e) ||
        ulysses_cuda_scatter(a, rows, s->stage, (const char *)dout + off * BF, 0, COMM_BF16, s->dog, e) ||
        ulysses_cuda_lse(a, rows, a->n_local, s->stage, lse + f->loff[i], s->lse_run, 1, e))
      return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, tm, ti);
    CUDA_TRY(cudaMemsetAsync(s->dqg, 0, sizeof(float) * (size_t)(f->n[i] * a->nh * a->d), CS(a)));
    c->q = s->qg, c->o = s->og, c->dout = s->dog, c->dq = s->dqg;
  }
  if (a->nh > 0 && sa_bwd_prepare(f->n[i], a->nh, a->d, c->o, c->dout, s->d_row, CS(a), e)) return e->code;
  // the tile form's lists (the dQ of bars reads them), once for the chunk's pairs
  c->ix = &s->ix[i];
  if (a->nh > 0 && dist_cuda_bars_ready(a, &s->ix[i], s->bars, s->shape.bars, &c->expanded, &c->ix, e)) return e->code;
  return SR_OK;
}

// dQ of chunk i and its dK/dV (final: every later query chunk ran) back to the owners (several ranks).
static int scatter_grads(struct dist_attn *a, cuda_timer *tm, float *dq, float *dk, float *dv, int i, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  if (f->W == 1) return SR_OK;  // accumulated in place
  const int64_t *rows = f->rows + (int64_t)i * f->W;
  int64_t row = (int64_t)a->nkv * a->d, kd = (int64_t)a->Hkv * a->d;
  const float *acc = s->dkv + 2 * f->koff[i] * row;
  int ti = ulysses_cuda_open(a, tm, i, e);
  if (ulysses_cuda_gather(a, rows, s->stage, s->dqg, 0, COMM_F32, 0, dq + f->loff[i] * (int64_t)a->H * a->d, e) ||
      ulysses_cuda_gather(a, rows, s->stage, acc, 1, COMM_F32, 1, dk + f->loff[i] * kd, e) ||
      ulysses_cuda_gather(a, rows, s->stage, acc + f->n[i] * row, 1, COMM_F32, 1, dv + f->loff[i] * kd, e))
    return e->code ? e->code : SR_EINTERNAL;
  cuda_timer_close(a, tm, ti);
  return SR_OK;
}

static int pair_bwd(struct dist_attn *a, cuda_timer *tm, const bwd_chunk *c, kv_ptr kv, int i, int j, float *dk,
                    float *dv, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  if (a->nh == 0) return SR_OK;
  int64_t row = (int64_t)a->nkv * a->d, kd = (int64_t)a->Hkv * a->d;
  float *dkj = f->W > 1 ? s->dkv + 2 * f->koff[j] * row : dk + f->loff[j] * kd;
  float *dvj = f->W > 1 ? dkj + f->n[j] * row : dv + f->loff[j] * kd;
  sa_shape sh = {f->n[i], f->n[j], a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
  // the pair's transpose with the workspace's bars' scratch, its bar keys' query tiles expanded where compact
  sa_gpu_index_t t = s->ixt[(int64_t)i * f->u + j];
  if (dist_cuda_bars_t_ready(a, &t, s->bar_scratch, s->shape.bar_scratch, s->bars_t, s->shape.bars_t, e)) return e->code;
  int ti = cuda_timer_open(a, tm, i, PHASE_ATTN_BWD, STREAM_COMPUTE);
  if (sa_bwd(&sh, c->q, kv.k, kv.v, s->lse_run, s->d_row, c->dout, s->pos[i], s->pos[j], c->ix, &t, j,
             s->masks + a->h_lo[a->gidx], c->dq, dkj, dvj, CS(a), e))
    return e->code;
  cuda_timer_close(a, tm, ti);
  return SR_OK;
}

static int bwd_pass(struct dist_attn *a, cuda_timer *tm, const void *q, const void *k, const void *v, const void *o,
                    const float *lse, const void *dout, float *dq, float *dk, float *dv, fetch_list *fl, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  fpdt_cuda *s = FC(a);
  CUDA_TRY(cudaMemsetAsync(dq, 0, sizeof(float) * (size_t)(a->n_local * a->H * a->d), CS(a)));
  CUDA_TRY(cudaMemsetAsync(dk, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d), CS(a)));
  CUDA_TRY(cudaMemsetAsync(dv, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d), CS(a)));
  if (f->W > 1) CUDA_TRY(cudaMemsetAsync(s->dkv, 0, sizeof(float) * (size_t)(2 * f->koff[f->u] * a->nkv * a->d), CS(a)));
  for (int j = 0; j < f->u; j++) {  // the last query chunk needs every KV chunk
    kv_ptr unused;
    if (gather_kv(a, tm, k, v, j, &unused, e)) return e->code;
  }
  if (f->offload && issue(a, tm, fl, 0, e)) return e->code;
  for (int i = f->u - 1; i >= 0; i--) {
    bwd_chunk c = {0};
    if (gather_bwd(a, tm, q, o, lse, dout, dq, i, &c, e)) return e->code;
    for (int x = 0; x <= i; x++) {
      int j = x == 0 ? i : x - 1;  // its own KV chunk first, then 0..i-1
      kv_ptr kv = resident(a, k, v, j);
      if (f->offload && fetch_next(a, tm, fl, &kv, e)) return e->code;
      if (pair_bwd(a, tm, &c, kv, i, j, dk, dv, e) || (f->offload && release_buffer(a, e))) return e->code;
    }
    if (scatter_grads(a, tm, dq, dk, dv, i, e)) return e->code;
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// calls: the shared workspace is held while a call queues its work

static void scratch_take(fpdt_cuda *s) {
  void *b[WS_COUNT];
  ws_acquire(b);
  s->qg = b[WS_QG], s->og = b[WS_OG], s->dog = b[WS_DOG], s->dqg = b[WS_DQG], s->stage = b[WS_STAGE];
  s->o_run = b[WS_O_RUN], s->lse_run = b[WS_LSEG], s->d_row = b[WS_D_ROW], s->dkv = b[WS_FPDT_DKV];
  s->kv_all = b[WS_FPDT_KV_ALL], s->host = b[WS_FPDT_HOST];
  s->kv_buf[0] = b[WS_FPDT_KV0], s->kv_buf[1] = b[WS_FPDT_KV1];
  s->kv_stage[0] = b[WS_FPDT_STAGE0], s->kv_stage[1] = b[WS_FPDT_STAGE1];
  s->bar_scratch = b[WS_BAR_SCRATCH], s->bars = b[WS_BARS], s->bars_t = b[WS_BARS_T];
}

int fpdt_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  fpdt_cuda *s = FC(a);
  double t0 = sr_now();
  cuda_timer tm;
  fetch_list fl = {0};
  scratch_take(s);
  int rc = cuda_timer_start(a, &tm, e);
  if (!rc && !(rc = pass_begin(a, &fl, 0, e))) {
    rc = fwd_pass(a, &tm, q, k, v, o, lse, &fl, e);
    int rc2 = pass_end(a, &fl, e);
    rc = rc ? rc : rc2;
  }
  if (!rc) rc = cuda_timer_finish(a, &tm, e);
  ws_release();
  a->st.fwd_s += sr_now() - t0;
  return rc;
}

int fpdt_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                  const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  fpdt_cuda *s = FC(a);
  double t0 = sr_now();
  cuda_timer tm;
  fetch_list fl = {0};
  scratch_take(s);
  int rc = cuda_timer_start(a, &tm, e);
  if (!rc && !(rc = pass_begin(a, &fl, 1, e))) {
    rc = bwd_pass(a, &tm, q, k, v, o, lse, dout, dq, dk, dv, &fl, e);
    int rc2 = pass_end(a, &fl, e);
    rc = rc ? rc : rc2;
  }
  if (!rc) rc = cuda_timer_finish(a, &tm, e);
  ws_release();
  a->st.bwd_s += sr_now() - t0;
  return rc;
}

#else  // no CUDA in this build

int fpdt_cuda_setup(struct dist_attn *a, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}
void fpdt_cuda_release(struct dist_attn *a) {}
int fpdt_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  return fpdt_cuda_setup(a, e);
}
int fpdt_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                  const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  return fpdt_cuda_setup(a, e);
}
void fpdt_cuda_bytes(const struct dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes, int64_t *host_bytes) {
  *plan_bytes = *shared_bytes = *host_bytes = 0;
}
int fpdt_cuda_plan_items(const struct dist_attn *a, dist_plan_bytes *out) { return 0; }

#endif

// attn_cuda.c — the GPU half of one-device attention (api.h), built into libsparsering_cuda.so only (the
// Makefile keeps api/*_cuda.c out of the CPU library): the shape's pattern copied to the current device on
// first use and run by the kernels' sa_fwd / sa_bwd (kernels/sparse_attn.h) as one ring step of one rank;
// vs-online estimated on the GPU in every forward (kernels/vs_gpu.h) and converted into an execution form
// that the forward hands to its backward, which transposes it on the GPU (kernels/transpose_gpu.h), as the
// executor's online_vs_cuda.c does for a ring of one. Gated patterns (moba, token-topk) are refused here.
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"
#include "kernels/transpose_gpu.h"
#include "kernels/vs_gpu.h"

int api_has_cuda(void) { return 1; }

#define CU(call)                                                                                           \
  do {                                                                                                     \
    cudaError_t r_ = (call);                                                                               \
    if (r_ != cudaSuccess) return sr_internal_error(e, 0, "attention: %s: %s", #call, cudaGetErrorString(r_)); \
  } while (0)

// The shape's device state, on the device of its first GPU call.
typedef struct {
  int device, heads;
  int64_t *pos;              // device [n] 0..n-1
  // a fixed pattern: its execution form and masks, uploaded once
  int fixed_ready;
  sa_gpu_index ix;
  sa_gpu_index_t ixt;
  head_mask *masks;
  // vs-online: the estimator (shared by every forward of the shape), the layout's tables, the transposer
  int est_ready;
  vs_gpu_est est;
  vs_gpu_layout lay;
  sa_gpu_transposer *tr;
} attn_dev;

struct sr_attn_saved {
  vs_gpu_conv conv;   // the execution form (conv.ix) of the estimate
  uint32_t *bits;     // device [2 * heads * words]: the estimate's verticals, then its slashes
  head_mask *masks;   // device [heads] pointing at bits
};

static void dev_free(void *p) {
  attn_dev *d = p;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != d->device) cudaSetDevice(d->device);
  cudaDeviceSynchronize();
  if (d->fixed_ready) sa_gpu_index_free(&d->ix), sa_gpu_index_t_free(&d->ixt), sa_gpu_masks_free(d->masks, d->heads);
  if (d->est_ready) vs_gpu_est_free(&d->est), vs_gpu_layout_free(&d->lay);
  if (d->tr) sa_gpu_transposer_free(d->tr);
  cudaFree(d->pos);
  free(d);
  if (cur >= 0) cudaSetDevice(cur);
}

// The device state on the current device (made on the first call; a later call on another device is refused).
static int dev_get(sr_attn *a, attn_dev **out, sr_error *e) {
  int cur = -1, count = 0;
  // moba and token-topk select on the host (plan/gating.h); their GPU path is the executor's (online_gate_cuda.c)
  if (a->gated)
    return sr_input_error(e, NULL, "pattern", "'%s' selects its keys from Q and K on the host: the GPU calls run fixed "
                          "and vs-online patterns (sr_attn_forward_cpu runs it)", a->pattern);
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return sr_internal_error(e, 0, "attention: no CUDA device is available");
  CU(cudaGetDevice(&cur));
  attn_dev *d = a->dev;
  if (d) {
    if (d->device != cur)
      return sr_input_error(e, NULL, "device", "the shape's pattern lives on device %d, the call runs on device %d",
                            d->device, cur);
    *out = d;
    return SR_OK;
  }
  if (!(d = calloc(1, sizeof *d))) return sr_internal_error(e, 0, "out of memory");
  d->device = cur, d->heads = a->heads;
  a->dev = d, a->dev_free = dev_free;
  CU(cudaMalloc((void **)&d->pos, sizeof(int64_t) * (size_t)a->n));
  CU(cudaMemcpy(d->pos, a->pos, sizeof(int64_t) * (size_t)a->n, cudaMemcpyHostToDevice));
  *out = d;
  return SR_OK;
}

static int fixed_ready(sr_attn *a, attn_dev *d, sr_error *e) {
  if (d->fixed_ready) return SR_OK;
  if (sa_gpu_index_upload(&a->form.ti, &d->ix, e) || sa_gpu_masks_upload(a->form.masks, a->heads, &d->masks, e) ||
      sa_gpu_index_t_upload(&a->form.tt, a->heads, a->kv_heads, &d->ixt, e))
    return e->code;
  d->fixed_ready = 1;
  return SR_OK;
}

static int est_ready(sr_attn *a, attn_dev *d, sr_error *e) {
  if (d->est_ready) return SR_OK;
  if (vs_gpu_est_init(&d->est, a->heads, a->kv_heads, a->head_dim, attn_est_queries(a), a->n, a->n, a->scale, e) ||
      vs_gpu_layout_init(&a->lay, &d->lay, e) || sa_gpu_transposer_new(1, &d->tr, e))
    return e->code;
  d->est_ready = 1;
  return SR_OK;
}

// The estimate's passes over all keys: the last queries of q against k, then the selection.
static int estimate(sr_attn *a, attn_dev *d, const void *q, const void *k, void *stream, sr_error *e) {
  int32_t nq = attn_est_queries(a);
  const char *q_est = (const char *)q + 2 * (size_t)((a->n - nq) * a->heads * a->head_dim);
  if (est_ready(a, d, e) || vs_gpu_est_reset(&d->est, stream, e) ||
      vs_gpu_rowmax(&d->est, q_est, d->pos + (a->n - nq), k, d->pos, a->n, stream, e) ||
      vs_gpu_rowsum(&d->est, stream, e) || vs_gpu_scores(&d->est, d->pos + (a->n - nq), d->pos, stream, e) ||
      vs_gpu_select(&d->est, &a->opts, stream, e))
    return e->code;
  return SR_OK;
}

void sr_attn_saved_free(sr_attn_saved *s) {
  if (!s) return;
  cudaDeviceSynchronize();
  vs_gpu_conv_free(&s->conv);
  cudaFree(s->bits);
  cudaFree(s->masks);
  free(s);
}

// This forward's estimate as an execution form of its own, with a copy of its bits, for the backward.
static int saved_make(sr_attn *a, attn_dev *d, void *stream, sr_attn_saved **out, sr_error *e) {
  sr_attn_saved *s = calloc(1, sizeof *s);
  if (!s) return sr_internal_error(e, 0, "out of memory");
  *out = s;
  size_t plane = sizeof(uint32_t) * (size_t)(a->heads * d->est.words);
  if (vs_gpu_conv_init(&s->conv, &d->est, &d->lay, 0, e) || vs_gpu_convert(&s->conv, &d->est, &d->lay, stream, e))
    return e->code;
  CU(cudaMalloc((void **)&s->bits, 2 * plane));
  CU(cudaMemcpyAsync(s->bits, d->est.vbits, plane, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  CU(cudaMemcpyAsync((char *)s->bits + plane, d->est.sbits, plane, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  vs_gpu_est view = d->est;  // vs_gpu_masks over the copy
  view.vbits = s->bits, view.sbits = (uint32_t *)((char *)s->bits + plane);
  return vs_gpu_masks(&view, &s->masks, e);
}

static sa_shape shape_of(const sr_attn *a) {
  sa_shape s = {a->n, a->n, a->heads, a->kv_heads, a->head_dim, a->scale, 0};
  return s;
}

int sr_attn_forward(sr_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, void *stream,
                    sr_attn_saved **saved, char **err) {
  sr_error e;
  sr_error_clear(&e);
  attn_dev *d;
  sr_attn_saved *s = NULL;
  if (saved) *saved = NULL;
  sa_shape sh = shape_of(a);
  int rc = dev_get(a, &d, &e);
  if (!rc && !a->online) {
    if (!(rc = fixed_ready(a, d, &e)))
      rc = sa_fwd(&sh, q, k, v, d->pos, d->pos, &d->ix, 0, d->masks, o, lse, NULL, NULL, stream, &e);
  } else if (!rc) {
    if (!(rc = estimate(a, d, q, k, stream, &e)) && !(rc = saved_make(a, d, stream, &s, &e)))
      rc = sa_fwd(&sh, q, k, v, d->pos, d->pos, &s->conv.ix, 0, s->masks, o, lse, NULL, NULL, stream, &e);
  }
  if (!rc && saved) *saved = s;
  else sr_attn_saved_free(s);
  return rc ? api_fail(&e, err) : SR_OK;
}

int sr_attn_backward(sr_attn *a, const sr_attn_saved *saved, const void *q, const void *k, const void *v,
                     const void *o, const float *lse, const void *dout, float *d_row, float *dq, float *dk, float *dv,
                     int deterministic, void *stream, char **err) {
  sr_error e;
  sr_error_clear(&e);
  attn_dev *d;
  sa_shape sh = shape_of(a);
  sh.deterministic = deterministic != 0;  // the kernels' choice of backward (kernels/sparse_attn.h)
  cudaStream_t st = (cudaStream_t)stream;
  const sa_gpu_index *ix = NULL;
  const sa_gpu_index_t *ixt = NULL;
  const head_mask *masks = NULL;
  int rc = dev_get(a, &d, &e);
  if (!rc && a->online && !saved)
    rc = sr_input_error(&e, NULL, "saved", "an online pattern's backward needs what its forward saved");
  if (!rc && !a->online && !(rc = fixed_ready(a, d, &e))) ix = &d->ix, ixt = &d->ixt, masks = d->masks;
  if (!rc && a->online && !(rc = est_ready(a, d, &e)) &&
      !(rc = sa_gpu_transpose(d->tr, &saved->conv.ix.d, 0, a->n, a->heads, a->kv_heads, stream, &ixt, &e)))
    ix = &saved->conv.ix, masks = saved->masks;
  if (!rc) {
    size_t qb = sizeof(float) * (size_t)(a->n * a->heads * a->head_dim), kb = sizeof(float) * (size_t)(a->n * a->kv_heads * a->head_dim);
    cudaError_t r = cudaMemsetAsync(dq, 0, qb, st);
    if (r == cudaSuccess) r = cudaMemsetAsync(dk, 0, kb, st);
    if (r == cudaSuccess) r = cudaMemsetAsync(dv, 0, kb, st);
    if (r != cudaSuccess) rc = sr_internal_error(&e, 0, "attention: clearing the gradients: %s", cudaGetErrorString(r));
  }
  if (!rc) rc = sa_bwd_prepare(a->n, a->heads, a->head_dim, o, dout, d_row, stream, &e);
  if (!rc) rc = sa_bwd(&sh, q, k, v, lse, d_row, dout, d->pos, d->pos, ix, ixt, 0, masks, dq, dk, dv, stream, &e);
  return rc ? api_fail(&e, err) : SR_OK;
}

int sr_attn_estimate(sr_attn *a, const void *q, const void *k, void *stream, uint32_t *vbits, uint32_t *sbits,
                     char **err) {
  sr_error e;
  sr_error_clear(&e);
  attn_dev *d;
  if (!a->online) {
    sr_input_error(&e, NULL, "pattern", "'%s' is not estimated (vs-online:P is)", a->pattern);
    return api_fail(&e, err);
  }
  int rc = dev_get(a, &d, &e);
  if (!rc) rc = estimate(a, d, q, k, stream, &e);
  if (!rc) {
    size_t plane = sizeof(uint32_t) * (size_t)(a->heads * d->est.words);
    cudaError_t r = cudaStreamSynchronize((cudaStream_t)stream);
    if (r == cudaSuccess) r = cudaMemcpy(vbits, d->est.vbits, plane, cudaMemcpyDeviceToHost);
    if (r == cudaSuccess) r = cudaMemcpy(sbits, d->est.sbits, plane, cudaMemcpyDeviceToHost);
    if (r != cudaSuccess) rc = sr_internal_error(&e, 0, "attention: estimate: %s", cudaGetErrorString(r));
  }
  return rc ? api_fail(&e, err) : SR_OK;
}

#endif

// exec_dev.c — device tensors of the executor commands (exec_dev.h).
#include "exec/exec_dev.h"

#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

// Round to nearest even: the same bf16 conversion the GPU's __float2bfloat16_rn does.
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int cuda_err(cudaError_t r, const char *what, sr_error *e) {
  return sr_internal_error(e, 0, "%s: CUDA error %s", what, cudaGetErrorString(r));
}

int exec_dev_alloc(exec_dev *x, int64_t n, int H, int Hkv, int d, sr_error *e) {
  memset(x, 0, sizeof *x);
  x->n = n, x->H = H, x->Hkv = Hkv, x->d = d;
  size_t qn = (size_t)(n > 0 ? n : 1) * H * d, kn = (size_t)(n > 0 ? n : 1) * Hkv * d;
  void **b16[5] = {&x->q, &x->k, &x->v, &x->o, &x->dout};
  size_t n16[5] = {qn, kn, kn, qn, qn};
  for (int i = 0; i < 5; i++) {
    cudaError_t r = cudaMalloc(b16[i], n16[i] * 2);
    if (r != cudaSuccess) return cuda_err(r, "cudaMalloc", e);
  }
  float **b32[4] = {&x->lse, &x->dq, &x->dk, &x->dv};
  size_t n32[4] = {(size_t)(n > 0 ? n : 1) * H, qn, kn, kn};
  for (int i = 0; i < 4; i++) {
    cudaError_t r = cudaMalloc((void **)b32[i], n32[i] * 4);
    if (r != cudaSuccess) return cuda_err(r, "cudaMalloc", e);
  }
  return SR_OK;
}

// The conversion in chunks over the host's threads (a 512K-token layer's Q is 1.07e9 elements).
#define CONVERT_CHUNK ((size_t)1 << 22)
typedef struct {
  const float *src;
  uint16_t *h;
  size_t n;
} convert_ctx;

static int convert_item(void *ctx, int item, int thread, sr_error *e) {
  const convert_ctx *c = ctx;
  size_t i0 = (size_t)item * CONVERT_CHUNK, i1 = i0 + CONVERT_CHUNK < c->n ? i0 + CONVERT_CHUNK : c->n;
  for (size_t i = i0; i < i1; i++) c->h[i] = to_bf16(c->src[i]);
  return SR_OK;
}

// h: the staging buffer (n elements at least); the copy is synchronous, so the next tensor may reuse it.
static int upload16(void *dst, const float *src, size_t n, uint16_t *h, sr_error *e) {
  convert_ctx c = {src, h, n};
  if (n && sr_parallel_for((int)((n + CONVERT_CHUNK - 1) / CONVERT_CHUNK), sr_threads(), convert_item, &c, e))
    return e->code;
  cudaError_t r = cudaMemcpy(dst, h, 2 * n, cudaMemcpyHostToDevice);
  return r == cudaSuccess ? SR_OK : cuda_err(r, "upload", e);
}

int exec_dev_upload(exec_dev *x, const float *q, const float *k, const float *v, const float *dout, sr_error *e) {
  size_t qn = (size_t)x->n * x->H * x->d, kn = (size_t)x->n * x->Hkv * x->d;
  // One staging buffer for every upload of the run (a layer's Q at 512K tokens on 4 ranks is 512 MiB of bf16: made
  // anew for each tensor, its pages were faulted in again four times a layer).
  if (!x->stage && !(x->stage = malloc(2 * (qn > kn ? qn : kn) + 2))) return sr_internal_error(e, 0, "out of memory");
  if (upload16(x->q, q, qn, x->stage, e) || upload16(x->k, k, kn, x->stage, e) || upload16(x->v, v, kn, x->stage, e) ||
      upload16(x->dout, dout, qn, x->stage, e))
    return e->code;
  return SR_OK;
}

int exec_dev_download(exec_dev *x, float *o, float *lse, float *dq, float *dk, float *dv, sr_error *e) {
  size_t qn = (size_t)x->n * x->H * x->d, kn = (size_t)x->n * x->Hkv * x->d;
  uint16_t *h = malloc(2 * (qn ? qn : 1));
  if (!h) return sr_internal_error(e, 0, "out of memory");
  cudaError_t r = cudaMemcpy(h, x->o, 2 * qn, cudaMemcpyDeviceToHost);
  for (size_t i = 0; r == cudaSuccess && i < qn; i++) o[i] = from_bf16(h[i]);
  free(h);
  if (r == cudaSuccess) r = cudaMemcpy(lse, x->lse, 4 * (size_t)x->n * x->H, cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) r = cudaMemcpy(dq, x->dq, 4 * qn, cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) r = cudaMemcpy(dk, x->dk, 4 * kn, cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) r = cudaMemcpy(dv, x->dv, 4 * kn, cudaMemcpyDeviceToHost);
  return r == cudaSuccess ? SR_OK : cuda_err(r, "download", e);
}

int exec_dev_memory(int64_t *used, int64_t *total, sr_error *e) {
  size_t f = 0, t = 0;
  cudaError_t r = cudaMemGetInfo(&f, &t);
  if (r != cudaSuccess) return cuda_err(r, "cudaMemGetInfo", e);
  *used = (int64_t)(t - f), *total = (int64_t)t;
  return SR_OK;
}

void exec_dev_free(exec_dev *x) {
  void *all[9] = {x->q, x->k, x->v, x->o, x->dout, x->lse, x->dq, x->dk, x->dv};
  for (int i = 0; i < 9; i++)
    if (all[i]) cudaFree(all[i]);
  free(x->stage);
  memset(x, 0, sizeof *x);
}

#else

int exec_dev_alloc(exec_dev *x, int64_t n, int H, int Hkv, int d, sr_error *e) {
  memset(x, 0, sizeof *x);
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}
int exec_dev_upload(exec_dev *x, const float *q, const float *k, const float *v, const float *dout, sr_error *e) {
  return exec_dev_alloc(x, 0, 0, 0, 0, e);
}
int exec_dev_download(exec_dev *x, float *o, float *lse, float *dq, float *dk, float *dv, sr_error *e) {
  return exec_dev_alloc(x, 0, 0, 0, 0, e);
}
void exec_dev_free(exec_dev *x) {}
int exec_dev_memory(int64_t *used, int64_t *total, sr_error *e) {
  *used = *total = 0;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}

#endif

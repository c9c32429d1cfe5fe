// model_cuda_ops.cu — the GPU model's fused kernels one at a time on host arrays (model_cuda_ops.h), for
// train-gpu-check: each call copies its inputs to the device (in the operands' dtype), runs the kernel on the
// default stream, waits, and copies the outputs back as floats.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "train/model_cuda_ops.h"
#include "plan/util.h"
}
#include "train/model_cuda_kernels.cuh"

#define OPS_CU(call)                                                                                   \
  do {                                                                                                 \
    cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess) {                                                                         \
      rc = sr_internal_error(e, 0, "%s:%d: CUDA: %s", __FILE__, __LINE__, cudaGetErrorString(err_));   \
      goto done;                                                                                       \
    }                                                                                                  \
  } while (0)

// Device buffers of one call, freed together.
typedef struct {
  void *p[12];
  int n;
} bufs;

static void bufs_free(bufs *b) {
  for (int i = 0; i < b->n; i++) cudaFree(b->p[i]);
  b->n = 0;
}

// A device copy of n host floats (NULL: n zeros... none) in fp32 or, with bf16, rounded to bf16.
static cudaError_t up(bufs *b, void **dev, const float *host, int64_t n, int bf16) {
  size_t es = bf16 ? 2 : 4, bytes = (size_t)(n > 0 ? n : 1) * es;
  *dev = NULL;
  cudaError_t r = cudaMalloc(dev, bytes);
  if (r != cudaSuccess) return r;
  b->p[b->n++] = *dev;
  if (!host || n <= 0) return cudaMemset(*dev, 0, bytes);
  if (!bf16) return cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice);
  __nv_bfloat16 *t = (__nv_bfloat16 *)malloc(bytes);
  if (!t) return cudaErrorMemoryAllocation;
  for (int64_t i = 0; i < n; i++) t[i] = __float2bfloat16(host[i]);
  r = cudaMemcpy(*dev, t, bytes, cudaMemcpyHostToDevice);
  free(t);
  return r;
}

// n values of a device array (fp32, or bf16) into host floats.
static cudaError_t down(float *host, const void *dev, int64_t n, int bf16) {
  if (n <= 0) return cudaSuccess;
  if (!bf16) return cudaMemcpy(host, dev, (size_t)n * 4, cudaMemcpyDeviceToHost);
  __nv_bfloat16 *t = (__nv_bfloat16 *)malloc((size_t)n * 2);
  if (!t) return cudaErrorMemoryAllocation;
  cudaError_t r = cudaMemcpy(t, dev, (size_t)n * 2, cudaMemcpyDeviceToHost);
  for (int64_t i = 0; r == cudaSuccess && i < n; i++) host[i] = __bfloat162float(t[i]);
  free(t);
  return r;
}

// Positions as the kernels read them (long long).
static cudaError_t up_pos(bufs *b, long long **dev, const int64_t *pos, int64_t T) {
  cudaError_t r = cudaMalloc((void **)dev, sizeof(long long) * (size_t)(T > 0 ? T : 1));
  if (r != cudaSuccess) return r;
  b->p[b->n++] = *dev;
  return cudaMemcpy(*dev, pos, sizeof(long long) * (size_t)T, cudaMemcpyHostToDevice);
}

extern "C" int model_cuda_op_rmsnorm_fwd(int act_bf16, const float *x, const float *w, int64_t T, int C, float eps,
                                         float *out, float *rstd, sr_error *e) {
  bufs b = {{0}, 0};
  void *dx, *dw, *dout, *dr, *dcopy;
  int rc = SR_OK;
  OPS_CU(up(&b, &dx, x, T * C, 0));
  OPS_CU(up(&b, &dw, w, C, 0));
  OPS_CU(up(&b, &dout, NULL, T * C, act_bf16));
  OPS_CU(up(&b, &dr, NULL, T, 0));
  OPS_CU(up(&b, &dcopy, NULL, T * C, 0));
  rmsnorm_fwd_run(act_bf16, dout, (float *)dr, (float *)dcopy, (const float *)dx, (const float *)dw, T, C, eps, 0);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(out, dout, T * C, act_bf16));
  OPS_CU(down(rstd, dr, T, 0));
  {  // the residual copy must be x itself
    float *copy = (float *)malloc(sizeof(float) * (size_t)(T * C + 1));
    if (!copy) {
      rc = sr_internal_error(e, 0, "out of memory");
      goto done;
    }
    cudaError_t r = down(copy, dcopy, T * C, 0);
    int same = r == cudaSuccess && (T * C == 0 || memcmp(copy, x, sizeof(float) * (size_t)(T * C)) == 0);
    free(copy);
    OPS_CU(r);
    if (!same) rc = sr_internal_error(e, 0, "rmsnorm: the residual copy differs from its input");
  }
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_rmsnorm_bwd(int act_bf16, float *dx, float *dx_act, float *dw, const float *dout,
                                         const float *x, const float *w, const float *rstd, int64_t T, int C,
                                         sr_error *e) {
  bufs b = {{0}, 0};
  void *ddx, *dact, *ddw, *dtmp, *ddout, *dxx, *dwt, *dr;
  int rc = SR_OK, sums = 0;
  OPS_CU(up(&b, &ddx, dx, T * C, 0));
  OPS_CU(up(&b, &dact, NULL, T * C, act_bf16));
  OPS_CU(up(&b, &ddw, dw, C, 0));
  OPS_CU(up(&b, &dtmp, NULL, T * C, 0));
  OPS_CU(up(&b, &ddout, dout, T * C, 0));
  OPS_CU(up(&b, &dxx, x, T * C, 0));
  OPS_CU(up(&b, &dwt, w, C, 0));
  OPS_CU(up(&b, &dr, rstd, T, 0));
  rmsnorm_bwd_run(act_bf16, (float *)ddx, dact, (float *)ddw, (float *)dtmp, (const float *)ddout, (const float *)dxx,
                  (const float *)dwt, (const float *)dr, T, C, 0, &sums);
  if (sums) colsum_k<<<dim3((unsigned)((C + 31) / 32), 1), dim3(32, 8)>>>((float *)ddw, (const float *)dtmp, T, C, T, C);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(dx, ddx, T * C, 0));
  OPS_CU(down(dx_act, dact, T * C, act_bf16));
  OPS_CU(down(dw, ddw, C, 0));
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_qkv_post(const float *qkv, const float *bq, const float *bk, const float *bv,
                                      const float *cosv, const float *sinv, const int64_t *pos, int64_t logn_len,
                                      int64_t T, int Hq, int Hkv, int D, float *q, float *k, float *v, sr_error *e) {
  bufs b = {{0}, 0};
  int64_t QD = (int64_t)Hq * D, KD = (int64_t)Hkv * D, half = D / 2;
  void *dqkv, *dbq = NULL, *dbk = NULL, *dbv = NULL, *dc, *ds, *dq, *dk, *dv;
  long long *dp;
  int rc = SR_OK;
  OPS_CU(up(&b, &dqkv, qkv, T * (QD + 2 * KD), 0));
  if (bq) OPS_CU(up(&b, &dbq, bq, QD, 0));
  if (bk) OPS_CU(up(&b, &dbk, bk, KD, 0));
  if (bv) OPS_CU(up(&b, &dbv, bv, KD, 0));
  OPS_CU(up(&b, &dc, cosv, T * half, 0));
  OPS_CU(up(&b, &ds, sinv, T * half, 0));
  OPS_CU(up_pos(&b, &dp, pos, T));
  OPS_CU(up(&b, &dq, NULL, T * QD, 1));
  OPS_CU(up(&b, &dk, NULL, T * KD, 1));
  OPS_CU(up(&b, &dv, NULL, T * KD, 1));
  qkv_post_k<<<T > 0 ? (unsigned)T : 1u, 256>>>((__nv_bfloat16 *)dq, (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv,
                                                (const float *)dqkv, (const float *)dbq, (const float *)dbk,
                                                (const float *)dbv, (const float *)dc, (const float *)ds, dp, logn_len,
                                                T, Hq, Hkv, D);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(q, dq, T * QD, 1));
  OPS_CU(down(k, dk, T * KD, 1));
  OPS_CU(down(v, dv, T * KD, 1));
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_qkv_bwd_post(int act_bf16, float *dq, float *dk, const float *dv, const float *cosv,
                                          const float *sinv, const int64_t *pos, int64_t logn_len, int64_t T, int Hq,
                                          int Hkv, int D, float *dqkv, sr_error *e) {
  bufs b = {{0}, 0};
  int64_t QD = (int64_t)Hq * D, KD = (int64_t)Hkv * D, half = D / 2;
  void *ddq, *ddk, *ddv, *dc, *ds, *dout;
  long long *dp;
  int rc = SR_OK;
  OPS_CU(up(&b, &ddq, dq, T * QD, 0));
  OPS_CU(up(&b, &ddk, dk, T * KD, 0));
  OPS_CU(up(&b, &ddv, dv, T * KD, 0));
  OPS_CU(up(&b, &dc, cosv, T * half, 0));
  OPS_CU(up(&b, &ds, sinv, T * half, 0));
  OPS_CU(up_pos(&b, &dp, pos, T));
  OPS_CU(up(&b, &dout, NULL, T * (QD + 2 * KD), act_bf16));
  qkv_bwd_post_run(act_bf16, dout, (float *)ddq, (float *)ddk, (const float *)ddv, (const float *)dc, (const float *)ds,
                   dp, logn_len, T, Hq, Hkv, D, 0);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(dq, ddq, T * QD, 0));
  OPS_CU(down(dk, ddk, T * KD, 0));
  OPS_CU(down(dqkv, dout, T * (QD + 2 * KD), act_bf16));
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_swiglu_fwd(int act_bf16, const float *gu, int64_t T, int I, float *h, sr_error *e) {
  bufs b = {{0}, 0};
  void *dgu, *dh;
  int rc = SR_OK;
  OPS_CU(up(&b, &dgu, gu, T * 2 * I, act_bf16));
  OPS_CU(up(&b, &dh, NULL, T * I, act_bf16));
  swiglu_fwd_run(act_bf16, dh, dgu, T, I, 0);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(h, dh, T * I, act_bf16));
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_swiglu_bwd(int act_bf16, const float *dh, const float *gu, int64_t T, int I, float *dgu,
                                        sr_error *e) {
  bufs b = {{0}, 0};
  void *ddh, *dgu_d;
  int rc = SR_OK;
  OPS_CU(up(&b, &ddh, dh, T * I, act_bf16));
  OPS_CU(up(&b, &dgu_d, gu, T * 2 * I, act_bf16));
  swiglu_bwd_run(act_bf16, dgu_d, ddh, dgu_d, T, I, 0);  // in place, as the model runs it
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(dgu, dgu_d, T * 2 * I, act_bf16));
done:
  bufs_free(&b);
  return rc;
}

extern "C" int model_cuda_op_cross_entropy(int act_bf16, float *logits, int64_t rows, int V, const int32_t *targets,
                                           float scale, int grads, float *losses, int32_t *argmax, sr_error *e) {
  bufs b = {{0}, 0};
  void *dl, *dloss;
  int *dt = NULL, *da = NULL;
  int rc = SR_OK;
  OPS_CU(up(&b, &dl, logits, rows * V, act_bf16));
  OPS_CU(up(&b, &dloss, NULL, rows, 0));
  OPS_CU(cudaMalloc((void **)&dt, sizeof(int) * (size_t)(rows > 0 ? rows : 1)));
  b.p[b.n++] = dt;
  OPS_CU(cudaMalloc((void **)&da, sizeof(int) * (size_t)(rows > 0 ? rows : 1)));
  b.p[b.n++] = da;
  OPS_CU(cudaMemcpy(dt, targets, sizeof(int) * (size_t)rows, cudaMemcpyHostToDevice));
  cross_entropy_run(act_bf16, dl, rows, V, dt, scale, grads, (float *)dloss, da, 0);
  OPS_CU(cudaGetLastError());
  OPS_CU(cudaDeviceSynchronize());
  OPS_CU(down(losses, dloss, rows, 0));
  OPS_CU(cudaMemcpy(argmax, da, sizeof(int) * (size_t)rows, cudaMemcpyDeviceToHost));
  if (grads) OPS_CU(down(logits, dl, rows * V, act_bf16));
done:
  bufs_free(&b);
  return rc;
}

// calib_kernels.c — kernel efficiencies for calibration (calibrate.h): cuBLAS bf16 GEMMs of a
// transformer layer's shapes, and the sparse attention kernels on synthetic tile indices holding one
// kind of tile each, timed with CUDA events.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calibrate.h"

#if SR_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/calib_attn.h"

#define CK(call, what)                                                                          \
  do {                                                                                          \
    cudaError_t r_ = (call);                                                                    \
    if (r_ != cudaSuccess) return sr_internal_error(e, 0, "%s: CUDA error %s", what, cudaGetErrorString(r_)); \
  } while (0)

// n bf16 values uniform in [-1, 1) into device memory (a splitmix64 stream from seed; 1M values a copy). The
// GEMMs are timed on such operands, not on zeros: a tensor-core product of zeros draws less power, so the GPU
// holds higher clocks than on real data and the calibration overstates the trainer's GEMM rate (on one H100
// the exec trainer's non-attention work ran at about 680 TFLOP/s where a zero-operand calibration said 869,
// results/sim/2026-11-27-train-step-model).
static int fill_bf16_uniform(void *dev, size_t n, uint64_t seed, sr_error *e) {
  enum { CHUNK = 1 << 20 };
  uint16_t *h = malloc(sizeof(uint16_t) * CHUNK);
  if (!h) return sr_internal_error(e, 0, "out of memory");
  for (size_t at = 0; at < n; at += CHUNK) {
    size_t m = n - at < CHUNK ? n - at : CHUNK;
    for (size_t i = 0; i < m; i++) {
      uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      float x = (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
      uint32_t bits;
      memcpy(&bits, &x, sizeof bits);
      h[i] = (uint16_t)(bits >> 16);  // bf16: the float's upper half (truncation is enough for operands)
    }
    cudaError_t r = cudaMemcpy((uint16_t *)dev + at, h, sizeof(uint16_t) * m, cudaMemcpyHostToDevice);
    if (r != cudaSuccess) {
      free(h);
      return sr_internal_error(e, 0, "cudaMemcpy: CUDA error %s", cudaGetErrorString(r));
    }
  }
  free(h);
  return SR_OK;
}

// Achieved TFLOP/s of bf16 GEMMs (fp32 accumulate) over the shapes of a layer's projections, on random operands.
static int gemm_tflops(double *tflops, sr_error *e) {
  const int shapes[3][3] = {{8192, 2048, 2048}, {8192, 11008, 2048}, {8192, 2048, 11008}};  // Qwen2.5-3B-like
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return sr_internal_error(e, 0, "cublasCreate failed");
  size_t maxe = (size_t)8192 * 11008;
  void *A, *B, *C;
  CK(cudaMalloc(&A, maxe * 2), "cudaMalloc");
  CK(cudaMalloc(&B, maxe * 2), "cudaMalloc");
  CK(cudaMalloc(&C, maxe * 2), "cudaMalloc");
  if (fill_bf16_uniform(A, maxe, 1, e) || fill_bf16_uniform(B, maxe, 2, e)) return e->code;
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0), "event");
  CK(cudaEventCreate(&t1), "event");
  double flops = 0, secs = 0;
  float alpha = 1, beta = 0;
  for (int s = 0; s < 3; s++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    for (int rep = 0; rep < 12; rep++) {
      if (rep == 2) CK(cudaEventRecord(t0, 0), "record");  // two warm-ups
      cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_16BF, n, A, CUDA_R_16BF, k,
                                       &beta, C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) return sr_internal_error(e, 0, "cublasGemmEx failed (%d)", (int)st);
    }
    CK(cudaEventRecord(t1, 0), "record");
    CK(cudaEventSynchronize(t1), "sync");
    float ms;
    CK(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
    flops += 10 * 2.0 * m * n * k, secs += ms * 1e-3;
  }
  *tflops = flops / secs / 1e12;
  cudaEventDestroy(t0), cudaEventDestroy(t1);
  cudaFree(A), cudaFree(B), cudaFree(C);
  cublasDestroy(h);
  return SR_OK;
}

int calib_gpu_identity(char *name, size_t size, double *mem_gib, double *hbm_gbps, double *peak_tflops,
                       double *fp64_tflops, sr_error *e) {
  int dev = 0, clock_khz = 0, bus_bits = 0;
  struct cudaDeviceProp prop;
  CK(cudaGetDevice(&dev), "cudaGetDevice");
  CK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev), "cudaDeviceGetAttribute");
  CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev), "cudaDeviceGetAttribute");
  snprintf(name, size, "%s", prop.name);
  *mem_gib = (double)prop.totalGlobalMem / 1073741824.0;
  *hbm_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate
  calib_gpu_peaks(prop.name, peak_tflops, fp64_tflops);
  return SR_OK;
}

int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, calib_kernels *k,
                          sr_error *e) {
  memset(k, 0, sizeof *k);
  if (gemm_tflops(&k->gemm_tflops, e)) return e->code;
  k->gemm = k->gemm_tflops / peak_tflops;
  for (int phase = 0; phase < 2; phase++)
    for (int kind = 0; kind < 3; kind++) {
      double *f = k->flops[phase][kind], *t = k->seconds[phase][kind];
      for (int i = 0; i < CALIB_SIZES; i++)  // 1, 2, 4 units of work per query tile
        if (calib_attn_time(phase, kind, 1 << i, heads, kv_heads, head_dim, &f[i], &t[i], e)) return e->code;
      if (calib_fit_rate(f, t, CALIB_SIZES, &k->attn_slope_tflops[phase][kind], &k->attn_overhead_us[phase][kind], e))
        return e->code;
      k->attn_tflops[phase][kind] = calib_sustained_rate(f, t, CALIB_SIZES);
      k->attn[phase][kind] = k->attn_tflops[phase][kind] / peak_tflops;
    }
  return SR_OK;
}

#else

int calib_gpu_identity(char *name, size_t size, double *mem_gib, double *hbm_gbps, double *peak_tflops,
                       double *fp64_tflops, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (the GPU's identity needs a GPU build)");
}

int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, calib_kernels *k,
                          sr_error *e) {
  memset(k, 0, sizeof *k);
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (kernel calibration needs a GPU build)");
}

#endif

// calib_kernels.c — kernel efficiencies for calibration (calibrate.h): cuBLAS bf16 GEMMs of a
// transformer layer's shapes, and the sparse attention kernels on synthetic tile indices holding one
// kind of tile each, timed with CUDA events.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calibrate.h"

#if SR_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "exec/calib_attn.h"
#include "kernels/sparse_attn.h"

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
int calib_fill_bf16_uniform(void *dev, size_t n, uint64_t seed, sr_error *e) {
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

int calib_operands_make(int64_t n_q, int64_t n_k, int heads, int kv_heads, int head_dim, uint64_t seed,
                        calib_operands *x, sr_error *e) {
  memset(x, 0, sizeof *x);
  size_t qn = (size_t)n_q * heads * head_dim, kn = (size_t)n_k * kv_heads * head_dim, rows = (size_t)n_q * heads;
  const char *what = "calibration operands";
  CK(cudaMalloc(&x->q, qn * 2), what);
  CK(cudaMalloc(&x->dout, qn * 2), what);
  CK(cudaMalloc(&x->o16, qn * 2), what);
  CK(cudaMalloc(&x->k, kn * 2), what);
  CK(cudaMalloc(&x->v, kn * 2), what);
  CK(cudaMalloc((void **)&x->o, qn * 4), what);
  CK(cudaMalloc((void **)&x->dq, qn * 4), what);
  CK(cudaMalloc((void **)&x->dk, kn * 4), what);
  CK(cudaMalloc((void **)&x->dv, kn * 4), what);
  CK(cudaMalloc((void **)&x->lse, sizeof(float) * rows), what);
  CK(cudaMalloc((void **)&x->drow, sizeof(float) * rows), what);
  void *bf16[5] = {x->q, x->k, x->v, x->dout, x->o16};
  size_t n[5] = {qn, kn, kn, qn, qn};
  for (int i = 0; i < 5; i++) {
    if (!seed) CK(cudaMemset(bf16[i], 0x3c, n[i] * 2), what);
    else if (calib_fill_bf16_uniform(bf16[i], n[i], seed + (uint64_t)i, e)) return e->code;
  }
  CK(cudaMemset(x->o, 0, qn * 4), what);
  CK(cudaMemset(x->lse, 0, sizeof(float) * rows), what);
  return sa_bwd_prepare(n_q, heads, head_dim, x->o16, x->dout, x->drow, NULL, e);
}

void calib_operands_free(calib_operands *x) {
  cudaFree(x->q), cudaFree(x->k), cudaFree(x->v), cudaFree(x->dout), cudaFree(x->o16), cudaFree(x->o);
  cudaFree(x->lse), cudaFree(x->drow), cudaFree(x->dq), cudaFree(x->dk), cudaFree(x->dv);
  memset(x, 0, sizeof *x);
}

// The GEMMs a layer's projections run (Qwen2.5-3B-like: tokens x out x in), on random operands.
static const int gemm_shapes[3][3] = {{8192, 2048, 2048}, {8192, 11008, 2048}, {8192, 2048, 11008}};

typedef struct {
  cublasHandle_t h;
  void *A, *B, *C;
  cudaEvent_t t0, t1;
} gemm_bench;

static void gemm_bench_free(gemm_bench *b) {
  if (b->t0) cudaEventDestroy(b->t0);
  if (b->t1) cudaEventDestroy(b->t1);
  cudaFree(b->A), cudaFree(b->B), cudaFree(b->C);
  if (b->h) cublasDestroy(b->h);
}

static int gemm_bench_init(gemm_bench *b, sr_error *e) {
  memset(b, 0, sizeof *b);
  if (cublasCreate(&b->h) != CUBLAS_STATUS_SUCCESS) return sr_internal_error(e, 0, "cublasCreate failed");
  size_t maxe = (size_t)8192 * 11008;
  CK(cudaMalloc(&b->A, maxe * 2), "cudaMalloc");
  CK(cudaMalloc(&b->B, maxe * 2), "cudaMalloc");
  CK(cudaMalloc(&b->C, maxe * 2), "cudaMalloc");
  if (calib_fill_bf16_uniform(b->A, maxe, 1, e) || calib_fill_bf16_uniform(b->B, maxe, 2, e)) return e->code;
  CK(cudaEventCreate(&b->t0), "event");
  CK(cudaEventCreate(&b->t1), "event");
  return SR_OK;
}

// One GEMM of shape s (bf16 in and out, fp32 accumulate); its FLOPs into *flops.
static int gemm_one(gemm_bench *b, int s, double *flops, sr_error *e) {
  const float alpha = 1, beta = 0;
  int m = gemm_shapes[s][0], n = gemm_shapes[s][1], k = gemm_shapes[s][2];
  cublasStatus_t st = cublasGemmEx(b->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b->B, CUDA_R_16BF, n, b->A, CUDA_R_16BF,
                                   k, &beta, b->C, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) return sr_internal_error(e, 0, "cublasGemmEx failed (%d)", (int)st);
  *flops += 2.0 * m * n * k;
  return SR_OK;
}

// Achieved TFLOP/s of a short burst: each shape 2 warm-ups + 10 timed, about 12 ms in all, the clock still at boost.
static int gemm_burst_tflops(gemm_bench *b, double *tflops, sr_error *e) {
  double flops = 0, secs = 0;
  for (int s = 0; s < 3; s++) {
    double f = 0;
    for (int rep = 0; rep < 12; rep++) {
      if (rep == 2) {  // after two warm-ups
        CK(cudaEventRecord(b->t0, 0), "record");
        f = 0;
      }
      if (gemm_one(b, s, &f, e)) return e->code;
    }
    CK(cudaEventRecord(b->t1, 0), "record");
    CK(cudaEventSynchronize(b->t1), "sync");
    float ms;
    CK(cudaEventElapsedTime(&ms, b->t0, b->t1), "elapsed");
    flops += f, secs += ms * 1e-3;
  }
  *tflops = flops / secs / 1e12;
  return SR_OK;
}

// Achieved TFLOP/s held over seconds: the three shapes in turn back to back for `warm_s` untimed (the board reaches
// its power limit and the clock settles) and then `timed_s` timed, in batches of 30 GEMMs (a few ms each) so that
// the host keeps the queue full. What a training step's GEMMs see (sim/cost.c, cost_gemm_step).
static int gemm_sustained_tflops(gemm_bench *b, double warm_s, double timed_s, double *tflops, sr_error *e) {
  double flops = 0, secs = 0, waste = 0;
  for (int phase = 0; phase < 2; phase++) {
    double goal = phase ? timed_s : warm_s, spent = 0, *f = phase ? &flops : &waste;
    while (spent < goal) {
      CK(cudaEventRecord(b->t0, 0), "record");
      for (int i = 0; i < 30; i++)
        if (gemm_one(b, i % 3, f, e)) return e->code;
      CK(cudaEventRecord(b->t1, 0), "record");
      CK(cudaEventSynchronize(b->t1), "sync");
      float ms;
      CK(cudaEventElapsedTime(&ms, b->t0, b->t1), "elapsed");
      spent += ms * 1e-3;
    }
    if (phase) secs = spent;
  }
  *tflops = flops / secs / 1e12;
  return SR_OK;
}

// The GEMM load of calib_attn_held_measure's mixed form: the projections' shapes in turn on stream 0, each GEMM's
// seconds timed once at creation (12 after 3 warm-ups).
struct calib_gemm_load {
  gemm_bench b;
  double each_s;
  int next;
};

int calib_gemm_load_new(calib_gemm_load **out, sr_error *e) {
  *out = NULL;
  calib_gemm_load *g = calloc(1, sizeof *g);
  if (!g) return sr_internal_error(e, 0, "out of memory");
  double f = 0;
  int rc = gemm_bench_init(&g->b, e);
  for (int i = 0; !rc && i < 15; i++) {
    if (i == 3 && (rc = cudaEventRecord(g->b.t0, 0) == cudaSuccess ? SR_OK : sr_internal_error(e, 0, "record"))) break;
    rc = gemm_one(&g->b, i % 3, &f, e);
  }
  float ms = 0;
  if (!rc && (cudaEventRecord(g->b.t1, 0) != cudaSuccess || cudaEventSynchronize(g->b.t1) != cudaSuccess ||
              cudaEventElapsedTime(&ms, g->b.t0, g->b.t1) != cudaSuccess))
    rc = sr_internal_error(e, 0, "timing the GEMM load failed");
  if (rc) {
    calib_gemm_load_free(g);
    return rc;
  }
  g->each_s = ms * 1e-3 / 12;
  *out = g;
  return SR_OK;
}

int calib_gemm_load_queue(calib_gemm_load *g, double seconds, double *flops, sr_error *e) {
  int n = g->each_s > 0 ? (int)ceil(seconds / g->each_s) : 0;
  for (int i = 0; i < n; i++, g->next = (g->next + 1) % 3)
    if (gemm_one(&g->b, g->next, flops, e)) return e->code;
  return SR_OK;
}

void calib_gemm_load_free(calib_gemm_load *g) {
  if (!g) return;
  gemm_bench_free(&g->b);
  free(g);
}

static int gemm_measure(double sustained_s, double *burst, double *sustained, sr_error *e) {
  gemm_bench b;
  int rc = gemm_bench_init(&b, e);
  if (!rc) rc = gemm_burst_tflops(&b, burst, e);
  *sustained = 0;
  if (!rc && sustained_s > 0) rc = gemm_sustained_tflops(&b, sustained_s / 2, sustained_s / 2, sustained, e);
  gemm_bench_free(&b);
  return rc;
}

int calib_gpu_identity(char *name, size_t size, double *mem_gib, double *hbm_gbps, double *l2_mb, double *peak_tflops,
                       double *fp64_tflops, sr_error *e) {
  int dev = 0, clock_khz = 0, bus_bits = 0, l2_bytes = 0;
  struct cudaDeviceProp prop;
  CK(cudaGetDevice(&dev), "cudaGetDevice");
  CK(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev), "cudaDeviceGetAttribute");
  CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev), "cudaDeviceGetAttribute");
  CK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
  snprintf(name, size, "%s", prop.name);
  *mem_gib = (double)prop.totalGlobalMem / 1073741824.0;
  *hbm_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // double data rate
  *l2_mb = l2_bytes > 0 ? l2_bytes / 1048576.0 : calib_gpu_l2(prop.name);
  calib_gpu_peaks(prop.name, peak_tflops, fp64_tflops);
  return SR_OK;
}

int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, double gemm_seconds,
                          calib_kernels *k, sr_error *e) {
  memset(k, 0, sizeof *k);
  if (gemm_measure(gemm_seconds, &k->gemm_tflops, &k->gemm_sustained_tflops, e)) return e->code;
  k->gemm = k->gemm_tflops / peak_tflops;
  k->gemm_sustained = k->gemm_sustained_tflops / peak_tflops;
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

int calib_gpu_identity(char *name, size_t size, double *mem_gib, double *hbm_gbps, double *l2_mb, double *peak_tflops,
                       double *fp64_tflops, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (the GPU's identity needs a GPU build)");
}

int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, double gemm_seconds,
                          calib_kernels *k, sr_error *e) {
  memset(k, 0, sizeof *k);
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (kernel calibration needs a GPU build)");
}

#endif

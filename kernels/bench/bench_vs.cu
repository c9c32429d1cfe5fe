// bench_vs.cu — bin/sparsering-bench-vs: cost of MTraining's online VS estimation and of converting its
// pattern to the execution form on the GPU, as a fraction of the sparse forward that runs the pattern.
// Qwen2.5-3B attention shape (16 query heads, 2 KV heads, d = 128, bf16), N = 512K tokens, one GPU:
//   whole    the whole sequence on the GPU (W = 1): estimation over all N keys, conversion for all N
//            queries, forward of all N queries against all N keys;
//   shard    what rank 0 of a 2-rank striped (G = 128) ring does: estimation passes over its N/2 keys (the
//            combine across ranks is communication, not timed here), selection, conversion for its N/2
//            queries against both sources, and its forward over both sources (two ring steps).
// Inputs: one random vector per group rotated by position as in RoPE, plus noise, and 1000 keys (drawn at
// N u^3) with an extra shared component. This structure is too weak to concentrate attention at 512K
// (query head h takes group h % 2, not its KV head h / 8, so half the heads see unrelated vectors): top-p
// 0.9 reaches the cap (4096 verticals and 4096 slashes) on every head, and the forward runs a dense-ish
// pattern (the "density" column). The estimation cost does not depend on the pattern; the conversion and
// the forward do. Top-p 0.9, cap 4096. CUDA events, 1 warm-up, median of 5.
// Usage: sparsering-bench-vs [--n N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
extern "C" {
#include "plan/layout.h"
}

#include "kernels/test/check.h"

enum { REPS = 5 };

static __device__ float hash_normal(uint64_t k) {  // sum of 4 uniforms, centred and scaled to unit variance
  float s = 0;
  for (int i = 0; i < 4; i++) {
    uint64_t z = k * 4 + i + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    s += (float)(z >> 40) / 16777216.0f;
  }
  return (s - 2.0f) * 1.7320508f;
}

__constant__ double inv_freq[64];  // RoPE frequencies 10000^(-2f/d)

// x[t, h, :] = R(t) (base[h % groups] + noise) (+ boost * vert_dir when t is a vertical key), RoPE pairs (c, c + d/2).
__global__ void gen_kernel(__nv_bfloat16 *x, int64_t n, int heads, int groups, int d, const uint8_t *is_vert,
                           float noise, float boost, uint64_t seed) {
  int64_t total = n * heads * (d / 2);
  for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < total; id += (int64_t)gridDim.x * blockDim.x) {
    int64_t t = id / (heads * (d / 2));
    int h = (int)(id / (d / 2) % heads), f = (int)(id % (d / 2)), g = h % groups;
    float a = hash_normal(((uint64_t)g << 20) + f) + noise * hash_normal(seed + (uint64_t)id * 2);
    float b = hash_normal(((uint64_t)g << 20) + f + 4096) + noise * hash_normal(seed + (uint64_t)id * 2 + 1);
    if (is_vert && is_vert[t]) a += boost * hash_normal(((uint64_t)g << 20) + f + 9000), b += boost * hash_normal(((uint64_t)g << 20) + f + 13000);
    double theta = (double)t * inv_freq[f];
    theta -= 6.283185307179586 * floor(theta / 6.283185307179586);
    float cs, sn;
    sincosf((float)theta, &sn, &cs);
    int64_t base = (t * heads + h) * d;
    x[base + f] = __float2bfloat16(a * cs - b * sn);
    x[base + f + d / 2] = __float2bfloat16(a * sn + b * cs);
  }
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_f);
  return v[n / 2];
}

int main(int argc, char **argv) {
  int64_t N = 524288;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) N = atoll(argv[++i]);
  const int H = 16, KH = 2, D = 128, NQ = 64;
  const float scale = 1.0f / sqrtf((float)D);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs; N = %lld, heads %d/%d, d %d, top-p 0.9, cap 4096\n", prop.name, prop.multiProcessorCount,
         (long long)N, H, KH, D);
  // inputs
  uint8_t *isv_h = (uint8_t *)calloc((size_t)N, 1), *isv;
  uint64_t st = 1;
  for (int i = 0; i < 1000; i++) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(st >> 11) / 9007199254740992.0;
    isv_h[(int64_t)(N * u * u * u)] = 1;
  }
  CK(cudaMalloc((void **)&isv, (size_t)N));
  CK(cudaMemcpy(isv, isv_h, (size_t)N, cudaMemcpyHostToDevice));
  double invf[64];
  for (int f = 0; f < D / 2; f++) invf[f] = pow(10000.0, -2.0 * f / D);
  CK(cudaMemcpyToSymbol(inv_freq, invf, sizeof(double) * (D / 2)));
  void *q, *k, *v;
  CK(cudaMalloc(&q, 2 * (size_t)(N * H * D)));
  CK(cudaMalloc(&k, 2 * (size_t)(N * KH * D)));
  CK(cudaMalloc(&v, 2 * (size_t)(N * KH * D)));
  gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)q, N, H, KH, D, NULL, 0.5f, 0.f, 11);
  gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)k, N, KH, KH, D, isv, 0.5f, 1.5f, 22);
  gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)v, N, KH, KH, D, NULL, 1.0f, 0.f, 33);
  CK(cudaGetLastError());
  int64_t *pos_h = (int64_t *)malloc(sizeof(int64_t) * (size_t)N), *pos;
  for (int64_t t = 0; t < N; t++) pos_h[t] = t;
  CK(cudaMalloc((void **)&pos, sizeof(int64_t) * (size_t)N));
  CK(cudaMemcpy(pos, pos_h, sizeof(int64_t) * (size_t)N, cudaMemcpyHostToDevice));
  const void *q_est = (const char *)q + 2 * (size_t)((N - NQ) * H * D);
  const int64_t *qpos = pos + (N - NQ);
  vs_est_opts o = vs_est_defaults();  // p 0.9, cap 4096
  cudaEvent_t ev[8];
  for (int i = 0; i < 8; i++) CK(cudaEventCreate(&ev[i]));

  printf("%-6s %8s %8s %8s %8s %8s %9s %9s %8s %9s %8s %8s\n", "case", "pass1", "pass2", "pass3", "select", "convert",
         "est+conv", "fwd", "fraction", "vert/head", "sl/head", "density");
  for (int cs = 0; cs < 2; cs++) {
    int W = cs == 0 ? 1 : 2;
    layout L;
    SR(layout_build(cs == 0 ? LAYOUT_CONTIGUOUS : LAYOUT_STRIPED, N, W, 128, NULL, &L, E));
    int64_t nloc = L.rank_count[0];
    // rank 0's keys and queries in local order (for W = 1 the whole sequence)
    int64_t *lp_h = (int64_t *)malloc(sizeof(int64_t) * (size_t)nloc), *lp;
    layout_positions(&L, 0, lp_h);
    CK(cudaMalloc((void **)&lp, sizeof(int64_t) * (size_t)nloc));
    CK(cudaMemcpy(lp, lp_h, sizeof(int64_t) * (size_t)nloc, cudaMemcpyHostToDevice));
    // gather rank 0's rows (striped: 128-token blocks) so the kernels see a contiguous local shard
    void *ql = q, *kl = k, *vl = v, *k1 = NULL, *v1 = NULL;
    int64_t *lp1 = NULL;
    if (W == 2) {
      CK(cudaMalloc(&ql, 2 * (size_t)(nloc * H * D)));
      CK(cudaMalloc(&kl, 2 * (size_t)(nloc * KH * D)));
      CK(cudaMalloc(&vl, 2 * (size_t)(nloc * KH * D)));
      int64_t n1 = L.rank_count[1];
      int64_t *lp1_h = (int64_t *)malloc(sizeof(int64_t) * (size_t)n1);
      layout_positions(&L, 1, lp1_h);
      CK(cudaMalloc(&k1, 2 * (size_t)(n1 * KH * D)));
      CK(cudaMalloc(&v1, 2 * (size_t)(n1 * KH * D)));
      CK(cudaMalloc((void **)&lp1, sizeof(int64_t) * (size_t)n1));
      CK(cudaMemcpy(lp1, lp1_h, sizeof(int64_t) * (size_t)n1, cudaMemcpyHostToDevice));
      for (int r = 0; r < 2; r++) {
        const int64_t *pp = r ? lp1_h : lp_h;
        int64_t nr = r ? n1 : nloc;
        for (int64_t b = 0; b < nr; b += 128) {  // runs of 128 consecutive tokens
          int64_t len = nr - b < 128 ? nr - b : 128, g = pp[b];
          if (!r) CK(cudaMemcpy((char *)ql + 2 * b * H * D, (char *)q + 2 * g * H * D, 2 * (size_t)(len * H * D), cudaMemcpyDeviceToDevice));
          CK(cudaMemcpy((char *)(r ? k1 : kl) + 2 * b * KH * D, (char *)k + 2 * g * KH * D, 2 * (size_t)(len * KH * D), cudaMemcpyDeviceToDevice));
          CK(cudaMemcpy((char *)(r ? v1 : vl) + 2 * b * KH * D, (char *)v + 2 * g * KH * D, 2 * (size_t)(len * KH * D), cudaMemcpyDeviceToDevice));
        }
      }
      free(lp1_h);
    }
    // the pattern itself: estimation over every key (exact sums: the same as combining the ranks' partials)
    vs_gpu_est full, part;
    SR(vs_gpu_est_init(&full, H, KH, D, NQ, N, N, scale, E));
    SR(vs_gpu_est_reset(&full, NULL, E));
    SR(vs_gpu_rowmax(&full, q_est, qpos, k, pos, N, NULL, E));
    SR(vs_gpu_rowsum(&full, NULL, E));
    SR(vs_gpu_scores(&full, qpos, pos, NULL, E));
    if (W == 2) SR(vs_gpu_est_init(&part, H, KH, D, NQ, N, nloc, scale, E));
    vs_gpu_est *ge = W == 2 ? &part : &full;
    vs_gpu_layout GL;
    SR(vs_gpu_layout_init(&L, &GL, E));
    vs_gpu_conv cv;
    SR(vs_gpu_conv_init(&cv, &full, &GL, 0, E));
    head_mask *masks;
    SR(vs_gpu_masks(&full, &masks, E));
    float t[6][REPS], tf[REPS];
    float *o_run, *lse_run;
    CK(cudaMalloc((void **)&o_run, sizeof(float) * (size_t)(nloc * H * D)));
    CK(cudaMalloc((void **)&lse_run, sizeof(float) * (size_t)(nloc * H)));
    for (int rep = -1; rep < REPS; rep++) {
      // passes over this rank's keys (W = 2: rank 0's half, into the state of its own)
      CK(cudaEventRecord(ev[0]));
      SR(vs_gpu_est_reset(ge, NULL, E));
      SR(vs_gpu_rowmax(ge, q_est, qpos, kl, W == 2 ? lp : pos, nloc, NULL, E));
      CK(cudaEventRecord(ev[1]));
      SR(vs_gpu_rowsum(ge, NULL, E));
      CK(cudaEventRecord(ev[2]));
      SR(vs_gpu_scores(ge, qpos, W == 2 ? lp : pos, NULL, E));
      CK(cudaEventRecord(ev[3]));
      SR(vs_gpu_select(&full, &o, NULL, E));
      CK(cudaEventRecord(ev[4]));
      SR(vs_gpu_convert(&cv, &full, &GL, NULL, E));
      CK(cudaEventRecord(ev[5]));
      CK(cudaEventSynchronize(ev[5]));
      for (int x = 0; x < 5 && rep >= 0; x++) CK(cudaEventElapsedTime(&t[x][rep], ev[x], ev[x + 1]));
      if (rep >= 0) CK(cudaEventElapsedTime(&t[5][rep], ev[0], ev[5]));
      // the sparse forward of this rank's queries over every source
      CK(cudaMemset(o_run, 0, sizeof(float) * (size_t)(nloc * H * D)));
      CK(cudaMemset(lse_run, 0, sizeof(float) * (size_t)(nloc * H)));  // values do not matter for the timing
      CK(cudaEventRecord(ev[6]));
      for (int s = 0; s < W; s++) {
        sa_shape sh = {nloc, L.rank_count[s], H, KH, D, scale};
        SR(sa_fwd(&sh, ql, s ? k1 : kl, s ? v1 : vl, W == 2 ? lp : pos, s ? lp1 : (W == 2 ? lp : pos), &cv.ix, s, masks,
                  NULL, NULL, o_run, lse_run, NULL, E));
      }
      CK(cudaEventRecord(ev[7]));
      CK(cudaEventSynchronize(ev[7]));
      if (rep >= 0) CK(cudaEventElapsedTime(&tf[rep], ev[6], ev[7]));
    }
    int32_t cnt[32];
    CK(cudaMemcpy(cnt, full.counts, sizeof(int32_t) * 2 * H, cudaMemcpyDeviceToHost));
    double nv = 0, ns = 0;
    for (int h = 0; h < H; h++) nv += cnt[2 * h], ns += cnt[2 * h + 1];
    // computed elements (tiles x 128^2 + bars x 128) over the causal pairs of this rank's queries
    double causal = 0;
    for (int64_t i = 0; i < nloc; i++) causal += (double)lp_h[i] + 1;
    double work = ((double)cv.ix.d.n_tiles * 128.0 * 128.0 + (double)cv.ix.d.n_bars * 128.0) / (causal * H);
    float m[6];
    for (int x = 0; x < 6; x++) m[x] = median(t[x], REPS);
    float fm = median(tf, REPS);
    printf("%-6s %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f %9.3f %8.3f %9.0f %8.0f %8.4f\n", cs == 0 ? "whole" : "shard", m[0],
           m[1], m[2], m[3], m[4], m[5], fm, m[5] / fm, nv / H, ns / H, work);
    fflush(stdout);
    cudaFree(o_run), cudaFree(lse_run), cudaFree(masks);
    vs_gpu_conv_free(&cv);
    vs_gpu_layout_free(&GL);
    if (W == 2) vs_gpu_est_free(&part), cudaFree(ql), cudaFree(kl), cudaFree(vl), cudaFree(k1), cudaFree(v1), cudaFree(lp1);
    vs_gpu_est_free(&full);
    cudaFree(lp), free(lp_h);
    layout_free(&L);
  }
  printf("times in ms; fraction = est+conv / fwd; density = computed elements / causal pairs of the rank's queries\n");
  return 0;
}

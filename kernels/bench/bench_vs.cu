// bench_vs.cu — bin/sparsering-bench-vs: cost of MTraining's online VS estimation and of converting its
// pattern to the execution form on the GPU, as a fraction of the sparse forward that runs the pattern.
// Qwen2.5-3B attention shape (16 query heads, 2 KV heads, d = 128, bf16), N = 512K tokens, one GPU:
//   whole    the whole sequence on the GPU (W = 1): estimation over all N keys, conversion for all N
//            queries, forward of all N queries against all N keys;
//   shard    what rank 0 of a 2-rank striped (G = 128) ring does: estimation passes over its N/2 keys (the
//            combine across ranks is communication, not timed here), selection, conversion for its N/2
//            queries against both sources, and its forward over both sources (two ring steps).
// Inputs (--inputs):
//   random   (default) one random vector per group rotated by position as in RoPE, plus noise, and 1000 keys
//            (drawn at N u^3) with an extra shared component. Too weak to concentrate attention at 512K (query
//            head h takes group h % 2, not its KV head h / 8): top-p reaches the cap on every head and the
//            forward runs a dense-ish pattern.
//   vs       the executor's planted inputs (`sparsering-exec attn --inputs vs`, kernels/attn_inputs.h, data
//            seed 1, layer 0): sinks, planted vertical keys and a RoPE band, so attention concentrates as in a
//            trained model. Filled on the host (one thread per core) and rounded to bf16.
// The estimation cost does not depend on the pattern; selection, conversion and the forward do. Each top-p
// of --p (default 0.9 and 0.95), cap 4096. CUDA events, 1 warm-up, median of --reps (5). Columns: kept =
// the pattern's (query, key) pairs over the causal pairs of the rank's queries; computed = what the
// forward computes (tiles x 128^2 + bars x 128) over the same; cap v/s = heads whose verticals / slashes
// reached the cap. --est-only leaves the forward out (fwd and fraction print 0).
// Usage: sparsering-bench-vs [--n N] [--inputs random|vs] [--p P,P..] [--reps R] [--est-only]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
extern "C" {
#include "kernels/attn_inputs.h"
#include "plan/layout.h"
}
#include <unistd.h>

#include "kernels/bench/bench_common.cuh"
#include "kernels/test/check.h"

enum { MAX_REPS = 32, MAX_PS = 8 };

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

static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_f);
  return v[n / 2];
}

// ---- the executor's vs inputs, filled on the host ------------------------------------------------------

typedef struct {
  int tensor, heads, kv_heads, d;
  int64_t t0, t1, n_tokens;
  uint16_t *out;  // bf16 bits [n_tokens, heads of the tensor, d]
  int rc;
} fill_job;

// Round to the nearest bf16, ties to even (what __float2bfloat16 and the executor's upload give).
static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void *fill_worker(void *arg) {
  fill_job *j = (fill_job *)arg;
  int nh = j->tensor == ATTN_Q ? j->heads : j->kv_heads;
  int64_t n = j->t1 - j->t0, w = (int64_t)nh * j->d;
  float *x = (float *)malloc(sizeof(float) * (size_t)(n * w + 1));
  int64_t *pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n + 1));
  sr_error e;
  j->rc = !x || !pos;
  if (!j->rc) {
    for (int64_t t = 0; t < n; t++) pos[t] = j->t0 + t;
    j->rc = attn_inputs_fill(ATTN_INPUTS_VS, 1, 0, j->tensor, pos, n, j->n_tokens, j->heads, j->kv_heads, j->d, x, &e);
    for (int64_t i = 0; i < n * w && !j->rc; i++) j->out[j->t0 * w + i] = bf16_bits(x[i]);
  }
  free(x), free(pos);
  return NULL;
}

// Device tensor `tensor` of the vs inputs over all n_tokens positions (one contiguous token range per thread:
// attn_inputs_fill sets up its per-sequence tables once per call).
static void fill_vs(void *dev, int tensor, int64_t n_tokens, int heads, int kv_heads, int d) {
  int nt = (int)sysconf(_SC_NPROCESSORS_ONLN);
  nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
  int nh = tensor == ATTN_Q ? heads : kv_heads;
  size_t bytes = 2 * (size_t)(n_tokens * nh * d);
  uint16_t *h = (uint16_t *)malloc(bytes);
  fill_job jobs[64];
  pthread_t th[64];
  if (!h) { fprintf(stderr, "fill_vs: out of memory\n"); exit(1); }
  for (int i = 0; i < nt; i++) {
    fill_job j = {tensor, heads, kv_heads, d, n_tokens * i / nt, n_tokens * (i + 1) / nt, n_tokens, h, 0};
    jobs[i] = j;
    if (pthread_create(&th[i], NULL, fill_worker, &jobs[i])) { fprintf(stderr, "fill_vs: pthread_create\n"); exit(1); }
  }
  for (int i = 0; i < nt; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].rc) { fprintf(stderr, "fill_vs: tensor %d: fill failed\n", tensor); exit(1); }
  }
  CK(cudaMemcpy(dev, h, bytes, cudaMemcpyHostToDevice));
  free(h);
}

// (query, key) pairs of the VS pattern (vbits by key, sbits by offset) over the queries marked in `mine`:
// sum over those queries i of (verticals <= i) + (slashes <= i), less the pairs counted twice (key v is a
// vertical and offset i - v a slash, i.e. i = v + s).
static double kept_pairs(const uint32_t *vb, const uint32_t *sb, int64_t n_tokens, const uint8_t *mine,
                         int64_t *vl, int64_t *sl) {
  double kept = 0;
  int64_t cv = 0, cs = 0, nv = 0, ns = 0;
  for (int64_t i = 0; i < n_tokens; i++) {
    int v = (vb[i >> 5] >> (i & 31)) & 1, sl_ = (sb[i >> 5] >> (i & 31)) & 1;
    cv += v, cs += sl_;
    if (v) vl[nv++] = i;
    if (sl_) sl[ns++] = i;
    if (mine[i]) kept += (double)(cv + cs);
  }
  for (int64_t a = 0; a < nv; a++)
    for (int64_t b = 0; b < ns && vl[a] + sl[b] < n_tokens; b++) kept -= mine[vl[a] + sl[b]];
  return kept;
}

int main(int argc, char **argv) {
  int64_t N = 524288;
  int vs_inputs = 0, reps = 5, est_only = 0, n_ps = 2;
  double ps[MAX_PS] = {0.9, 0.95};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) N = atoll(argv[++i]);
    else if (strcmp(argv[i], "--inputs") == 0 && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "vs") && strcmp(v, "random")) { fprintf(stderr, "--inputs: expected random or vs\n"); return 2; }
      vs_inputs = strcmp(v, "vs") == 0;
    } else if (strcmp(argv[i], "--p") == 0 && i + 1 < argc) {
      char *s = argv[++i], *end;
      for (n_ps = 0; n_ps < MAX_PS && *s; s = *end ? end + 1 : end) {
        ps[n_ps++] = strtod(s, &end);
        if (end == s || !(ps[n_ps - 1] > 0 && ps[n_ps - 1] <= 1)) { fprintf(stderr, "--p: expected P,P.. in (0, 1]\n"); return 2; }
      }
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
      if (reps < 1 || reps > MAX_REPS) { fprintf(stderr, "--reps: expected 1..%d\n", MAX_REPS); return 2; }
    } else if (strcmp(argv[i], "--est-only") == 0) est_only = 1;
    else { fprintf(stderr, "usage: %s [--n N] [--inputs random|vs] [--p P,P..] [--reps R] [--est-only]\n", argv[0]); return 2; }
  }
  const int H = 16, KH = 2, D = 128, NQ = 64;
  const float scale = 1.0f / sqrtf((float)D);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs; N = %lld, heads %d/%d, d %d, inputs %s, cap 4096, median of %d\n", prop.name,
         prop.multiProcessorCount, (long long)N, H, KH, D, vs_inputs ? "vs" : "random", reps);
  // inputs
  void *q, *k, *v;
  CK(cudaMalloc(&q, 2 * (size_t)(N * H * D)));
  CK(cudaMalloc(&k, 2 * (size_t)(N * KH * D)));
  CK(cudaMalloc(&v, 2 * (size_t)(N * KH * D)));
  if (vs_inputs) {
    fill_vs(q, ATTN_Q, N, H, KH, D);
    fill_vs(k, ATTN_K, N, H, KH, D);
    fill_vs(v, ATTN_V, N, H, KH, D);
  } else {
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
    gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)q, N, H, KH, D, NULL, 0.5f, 0.f, 11);
    gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)k, N, KH, KH, D, isv, 0.5f, 1.5f, 22);
    gen_kernel<<<4096, 256>>>((__nv_bfloat16 *)v, N, KH, KH, D, NULL, 1.0f, 0.f, 33);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    cudaFree(isv), free(isv_h);
  }
  int64_t *pos_h = (int64_t *)malloc(sizeof(int64_t) * (size_t)N), *pos;
  for (int64_t t = 0; t < N; t++) pos_h[t] = t;
  CK(cudaMalloc((void **)&pos, sizeof(int64_t) * (size_t)N));
  CK(cudaMemcpy(pos, pos_h, sizeof(int64_t) * (size_t)N, cudaMemcpyHostToDevice));
  const void *q_est = (const char *)q + 2 * (size_t)((N - NQ) * H * D);
  const int64_t *qpos = pos + (N - NQ);
  cudaEvent_t ev[8];
  for (int i = 0; i < 8; i++) CK(cudaEventCreate(&ev[i]));
  int64_t words = (N + 31) / 32;
  uint32_t *vb_h = (uint32_t *)malloc(4 * (size_t)(H * words)), *sb_h = (uint32_t *)malloc(4 * (size_t)(H * words));
  int64_t *vl = (int64_t *)malloc(sizeof(int64_t) * (size_t)N), *sl = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
  uint8_t *mine = (uint8_t *)malloc((size_t)N);

  printf("%-6s %5s %8s %8s %8s %8s %8s %9s %9s %8s %9s %8s %9s %9s %7s\n", "case", "p", "pass1", "pass2", "pass3",
         "select", "convert", "est+conv", "fwd", "fraction", "vert/head", "sl/head", "kept", "computed", "cap v/s");
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
    memset(mine, 0, (size_t)N);
    for (int64_t i = 0; i < nloc; i++) mine[lp_h[i]] = 1;
    // gather rank 0's rows (striped: 128-token blocks) so the kernels see a contiguous local shard
    void *ql = q, *kl = k, *vl_ = v, *k1 = NULL, *v1 = NULL;
    int64_t *lp1 = NULL;
    if (W == 2) {
      CK(cudaMalloc(&ql, 2 * (size_t)(nloc * H * D)));
      CK(cudaMalloc(&kl, 2 * (size_t)(nloc * KH * D)));
      CK(cudaMalloc(&vl_, 2 * (size_t)(nloc * KH * D)));
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
          CK(cudaMemcpy((char *)(r ? v1 : vl_) + 2 * b * KH * D, (char *)v + 2 * g * KH * D, 2 * (size_t)(len * KH * D), cudaMemcpyDeviceToDevice));
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
    float *o_run, *lse_run;
    CK(cudaMalloc((void **)&o_run, sizeof(float) * (size_t)(nloc * H * D)));
    CK(cudaMalloc((void **)&lse_run, sizeof(float) * (size_t)(nloc * H)));
    // causal pairs of this rank's queries
    double causal = 0;
    for (int64_t i = 0; i < nloc; i++) causal += (double)lp_h[i] + 1;
    for (int pi = 0; pi < n_ps; pi++) {
      vs_est_opts o = vs_est_defaults();  // cap 4096
      o.p = ps[pi];
      float t[6][MAX_REPS], tf[MAX_REPS];
      for (int rep = -1; rep < reps; rep++) {
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
        if (est_only) {
          if (rep >= 0) tf[rep] = 0;
          continue;
        }
        // the sparse forward of this rank's queries over every source
        CK(cudaMemset(o_run, 0, sizeof(float) * (size_t)(nloc * H * D)));
        CK(cudaMemset(lse_run, 0, sizeof(float) * (size_t)(nloc * H)));  // values do not matter for the timing
        CK(cudaEventRecord(ev[6]));
        for (int s = 0; s < W; s++) {
          sa_shape sh = {nloc, L.rank_count[s], H, KH, D, scale};
          SR(sa_fwd(&sh, ql, s ? k1 : kl, s ? v1 : vl_, W == 2 ? lp : pos, s ? lp1 : (W == 2 ? lp : pos), &cv.ix, s,
                    masks, NULL, NULL, o_run, lse_run, NULL, E));
        }
        CK(cudaEventRecord(ev[7]));
        CK(cudaEventSynchronize(ev[7]));
        if (rep >= 0) CK(cudaEventElapsedTime(&tf[rep], ev[6], ev[7]));
      }
      int32_t cnt[32];
      CK(cudaMemcpy(cnt, full.counts, sizeof(int32_t) * 2 * H, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(vb_h, full.vbits, 4 * (size_t)(H * words), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(sb_h, full.sbits, 4 * (size_t)(H * words), cudaMemcpyDeviceToHost));
      double nv = 0, ns = 0, kept = 0;
      int capv = 0, caps = 0;
      for (int h = 0; h < H; h++) {
        nv += cnt[2 * h], ns += cnt[2 * h + 1];
        capv += cnt[2 * h] >= o.cap, caps += cnt[2 * h + 1] >= o.cap;
        kept += kept_pairs(vb_h + h * words, sb_h + h * words, N, mine, vl, sl);
      }
      double work = ((double)cv.ix.d.n_tiles * 128.0 * 128.0 + (double)cv.ix.d.n_bars * 128.0) / (causal * H);
      float m[6];
      for (int x = 0; x < 6; x++) m[x] = median(t[x], reps);
      float fm = median(tf, reps);
      char capc[16];
      snprintf(capc, sizeof capc, "%d/%d", capv, caps);
      printf("%-6s %5.2f %8.3f %8.3f %8.3f %8.3f %8.3f %9.3f %9.3f %8.4f %9.0f %8.0f %9.3e %9.3e %7s\n",
             cs == 0 ? "whole" : "shard", o.p, m[0], m[1], m[2], m[3], m[4], m[5], fm, fm > 0 ? m[5] / fm : 0.0,
             nv / H, ns / H, kept / (causal * H), work, capc);
      fflush(stdout);
    }
    cudaFree(o_run), cudaFree(lse_run), cudaFree(masks);
    vs_gpu_conv_free(&cv);
    vs_gpu_layout_free(&GL);
    if (W == 2) vs_gpu_est_free(&part), cudaFree(ql), cudaFree(kl), cudaFree(vl_), cudaFree(k1), cudaFree(v1), cudaFree(lp1);
    vs_gpu_est_free(&full);
    cudaFree(lp), free(lp_h);
    layout_free(&L);
  }
  printf("times in ms; fraction = est+conv / fwd; kept = the pattern's pairs, computed = elements the forward "
         "computes, both over the causal pairs of the rank's queries; cap v/s = heads at the cap\n");
  free(vb_h), free(sb_h), free(vl), free(sl), free(mine), free(pos_h);
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(pos);
  return 0;
}

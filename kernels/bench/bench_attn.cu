// bench_attn.cu — bin/sparsering-bench-attn: times the sparse attention kernels at the Qwen2.5-3B
// attention shape (16 query heads, 2 KV heads, d = 128, bf16) on one GPU: dense causal at 16K and 64K
// and the VS-like mask of ANCHORS.md (per head sinks 128 + window 4096 + 1000 verticals at N u^3,
// seed 1) at 64K and 128K, and MTraining's published Qwen2.5-3B budget mix ("qwen mix": the planner's
// `vs-preset:qwen2.5-3b`, seed 1, layer 0, its execution form built by plan/tiles.h) at 64K and 128K, forward (the default and every variant of sa_fwd_variant, side by side)
// and backward (every variant of sa_bwd_variant). CUDA events around each call, 3 warm-up runs,
// the median of 10 timed runs, inputs rotated over 3 sets so that no run finds its data in L2.
// Usage: sparsering-bench-attn [--quick] [--fast] [--mix] [--defaults] [--shapes] [--dump DIR] [--dump-only DIR]
//                              [--fwd-variants V,V..] [--fwd-only]
//   (SR_BENCH_ONLY=TEXT: only the cases whose name holds TEXT; --shapes: instead, dense causal at 128K (16 / 2 heads, d 128), MHA 16 / 16 and d 64 at 16K and 64K, the
//   default kernels only; the mask column names the shape)
//   (--fast: forward default only, no 64K VS-like, no budget mix; --mix: only VS-like 128K and the budget mix;
//   --defaults: the default forward and backward only, no other variant; --dump-only: the dumps with the
//   defaults, no timing)
//   prints one table (TFLOP/s by ANCHORS.md's counts); --dump writes input set 0 and its outputs (raw
//   bf16 q k v dout o, fp32 lse dq dk dv) of dense 16K, VS-like 64K and the budget mix at 64K for kernels/bench/peers.py, and the
//   budget mix's pattern (preset_N_pattern.bin: int32 heads, then per head n_vert, n_slash, the verticals,
//   the slash offsets) so that FlexAttention runs the identical mask. After each budget-mix row, a "runs form" line:
//   the default forward on the forward form of tiles_runs_build (scattered slashes as 64-key runs) against the
//   tile form, its chunk counts and host build time, and its outputs against the tile form's.
//   --fwd-variants 3,5: after each row a "fwd variants" line, those forward variants (sa_fwd_variant) timed on the
//   row's index, each one's O and LSE on input set 0 against the default's (bit-identical, or the relative error);
//   after a runs form line, the same on the runs form. --fwd-only: no backward (its columns print nan).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/sparse_attn.h"
#include "kernels/test/index_build.h"
extern "C" {  // the planner is C
#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
}


#include "kernels/bench/bench_common.cuh"
#include "kernels/test/check.h"

enum { SETS = 3, WARM = 3, REPS = 10 };

static int fwd_vars[8], n_fwd_vars;  // --fwd-variants

typedef struct {
  const char *name;
  int vs;  // 0 dense causal, 1 VS-like, 2 the Qwen2.5-3B budget mix
  int64_t n;
  int h, kh, d;  // query heads, KV heads, head dim (0: the Qwen2.5-3B shape, 16 / 2 / 128)
} bcase;

// The budget mix at n tokens as the planner builds it: layer 0 of vs-preset:qwen2.5-3b (seed 1) on one rank,
// its tile index and element masks; the pattern is written to dump/preset_N_pattern.bin when dump is set.
static void qwen_mix(int64_t n, const char *dump, tile_index *ti, head_mask **masks) {
  sr_error e = {0};
  model_config m;
  pattern pat;
  layout lay;
  if (model_load("qwen2.5-3b", &m, &e) || pattern_from_spec("vs-preset:qwen2.5-3b", &m, n, 1, 0, &pat, &e) ||
      layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &lay, &e) || tiles_build(&pat, 0, &lay, 0, ti, &e) ||
      tiles_masks_build(&pat, 0, masks, &e))
    fprintf(stderr, "bench: qwen mix: %s\n", e.msg), exit(1);
  if (dump) {
    char path[512];
    snprintf(path, sizeof path, "%s/preset_%lld_pattern.bin", dump, (long long)n);
    FILE *f = fopen(path, "wb");
    int32_t heads = pat.heads;
    int ok = f && fwrite(&heads, 4, 1, f) == 1;
    for (int h = 0; ok && h < pat.heads; h++) {
      const head_pattern *hp = pattern_head(&pat, 0, h);
      int32_t cnt[2] = {hp->n_vertical, hp->n_slash};
      ok = fwrite(cnt, 4, 2, f) == 2 && fwrite(hp->vertical, 4, (size_t)cnt[0], f) == (size_t)cnt[0] &&
           fwrite(hp->slash, 4, (size_t)cnt[1], f) == (size_t)cnt[1];
    }
    if (!ok || fclose(f) != 0) fprintf(stderr, "bench: cannot write %s\n", path), exit(1);
  }
  layout_free(&lay);
  pattern_free(&pat);
}

// Median of REPS timed default forwards over the input sets (after WARM), in ms.
static double time_fwd(const sa_shape *sh, void **q, void **k, void **v, const int64_t *posd, const sa_gpu_index *gix,
                       const head_mask *dmasks, void *ob, float *lse, cudaEvent_t e0, cudaEvent_t e1) {
  float t[REPS];
  for (int it = 0; it < WARM + REPS; it++) {
    int s = it % SETS;
    CK(cudaEventRecord(e0));
    SR(sa_fwd(sh, q[s], k[s], v[s], posd, posd, gix, 0, dmasks, ob, lse, NULL, NULL, NULL, E));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    if (it >= WARM) CK(cudaEventElapsedTime(&t[it - WARM], e0, e1));
  }
  qsort(t, REPS, sizeof(float), bench_cmp_f);
  return (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
}

static double dev_rel_err(const void *a, const void *b, int64_t n, int bf16);

// --fwd-variants: each listed forward variant timed on index gix (median ms), and its O and LSE on input set 0
// against the default forward's: "=" when every byte is equal, else the relative errors. One line, `what` first.
static void variants_line(const char *what, const sa_shape *sh, void **q, void **k, void **v, const int64_t *posd,
                          const sa_gpu_index *gix, const head_mask *dmasks, cudaEvent_t e0, cudaEvent_t e1) {
  if (!n_fwd_vars) return;
  int64_t nqo = sh->n_q * sh->heads * sh->head_dim, nl = sh->n_q * sh->heads;
  void *ob[2];
  float *lse[2];
  for (int i = 0; i < 2; i++) {
    CK(cudaMalloc(&ob[i], 2 * (size_t)nqo));
    CK(cudaMalloc((void **)&lse[i], 4 * (size_t)nl));
  }
  sa_fwd_variant = -1;
  SR(sa_fwd(sh, q[0], k[0], v[0], posd, posd, gix, 0, dmasks, ob[0], lse[0], NULL, NULL, NULL, E));
  printf("fwd variants %s:", what);
  for (int x = 0; x < n_fwd_vars; x++) {
    sa_fwd_variant = fwd_vars[x];
    double t = time_fwd(sh, q, k, v, posd, gix, dmasks, ob[1], lse[1], e0, e1);
    SR(sa_fwd(sh, q[0], k[0], v[0], posd, posd, gix, 0, dmasks, ob[1], lse[1], NULL, NULL, NULL, E));
    CK(cudaDeviceSynchronize());
    double eo = dev_rel_err(ob[1], ob[0], nqo, 1), el = dev_rel_err(lse[1], lse[0], nl, 0);
    char cmp[64];
    if (eo == 0 && el == 0) snprintf(cmp, sizeof cmp, "=");
    else snprintf(cmp, sizeof cmp, "O %.2e LSE %.2e", eo, el);
    printf("%s v%d %.2f ms (%s)", x ? "," : "", fwd_vars[x], t, cmp);
  }
  sa_fwd_variant = -1;
  printf("; vs the default\n");
  fflush(stdout);
  for (int i = 0; i < 2; i++) {
    CK(cudaFree(ob[i]));
    CK(cudaFree(lse[i]));
  }
}

// ||a - b|| / ||b|| of n device values (bf16 when bf16, else fp32), -inf entries equal on both sides skipped.
static double dev_rel_err(const void *a, const void *b, int64_t n, int bf16) {
  size_t es = bf16 ? 2 : 4;
  void *ha = malloc(es * (size_t)n), *hb = malloc(es * (size_t)n);
  CK(cudaMemcpy(ha, a, es * (size_t)n, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb, b, es * (size_t)n, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = bf16 ? __bfloat162float(((__nv_bfloat16 *)ha)[i]) : ((float *)ha)[i];
    double y = bf16 ? __bfloat162float(((__nv_bfloat16 *)hb)[i]) : ((float *)hb)[i];
    if (x == y) continue;  // also both -inf
    num += (x - y) * (x - y), den += y * y;
  }
  free(ha), free(hb);
  return den > 0 ? sqrt(num / den) : num > 0 ? INFINITY : 0;
}

// The budget mix's forward on the runs form (plan/tiles_runs.c) next to its tile form: one row with the
// runs form's 64-key chunks as a share of the tile form's, its build time on the host, the default forward
// on each form, and the runs form's O and LSE against the tile form's on input set 0.
static void runs_row(int64_t N, const tile_index *ti, const head_mask *masks, const sa_shape *sh, void **q, void **k,
                     void **v, const int64_t *posd, const sa_gpu_index *gix, const head_mask *dmasks, void *ob, float *lse,
                     double t_tiles, cudaEvent_t e0, cudaEvent_t e1) {
  layout lay;
  tile_index tr;
  SR(layout_build(LAYOUT_CONTIGUOUS, N, 1, 1, NULL, &lay, E));
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  SR(tiles_runs_build(ti, masks, &lay, &tr, E));
  clock_gettime(CLOCK_MONOTONIC, &b);
  double build_s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  double c_tiles = 2.0 * (double)ti->n_tiles, c_runs = 2.0 * (double)tr.n_tiles + (double)tr.n_runs;
  sa_gpu_index gr;
  SR(sa_gpu_index_upload(&tr, &gr, E));
  double t_runs = time_fwd(sh, q, k, v, posd, &gr, dmasks, ob, lse, e0, e1);
  char what[64];
  snprintf(what, sizeof what, "runs form %lldK", (long long)(N / 1024));
  variants_line(what, sh, q, k, v, posd, &gr, dmasks, e0, e1);
  int64_t nqo = N * sh->heads * sh->head_dim, nl = N * sh->heads;
  void *ob2;
  float *lse2;
  CK(cudaMalloc(&ob2, 2 * (size_t)nqo));
  CK(cudaMalloc((void **)&lse2, 4 * (size_t)nl));
  SR(sa_fwd(sh, q[0], k[0], v[0], posd, posd, gix, 0, dmasks, ob, lse, NULL, NULL, NULL, E));
  SR(sa_fwd(sh, q[0], k[0], v[0], posd, posd, &gr, 0, dmasks, ob2, lse2, NULL, NULL, NULL, E));
  CK(cudaDeviceSynchronize());
  double eo = dev_rel_err(ob2, ob, nqo, 1), el = dev_rel_err(lse2, lse, nl, 0);
  // Both forms against float64 attention on a sample of (row, head) pairs of set 0: every key the head's
  // mask keeps (sa_mask_keeps over all positions <= the row), from the bf16 inputs the GPU read.
  enum { SAMPLE = 512 };
  int H = sh->heads, KH = sh->kv_heads, D = sh->head_dim;
  int64_t nkv = N * KH * D;
  __nv_bfloat16 *kh = (__nv_bfloat16 *)malloc(2 * (size_t)nkv), *vh = (__nv_bfloat16 *)malloc(2 * (size_t)nkv);
  CK(cudaMemcpy(kh, k[0], 2 * (size_t)nkv, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(vh, v[0], 2 * (size_t)nkv, cudaMemcpyDeviceToHost));
  double num[2] = {0, 0}, lnum[2] = {0, 0}, den = 0, lden = 0, *acc = (double *)malloc(sizeof(double) * (size_t)D);
  uint64_t rs = 99;
  for (int x = 0; x < SAMPLE; x++) {
    int64_t r = (int64_t)(ib_uniform(&rs) * (double)N), h = x % H;
    if (r >= N) r = N - 1;
    __nv_bfloat16 qr[128], o_g[2][128];
    float l_g[2];
    int64_t off = (r * H + h) * D;
    CK(cudaMemcpy(qr, (const __nv_bfloat16 *)q[0] + off, 2 * (size_t)D, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o_g[0], (const __nv_bfloat16 *)ob + off, 2 * (size_t)D, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o_g[1], (const __nv_bfloat16 *)ob2 + off, 2 * (size_t)D, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&l_g[0], lse + h * N + r, 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&l_g[1], lse2 + h * N + r, 4, cudaMemcpyDeviceToHost));
    double mx = -INFINITY, sum = 0;
    int64_t kvh = h / (H / KH);
    for (int pass = 0; pass < 2; pass++) {  // the row max, then the sums
      if (pass) memset(acc, 0, sizeof(double) * (size_t)D);
      for (int64_t kk = 0; kk <= r; kk++) {
        if (!sa_mask_keeps(&masks[h], r, kk)) continue;
        const __nv_bfloat16 *kr = kh + (kk * KH + kvh) * D, *vr = vh + (kk * KH + kvh) * D;
        double dot = 0;
        for (int c = 0; c < D; c++) dot += (double)__bfloat162float(qr[c]) * __bfloat162float(kr[c]);
        dot *= sh->scale;
        if (!pass) {
          mx = dot > mx ? dot : mx;
          continue;
        }
        double p = exp(dot - mx);
        sum += p;
        for (int c = 0; c < D; c++) acc[c] += p * __bfloat162float(vr[c]);
      }
    }
    if (sum == 0) continue;
    double lt = mx + log(sum);
    for (int c = 0; c < D; c++) {
      double t = acc[c] / sum;
      den += t * t;
      for (int f = 0; f < 2; f++) num[f] += (__bfloat162float(o_g[f][c]) - t) * (__bfloat162float(o_g[f][c]) - t);
    }
    lden += lt * lt;
    for (int f = 0; f < 2; f++) lnum[f] += (l_g[f] - lt) * (l_g[f] - lt);
  }
  free(kh), free(vh), free(acc);
  printf("runs form %6lldK: tile chunks %.0f (tiles %lld, bars %lld), runs form chunks %.0f = %.1f%% (FULL tiles %lld, runs %lld, bars %lld),"
         " built in %.2f s; fwd tiles %.2f ms, runs %.2f ms (%.2fx); runs vs tiles: O %.2e, LSE %.2e;"
         " vs float64 on %d sampled rows: tiles O %.2e LSE %.2e, runs O %.2e LSE %.2e\n",
         (long long)(N / 1024), c_tiles, (long long)ti->n_tiles, (long long)ti->n_bars, c_runs, 100 * c_runs / c_tiles,
         (long long)tr.n_tiles, (long long)tr.n_runs, (long long)tr.n_bars, build_s, t_tiles, t_runs, t_tiles / t_runs, eo, el,
         (int)SAMPLE, sqrt(num[0] / den), sqrt(lnum[0] / lden), sqrt(num[1] / den), sqrt(lnum[1] / lden));
  fflush(stdout);
  CK(cudaFree(ob2));
  CK(cudaFree(lse2));
  sa_gpu_index_free(&gr);
  tiles_free(&tr);
  layout_free(&lay);
}

int main(int argc, char **argv) {
  int quick = 0, fast = 0, mix = 0, defaults = 0, dump_only = 0, skip_cmp = 0, shapes = 0, fwd_only = 0;
  const char *dump = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) quick = 1;
    if (strcmp(argv[i], "--fast") == 0) fast = 1;
    if (strcmp(argv[i], "--mix") == 0) mix = 1;
    if (strcmp(argv[i], "--defaults") == 0) defaults = 1;
    if (strcmp(argv[i], "--skip-cmp") == 0) skip_cmp = defaults = 1;  // the defaults, and every Hopper forward and backward variant
    if (strcmp(argv[i], "--dump-only") == 0 && i + 1 < argc) dump = argv[++i], dump_only = 1;
    if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump = argv[++i];
    if (strcmp(argv[i], "--shapes") == 0) shapes = defaults = 1;
    if (strcmp(argv[i], "--fwd-only") == 0) fwd_only = 1;
    if (strcmp(argv[i], "--fwd-variants") == 0 && i + 1 < argc)
      for (char *p = argv[++i]; *p && n_fwd_vars < 8; p += *p == ',') {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 5 || x == 1) fprintf(stderr, "bench: --fwd-variants: variants 0, 2-5\n"), exit(2);
        fwd_vars[n_fwd_vars++] = (int)x, p = end;
      }
  }
  // SR_BWD_WS_CAP: the backward's part size in query chunks (sa_bwd_ws_cap; 0 or unset: automatic).
  if (getenv("SR_BWD_WS_CAP")) sa_bwd_ws_cap = atoi(getenv("SR_BWD_WS_CAP"));
  // SR_BWD_BAR_CAP: variant 3's part size of a bar walk in 64-row steps (sa_bwd_bar_cap; 0 or unset: automatic).
  if (getenv("SR_BWD_BAR_CAP")) sa_bwd_bar_cap = atoi(getenv("SR_BWD_BAR_CAP"));
  bcase cs_main[] = {{"dense causal", 0, 16384}, {"dense causal", 0, 65536}, {"vs-like", 1, 65536}, {"vs-like", 1, 131072},
                     {"qwen mix", 2, 65536}, {"qwen mix", 2, 131072}};
  // --shapes: the dense causal goals' other shapes (the default kernels only): 128K at the Qwen2.5-3B shape, MHA
  // (16 / 16 heads) and d 64 (16 / 2) at 16K and 64K, as peers.py --shapes times cuDNN on them.
  bcase cs_shapes[] = {{"dense causal", 0, 131072}, {"dense MHA", 0, 16384, 16, 16, 128}, {"dense MHA", 0, 65536, 16, 16, 128},
                       {"dense d64", 0, 16384, 16, 2, 64}, {"dense d64", 0, 65536, 16, 2, 64}};
  bcase *cs = shapes ? cs_shapes : cs_main;
  int ncs = shapes ? 5 : quick && !dump_only ? 1 : 6;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  printf("forward variants (sa_fwd_variant): v0 mma.sync, v2 wgmma, v3 warp-specialized wgmma with turns, v4 without,"
         " v5 v3 with the windowed keep bits (--fwd-variants); fwd = the default (%s)\n",
         sa_wgmma_built() ? "v5" : "v0, no sm_90a image");
  printf("backward variants (sa_bwd_variant): b0 mma.sync, b1 split wgmma kernels (deterministic), b2 warp-specialized (dQ by TMA reduction),"
         " b3 b2 with the bars' split walk, b4 the bars on the warp-specialized kernel, b5 b4 in pairs of compute chunks"
         " (SR_BWD_VARIANT=N makes bN the bwd column); bwd = the default (b%d)\n",
         sa_bwd_default_variant());
  printf("%-13s %7s %9s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %9s\n", "mask", "N", "work", "fwd ms",
         "fwd TF/s", "v0 ms", "v2 ms", "v3 ms", "v4 ms", "b0 ms", "b1 ms", "b2 ms", "b3 ms", "bwd ms",
         "bwd TF/s", "fwdbwd ms");
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  uint64_t st = 7;
  for (int c = 0; c < ncs; c++) {
    const int H = cs[c].h ? cs[c].h : 16, KH = cs[c].kh ? cs[c].kh : 2, D = cs[c].d ? cs[c].d : 128;
    int64_t N = cs[c].n, nqo = N * H * D, nkv = N * KH * D, nl = N * H;
    if (cs[c].vs == 2 && dump) {  // the mix's mask for peers.py, also under --dump-only
      tile_index tm;
      head_mask *mm;
      qwen_mix(N, dump, &tm, &mm);
      tiles_free(&tm), tiles_masks_free(mm, H);
    }
    int dumped = c == 0 || c == 2 || c == 4;  // dense 16K, VS-like 64K, the mix at 64K
    if (!shapes && ((fast && c >= 2 && c != 3) || (mix && c < 3) || (dump_only && !dumped))) continue;
    if (shapes && (dump || quick)) continue;  // --shapes: timing only
    // SR_BENCH_ONLY: only the cases whose name holds it (e.g. "d64": an A/B of one shape's kernels in a short call).
    if (getenv("SR_BENCH_ONLY") && !strstr(cs[c].name, getenv("SR_BENCH_ONLY"))) continue;
    tile_index ti;
    head_mask vs_masks[16], *masks = vs_masks, *mix_masks = NULL, *dmasks = NULL;
    if (cs[c].vs == 2) qwen_mix(N, NULL, &ti, &mix_masks), masks = mix_masks;
    else if (cs[c].vs) ib_vs_like(&ti, masks, H, N, 128, 4096, 1000, 1);
    else ib_dense_causal(&ti, H, N);
    tile_index_t tt;
    ib_transpose(&ti, 0, N, &tt);
    sa_gpu_index gix;
    sa_gpu_index_t gtt;
    SR(sa_gpu_index_upload(&ti, &gix, E));
    SR(sa_gpu_index_t_upload(&tt, H, KH, &gtt, E));
    if (cs[c].vs) SR(sa_gpu_masks_upload(masks, H, &dmasks, E));
    // Work actually computed: 64-key chunks x 128 rows, against the causal N^2/2 x heads.
    double chunks = 0;
    for (int64_t x = 0; x < (int64_t)H * ti.n_qtiles; x++) {
      chunks += 2.0 * (ti.tile_cnt[x * 2 + 1] - ti.tile_cnt[x * 2]) + ceil((ti.bar_cnt[x * 2 + 1] - ti.bar_cnt[x * 2]) / 64.0);
    }
    double work = chunks * 64.0 * 128.0 / ((double)N * N / 2 * H);
    int64_t *pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) pos[i] = i;
    int64_t *posd;
    CK(cudaMalloc((void **)&posd, sizeof(int64_t) * (size_t)N));
    CK(cudaMemcpy(posd, pos, sizeof(int64_t) * (size_t)N, cudaMemcpyHostToDevice));
    void *q[SETS], *k[SETS], *v[SETS], *dout[SETS], *ob;
    for (int s = 0; s < SETS; s++)
      q[s] = bench_rand_bf16(nqo, &st), k[s] = bench_rand_bf16(nkv, &st), v[s] = bench_rand_bf16(nkv, &st),
      dout[s] = bench_rand_bf16(nqo, &st);
    float *lse, *d_row, *dq, *dk, *dv;
    CK(cudaMalloc(&ob, sizeof(__nv_bfloat16) * (size_t)nqo));
    CK(cudaMalloc((void **)&lse, sizeof(float) * (size_t)nl));
    CK(cudaMalloc((void **)&d_row, sizeof(float) * (size_t)nl));
    CK(cudaMalloc((void **)&dq, sizeof(float) * (size_t)nqo));
    CK(cudaMalloc((void **)&dk, sizeof(float) * (size_t)nkv));
    CK(cudaMalloc((void **)&dv, sizeof(float) * (size_t)nkv));
    sa_shape sh = {N, N, H, KH, D, (float)(1.0 / sqrt((double)D))};
    float t_fwd[7][REPS], t_bwd[REPS];
    double mv[7], mbv[5];
    if (!dump_only) {
    for (int var = -1; var < 5; var++) {
      mv[var + 1] = NAN;
      if ((var >= 2 && !sa_wgmma_built()) || var == 1 || ((fast || defaults) && var >= 0 && !(skip_cmp && var >= 2)))
        continue;
      sa_fwd_variant = var;
      for (int it = 0; it < WARM + REPS; it++) {
        int s = it % SETS;
        CK(cudaEventRecord(e0));
        SR(sa_fwd(&sh, q[s], k[s], v[s], posd, posd, &gix, 0, dmasks, ob, lse, NULL, NULL, NULL, E));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        if (it >= WARM) CK(cudaEventElapsedTime(&t_fwd[var + 1][it - WARM], e0, e1));
      }
      qsort(t_fwd[var + 1], REPS, sizeof(float), bench_cmp_f);
      mv[var + 1] = (t_fwd[var + 1][REPS / 2 - 1] + t_fwd[var + 1][REPS / 2]) / 2;
    }
    sa_fwd_variant = -1;
    for (int bv = -1; bv < 4; bv++) {
    mbv[bv + 1] = NAN;
    if ((bv >= 1 && !sa_wgmma_built()) || (defaults && bv >= 0 && !(skip_cmp && bv >= 1)) || fwd_only) continue;
    sa_bwd_variant = bv;
    for (int it = 0; it < WARM + REPS; it++) {
      int s = it % SETS;
      SR(sa_fwd(&sh, q[s], k[s], v[s], posd, posd, &gix, 0, dmasks, ob, lse, NULL, NULL, NULL, E));  // this set's LSE
      CK(cudaEventRecord(e0));
      CK(cudaMemsetAsync(dq, 0, sizeof(float) * (size_t)nqo));
      CK(cudaMemsetAsync(dk, 0, sizeof(float) * (size_t)nkv));
      CK(cudaMemsetAsync(dv, 0, sizeof(float) * (size_t)nkv));
      SR(sa_bwd_prepare(N, H, D, ob, dout[s], d_row, NULL, E));
      SR(sa_bwd(&sh, q[s], k[s], v[s], lse, d_row, dout[s], posd, posd, &gix, &gtt, 0, dmasks, dq, dk, dv, NULL, E));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      if (it >= WARM) CK(cudaEventElapsedTime(&t_bwd[it - WARM], e0, e1));
    }
    qsort(t_bwd, REPS, sizeof(float), bench_cmp_f);
    mbv[bv + 1] = (t_bwd[REPS / 2 - 1] + t_bwd[REPS / 2]) / 2;
    }
    sa_bwd_variant = -1;
    double mf = mv[0], mb = mbv[0];
    double flop = 4.0 * N * N * D * H / 2;  // causal forward (ANCHORS.md); backward counts 2.5x
    if (cs[c].vs)
      printf("%-13s %6lldK %8.1f%% %9.2f %9s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9s %9.2f\n",
             cs[c].name, (long long)(N / 1024), 100 * work, mf, "-", mv[1], mv[3], mv[4], mv[5], mbv[1], mbv[2],
             mbv[3], mbv[4], mb, "-", mf + mb);
    else
      printf("%-13s %6lldK %8.1f%% %9.2f %9.0f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9.0f %9.2f\n",
             cs[c].name, (long long)(N / 1024), 100 * work, mf, flop / mf / 1e9, mv[1], mv[3], mv[4], mv[5], mbv[1],
             mbv[2], mbv[3], mbv[4], mb, 2.5 * flop / mb / 1e9, mf + mb);
    fflush(stdout);
    char what[64];
    snprintf(what, sizeof what, "%s %lldK", cs[c].name, (long long)(N / 1024));
    variants_line(what, &sh, q, k, v, posd, &gix, dmasks, e0, e1);
    if (cs[c].vs == 2) runs_row(N, &ti, masks, &sh, q, k, v, posd, &gix, dmasks, ob, lse, mf, e0, e1);
    }
    if (dump && dumped) {  // set 0 once more, outputs kept for the independent check
      SR(sa_fwd(&sh, q[0], k[0], v[0], posd, posd, &gix, 0, dmasks, ob, lse, NULL, NULL, NULL, E));
      CK(cudaMemset(dq, 0, sizeof(float) * (size_t)nqo));
      CK(cudaMemset(dk, 0, sizeof(float) * (size_t)nkv));
      CK(cudaMemset(dv, 0, sizeof(float) * (size_t)nkv));
      SR(sa_bwd_prepare(N, H, D, ob, dout[0], d_row, NULL, E));
      SR(sa_bwd(&sh, q[0], k[0], v[0], lse, d_row, dout[0], posd, posd, &gix, &gtt, 0, dmasks, dq, dk, dv, NULL, E));
      CK(cudaDeviceSynchronize());
      const char *names[9] = {"q", "k", "v", "dout", "o", "lse", "dq", "dk", "dv"};
      void *ptrs[9] = {q[0], k[0], v[0], dout[0], ob, lse, dq, dk, dv};
      size_t bytes[9] = {2 * (size_t)nqo, 2 * (size_t)nkv, 2 * (size_t)nkv, 2 * (size_t)nqo, 2 * (size_t)nqo,
                         4 * (size_t)nl, 4 * (size_t)nqo, 4 * (size_t)nkv, 4 * (size_t)nkv};
      for (int x = 0; x < 9; x++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%lld_%s.bin", dump, cs[c].vs == 2 ? "mix" : cs[c].vs ? "vs" : "dense", (long long)N, names[x]);
        void *h = malloc(bytes[x]);
        CK(cudaMemcpy(h, ptrs[x], bytes[x], cudaMemcpyDeviceToHost));
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(h, 1, bytes[x], f) != bytes[x]) fprintf(stderr, "bench: cannot write %s\n", path), exit(1);
        fclose(f);
        free(h);
      }
    }
    for (int s = 0; s < SETS; s++) {
      CK(cudaFree(q[s]));
      CK(cudaFree(k[s]));
      CK(cudaFree(v[s]));
      CK(cudaFree(dout[s]));
    }
    CK(cudaFree(ob));
    CK(cudaFree(lse));
    CK(cudaFree(d_row));
    CK(cudaFree(dq));
    CK(cudaFree(dk));
    CK(cudaFree(dv));
    CK(cudaFree(posd));
    free(pos);
    sa_gpu_index_free(&gix), sa_gpu_index_t_free(&gtt), ib_transpose_free(&tt);
    if (cs[c].vs == 2) tiles_free(&ti);
    else ib_free(&ti);
    if (dmasks) sa_gpu_masks_free(dmasks, H);
    if (mix_masks) tiles_masks_free(mix_masks, H);
    else if (cs[c].vs)
      for (int h = 0; h < H; h++) free((void *)vs_masks[h].vbits), free((void *)vs_masks[h].sbits);
  }
  return 0;
}

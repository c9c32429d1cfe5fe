// gpu_test.cu — bin/sparsering-gpu-test: every GPU kernel of kernels/ against the CPU reference
// (kernels/ref_attn.c) on fresh random inputs, outputs poisoned with NaN before each run and every
// element checked (every forward and backward variant). Relative error ||out - ref|| / ||ref||: <= 1e-2 for bf16 outputs and gradients,
// <= 1e-3 for LSE; LSE = -inf must match exactly; the backward must repeat bit for bit.
// Then the bars' compact form: sa_bars_expand and sa_bars_t_expand must write every list tiles_build,
// tiles_runs_build and tiles_transpose hold, bit for bit (vs-topp, vs-preset, vs-like over contiguous, zigzag and
// striped layouts, 1 to 3 ranks, every query rank and source).
// Usage: sparsering-gpu-test [--small] [--bwd] [--fwd] [--bwd-only RUN,RUN..]   (--fwd: backward variant 0 only; --small:
//   the short cases, for compute-sanitizer; --bwd: forward variant 0 only, whose results the backward takes: every
//   backward variant, less time; --bwd-only: as --bwd with only the backward runs named, e.g. 5,5s for racecheck of
//   one variant; an unknown name exits 2)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "kernels/test/index_build.h"
extern "C" {  // the planner's C API
#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
}


#include "kernels/test/check.h"

// ---- cases ---------------------------------------------------------------------------------------

typedef struct {
  const char *name;
  int kind;  // pattern kind, -1 the closed-form VS-like mask, -2 VS built by the planner (plan/tiles.c),
             // -3 the same with scattered slashes, the forward on the runs form (tiles_runs_build)
  int64_t N, g;
  int W, qr, H, KH, d, bars, small;
  int nvert;  // kind -1: vertical lines a head (0: 100)
} tcase;

static const tcase cases[] = {
    {"dense d128 N777", PATTERN_DENSE, 777, 1, 1, 0, 16, 2, 128, 0, 0},
    {"dense d64 N1000 W2", PATTERN_DENSE, 1000, 128, 2, 1, 16, 2, 64, 0, 0},
    {"window d128 N1500 W2", PATTERN_WINDOW, 1500, 64, 2, 1, 16, 2, 128, 0, 0},
    {"vs+bars d128 N1200", PATTERN_VS, 1200, 1, 1, 0, 16, 2, 128, 1, 0},
    {"vs+bars d64 N1900 W3", PATTERN_VS, 1900, 128, 3, 2, 16, 2, 64, 1, 0},
    // stripes of 40 tokens: a partial tile's keys are not at consecutive positions (element-wise keep bits)
    {"vs+bars d128 W2 g40", PATTERN_VS, 1300, 40, 2, 1, 16, 2, 128, 1, 0},
    {"block d128 N1100", PATTERN_BLOCK, 1100, 1, 1, 0, 16, 2, 128, 0, 0},
    {"vs-like d128 N3000", -1, 3000, 1, 1, 0, 16, 2, 128, 1, 0},
    // more bar keys than one compute chunk a head holds: 3 chunks in 14 heads, 2 in the others (backward variant 5's
    // pairs and its lone last chunks), and 3 in every head of the small one
    {"vs-like d64 N3000 200 verticals", -1, 3000, 1, 1, 0, 16, 2, 64, 1, 0, 200},
    {"vs-like d128 N1300 300 verticals", -1, 1300, 1, 1, 0, 16, 2, 128, 1, 1, 300},
    {"planner vs striped W2", -2, 2100, 128, 2, 1, 16, 2, 128, 1, 0},
    {"planner vs striped W3 d64", -2, 1700, 128, 3, 0, 16, 2, 64, 1, 1},
    {"planner vs runs W2", -3, 2100, 128, 2, 1, 16, 2, 128, 1, 1},
    {"planner vs runs d64 N3000", -3, 3000, 128, 1, 0, 16, 2, 64, 1, 0},
    {"window d64 N300 gqa1", PATTERN_WINDOW, 300, 1, 1, 0, 4, 4, 64, 0, 1},
    {"vs+bars d128 N400 gqa8", PATTERN_VS, 400, 1, 1, 0, 8, 1, 128, 1, 1},
    {"dense d64 N1", PATTERN_DENSE, 1, 1, 1, 0, 2, 1, 64, 0, 1},
};

// The backward runs of a case: sa_bwd_variant 0 (mma.sync), 1 (split wgmma kernels), 2 (warp-specialized, dQ by
// the TMA's reductions), "2s" (2 with every KV tile's walk split into parts of 2 query chunks, sa_bwd_ws_cap, so
// dK and dV are added by atomics), 3 (2 with the bars' split walk, added by atomics) and "3s" (3 with the tiles'
// and the bars' walks in parts of 2 steps, sa_bwd_bar_cap), 4 (the tiles of 2 and the bars on the same warp-specialized
// machinery: gathered keys, dQ by the TMA's reductions) and "4s" (4 in parts of 2 steps), 5 (the bars in pairs of
// compute chunks of a head, walking the merged list of both chunks' query steps) and "5s" (5 in parts of 2 steps of a
// chunk's list: cuts at every query tile of the merged walk); 1 to 5s where the sm_90a image runs. kv_fixed, q_fixed:
// dK and dV, dQ add in a fixed order, so two runs agree bit for bit.
#define BWD_RUNS 10
static const struct {
  const char *name;
  int var, ws_cap, bar_cap, kv_fixed, q_fixed;
} bwd_runs[BWD_RUNS] = {{"0", 0, 0, 0, 1, 1}, {"1", 1, 0, 0, 1, 1}, {"2", 2, 0, 0, 1, 0},
                        {"2s", 2, 2, 0, 0, 0}, {"3", 3, 0, 0, 0, 0}, {"3s", 3, 2, 2, 0, 0},
                        {"4", 4, 0, 0, 0, 0}, {"4s", 4, 2, 2, 0, 0}, {"5", 5, 0, 0, 0, 0},
                        {"5s", 5, 2, 2, 0, 0}};

// --bwd-only NAME,NAME..: only those backward runs (e.g. "5,5s": compute-sanitizer's racecheck of one variant in a
// call's time); NULL: every run.
static const char *bwd_only;
static int bwd_sel(int bv) {
  if (!bwd_only) return 1;
  size_t n = strlen(bwd_runs[bv].name);
  for (const char *p = bwd_only; *p;) {
    size_t m = strcspn(p, ",");
    if (m == n && strncmp(p, bwd_runs[bv].name, n) == 0) return 1;
    p += m + (p[m] == ',');
  }
  return 0;
}

static uint64_t rng = 12345;
static int fwd_one;  // --bwd
static int bwd_one;  // --fwd
static double uni(void) { return ib_uniform(&rng); }

// Random head mask of a kind (bit sets), positions in [0, n).
static head_mask random_mask(int kind, int64_t n) {
  head_mask m;
  memset(&m, 0, sizeof m);
  m.kind = kind, m.n_tokens = n;
  int64_t words = n / 32 + 1;
  if (kind == PATTERN_WINDOW) m.sinks = 1 + (int64_t)(uni() * 64), m.window = 16 + (int64_t)(uni() * 300);
  if (kind == PATTERN_VS) {
    uint32_t *vb = (uint32_t *)calloc((size_t)words, 4), *sb = (uint32_t *)calloc((size_t)words, 4);
    int nv = 1 + (int)(uni() * 40), ns = 1 + (int)(uni() * 6);
    for (int i = 0; i < nv; i++) {
      int64_t k = (int64_t)(uni() * n);
      vb[k >> 5] |= 1u << (k & 31);
    }
    for (int i = 0; i < ns; i++) {  // slashes near the diagonal, so far tiles hold verticals only
      int64_t d = i == 0 ? 0 : (int64_t)(uni() * 200);
      if (d < n) sb[d >> 5] |= 1u << (d & 31);
    }
    m.vbits = vb, m.sbits = sb;
  }
  if (kind == PATTERN_BLOCK) {
    m.block = uni() < 0.5 ? 64 : 96;
    int64_t nb = (n + m.block - 1) / m.block;
    m.row_words = (nb + 63) / 64;
    uint64_t *bm = (uint64_t *)calloc((size_t)(nb * m.row_words), 8);
    for (int64_t a = 0; a < nb; a++)
      for (int64_t c = 0; c <= a; c++)
        if (c == a || uni() < 0.4) bm[a * m.row_words + c / 64] |= 1ull << (c % 64);
    m.bmask = bm;
  }
  return m;
}

// ---- helpers -----------------------------------------------------------------------------------------

static int64_t positions(int64_t N, int W, int64_t g, int r, int64_t *out) {
  int64_t n = 0;
  for (int64_t t = 0; t < N; t++)
    if ((t / g) % W == r) {
      if (out) out[n] = t;
      n++;
    }
  return n;
}

// Random bf16 tensor: device copy and the float values of the bf16 numbers (what the GPU sees).
static void *rand_bf16(int64_t n, float *host) {
  for (int64_t i = 0; i < n; i++) host[i] = (float)(2 * uni() - 1);
  return to_bf16_dev(host, n, host);
}

static void poison(void *d, size_t bytes) { CK(cudaMemset(d, 0xff, bytes)); }  // 0xffff.. is NaN in bf16 and fp32

static float *fetch_f32(const float *d, int64_t n) {
  float *h = (float *)malloc(sizeof(float) * (size_t)(n + 1));
  CK(cudaMemcpy(h, d, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
  return h;
}
static float *fetch_bf16(const void *d, int64_t n) {
  __nv_bfloat16 *b = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)(n + 1));
  float *h = (float *)malloc(sizeof(float) * (size_t)(n + 1));
  CK(cudaMemcpy(b, d, sizeof(__nv_bfloat16) * (size_t)n, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < n; i++) h[i] = __bfloat162float(b[i]);
  free(b);
  return h;
}

// ||out - ref|| / ||ref|| over finite reference entries; infinities must match exactly and NaN
// never passes (returns +inf then). ||ref|| = 0 compares the absolute norm.
static double rel_err(const float *out, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(out[i])) return INFINITY;
    if (isinf(ref[i])) {
      if (out[i] != ref[i]) return INFINITY;
      continue;
    }
    if (isinf(out[i])) return INFINITY;
    num += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]), den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

// ---- one case ----------------------------------------------------------------------------------------

typedef struct {
  double o_b, lse_b, o_run, lse_run, merge, dq, dk, dv;
  int det;
  int bad;  // a check that is not an error figure failed (the runs case: no runs, or sa_bwd took the runs form)
} errs;

static double fmax_(double a, double b) { return a > b ? a : b; }

static errs run_case(const tcase *c) {
  errs r;
  memset(&r, 0, sizeof r);
  int H = c->H, KH = c->KH, d = c->d, W = c->W;
  int64_t N = c->N, n_q = positions(N, W, c->g, c->qr, NULL), n_k[8];
  layout lay;
  if (c->kind <= -2) {  // the planner's striped layout spreads remainders its own way: use its counts
    SR(layout_build(LAYOUT_STRIPED, N, W, c->g, NULL, &lay, E));
    n_q = lay.rank_count[c->qr];
  }
  int64_t *qpos = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_q + 1)), *kpos[8];
  if (c->kind <= -2) layout_positions(&lay, c->qr, qpos);
  else positions(N, W, c->g, c->qr, qpos);
  for (int s = 0; s < W; s++) {
    n_k[s] = c->kind <= -2 ? lay.rank_count[s] : positions(N, W, c->g, s, NULL);
    kpos[s] = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_k[s] + 1));
    if (c->kind <= -2) layout_positions(&lay, s, kpos[s]);
    else positions(N, W, c->g, s, kpos[s]);
  }
  head_mask masks[64], *pmasks = NULL;
  tile_index ti;
  pattern pat;
  if (c->kind <= -2) {  // random VS heads through the planner: striped layout, tiles_build, its masks
    SR(pattern_alloc(&pat, N, 1, H, E));
    for (int h = 0; h < H; h++) {
      head_pattern *hp = pattern_head(&pat, 0, h);
      hp->kind = PATTERN_VS;
      hp->vertical = (int32_t *)malloc(sizeof(int32_t) * 64), hp->slash = (int32_t *)malloc(sizeof(int32_t) * 32);
      int nv = 0, ns = 0, scattered = c->kind == -3;
      for (int64_t k = 0; k < N && nv < 64; k++)
        if (uni() < 30.0 / N) hp->vertical[nv++] = (int32_t)k;
      for (int64_t d = 0; d < N && ns < (scattered ? 32 : 8); d++)
        if (d == 0 || (d < 300 && uni() < 0.01) || (scattered && uni() < 16.0 / N)) hp->slash[ns++] = (int32_t)d;
      hp->n_vertical = nv, hp->n_slash = ns;
    }
    SR(tiles_build(&pat, 0, &lay, c->qr, &ti, E));
    SR(tiles_masks_build(&pat, 0, &pmasks, E));
    for (int h = 0; h < H; h++) masks[h] = pmasks[h];
  } else if (c->kind < 0) {
    ib_vs_like(&ti, masks, H, N, 128, 512, c->nvert ? c->nvert : 100, 1);
  } else {
    for (int h = 0; h < H; h++) masks[h] = random_mask(c->kind, N);
    ib_bruteforce(&ti, H, W, c->qr, n_q, qpos, n_k, kpos, masks, c->bars);
  }
  int64_t nqo = n_q * H * d, nl = n_q * H;
  float *qh = (float *)malloc(sizeof(float) * (size_t)(nqo + 1)), *doh = (float *)malloc(sizeof(float) * (size_t)(nqo + 1));
  void *qd = rand_bf16(nqo, qh), *dod = rand_bf16(nqo, doh);
  float *kh[8], *vh[8];
  void *kd[8], *vd[8];
  int64_t *kposd[8];
  for (int s = 0; s < W; s++) {
    int64_t e = n_k[s] * KH * d;
    kh[s] = (float *)malloc(sizeof(float) * (size_t)(e + 1)), vh[s] = (float *)malloc(sizeof(float) * (size_t)(e + 1));
    kd[s] = rand_bf16(e, kh[s]), vd[s] = rand_bf16(e, vh[s]);
    kposd[s] = (int64_t *)dev_copy(kpos[s], sizeof(int64_t) * (size_t)n_k[s]);
  }
  int64_t *qposd = (int64_t *)dev_copy(qpos, sizeof(int64_t) * (size_t)n_q);
  sa_gpu_index gix, gix_runs, *gix_fwd = &gix;
  head_mask *dmasks;
  SR(sa_gpu_index_upload(&ti, &gix, E));
  // The runs form runs the forward; the reference and the backward take the tile form (the same elements).
  tile_index ti_runs;
  int64_t n_runs = -1;
  if (c->kind == -3) {
    SR(tiles_runs_build(&ti, pmasks, &lay, &ti_runs, E));
    SR(sa_gpu_index_upload(&ti_runs, &gix_runs, E));
    gix_fwd = &gix_runs, n_runs = ti_runs.n_runs;
    printf("  runs form: %lld runs, %lld tiles, %lld bars (tile form: %lld tiles, %lld bars)\n", (long long)ti_runs.n_runs,
           (long long)ti_runs.n_tiles, (long long)ti_runs.n_bars, (long long)ti.n_tiles, (long long)ti.n_bars);
  }
  SR(sa_gpu_masks_upload(masks, H, &dmasks, E));

  // ---- forward: per step O_b / LSE_b, running merge in the epilogue, and the standalone merge ----
  // Every forward variant (sa_fwd_variant 5, 4, 3: warp-specialized wgmma, 5 with the keep bits' windowed form, 2: wgmma,
  // then 0, whose results the backward uses);
  // the table shows the worst, the line above a case's row each variant's O_b error.
  float *o_run_ref = (float *)calloc((size_t)nqo + 1, 4), *lse_run_ref = (float *)malloc(sizeof(float) * (size_t)(nl + 1));
  float *o_run, *lse_run, *o_m, *lse_m, *lse_b;
  void *o_b;
  CK(cudaMalloc((void **)&o_run, sizeof(float) * (size_t)(nqo + 1)));
  CK(cudaMalloc((void **)&o_m, sizeof(float) * (size_t)(nqo + 1)));
  CK(cudaMalloc((void **)&lse_run, sizeof(float) * (size_t)(nl + 1)));
  CK(cudaMalloc((void **)&lse_m, sizeof(float) * (size_t)(nl + 1)));
  CK(cudaMalloc((void **)&lse_b, sizeof(float) * (size_t)(nl + 1)));
  CK(cudaMalloc(&o_b, sizeof(__nv_bfloat16) * (size_t)(nqo + 1)));
  // The references, once for all variants: each step alone from an empty state (O_b / LSE_b), and
  // the running state after every step.
  float *ob_ref[8], *lb_ref[8];
  memset(o_run_ref, 0, sizeof(float) * (size_t)nqo);
  for (int64_t i = 0; i < nl; i++) lse_run_ref[i] = -INFINITY;
  for (int s = 0; s < W; s++) {
    sa_shape sh = {n_q, n_k[s], H, KH, d, (float)(1.0 / sqrt((double)d))};
    ob_ref[s] = (float *)calloc((size_t)nqo + 1, 4), lb_ref[s] = (float *)malloc(sizeof(float) * (size_t)(nl + 1));
    for (int64_t i = 0; i < nl; i++) lb_ref[s][i] = -INFINITY;
    sa_ref_fwd(&sh, qh, kh[s], vh[s], qpos, kpos[s], &ti, s, masks, ob_ref[s], lb_ref[s]);
    sa_ref_fwd(&sh, qh, kh[s], vh[s], qpos, kpos[s], &ti, s, masks, o_run_ref, lse_run_ref);
  }
  double ob_var[6] = {0, 0, 0, 0, 0, 0};
  for (int var = 5; var >= 0; var--) {
  if ((var >= 2 && !sa_wgmma_built()) || (fwd_one && var) || var == 1) continue;
  sa_fwd_variant = var;
  float *neg_inf = (float *)malloc(sizeof(float) * (size_t)(nl + 1));
  for (int64_t i = 0; i < nl; i++) neg_inf[i] = -INFINITY;
  CK(cudaMemset(o_run, 0, sizeof(float) * (size_t)nqo));
  CK(cudaMemset(o_m, 0, sizeof(float) * (size_t)nqo));
  CK(cudaMemcpy(lse_run, neg_inf, sizeof(float) * (size_t)nl, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(lse_m, neg_inf, sizeof(float) * (size_t)nl, cudaMemcpyHostToDevice));
  free(neg_inf);
  for (int s = 0; s < W; s++) {
    sa_shape sh = {n_q, n_k[s], H, KH, d, (float)(1.0 / sqrt((double)d))};
    poison(o_b, sizeof(__nv_bfloat16) * (size_t)nqo), poison(lse_b, sizeof(float) * (size_t)nl);
    SR(sa_fwd(&sh, qd, kd[s], vd[s], qposd, kposd[s], gix_fwd, s, dmasks, o_b, lse_b, o_run, lse_run, NULL, E));
    SR(sa_merge(n_q, H, d, o_m, lse_m, o_b, lse_b, NULL, E));
    CK(cudaDeviceSynchronize());
    float *ob = fetch_bf16(o_b, nqo), *lb = fetch_f32(lse_b, nl);
    ob_var[var] = fmax_(ob_var[var], rel_err(ob, ob_ref[s], nqo));
    r.o_b = fmax_(r.o_b, ob_var[var]), r.lse_b = fmax_(r.lse_b, rel_err(lb, lb_ref[s], nl));
    free(ob), free(lb);
  }
  if (var) {  // this variant's final state, compared here before the next one overwrites it
    float *of = fetch_f32(o_run, nqo), *lf = fetch_f32(lse_run, nl);
    r.o_run = fmax_(r.o_run, rel_err(of, o_run_ref, nqo)), r.lse_run = fmax_(r.lse_run, rel_err(lf, lse_run_ref, nl));
    free(of), free(lf);
  }
  }
  for (int s = 0; s < W; s++) free(ob_ref[s]), free(lb_ref[s]);
  printf("  O_b by variant: 0 %.2e  2 %.2e  3 %.2e  4 %.2e  5 %.2e%s\n", ob_var[0], ob_var[2], ob_var[3], ob_var[4],
         ob_var[5], sa_wgmma_built() ? "" : " (no sm_90a image: 2-5 not run)");
  float *o_fin = fetch_f32(o_run, nqo), *l_fin = fetch_f32(lse_run, nl);
  float *o_mh = fetch_f32(o_m, nqo), *l_mh = fetch_f32(lse_m, nl);
  r.o_run = fmax_(r.o_run, rel_err(o_fin, o_run_ref, nqo)), r.lse_run = fmax_(r.lse_run, rel_err(l_fin, lse_run_ref, nl));
  r.merge = fmax_(rel_err(o_mh, o_run_ref, nqo), rel_err(l_mh, lse_run_ref, nl));

  // ---- backward with the final O (bf16, as the executor keeps it) and LSE ----
  __nv_bfloat16 *o16 = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)(nqo + 1));
  float *o16f = (float *)malloc(sizeof(float) * (size_t)(nqo + 1));
  for (int64_t i = 0; i < nqo; i++) o16[i] = __float2bfloat16(o_fin[i]), o16f[i] = __bfloat162float(o16[i]);
  void *od = dev_copy(o16, sizeof(__nv_bfloat16) * (size_t)nqo);
  // Every backward variant (bwd_runs), each run twice from zero (runs 2 bv and 2 bv + 1), which must agree bit
  // for bit where the variant adds in a fixed order.
  int nbv = sa_wgmma_built() && !bwd_one ? BWD_RUNS : 1;
  double bwd_var[BWD_RUNS][3];
  memset(bwd_var, 0, sizeof bwd_var);
  float *d_row, *dq[2 * BWD_RUNS], *dk[2 * BWD_RUNS][8], *dv[2 * BWD_RUNS][8];
  CK(cudaMalloc((void **)&d_row, sizeof(float) * (size_t)(nl + 1)));
  poison(d_row, sizeof(float) * (size_t)nl);
  SR(sa_bwd_prepare(n_q, H, d, od, dod, d_row, NULL, E));
  float *dq_ref = (float *)calloc((size_t)nqo + 1, 4);
  for (int rep = 0; rep < 2 * nbv; rep++) {
    CK(cudaMalloc((void **)&dq[rep], sizeof(float) * (size_t)(nqo + 1)));
    CK(cudaMemset(dq[rep], 0, sizeof(float) * (size_t)nqo));
  }
  for (int s = 0; s < W; s++) {
    sa_shape sh = {n_q, n_k[s], H, KH, d, (float)(1.0 / sqrt((double)d))};
    int64_t e = n_k[s] * KH * d;
    tile_index_t tt;
    if (c->kind <= -2) SR(tiles_transpose(&ti, s, n_k[s], &tt, E));
    else ib_transpose(&ti, s, n_k[s], &tt);
    sa_gpu_index_t gtt;
    SR(sa_gpu_index_t_upload(&tt, H, KH, &gtt, E));
    if (s == 0 && tt.n_bar_keys > 0) {  // what backward variant 5 pairs: heads by their count of bar compute chunks
      sa_bar_chunks bc;
      SR(sa_bar_chunks_build(&tt, H, KH, &bc, E));
      int per[64] = {0}, by[4] = {0};
      for (int x = 0; x < bc.n_hchunks; x++) per[bc.hc_head[x]]++;
      for (int h = 0; h < H; h++) by[per[h] < 3 ? per[h] : 3]++;
      printf("  bar compute chunks: %d; heads holding 0 / 1 / 2 / 3+: %d / %d / %d / %d\n", bc.n_hchunks, by[0], by[1], by[2],
             by[3]);
      sa_bar_chunks_free(&bc);
    }
    float *dk_ref = (float *)calloc((size_t)e + 1, 4), *dv_ref = (float *)calloc((size_t)e + 1, 4);
    sa_ref_bwd(&sh, qh, kh[s], vh[s], o16f, l_fin, doh, qpos, kpos[s], &ti, s, masks, dq_ref, dk_ref, dv_ref);
    for (int rep = 0; rep < 2 * nbv; rep++) {
      sa_bwd_variant = bwd_runs[rep / 2].var;
      sa_bwd_ws_cap = bwd_runs[rep / 2].ws_cap;
      sa_bwd_bar_cap = bwd_runs[rep / 2].bar_cap;
      CK(cudaMalloc((void **)&dk[rep][s], sizeof(float) * (size_t)(e + 1)));
      CK(cudaMalloc((void **)&dv[rep][s], sizeof(float) * (size_t)(e + 1)));
      CK(cudaMemset(dk[rep][s], 0, sizeof(float) * (size_t)e)); CK(cudaMemset(dv[rep][s], 0, sizeof(float) * (size_t)e));
      if (!bwd_sel(rep / 2)) continue;
      SR(sa_bwd(&sh, qd, kd[s], vd[s], lse_run, d_row, dod, qposd, kposd[s], &gix, &gtt, s, dmasks, dq[rep], dk[rep][s],
                dv[rep][s], NULL, E));
    }
    sa_bwd_variant = -1;
    sa_bwd_ws_cap = sa_bwd_bar_cap = 0;
    sr_error e_refuse;
    if (c->kind == -3 && s == 0)  // the backward refuses the forward form, before touching anything
      r.bad |= sa_bwd(&sh, qd, kd[s], vd[s], lse_run, d_row, dod, qposd, kposd[s], &gix_runs, &gtt, s, dmasks, dq[0],
                      dk[0][s], dv[0][s], NULL, &e_refuse) != SR_EINPUT;
    CK(cudaDeviceSynchronize());
    for (int bv = 0; bv < nbv; bv++) {
      if (!bwd_sel(bv)) continue;
      float *g0 = fetch_f32(dk[2 * bv][s], e), *g1 = fetch_f32(dk[2 * bv + 1][s], e);
      float *v0 = fetch_f32(dv[2 * bv][s], e), *v1 = fetch_f32(dv[2 * bv + 1][s], e);
      bwd_var[bv][1] = fmax_(bwd_var[bv][1], rel_err(g0, dk_ref, e));
      bwd_var[bv][2] = fmax_(bwd_var[bv][2], rel_err(v0, dv_ref, e));
      if (bwd_runs[bv].kv_fixed)
        r.det |= memcmp(g0, g1, sizeof(float) * (size_t)e) != 0 || memcmp(v0, v1, sizeof(float) * (size_t)e) != 0;
      free(g0), free(g1), free(v0), free(v1);
    }
    for (int bv = 0; bv < nbv; bv++) r.dk = fmax_(r.dk, bwd_var[bv][1]), r.dv = fmax_(r.dv, bwd_var[bv][2]);
    free(dk_ref), free(dv_ref);
    sa_gpu_index_t_free(&gtt);
    if (c->kind <= -2) tiles_transpose_free(&tt);
    else ib_transpose_free(&tt);
    for (int rep = 0; rep < 2 * nbv; rep++) {
      CK(cudaFree(dk[rep][s]));
      CK(cudaFree(dv[rep][s]));
    }
  }
  for (int bv = 0; bv < nbv; bv++) {
    if (!bwd_sel(bv)) continue;
    float *q0 = fetch_f32(dq[2 * bv], nqo), *q1 = fetch_f32(dq[2 * bv + 1], nqo);
    bwd_var[bv][0] = rel_err(q0, dq_ref, nqo);
    if (bwd_runs[bv].q_fixed) r.det |= memcmp(q0, q1, sizeof(float) * (size_t)nqo) != 0;
    free(q0), free(q1);
  }
  for (int bv = 0; bv < nbv; bv++) r.dq = fmax_(r.dq, bwd_var[bv][0]);
  printf("  dQ dK dV by backward variant:");
  for (int bv = 0; bv < nbv; bv++)
    if (bwd_sel(bv)) printf("  %s %.2e %.2e %.2e", bwd_runs[bv].name, bwd_var[bv][0], bwd_var[bv][1], bwd_var[bv][2]);
  printf("%s\n", nbv > 1 ? " (2s, 3s, 4s: split into parts of 2 steps)" : " (variants 1 to 4 not run)");
  free(dq_ref), free(o16), free(o16f), free(o_fin), free(l_fin), free(o_mh), free(l_mh);
  free(o_run_ref), free(lse_run_ref), free(qh), free(doh), free(qpos);
  for (int rep = 0; rep < 2 * nbv; rep++) CK(cudaFree(dq[rep])); CK(cudaFree(d_row)); CK(cudaFree(od)); CK(cudaFree(o_b));
  CK(cudaFree(o_run)); CK(cudaFree(o_m)); CK(cudaFree(lse_run)); CK(cudaFree(lse_m)); CK(cudaFree(lse_b));
  CK(cudaFree(qd)); CK(cudaFree(dod)); CK(cudaFree(qposd));
  for (int s = 0; s < W; s++) {
    free(kh[s]), free(vh[s]), free(kpos[s]);
    CK(cudaFree(kd[s])); CK(cudaFree(vd[s])); CK(cudaFree(kposd[s]));
  }
  sa_gpu_masks_free(dmasks, H), sa_gpu_index_free(&gix);
  if (c->kind == -3) sa_gpu_index_free(&gix_runs), tiles_free(&ti_runs);
  r.bad |= n_runs == 0;  // a runs case whose form has no runs tests nothing new
  if (c->kind <= -2) {
    tiles_free(&ti), tiles_masks_free(pmasks, H), pattern_free(&pat), layout_free(&lay);
  } else {
    ib_free(&ti);
    for (int h = 0; h < H; h++) free((void *)masks[h].vbits), free((void *)masks[h].sbits), free((void *)masks[h].bmask);
  }
  return r;
}

// ---- compact bars ----------------------------------------------------------------------------------

// Whether n int32 of device memory d equal host h.
static int same_i32(const int32_t *d, const int32_t *h, int64_t n) {
  int32_t *g = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (n > 0) CK(cudaMemcpy(g, d, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost));
  int ok = n == 0 || memcmp(g, h, sizeof(int32_t) * (size_t)n) == 0;
  free(g);
  return ok;
}

// One index's lists expanded on the GPU from its compact form against the host's; 1 when equal (or the host finds
// the index not of the compact kind, which the executor then uploads with its lists: counted in *stored).
static int bars_index_ok(const tile_index *t, int64_t *entries, int *stored) {
  tile_bar_cols cols;
  SR(tiles_bar_cols_build(t, &cols, E));
  if (!tiles_bars_compact_exact(t, &cols)) return tiles_bar_cols_free(&cols), ++*stored, 1;
  sa_gpu_index g;
  SR(sa_gpu_index_upload_compact(t, &cols, &g, E));
  int32_t *d;
  CK(cudaMalloc((void **)&d, sizeof(int32_t) * (size_t)(t->n_bars + 1)));
  poison(d, sizeof(int32_t) * (size_t)(t->n_bars + 1));
  SR(sa_bars_expand(&g, d, NULL, E));
  CK(cudaDeviceSynchronize());
  int ok = same_i32(d, t->bar_idx, t->n_bars) && g.d.bar_idx == NULL && g.bars_bytes == 4 * t->n_bars;
  *entries += t->n_bars;
  cudaFree(d);
  sa_gpu_index_free(&g);
  tiles_bar_cols_free(&cols);
  return ok;
}

// A transpose's bar_q_idx expanded on the GPU against the host's (and downloaded back whole).
static int bars_transpose_ok(const tile_index_t *tt, int H, int KH, int64_t *entries, int *stored) {
  if (!tiles_transpose_bars_compact_exact(tt)) return ++*stored, 1;
  sa_bar_chunks bc;
  SR(sa_bar_chunks_build(tt, H, KH, &bc, E));
  sa_gpu_index_t g;
  SR(sa_gpu_index_t_upload_compact(tt, &bc, &g, E));
  int64_t uses = tt->bar_q_cnt[tt->n_bar_keys];
  int32_t *d;
  CK(cudaMalloc((void **)&d, sizeof(int32_t) * (size_t)(uses + 1)));
  poison(d, sizeof(int32_t) * (size_t)(uses + 1));
  SR(sa_bars_t_expand(&g, d, NULL, E));
  CK(cudaDeviceSynchronize());
  int ok = same_i32(d, tt->bar_q_idx, uses) && g.d.bar_q_idx == NULL && g.compact_bars && g.bars_bytes == 4 * uses;
  *entries += uses;
  cudaFree(d);
  sa_gpu_index_t_free(&g);
  sa_bar_chunks_free(&bc);
  return ok;
}

// Every case of the compact form; returns the failures.
static int bars_cases(void) {
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_layers = 1, m.num_heads = 8;
  const char *specs[] = {"vs-topp:0.95", "vs-preset:qwen2.5-3b", "vs-like:4:64:64"};
  const layout_kind kinds[] = {LAYOUT_CONTIGUOUS, LAYOUT_ZIGZAG, LAYOUT_STRIPED};
  int fails = 0;
  for (int x = 0; x < 3; x++)
    for (int k = 0; k < 3; k++)
      for (int W = 1; W <= 3; W++) {
        int64_t N = 128 * 96 + 45 * W, entries = 0;
        int stored = 0, ok = 1;
        pattern pat;
        SR(pattern_from_spec(specs[x], &m, N, 5, 0, &pat, E));
        layout lay;
        SR(layout_build(kinds[k], N, W, 128, NULL, &lay, E));
        head_mask *masks;
        SR(tiles_masks_build(&pat, 0, &masks, E));
        for (int q = 0; q < W; q++) {
          tile_index ti, tf;
          SR(tiles_build(&pat, 0, &lay, q, &ti, E));
          ok &= bars_index_ok(&ti, &entries, &stored);
          SR(tiles_runs_build(&ti, masks, &lay, &tf, E));
          ok &= bars_index_ok(&tf, &entries, &stored);
          for (int s = 0; s < W; s++) {
            tile_index_t tt;
            SR(tiles_transpose(&ti, s, lay.rank_count[s], &tt, E));
            ok &= bars_transpose_ok(&tt, m.num_heads, 2, &entries, &stored);
            tiles_transpose_free(&tt);
          }
          tiles_free(&tf), tiles_free(&ti);
        }
        printf("bars %-22s %-10s W%d: %10lld entries, %d lists kept stored  %s\n", specs[x],
               k == 0 ? "contiguous" : k == 1 ? "zigzag" : "striped", W, (long long)entries, stored, ok ? "ok" : "FAIL");
        fails += !ok;
        tiles_masks_free(masks, pat.heads);
        layout_free(&lay);
        pattern_free(&pat);
      }
  return fails;
}

int main(int argc, char **argv) {
  int small = 0, fails = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--small") == 0) small = 1;
    if (strcmp(argv[i], "--bwd") == 0) fwd_one = 1;
    if (strcmp(argv[i], "--fwd") == 0) bwd_one = 1;
    if (strcmp(argv[i], "--bwd-only") == 0 && i + 1 < argc) bwd_only = argv[++i];
  }
  if (bwd_only) {  // every name must be a run's: a misspelt one would silently test nothing
    for (const char *p = bwd_only; *p;) {
      size_t m = strcspn(p, ",");
      int known = 0;
      for (int bv = 0; bv < BWD_RUNS; bv++) known |= strlen(bwd_runs[bv].name) == m && strncmp(p, bwd_runs[bv].name, m) == 0;
      if (!known) fprintf(stderr, "gpu-test: --bwd-only: '%.*s' is not a backward run (0 1 2 2s 3 3s 4 4s 5 5s)\n", (int)m, p), exit(2);
      p += m + (p[m] == ',');
    }
    fwd_one = 1;  // one forward variant: the run is about the backward
  }
  printf("%-24s %9s %9s %9s %9s %9s %9s %9s %9s %5s\n", "case", "O_b", "LSE_b", "O_run", "LSE_run", "merge", "dQ",
         "dK", "dV", "det");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (small && !cases[i].small) continue;
    errs r = run_case(&cases[i]);
    int ok = r.o_b <= 1e-2 && r.lse_b <= 1e-3 && r.o_run <= 1e-2 && r.lse_run <= 1e-3 && r.merge <= 1e-2 &&
             r.dq <= 1e-2 && r.dk <= 1e-2 && r.dv <= 1e-2 && !r.det && !r.bad;
    fails += !ok;
    printf("%-24s %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e %5s %s\n", cases[i].name, r.o_b, r.lse_b, r.o_run,
           r.lse_run, r.merge, r.dq, r.dk, r.dv, r.det ? "NO" : "yes", ok ? "ok" : "FAIL");
    fflush(stdout);
  }
  fails += bars_cases();
  printf("gpu-test: %d failed\n", fails);
  return fails ? 1 : 0;
}

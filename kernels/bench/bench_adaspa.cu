// bench_adaspa.cu — bin/sparsering-bench-adaspa: AdaSpa's LSE-cached search beside one dense forward on one GPU,
// both block-mass kernels in the same run (issue 26's goal: the search at most 0.5x the dense forward at 64K and
// 128K). Qwen2.5-3B attention shape by default (16 query heads, 2 KV heads, d = 128, bf16), random inputs uniform
// in [-1, 1] (the masses' cost does not depend on the values). Per N: the dense causal forward (sa_fwd, the default
// variant; its LSE is the cached one), the block masses by each kernel of adaspa_gpu_block_mass_by (mma always;
// wgmma where it applies: sm_90a, B = 64 or 128, with 4 of 16 exponentials on the FMA pipes, and as wgmma0 with
// all of them by ex2.approx, the default), and the selection the executor's search adds (adaspa_gpu_select
// twice: at the base sparsity, then at the head budgets; here 0.9 both times). CUDA events around each call, one
// warm-up, the median of --reps (5). Columns: milliseconds and the ratio to the dense forward; "search" = masses
// + the two selections; "diff" = the largest relative difference between the two kernels' masses (each is within
// the bound of docs/design.md of the float64 reference; bin/sparsering-gpu-test-vs checks that). On Hopper, right
// of the bar: the search that runs its own dense pass (the trainer's: each step a new sample), its masses from the
// pass's block table (sa_fwd_block_lse, adaspa_gpu_mass_from_table), costed as what it adds to that pass.
// Usage: sparsering-bench-adaspa [--n N,N..] [--block B] [--heads H] [--kv-heads KH] [--d D] [--reps R]
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "kernels/test/index_build.h"
#include "kernels/vs_gpu.h"

#include "kernels/bench/bench_common.cuh"
#include "kernels/test/check.h"

enum { MAX_REPS = 32, MAX_NS = 8 };

typedef struct {
  const void *q, *k, *v;
  const int64_t *pos;
  const sa_gpu_index *ix;
  sa_shape sh;
  int B;
  float *lse, *mass;
  void *o;
  float *o_run, *lse_run, *blk;  // the dense pass as the executor's search runs it (merged), and its block table
  uint64_t *mask;
  double *kt;
  int64_t nb, rw;
} bench_state;

// What one timed call runs: 0 the dense forward; the masses by 1 mma, 2 wgmma with 4 of 16 exponentials on the FMA
// pipes (or SR_ADASPA_POLY's share), 4 wgmma with every exponential by ex2.approx (the default); 3 the two selections;
// 5 the dense forward merged into (o_run, lse_run), as the executor's dense pass runs it, 6 the same with the block
// table (sa_fwd_block_lse), 7 the masses from the table, 8 the pass without output (no P V: the LSE and the table).
static void run_one(const bench_state *s, int what) {
  if (what == 0) {
    SR(sa_fwd(&s->sh, s->q, s->k, s->v, s->pos, s->pos, s->ix, 0, NULL, s->o, s->lse, NULL, NULL, NULL, E));
  } else if (what == 5) {
    SR(sa_fwd(&s->sh, s->q, s->k, s->v, s->pos, s->pos, s->ix, 0, NULL, NULL, NULL, s->o_run, s->lse_run, NULL, E));
  } else if (what == 6) {
    SR(sa_fwd_block_lse(&s->sh, s->q, s->k, s->v, s->pos, s->ix, s->o_run, s->lse_run, s->B, s->blk, NULL, E));
  } else if (what == 8) {
    SR(sa_fwd_block_lse(&s->sh, s->q, s->k, s->v, s->pos, s->ix, NULL, s->lse_run, s->B, s->blk, NULL, E));
  } else if (what == 7) {
    SR(adaspa_gpu_mass_from_table(s->blk, s->lse_run, s->sh.n_q, s->sh.heads, s->B, s->mass, NULL, E));
  } else if (what != 3) {
    adaspa_kernel k = what == 1 ? ADASPA_KERNEL_MMA : ADASPA_KERNEL_WGMMA;
    const char *env = getenv("SR_ADASPA_POLY");
    char saved[16];
    snprintf(saved, sizeof saved, "%s", env ? env : "");
    if (what == 4) setenv("SR_ADASPA_POLY", "0", 1);
    else if (what == 2 && !env) setenv("SR_ADASPA_POLY", "4", 1);
    SR(adaspa_gpu_block_mass_by(k, s->q, s->k, s->sh.n_q, s->sh.heads, s->sh.kv_heads, s->sh.head_dim, s->sh.scale,
                                s->B, s->lse, s->mass, NULL, E));
    if (what == 4 || what == 2) env ? setenv("SR_ADASPA_POLY", saved, 1) : unsetenv("SR_ADASPA_POLY");
  } else {
    double sp[64];
    for (int h = 0; h < s->sh.heads; h++) sp[h] = 0.9;
    for (int i = 0; i < 2; i++)
      SR(adaspa_gpu_select(s->mass, s->sh.heads, s->nb, sp, s->rw, s->mask, s->kt, s->kt + s->sh.heads, NULL, E));
  }
}

// The median over reps of one call's time (ms), after one warm-up.
static double time_ms(const bench_state *s, int what, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float t[MAX_REPS];
  run_one(s, what);
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(e0));
    run_one(s, what);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t[r], e0, e1));
  }
  qsort(t, (size_t)reps, sizeof(float), bench_cmp_f);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return t[reps / 2];
}

int main(int argc, char **argv) {
  int64_t ns[MAX_NS] = {65536, 131072};
  int n_ns = 2, B = 128, H = 16, KH = 2, D = 128, reps = 5;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      char *p = argv[++i], *end;
      for (n_ns = 0; n_ns < MAX_NS && *p; p = *end ? end + 1 : end) {
        ns[n_ns++] = strtoll(p, &end, 10);
        if (end == p || ns[n_ns - 1] < 1) { fprintf(stderr, "--n: expected N,N.. (positive)\n"); return 2; }
      }
    } else if (strcmp(argv[i], "--block") == 0 && i + 1 < argc) B = atoi(argv[++i]);
    else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc) H = atoi(argv[++i]);
    else if (strcmp(argv[i], "--kv-heads") == 0 && i + 1 < argc) KH = atoi(argv[++i]);
    else if (strcmp(argv[i], "--d") == 0 && i + 1 < argc) D = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--n N,N..] [--block B] [--heads H] [--kv-heads KH] [--d D] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > MAX_REPS || H < 1 || H > 64 || KH < 1 || H % KH || (D != 64 && D != 128) || B < 16 ||
      B > 128 || B % 16) {
    fprintf(stderr, "bad arguments: reps 1..%d, heads 1..64 over kv-heads, d 64 or 128, block 16..128 by 16\n", MAX_REPS);
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs; heads %d/%d, d %d, block %d, random inputs, median of %d\n", prop.name,
         prop.multiProcessorCount, H, KH, D, B, reps);
  printf("%-8s %9s %9s %6s %9s %6s %9s %6s %9s %9s %6s %7s %9s | %9s %9s %9s %9s %6s %9s %9s %6s\n", "N", "dense fwd",
         "mma", "ratio", "wgmma", "ratio", "wgmma0", "ratio", "select", "search", "ratio", "via", "diff", "fwd run",
         "fwd+tbl", "tbl mass", "fused", "ratio", "fdiff", "lse+tbl", "ratio");
  uint64_t st = 1;
  for (int x = 0; x < n_ns; x++) {
    int64_t N = ns[x];
    bench_state s;
    memset(&s, 0, sizeof s);
    s.sh = {N, N, H, KH, D, (float)(1.0 / sqrt((double)D))};
    s.B = B, s.nb = (N + B - 1) / B, s.rw = (s.nb + 63) / 64;
    tile_index ti;
    ib_dense_causal(&ti, H, N);
    sa_gpu_index gix;
    SR(sa_gpu_index_upload(&ti, &gix, E));
    s.ix = &gix;
    int64_t *pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)N), *posd;
    for (int64_t i = 0; i < N; i++) pos[i] = i;
    CK(cudaMalloc((void **)&posd, sizeof(int64_t) * (size_t)N));
    CK(cudaMemcpy(posd, pos, sizeof(int64_t) * (size_t)N, cudaMemcpyHostToDevice));
    s.pos = posd;
    s.q = bench_rand_bf16(N * H * D, &st), s.k = bench_rand_bf16(N * KH * D, &st);
    s.v = bench_rand_bf16(N * KH * D, &st);
    size_t cells = (size_t)H * (size_t)(s.nb * s.nb);
    CK(cudaMalloc(&s.o, 2 * (size_t)(N * H * D)));
    CK(cudaMalloc((void **)&s.lse, 4 * (size_t)(N * H)));
    CK(cudaMalloc((void **)&s.mass, 4 * cells));
    CK(cudaMalloc((void **)&s.mask, 8 * (size_t)(H * s.nb * s.rw)));
    CK(cudaMalloc((void **)&s.kt, 8 * (size_t)(2 * H)));

    double fwd = time_ms(&s, 0, reps);  // also leaves the LSE the searches read
    int wg = adaspa_gpu_wgmma_applies(s.q, s.k, N, D, B);
    double t_mma = time_ms(&s, 1, reps), t_wg0 = wg ? time_ms(&s, 4, reps) : NAN, t_wg = wg ? time_ms(&s, 2, reps) : NAN;
    double diff = NAN;
    if (wg) {  // the two kernels' masses side by side (mass: wgmma's, from its last timed call)
      float *a = (float *)malloc(4 * cells), *b = (float *)malloc(4 * cells);
      CK(cudaMemcpy(b, s.mass, 4 * cells, cudaMemcpyDeviceToHost));
      run_one(&s, 1);
      CK(cudaMemcpy(a, s.mass, 4 * cells, cudaMemcpyDeviceToHost));
      diff = 0;
      for (size_t i = 0; i < cells; i++)
        if (a[i] > 0) diff = fmax(diff, fabs((double)b[i] - a[i]) / a[i]);
      free(a), free(b);
    }
    double sel = time_ms(&s, 3, reps), best = t_mma;
    const char *via = "mma";
    if (wg && t_wg0 < best) best = t_wg0, via = "wgmma0";
    if (wg && t_wg < best) best = t_wg, via = "wgmma";
    // The search that runs its own dense pass (the trainer's, every search): the masses from the pass's block table.
    // fused = (fwd+tbl - fwd run) + tbl mass + select: what the search adds to the dense pass it needs anyway.
    double f_run = NAN, f_tbl = NAN, t_tm = NAN, fdiff = NAN, f_np = NAN;
    if (sa_block_lse_applies(&s.sh, B)) {
      int64_t nt = sa_block_lse_floats(N, H, B);
      CK(cudaMalloc((void **)&s.o_run, 4 * (size_t)(N * H * D)));
      CK(cudaMalloc((void **)&s.lse_run, 4 * (size_t)(N * H)));
      CK(cudaMalloc((void **)&s.blk, 4 * (size_t)nt));
      float *neg = (float *)malloc(4 * (size_t)(N * H));
      for (int64_t i = 0; i < N * H; i++) neg[i] = -INFINITY;
      f_run = time_ms(&s, 5, reps);
      f_tbl = time_ms(&s, 6, reps);
      t_tm = time_ms(&s, 7, reps);
      f_np = time_ms(&s, 8, reps);
      // one clean pass (the running state from -inf), its masses against the cached-LSE kernel's on the same LSE
      CK(cudaMemcpy(s.lse_run, neg, 4 * (size_t)(N * H), cudaMemcpyHostToDevice));
      CK(cudaMemset(s.o_run, 0, 4 * (size_t)(N * H * D)));
      run_one(&s, 6);
      run_one(&s, 7);
      float *a = (float *)malloc(4 * cells), *b = (float *)malloc(4 * cells);
      CK(cudaMemcpy(a, s.mass, 4 * cells, cudaMemcpyDeviceToHost));
      SR(adaspa_gpu_block_mass(s.q, s.k, N, H, KH, D, s.sh.scale, B, s.lse_run, s.mass, NULL, E));
      CK(cudaMemcpy(b, s.mass, 4 * cells, cudaMemcpyDeviceToHost));
      fdiff = 0;
      for (size_t i = 0; i < cells; i++)
        if (b[i] > 0) fdiff = fmax(fdiff, fabs((double)a[i] - b[i]) / b[i]);
      free(a), free(b), free(neg);
      cudaFree(s.o_run), cudaFree(s.lse_run), cudaFree(s.blk);
    }
    double fused = f_tbl - f_run + t_tm + sel, whole = f_np + t_tm + sel;
    printf("%-8lld %9.3f %9.3f %6.3f %9.3f %6.3f %9.3f %6.3f %9.3f %9.3f %6.3f %7s %9.2e | %9.3f %9.3f %9.3f %9.3f %6.3f %9.2e "
           "%9.3f %6.3f\n", (long long)N, fwd, t_mma, t_mma / fwd, t_wg, t_wg / fwd, t_wg0, t_wg0 / fwd, sel, best + sel,
           (best + sel) / fwd, via, diff, f_run, f_tbl, t_tm, fused, fused / fwd, fdiff, f_np, whole / fwd);
    fflush(stdout);
    cudaFree((void *)s.q), cudaFree((void *)s.k), cudaFree((void *)s.v), cudaFree(s.o), cudaFree(s.lse);
    cudaFree(s.mass), cudaFree(s.mask), cudaFree(s.kt), cudaFree(posd);
    sa_gpu_index_free(&gix);
    ib_free(&ti);
    free(pos);
  }
  printf("times in ms; ratio = over the dense forward (issue 26's goal: search <= 0.5); wgmma0 = wgmma with every "
         "exponential by ex2.approx (the default; wgmma: 4 of 16 by the FMA-pipe polynomial); search = the fastest masses + two selections; diff = largest "
         "relative difference of mma's and wgmma's masses (nan: wgmma did not apply); the search with its own dense pass "
         "(the trainer's): fwd run = the dense forward merged into a running state (the executor's dense pass), fwd+tbl = "
         "the same writing the block table, tbl mass = the masses from it, fused = fwd+tbl - fwd run + tbl mass + select "
         "(what that search adds to its dense pass), fdiff = largest relative difference of its masses and the cached-LSE "
         "kernel's on the pass's LSE (nan: not Hopper); lse+tbl = the pass without output (no P V: the LSE and the table, "
         "what the executor's search runs), its ratio = (lse+tbl + tbl mass + select) / dense fwd: the whole search, its "
         "LSE included\n");
  return 0;
}

// moba_gpu_test.cu — bin/sparsering-gpu-test-moba: MoBA's gate on the GPU (kernels/moba_gpu.h) against the CPU
// reference (plan/gating_select.c, plan/tiles.c) on fresh random inputs, outputs poisoned before each run. The
// contract is identity, so every comparison is bit for bit:
//   means   the 128-bit fixed-point block sums equal moba_block_sums's (little-endian words, as vs_acc), and the
//           float64 block means equal those sums turned into means by the reference's formula
//           ((double) sum / 2^62 / B), also where keys reach 4 and above (the 128-bit conversion's upper path);
//   select  the group bit sets equal moba_select_rows's (ties to the lower block: all-zero queries, and keys
//           equal in every block so that every mean, hence every score of a row, ties);
//   index   the execution form equals tiles_build's arrays for the same selection, its cell order
//           sa_gpu_index_upload's, its BLOCK masks tiles_masks_build's;
//   fwd     sa_fwd over the GPU form gives the same bits as over the host-built, uploaded form;
//   transp  the backward's index transposed from the GPU form (kernels/transpose_gpu.h) equals tiles_transpose.
// Shapes: lengths that are not multiples of 128 or of B, GQA, K = 1, K at least the number of blocks, over 64
// blocks (several words a bit set).
// Usage: sparsering-gpu-test-moba
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moba_gpu.h"
#include "kernels/test/index_build.h"
#include "kernels/transpose_gpu.h"
extern "C" {
#include "plan/gating.h"
#include "plan/layout.h"
#include "plan/tiles.h"
}

#include "kernels/test/check.h"

static uint64_t rng = 4242;
static double uni(void) { return ib_uniform(&rng); }

static void *fetch(const void *d, size_t bytes) {
  void *h = malloc(bytes + 1);
  if (bytes) CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

template <typename T>
static int same_dev(const T *dev, const T *host, int64_t n) {
  if (n <= 0) return 1;
  T *h = (T *)fetch(dev, sizeof(T) * (size_t)n);
  int ok = memcmp(h, host, sizeof(T) * (size_t)n) == 0;
  free(h);
  return ok;
}

typedef struct {
  const char *name;
  int64_t N;
  int H, KH, d, B, K;
  double kscale;  // keys uniform in [-kscale, kscale]
  int ties;       // 1: all-zero queries; 2: every key row the same (every block mean ties)
} mcase;

static const mcase mcases[] = {
    {"uneven GQA B256 K3", 2000, 4, 2, 128, 256, 3, 3, 0},
    {"K=1", 1000, 2, 1, 64, 128, 1, 3, 0},
    {"K >= blocks", 1500, 2, 2, 64, 256, 8, 3, 0},
    {"B384 !| N d64", 3333, 6, 2, 64, 384, 4, 3, 0},
    {"157 blocks K10", 20000, 2, 1, 128, 128, 10, 3, 0},
    {"large keys", 2600, 2, 1, 128, 128, 6, 300, 0},
    {"ties zero q", 2500, 2, 1, 128, 128, 5, 3, 1},
    {"ties equal blocks", 2500, 4, 2, 64, 256, 3, 3, 2},
};

typedef struct {
  int means, sel, index, order, masks, fwd, transp;
  int64_t kept, tiles;
} mres;

#define FIXED_ONE 4611686018427387904.0

static mres run_mcase(const mcase *c) {
  mres r;
  memset(&r, 0, sizeof r);
  int64_t N = c->N, nb = (N + c->B - 1) / c->B, ng = (N + TILE - 1) / TILE, words = (nb + 63) / 64;
  int H = c->H, KH = c->KH, d = c->d;
  float scale = 1.0f / sqrtf((float)d);
  float *qf = (float *)malloc(sizeof(float) * (size_t)(N * H * d)), *kf = (float *)malloc(sizeof(float) * (size_t)(N * KH * d));
  float *vf = (float *)malloc(sizeof(float) * (size_t)(N * KH * d));
  for (int64_t i = 0; i < N * H * d; i++) qf[i] = c->ties == 1 ? 0.f : (float)(2 * uni() - 1);
  for (int64_t i = 0; i < N * KH * d; i++) {
    kf[i] = c->ties == 2 && i >= KH * d ? kf[i % (KH * d)] : (float)(c->kscale * (2 * uni() - 1));
    vf[i] = (float)(2 * uni() - 1);
  }
  void *qd = to_bf16_dev(qf, N * H * d, qf), *kd = to_bf16_dev(kf, N * KH * d, kf), *vd = to_bf16_dev(vf, N * KH * d, vf);

  // CPU reference: sums, the means by its formula, the rows' choices, the pattern and its execution form
  moba_shape s = {H, KH, d, N, c->B, c->K};
  int64_t *pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
  for (int64_t i = 0; i < N; i++) pos[i] = i;
  vs_acc *sums = (vs_acc *)calloc((size_t)(nb * KH * d), sizeof(vs_acc));
  moba_block_sums(&s, kf, pos, N, sums);
  double *mean_c = (double *)malloc(sizeof(double) * (size_t)(nb * KH * d));
  for (int64_t i = 0; i < nb * KH * d; i++) mean_c[i] = (double)(__int128)sums[i] / FIXED_ONE / (double)c->B;
  uint64_t *bits_c = (uint64_t *)calloc((size_t)(H * ng * words), sizeof(uint64_t));
  moba_select_rows(&s, sums, qf, pos, N, bits_c);
  pattern pc;
  SR(pattern_alloc(&pc, N, 1, H, E));
  SR(moba_heads_from_bits(&s, bits_c, &pc, 0, E));
  layout L;
  SR(layout_build(LAYOUT_CONTIGUOUS, N, 1, 1, NULL, &L, E));
  tile_index ti;
  head_mask *hmasks;
  SR(tiles_build(&pc, 0, &L, 0, &ti, E));
  SR(tiles_masks_build(&pc, 0, &hmasks, E));
  r.tiles = ti.n_tiles;
  for (int64_t x = 0; x < H * ng * words; x++) r.kept += __builtin_popcountll(bits_c[x]);

  // GPU, outputs poisoned
  double *means;
  uint64_t *bits, *sums_d;
  CK(cudaMalloc((void **)&sums_d, sizeof(uint64_t) * 2 * (size_t)(nb * KH * d)));
  CK(cudaMemset(sums_d, 0xff, sizeof(uint64_t) * 2 * (size_t)(nb * KH * d)));
  CK(cudaMalloc((void **)&means, sizeof(double) * (size_t)(nb * KH * d)));
  CK(cudaMalloc((void **)&bits, sizeof(uint64_t) * (size_t)(H * ng * words)));
  CK(cudaMemset(means, 0xff, sizeof(double) * (size_t)(nb * KH * d)));
  CK(cudaMemset(bits, 0xff, sizeof(uint64_t) * (size_t)(H * ng * words)));
  moba_gpu_form f;
  SR(moba_gpu_form_init(&f, H, N, c->B, E));
  CK(cudaMemset(f.bmask, 0xff, sizeof(uint64_t) * (size_t)(H * ng * f.row_words)));
  SR(moba_gpu_block_means(kd, N, KH, d, c->B, sums_d, means, NULL, E));
  SR(moba_gpu_select(qd, N, H, KH, d, c->B, c->K, means, bits, NULL, E));
  SR(moba_gpu_form_build(&f, bits, NULL, E));
  CK(cudaDeviceSynchronize());
  r.means = same_dev(sums_d, (const uint64_t *)sums, 2 * nb * KH * d) && same_dev(means, mean_c, nb * KH * d);
  r.sel = same_dev(bits, bits_c, H * ng * words);
  const tile_index *g = &f.ix.d;
  r.index = g->n_tiles == ti.n_tiles && g->n_bars == 0 && ti.n_bars == 0 && g->n_qtiles == ti.n_qtiles &&
            same_dev(g->tile_cnt, ti.tile_cnt, (int64_t)H * ng * 2) && same_dev(g->tile_idx, ti.tile_idx, ti.n_tiles) &&
            same_dev(g->tile_kind, ti.tile_kind, ti.n_tiles) && same_dev(g->bar_cnt, ti.bar_cnt, (int64_t)H * ng * 2);
  sa_gpu_index hix;
  SR(sa_gpu_index_upload(&ti, &hix, E));
  int32_t *ord = (int32_t *)fetch(hix.order, sizeof(int32_t) * (size_t)hix.cells);
  r.order = f.ix.cells == hix.cells && same_dev(f.ix.order, ord, hix.cells);
  free(ord);
  r.masks = 1;
  for (int h = 0; h < H; h++)
    r.masks &= hmasks[h].kind == PATTERN_BLOCK && hmasks[h].block == TILE && hmasks[h].row_words == f.row_words &&
               same_dev(f.bmask + (int64_t)h * ng * f.row_words, hmasks[h].bmask, ng * f.row_words);

  // forward over both forms
  head_mask *cmasks;
  SR(sa_gpu_masks_upload(hmasks, H, &cmasks, E));
  int64_t *pos_d = (int64_t *)dev_copy(pos, sizeof(int64_t) * (size_t)N);
  float *o1, *l1, *o2, *l2;
  size_t ob = sizeof(float) * (size_t)(N * H * d), lb = sizeof(float) * (size_t)(N * H);
  CK(cudaMalloc((void **)&o1, ob));
  CK(cudaMalloc((void **)&o2, ob));
  CK(cudaMalloc((void **)&l1, lb));
  CK(cudaMalloc((void **)&l2, lb));
  CK(cudaMemset(o1, 0, ob));
  CK(cudaMemset(o2, 0, ob));
  float *ninf = (float *)malloc(lb);
  for (int64_t i = 0; i < N * H; i++) ninf[i] = -INFINITY;
  CK(cudaMemcpy(l1, ninf, lb, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(l2, ninf, lb, cudaMemcpyHostToDevice));
  free(ninf);
  sa_shape sh = {N, N, H, KH, d, scale, 0};
  SR(sa_fwd(&sh, qd, kd, vd, pos_d, pos_d, &f.ix, 0, f.masks, NULL, NULL, o1, l1, NULL, E));
  SR(sa_fwd(&sh, qd, kd, vd, pos_d, pos_d, &hix, 0, cmasks, NULL, NULL, o2, l2, NULL, E));
  CK(cudaDeviceSynchronize());
  float *h1 = (float *)fetch(o1, ob), *h2 = (float *)fetch(o2, ob), *m1 = (float *)fetch(l1, lb), *m2 = (float *)fetch(l2, lb);
  r.fwd = memcmp(h1, h2, ob) == 0 && memcmp(m1, m2, lb) == 0;
  free(h1), free(h2), free(m1), free(m2);

  // the backward's transposed index from the GPU form
  sa_gpu_transposer *tr;
  SR(sa_gpu_transposer_new(1, &tr, E));
  const sa_gpu_index_t *gt;
  SR(sa_gpu_transpose(tr, &f.ix.d, 0, N, H, KH, NULL, &gt, E));
  CK(cudaDeviceSynchronize());
  tile_index_t tt, dt;
  sa_bar_chunks dbc;
  SR(tiles_transpose(&ti, 0, N, &tt, E));
  SR(sa_gpu_index_t_download(gt, &dt, &dbc, E));
  int64_t nkv = (int64_t)tt.heads * tt.n_kvtiles;
  r.transp = dt.heads == tt.heads && dt.n_kvtiles == tt.n_kvtiles && dt.n_bar_keys == 0 && tt.n_bar_keys == 0 &&
             memcmp(dt.kv_cnt, tt.kv_cnt, sizeof(int64_t) * (size_t)(nkv + 1)) == 0 &&
             memcmp(dt.q_idx, tt.q_idx, sizeof(int32_t) * (size_t)tt.kv_cnt[nkv]) == 0 &&
             memcmp(dt.q_kind, tt.q_kind, (size_t)tt.kv_cnt[nkv]) == 0;
  tiles_transpose_free(&dt), sa_bar_chunks_free(&dbc), tiles_transpose_free(&tt);
  sa_gpu_transposer_free(tr);

  cudaFree(o1), cudaFree(o2), cudaFree(l1), cudaFree(l2), cudaFree(pos_d), cudaFree(means), cudaFree(bits), cudaFree(sums_d);
  cudaFree(qd), cudaFree(kd), cudaFree(vd);
  sa_gpu_masks_free(cmasks, H);
  sa_gpu_index_free(&hix);
  moba_gpu_form_free(&f);
  tiles_masks_free(hmasks, H);
  tiles_free(&ti);
  layout_free(&L);
  pattern_free(&pc);
  free(qf), free(kf), free(vf), free(pos), free(sums), free(mean_c), free(bits_c);
  return r;
}

int main(void) {
  int fails = 0;
  printf("%-22s %6s %6s %6s %6s %6s %6s %6s %8s %8s\n", "moba case", "means", "select", "index", "order", "masks", "fwd",
         "transp", "blocks", "tiles");
  for (size_t i = 0; i < sizeof mcases / sizeof mcases[0]; i++) {
    mres r = run_mcase(&mcases[i]);
    int ok = r.means && r.sel && r.index && r.order && r.masks && r.fwd && r.transp;
    fails += !ok;
#define S(x) ((x) ? "same" : "DIFF")
    printf("%-22s %6s %6s %6s %6s %6s %6s %6s %8lld %8lld %s\n", mcases[i].name, S(r.means), S(r.sel), S(r.index),
           S(r.order), S(r.masks), S(r.fwd), S(r.transp), (long long)r.kept, (long long)r.tiles, ok ? "ok" : "FAIL");
    fflush(stdout);
  }
  printf("gpu-test-moba: %d failed\n", fails);
  return fails ? 1 : 0;
}

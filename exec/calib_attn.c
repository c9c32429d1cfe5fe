// calib_attn.c — achieved TFLOP/s of the sparse attention kernels on one kind of work at a time
// (calib_attn.h): a synthetic execution form over N tokens on one GPU whose every entry is a FULL
// tile, a PARTIAL tile or a bar. PARTIAL tiles carry a vertical-slash element mask (the bit-set
// lookups of MTraining's VS patterns run for every element, as in a real VS layer); the work counted
// is the whole tile, as the simulator counts it (sim/cost.c).
#include "exec/calib_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/model.h"
#include "plan/tiles.h"
#include "plan/util.h"

#define N_TOKENS 32768      // 256 query tiles
#define PER_QTILE 8         // tile entries per query tile at size 1 (below the diagonal, so FULL is exact)
#define BARS_PER_QTILE 256  // bar keys per query tile at size 1

// The synthetic index of calib_attn.h (a one-head index that serves every head).
int calib_attn_index(int kind, int size, tile_index *t, double *elems) {
  int nq = N_TOKENS / TILE, per = PER_QTILE * size, bars = BARS_PER_QTILE * size;
  memset(t, 0, sizeof *t);
  t->heads = 1, t->world = 1, t->q_rank = 0, t->n_qtiles = nq;
  t->tile_cnt = calloc((size_t)nq * 2, sizeof(int64_t));
  t->bar_cnt = calloc((size_t)nq * 2, sizeof(int64_t));
  t->tile_idx = malloc(sizeof(int32_t) * (size_t)nq * per);
  t->tile_kind = malloc((size_t)nq * per);
  t->bar_idx = malloc(sizeof(int32_t) * (size_t)nq * bars);
  if (!t->tile_cnt || !t->bar_cnt || !t->tile_idx || !t->tile_kind || !t->bar_idx) return -1;
  *elems = 0;
  for (int i = 0; i < nq; i++) {
    t->tile_cnt[2 * i] = t->n_tiles, t->bar_cnt[2 * i] = t->n_bars;
    if (kind < 2) {
      for (int j = i - 1; j >= 0 && j >= i - per; j--) {
        t->tile_idx[t->n_tiles] = j;
        t->tile_kind[t->n_tiles++] = kind == 0 ? TILE_FULL : TILE_PARTIAL;
        *elems += (double)TILE * TILE;
      }
    } else {
      int nb = i * TILE < bars ? i * TILE : bars;
      for (int x = 0; x < nb; x++) t->bar_idx[t->n_bars++] = i * TILE - nb + x;  // ascending, all before the tile
      *elems += (double)nb * TILE;
    }
    t->tile_cnt[2 * i + 1] = t->n_tiles, t->bar_cnt[2 * i + 1] = t->n_bars;
  }
  return 0;
}

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"

#define CK(call)                                                                                     \
  do {                                                                                               \
    cudaError_t r_ = (call);                                                                         \
    if (r_ != cudaSuccess) {                                                                         \
      rc = sr_internal_error(e, 0, "calibration: CUDA error %s at line %d", cudaGetErrorString(r_), __LINE__); \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)


int calib_attn_time(int phase, int kind, int size, int heads, int kv_heads, int head_dim, double *flops, double *seconds,
                    sr_error *e) {
  tile_index t;
  tile_index_t tt = {0};
  double elems;
  int rc = SR_OK;
  sa_gpu_index ix = {0};
  sa_gpu_index_t ixt = {0};
  head_mask *masks_d = NULL, *masks = calloc((size_t)heads, sizeof(head_mask));
  uint32_t *bits = calloc((size_t)2 * (N_TOKENS / 32), sizeof(uint32_t));
  int64_t *pos_h = malloc(sizeof(int64_t) * N_TOKENS), *pos = NULL;
  calib_operands x = {0};
  cudaEvent_t e0 = NULL, e1 = NULL;
  if (calib_attn_index(kind, size, &t, &elems) || !masks || !pos_h || !bits) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  // Verticals every 8th key, slashes at offsets 0..1023 and every 8th beyond: the values only decide
  // which scores are masked, not the work, which is the whole tile.
  for (int64_t x = 0; x < N_TOKENS; x++) {
    if (x % 8 == 0) bits[x >> 5] |= 1u << (x & 31);
    if (x < 1024 || x % 8 == 0) bits[N_TOKENS / 32 + (x >> 5)] |= 1u << (x & 31);
  }
  for (int h = 0; h < heads; h++) {
    masks[h].kind = PATTERN_VS, masks[h].n_tokens = N_TOKENS;
    masks[h].vbits = bits, masks[h].sbits = bits + N_TOKENS / 32;
  }
  for (int64_t i = 0; i < N_TOKENS; i++) pos_h[i] = i;
  if (sa_gpu_index_upload(&t, &ix, e) || sa_gpu_masks_upload(masks, heads, &masks_d, e)) {
    rc = e->code;
    goto done;
  }
  CK(cudaMalloc((void **)&pos, sizeof(int64_t) * N_TOKENS));
  CK(cudaMemcpy(pos, pos_h, sizeof(int64_t) * N_TOKENS, cudaMemcpyHostToDevice));
  // Small equal inputs: tensor-core throughput does not depend on the values.
  if ((rc = calib_operands_make(N_TOKENS, N_TOKENS, heads, kv_heads, head_dim, 0, &x, e))) goto done;
  sa_shape sh = {N_TOKENS, N_TOKENS, heads, kv_heads, head_dim, 1.0f / sqrtf((float)head_dim), 0};
  if (phase == 1) {
    if (tiles_transpose(&t, 0, N_TOKENS, &tt, e) || sa_gpu_index_t_upload(&tt, heads, kv_heads, &ixt, e)) {
      rc = e->code;
      goto done;
    }
  }
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int warm = 2, reps = 5;
  for (int r = 0; r < warm + reps; r++) {
    if (r == warm) CK(cudaEventRecord(e0, NULL));
    int bad = phase == 0 ? sa_fwd(&sh, x.q, x.k, x.v, pos, pos, &ix, 0, masks_d, NULL, NULL, x.o, x.lse, NULL, e)
                         : sa_bwd(&sh, x.q, x.k, x.v, x.lse, x.drow, x.dout, pos, pos, &ix, &ixt, 0, masks_d, x.dq, x.dk,
                                  x.dv, NULL, e);
    if (bad) {
      rc = e->code;
      goto done;
    }
  }
  CK(cudaEventRecord(e1, NULL));
  CK(cudaEventSynchronize(e1));
  float ms;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  // 4 d FLOPs per element forward (QK^T and PV); backward 2.5x (plan/model.h, FlashAttention-2).
  *flops = elems * 4.0 * head_dim * heads * (phase == 0 ? 1.0 : MODEL_ATTN_BWD_RATIO);
  *seconds = ms * 1e-3 / reps;
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  calib_operands_free(&x);
  cudaFree(pos);
  if (masks_d) sa_gpu_masks_free(masks_d, heads);
  sa_gpu_index_free(&ix);
  if (phase == 1) sa_gpu_index_t_free(&ixt), tiles_transpose_free(&tt);
  free(masks), free(pos_h), free(bits);
  free(t.tile_cnt), free(t.bar_cnt), free(t.tile_idx), free(t.tile_kind), free(t.bar_idx);
  return rc;
}

#endif

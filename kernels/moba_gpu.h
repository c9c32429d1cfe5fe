// moba_gpu.h — MoBA's block gate (moba:B:K, plan/gating.h) on the GPU: the block means of K, each row's top
// K - 1 earlier blocks united per 128-row query group into a bit set, and, for one process holding the whole
// sequence in global order, that selection's execution form (tile index, cell order, BLOCK masks) built in
// device memory, so only a few sizes cross to the host. Several processes a sequence: the partial block sums
// and bit sets below, combined across the processes by the caller's all-gathers.
//
// Contract: the same bits as the CPU reference (moba_block_sums, moba_select_rows, tiles_build,
// moba_block_mask and sa_gpu_index_upload's cell order), not within a bound: the block sums are the same
// 128-bit fixed-point integers (2^62 = 1.0; integer additions, so their order does not matter), converted to
// the means with the same correctly rounded operations; each score q . mean is summed in float64 over the
// dimensions in the same order with separately rounded multiplies and adds (no fused multiply-add, as the
// host's C11 build), so every score is the host's bit for bit and the top-k with ties to the lower block
// picks the same blocks. Holds for finite inputs whose keys are below 2^64 in magnitude (the fixed-point
// conversion's range on the host).
//
// Tensors are device memory: Q [n, heads, d] and K [n, kv_heads, d] bf16 (query head h reads KV head
// h / (heads / kv_heads)); `stream` is a cudaStream_t (NULL: the default stream).
#ifndef SR_MOBA_GPU_H
#define SR_MOBA_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/sparse_attn.h"
#include "plan/error.h"

#define MOBA_GPU_MAX_TOPK 64  // K a row keeps at most (its own block and 63 others: a per-thread list)

// Block means of K in float64: means [n_blocks, kv_heads, d], n_blocks = ceil(n / block) (the last block, when
// incomplete, divides by `block` too, as the host; no row ever picks it); sums [n_blocks, kv_heads, d][2] device
// scratch (the 128-bit fixed-point sums, lo and hi words, left there: moba_block_sums's values).
int moba_gpu_block_means(const void *k, int64_t n, int32_t kv_heads, int32_t head_dim, int32_t block, uint64_t *sums,
                         double *means, void *stream, sr_error *e);
// Each row's top (topk - 1) complete earlier blocks by q . mean (every earlier block when there are no more than
// that), ORed into its group's bit set: bits [heads, n_groups, words] (zeroed here), n_groups = ceil(n / TILE),
// words = ceil(n_blocks / 64), as moba_select_rows. topk 1 .. MOBA_GPU_MAX_TOPK, block a multiple of TILE.
int moba_gpu_select(const void *q, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t block,
                    int32_t topk, const double *means, uint64_t *bits, void *stream, sr_error *e);

// ---- several processes a sequence ---------------------------------------------------------------------------
// Each process holds some rows of the sequence (device positions pos [n_rows], global order not required): it
// sums its own keys per block (moba_gpu_partial_sums), the processes' partial sums are all-gathered and added
// (moba_gpu_sums_combine: integers, so exact in any order; the host all-reduces the same sums), the means are
// taken (moba_gpu_means), each process scores its own rows (moba_gpu_select_rows) and the processes' bit sets
// are all-gathered and ORed (moba_gpu_bits_combine). Every process then holds the host gate's selection
// (exec/online_gate_cpu.c) bit for bit. The gathers are the caller's (exec/online_gate_gpu.c, NCCL).

// This process's keys summed per block in 128-bit fixed point: sums [n_blocks, kv_heads, d][2] (zeroed here),
// n_blocks = ceil(n_tokens / block), moba_block_sums's values for the rows at pos [n_rows] (device; NULL: rows
// 0 .. n_rows - 1). k [n_rows, kv_heads, d] bf16.
int moba_gpu_partial_sums(const void *k, const int64_t *pos, int64_t n_rows, int64_t n_tokens, int32_t kv_heads,
                          int32_t head_dim, int32_t block, uint64_t *sums, void *stream, sr_error *e);
// sums [count][2] = the sum over ranks of parts [ranks][count][2] (all-gathered partial sums), 128-bit.
int moba_gpu_sums_combine(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *sums, void *stream, sr_error *e);
// means [count] of sums [count][2] as the host: (double) sum / 2^62 / block.
int moba_gpu_means(const uint64_t *sums, int64_t count, int32_t block, double *means, void *stream, sr_error *e);
// moba_gpu_select for the rows at pos [n_rows] (device; NULL: rows 0 .. n_rows - 1) of an n_tokens sequence:
// bits [heads, n_groups, words] (zeroed here) with n_groups = ceil(n_tokens / TILE), words = ceil(n_blocks / 64),
// a row's choices ORed into the bit set of its group floor(pos / TILE), as moba_select_rows on the same rows.
int moba_gpu_select_rows(const void *q, const int64_t *pos, int64_t n_rows, int64_t n_tokens, int32_t heads,
                         int32_t kv_heads, int32_t head_dim, int32_t block, int32_t topk, const double *means,
                         uint64_t *bits, void *stream, sr_error *e);
// bits [count] = the OR over ranks of parts [ranks][count] (all-gathered bit sets).
int moba_gpu_bits_combine(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *bits, void *stream, sr_error *e);

#ifdef __CUDACC__
#define MOBA_HD __host__ __device__
#else
#define MOBA_HD
#endif
// Element i of moba_gpu_sums_combine (one thread's work there, and the host tests' reference): the 128-bit
// two's-complement sum over ranks of parts [ranks][count][2], little-endian (lo, hi) words as a vs_acc in memory.
static inline MOBA_HD void moba_sums_combine_at(const uint64_t *parts, int32_t ranks, int64_t count, int64_t i,
                                                uint64_t *sums) {
  uint64_t lo = 0, hi = 0;
  for (int32_t r = 0; r < ranks; r++) {
    const uint64_t *p = parts + 2 * ((int64_t)r * count + i);
    lo += p[0];
    hi += p[1] + (lo < p[0]);  // the carry out of the low word
  }
  sums[2 * i] = lo, sums[2 * i + 1] = hi;
}
// Element i of moba_gpu_bits_combine: the OR over ranks of parts [ranks][count].
static inline MOBA_HD void moba_bits_combine_at(const uint64_t *parts, int32_t ranks, int64_t count, int64_t i,
                                                uint64_t *bits) {
  uint64_t m = 0;
  for (int32_t r = 0; r < ranks; r++) m |= parts[(int64_t)r * count + i];
  bits[i] = m;
}

// A selection's execution form in device memory, kept between calls and grown as needed.
typedef struct {
  int32_t heads, block;
  int64_t n, cells, row_words, cap_tiles;
  sa_gpu_index ix;      // world 1: tile entries (kept blocks' tiles FULL, the diagonal PARTIAL), no bars
  int64_t *cnt, *off;   // device [cells + 1]: entries a cell (the last 0), their exclusive sums
  uint64_t *keys[2];    // device [cells]: cell order keys (work descending, then cell)
  uint64_t *bmask;      // device [heads][n_groups * row_words]: moba_block_mask's bits per head
  head_mask *masks;     // device [heads], kind BLOCK of TILE-token blocks over bmask
  void *cub_tmp;
  size_t cub_bytes;
  int64_t *host_total;  // pinned: the entries of the last build
} moba_gpu_form;

// Allocate the form's fixed parts for `heads` heads over n tokens (global order, one process) and block `block`.
int moba_gpu_form_init(moba_gpu_form *f, int32_t heads, int64_t n, int32_t block, sr_error *e);
// Release it.
void moba_gpu_form_free(moba_gpu_form *f);
// Build f->ix and f->masks from the bit sets of moba_gpu_select: the arrays tiles_build, moba_block_mask and
// sa_gpu_index_upload give for the same selection. Syncs the stream once (the entry count).
int moba_gpu_form_build(moba_gpu_form *f, const uint64_t *bits, void *stream, sr_error *e);

#ifdef __cplusplus
}
#endif

#endif

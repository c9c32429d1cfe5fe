// moba_gate.cu — MoBA's block gate and its execution form on the GPU (moba_gpu.h). Every step reproduces the
// host's arithmetic (plan/gating_select.c) operation by operation, so the selection is the host's bit for bit.
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/moba_gpu.h"
#include "kernels/sa_gpu.h"
#include "plan/pattern.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- block means ----------------------------------------------------------------------------------

// (vs_acc)(__int128)v of the host: v truncated toward zero, two's complement mod 2^128, as (lo, hi).
__device__ static void to_fixed(double v, uint64_t *lo, uint64_t *hi) {
  double a = fabs(v);
  uint64_t l = 0, h = 0;
  if (a < 18446744073709551616.0) {  // 2^64
    l = __double2ull_rz(a);
  } else {  // an integer m 2^sh with a 53-bit m and sh >= 11
    int ex;
    double f = frexp(a, &ex);
    uint64_t m = __double2ull_rz(ldexp(f, 53));
    int sh = ex - 53;
    if (sh < 64) l = m << sh, h = m >> (64 - sh);
    else if (sh < 128) h = m << (sh - 64);
  }
  if (v < 0) {
    l = ~l + 1;
    h = ~h + (l == 0);
  }
  *lo = l, *hi = h;
}

// (double)(__int128)x of the host, correctly rounded: the top 64 significant bits with a sticky bit for
// the rest, which rounds like the whole (the sticky bit lies below the rounding position).
__device__ static double from_fixed(uint64_t lo, uint64_t hi) {
  int neg = (int)(hi >> 63);
  if (neg) {
    lo = ~lo + 1;
    hi = ~hi + (lo == 0);
  }
  double d;
  if (hi == 0) {
    d = __ull2double_rn(lo);
  } else if (hi >> 63) {  // only -2^127 itself
    d = ldexp(1.0, 127);
  } else {
    int s = 64 - __clzll((long long)hi);  // 1 .. 63 bits beyond the top 64
    uint64_t top = (hi << (64 - s)) | (lo >> s);
    top |= (lo & ((1ull << s) - 1)) != 0;
    d = ldexp(__ull2double_rn(top), s);
  }
  return neg ? -d : d;
}

#define MEANS_CHUNK 256  // keys a thread sums before adding into the block's total

// One thread a (block c, chunk of MEANS_CHUNK keys, kv head and dim x): the chunk's fixed-point sum, added into
// sums[2 (c row + x)] (lo, hi) by 64-bit atomics with the carry: integer additions, so the total is the same in
// any order.
__global__ static void sums_kernel(const __nv_bfloat16 *k, int64_t n, int64_t row, int32_t block, int64_t nb,
                                   int64_t chunks, uint64_t *sums) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nb * chunks * row) return;
  int64_t x = i % row, c = i / row / chunks, part = i / row % chunks;
  int64_t lo_t = c * block + part * MEANS_CHUNK, end = min(n, min((c + 1) * (int64_t)block, lo_t + MEANS_CHUNK));
  if (lo_t >= end) return;
  uint64_t lo = 0, hi = 0;
  for (int64_t t = lo_t; t < end; t++) {
    uint64_t l, h;
    to_fixed((double)__bfloat162float(k[t * row + x]) * 4611686018427387904.0, &l, &h);
    lo += l;
    hi += h + (lo < l);
  }
  unsigned long long *dst = (unsigned long long *)sums + 2 * (c * row + x);
  unsigned long long old = atomicAdd(dst, (unsigned long long)lo);
  atomicAdd(dst + 1, (unsigned long long)(hi + (old + lo < old)));
}

// The host's mean of each sum: (double) sum / 2^62 / block.
__global__ static void means_kernel(const uint64_t *sums, int64_t total, int32_t block, double *means) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < total) means[i] = __ddiv_rn(__ddiv_rn(from_fixed(sums[2 * i], sums[2 * i + 1]), 4611686018427387904.0), (double)block);
}

int moba_gpu_block_means(const void *k, int64_t n, int32_t kv_heads, int32_t head_dim, int32_t block, uint64_t *sums,
                         double *means, void *stream, sr_error *e) {
  if (block < TILE || block % TILE) return sr_input_error(e, NULL, "block", "moba block %d is not a multiple of %d", block, TILE);
  int64_t nb = cdiv(n, block), row = (int64_t)kv_heads * head_dim, total = nb * row, chunks = cdiv(block, MEANS_CHUNK);
  if (total == 0) return SR_OK;
  cudaStream_t st = (cudaStream_t)stream;
  SA_CUDA(cudaMemsetAsync(sums, 0, sizeof(uint64_t) * 2 * (size_t)total, st));
  sums_kernel<<<(unsigned)cdiv(total * chunks, 256), 256, 0, st>>>((const __nv_bfloat16 *)k, n, row, block, nb, chunks, sums);
  SA_CUDA(cudaGetLastError());
  means_kernel<<<(unsigned)cdiv(total, 256), 256, 0, st>>>(sums, total, block, means);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// ---- selection ------------------------------------------------------------------------------------------

// One thread a (head, row), rows padded to whole groups so that a warp is 32 rows of one head and group:
// its choices are ORed across the warp and one lane adds them to the group's bit set.
__global__ static void select_kernel(const __nv_bfloat16 *q, int64_t n, int32_t heads, int32_t group, int32_t d,
                                     int32_t block, int32_t want, const double *means, int32_t kv_heads,
                                     int64_t ng, int64_t words, uint64_t *bits) {
  int64_t npad = ng * TILE, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= npad * heads) return;  // whole warps leave together: npad is a multiple of 32
  int h = (int)(i / npad);
  int64_t r = i % npad, own = r / block, t = r / TILE;
  uint64_t *b = bits + ((int64_t)h * ng + t) * words;
  int lane = threadIdx.x & 31;
  if (want == 0 || own == 0) return;
  if (own <= want) {  // every earlier block (uniform over the warp: one group, one own block)
    if (lane == 0)
      for (int64_t c = 0; c < own; c++) atomicOr((unsigned long long *)&b[c / 64], 1ull << (c % 64));
    return;
  }
  double top_s[MOBA_GPU_MAX_TOPK];
  int32_t top_i[MOBA_GPU_MAX_TOPK];
  int nt = 0;
  if (r < n) {
    const __nv_bfloat16 *qr = q + (r * heads + h) * (int64_t)d;
    for (int64_t c = 0; c < own; c++) {
      const double *mc = means + (c * kv_heads + h / group) * (int64_t)d;
      double sc = 0;
      for (int x = 0; x < d; x++) sc = __dadd_rn(sc, __dmul_rn((double)__bfloat162float(qr[x]), mc[x]));
      // the host's top_insert: higher score first, ties to the lower block (c ascends, so a tie never passes)
      if (nt == want && !(sc > top_s[want - 1])) continue;
      int at = nt < want ? nt++ : want - 1;
      while (at > 0 && sc > top_s[at - 1]) {
        top_s[at] = top_s[at - 1], top_i[at] = top_i[at - 1];
        at--;
      }
      top_s[at] = sc, top_i[at] = (int32_t)c;
    }
  }
  for (int64_t w = 0; w <= (own - 1) / 64; w++) {
    uint64_t m = 0;
    for (int x = 0; x < nt; x++)
      if (top_i[x] / 64 == w) m |= 1ull << (top_i[x] % 64);
    unsigned lo = __reduce_or_sync(0xffffffffu, (unsigned)m), hi = __reduce_or_sync(0xffffffffu, (unsigned)(m >> 32));
    m = (uint64_t)hi << 32 | lo;
    if (lane == 0 && m) atomicOr((unsigned long long *)&b[w], (unsigned long long)m);
  }
}

int moba_gpu_select(const void *q, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t block,
                    int32_t topk, const double *means, uint64_t *bits, void *stream, sr_error *e) {
  if (block < TILE || block % TILE) return sr_input_error(e, NULL, "block", "moba block %d is not a multiple of %d", block, TILE);
  if (topk < 1 || topk > MOBA_GPU_MAX_TOPK)
    return sr_input_error(e, NULL, "topk", "the GPU gate keeps 1 .. %d blocks a row, got %d", MOBA_GPU_MAX_TOPK, topk);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  int64_t ng = cdiv(n, TILE), words = cdiv(cdiv(n, block), 64), threads = ng * TILE * heads;
  cudaStream_t st = (cudaStream_t)stream;
  SA_CUDA(cudaMemsetAsync(bits, 0, sizeof(uint64_t) * (size_t)(heads * ng * words), st));
  if (threads == 0) return SR_OK;
  select_kernel<<<(unsigned)cdiv(threads, 128), 128, 0, st>>>((const __nv_bfloat16 *)q, n, heads, heads / kv_heads,
                                                              head_dim, block, topk - 1, means, kv_heads, ng, words, bits);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// ---- several processes a sequence --------------------------------------------------------------------------

// One thread a (chunk of MEANS_CHUNK local rows, kv head and dim x): the rows' fixed-point values summed while
// their block stays the same, each run added into sums[2 (c row + x)] like sums_kernel (integer additions).
__global__ static void partial_sums_kernel(const __nv_bfloat16 *k, const int64_t *pos, int64_t n_rows, int64_t row,
                                           int32_t block, int64_t chunks, uint64_t *sums) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= chunks * row) return;
  int64_t x = i % row, lo_t = i / row * MEANS_CHUNK, end = min(n_rows, lo_t + MEANS_CHUNK), cur = -1;
  uint64_t lo = 0, hi = 0;
  for (int64_t t = lo_t; t <= end; t++) {
    int64_t c = t < end ? (pos ? pos[t] : t) / block : -1;
    if (c != cur) {
      if (cur >= 0) {
        unsigned long long *dst = (unsigned long long *)sums + 2 * (cur * row + x);
        unsigned long long old = atomicAdd(dst, (unsigned long long)lo);
        atomicAdd(dst + 1, (unsigned long long)(hi + (old + lo < old)));
      }
      cur = c, lo = 0, hi = 0;
    }
    if (t == end) break;
    uint64_t l, h;
    to_fixed((double)__bfloat162float(k[t * row + x]) * 4611686018427387904.0, &l, &h);
    lo += l;
    hi += h + (lo < l);
  }
}

int moba_gpu_partial_sums(const void *k, const int64_t *pos, int64_t n_rows, int64_t n_tokens, int32_t kv_heads,
                          int32_t head_dim, int32_t block, uint64_t *sums, void *stream, sr_error *e) {
  if (block < TILE || block % TILE) return sr_input_error(e, NULL, "block", "moba block %d is not a multiple of %d", block, TILE);
  int64_t row = (int64_t)kv_heads * head_dim, total = cdiv(n_tokens, block) * row, chunks = cdiv(n_rows, MEANS_CHUNK);
  cudaStream_t st = (cudaStream_t)stream;
  if (total > 0) SA_CUDA(cudaMemsetAsync(sums, 0, sizeof(uint64_t) * 2 * (size_t)total, st));
  if (total == 0 || chunks == 0) return SR_OK;
  partial_sums_kernel<<<(unsigned)cdiv(chunks * row, 256), 256, 0, st>>>((const __nv_bfloat16 *)k, pos, n_rows, row,
                                                                         block, chunks, sums);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

__global__ static void sums_combine_kernel(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *sums) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) moba_sums_combine_at(parts, ranks, count, i, sums);
}

int moba_gpu_sums_combine(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *sums, void *stream, sr_error *e) {
  if (count <= 0) return SR_OK;
  sums_combine_kernel<<<(unsigned)cdiv(count, 256), 256, 0, (cudaStream_t)stream>>>(parts, ranks, count, sums);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int moba_gpu_means(const uint64_t *sums, int64_t count, int32_t block, double *means, void *stream, sr_error *e) {
  if (count <= 0) return SR_OK;
  means_kernel<<<(unsigned)cdiv(count, 256), 256, 0, (cudaStream_t)stream>>>(sums, count, block, means);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

__global__ static void bits_combine_kernel(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *bits) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) moba_bits_combine_at(parts, ranks, count, i, bits);
}

int moba_gpu_bits_combine(const uint64_t *parts, int32_t ranks, int64_t count, uint64_t *bits, void *stream, sr_error *e) {
  if (count <= 0) return SR_OK;
  bits_combine_kernel<<<(unsigned)cdiv(count, 256), 256, 0, (cudaStream_t)stream>>>(parts, ranks, count, bits);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// select_kernel for rows at any positions: one thread a (head, local row), local rows padded to whole warps, so
// a warp is 32 rows of one head. Its lanes' groups may differ (a layout's run ending inside a 128-row group), so
// the warp ORs its choices only when every valid lane's group is lane 0's, else each lane adds its own. The
// scores and the running top-k are select_kernel's, operation by operation.
__global__ static void select_rows_kernel(const __nv_bfloat16 *q, const int64_t *pos, int64_t n_rows, int32_t heads,
                                          int32_t group, int32_t d, int32_t block, int32_t want, const double *means,
                                          int32_t kv_heads, int64_t ng, int64_t words, uint64_t *bits) {
  int64_t npad = (n_rows + 31) / 32 * 32, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= npad * heads || want == 0) return;  // whole warps leave together (npad and the block are multiples of 32)
  int h = (int)(i / npad), lane = threadIdx.x & 31;
  int64_t r = i % npad, p = r < n_rows ? (pos ? pos[r] : r) : -1;
  int64_t own = p >= 0 ? p / block : 0, t = p >= 0 ? p / TILE : -1;
  int64_t t0 = (int64_t)__shfl_sync(0xffffffffu, (long long)t, 0);
  int uniform = __all_sync(0xffffffffu, p < 0 || t == t0);
  int every = own <= want;  // every earlier block, unscored (none when own is 0)
  double top_s[MOBA_GPU_MAX_TOPK];
  int32_t top_i[MOBA_GPU_MAX_TOPK];
  int nt = 0;
  if (!every) {
    const __nv_bfloat16 *qr = q + (r * heads + h) * (int64_t)d;
    for (int64_t c = 0; c < own; c++) {
      const double *mc = means + (c * kv_heads + h / group) * (int64_t)d;
      double sc = 0;
      for (int x = 0; x < d; x++) sc = __dadd_rn(sc, __dmul_rn((double)__bfloat162float(qr[x]), mc[x]));
      if (nt == want && !(sc > top_s[want - 1])) continue;  // select_kernel's insertion, ties to the lower block
      int at = nt < want ? nt++ : want - 1;
      while (at > 0 && sc > top_s[at - 1]) {
        top_s[at] = top_s[at - 1], top_i[at] = top_i[at - 1];
        at--;
      }
      top_s[at] = sc, top_i[at] = (int32_t)c;
    }
  }
  for (int64_t w = 0; w < words; w++) {
    uint64_t m = 0;
    if (every) {
      int64_t lo = w * 64, hi = min(own, lo + 64);  // blocks [lo, hi) of this word
      if (hi > lo) m = hi - lo == 64 ? ~0ull : ((1ull << (hi - lo)) - 1);
    } else {
      for (int x = 0; x < nt; x++)
        if (top_i[x] / 64 == w) m |= 1ull << (top_i[x] % 64);
    }
    if (uniform) {
      if (t0 < 0) break;  // a warp of padding only
      unsigned ml = __reduce_or_sync(0xffffffffu, (unsigned)m), mh = __reduce_or_sync(0xffffffffu, (unsigned)(m >> 32));
      m = (uint64_t)mh << 32 | ml;
      if (lane == 0 && m) atomicOr((unsigned long long *)&bits[((int64_t)h * ng + t0) * words + w], (unsigned long long)m);
    } else if (m) {
      atomicOr((unsigned long long *)&bits[((int64_t)h * ng + t) * words + w], (unsigned long long)m);
    }
  }
}

int moba_gpu_select_rows(const void *q, const int64_t *pos, int64_t n_rows, int64_t n_tokens, int32_t heads,
                         int32_t kv_heads, int32_t head_dim, int32_t block, int32_t topk, const double *means,
                         uint64_t *bits, void *stream, sr_error *e) {
  if (block < TILE || block % TILE) return sr_input_error(e, NULL, "block", "moba block %d is not a multiple of %d", block, TILE);
  if (topk < 1 || topk > MOBA_GPU_MAX_TOPK)
    return sr_input_error(e, NULL, "topk", "the GPU gate keeps 1 .. %d blocks a row, got %d", MOBA_GPU_MAX_TOPK, topk);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  int64_t ng = cdiv(n_tokens, TILE), words = cdiv(cdiv(n_tokens, block), 64), threads = (n_rows + 31) / 32 * 32 * heads;
  cudaStream_t st = (cudaStream_t)stream;
  SA_CUDA(cudaMemsetAsync(bits, 0, sizeof(uint64_t) * (size_t)(heads * ng * words), st));
  if (threads == 0) return SR_OK;
  select_rows_kernel<<<(unsigned)cdiv(threads, 128), 128, 0, st>>>((const __nv_bfloat16 *)q, pos, n_rows, heads,
                                                                   heads / kv_heads, head_dim, block, topk - 1, means,
                                                                   kv_heads, ng, words, bits);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// ---- execution form ---------------------------------------------------------------------------------------

// Is KV tile j of group t kept? Its own block up to the diagonal, or a kept earlier block.
__device__ static int tile_kept(const uint64_t *gb, int64_t t, int64_t j, int64_t nbt) {
  int64_t own = t / nbt, c = j / nbt;
  if (c == own) return j <= t;
  return c < own && ((gb[c / 64] >> (c % 64)) & 1u);
}

// Entries of each cell (head, group): nbt per kept block, the own block's tiles up to the diagonal.
__global__ static void count_kernel(const uint64_t *bits, int64_t cells, int64_t ng, int64_t words, int64_t nbt,
                                    int64_t *cnt, uint64_t *keys) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= cells) return;
  int64_t t = x % ng, n = t - (t / nbt) * nbt + 1;
  for (int64_t w = 0; w < words; w++) n += nbt * __popcll(bits[x * words + w]);
  cnt[x] = n;
  // sa_gpu_index_upload's order: work (2 per tile entry) descending, then cell ascending
  keys[x] = ((uint64_t)(0xffffffffu - (uint32_t)(2 * n)) << 32) | (uint64_t)x;
}

// A cell's entries ascending, as tiles_build: FULL, the diagonal PARTIAL (the causal mask); offsets per source.
__global__ static void fill_kernel(const uint64_t *bits, int64_t cells, int64_t ng, int64_t words, int64_t nbt,
                                   const int64_t *off, int64_t *tile_cnt, int32_t *tile_idx, uint8_t *tile_kind) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= cells) return;
  int64_t t = x % ng, at = off[x];
  tile_cnt[2 * x] = off[x], tile_cnt[2 * x + 1] = off[x + 1];
  const uint64_t *gb = bits + x * words;
  for (int64_t j = 0; j <= t; j++) {
    if (!tile_kept(gb, t, j, nbt)) {
      j = (j / nbt + 1) * nbt - 1;  // skip the rest of an unkept block
      continue;
    }
    tile_idx[at] = (int32_t)j, tile_kind[at++] = j == t ? TILE_PARTIAL : TILE_FULL;
  }
}

// One thread a (cell, mask word): moba_block_mask's row t, word w.
__global__ static void mask_kernel(const uint64_t *bits, int64_t cells, int64_t ng, int64_t words, int64_t nbt,
                                   int64_t row_words, uint64_t *bmask) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= cells * row_words) return;
  int64_t x = i / row_words, w = i % row_words, t = x % ng;
  uint64_t m = 0;
  for (int b = 0; b < 64; b++) {
    int64_t j = w * 64 + b;
    if (j < ng && tile_kept(bits + x * words, t, j, nbt)) m |= 1ull << b;
  }
  bmask[i] = m;
}

__global__ static void order_kernel(const uint64_t *keys, int64_t cells, int32_t *order) {
  int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x < cells) order[x] = (int32_t)(keys[x] & 0xffffffffu);
}

int moba_gpu_form_init(moba_gpu_form *f, int32_t heads, int64_t n, int32_t block, sr_error *e) {
  memset(f, 0, sizeof *f);
  if (block < TILE || block % TILE) return sr_input_error(e, NULL, "block", "moba block %d is not a multiple of %d", block, TILE);
  int64_t ng = cdiv(n, TILE);
  f->heads = heads, f->block = block, f->n = n, f->cells = heads * ng, f->row_words = cdiv(ng, 64);
  int64_t cells = f->cells, offs = 2 * cells + 1;
  tile_index *d = &f->ix.d;
  d->heads = heads, d->world = 1, d->q_rank = 0, d->n_qtiles = (int32_t)ng;
  f->ix.cells = cells;
  SA_CUDA(cudaMalloc((void **)&f->cnt, sizeof(int64_t) * (size_t)(cells + 1)));
  SA_CUDA(cudaMalloc((void **)&f->off, sizeof(int64_t) * (size_t)(cells + 1)));
  SA_CUDA(cudaMalloc((void **)&f->keys[0], sizeof(uint64_t) * (size_t)(cells + 1)));
  SA_CUDA(cudaMalloc((void **)&f->keys[1], sizeof(uint64_t) * (size_t)(cells + 1)));
  SA_CUDA(cudaMalloc((void **)&f->ix.order, sizeof(int32_t) * (size_t)(cells + 1)));
  SA_CUDA(cudaMalloc((void **)&d->tile_cnt, sizeof(int64_t) * (size_t)offs));
  SA_CUDA(cudaMalloc((void **)&d->bar_cnt, sizeof(int64_t) * (size_t)offs));  // no bars: every offset 0
  SA_CUDA(cudaMemset(d->bar_cnt, 0, sizeof(int64_t) * (size_t)offs));
  SA_CUDA(cudaMalloc((void **)&d->bar_idx, sizeof(int32_t)));
  SA_CUDA(cudaMalloc((void **)&f->bmask, sizeof(uint64_t) * (size_t)(cells * f->row_words + 1)));
  SA_CUDA(cudaMallocHost((void **)&f->host_total, sizeof(int64_t)));
  // the masks: BLOCK heads of TILE-token blocks, as gated_mask_moba
  head_mask *hm = (head_mask *)calloc((size_t)heads, sizeof *hm);
  if (!hm) return sr_internal_error(e, 0, "moba gate: out of memory");
  for (int h = 0; h < heads; h++) {
    hm[h].kind = PATTERN_BLOCK, hm[h].n_tokens = n, hm[h].block = TILE, hm[h].row_words = f->row_words;
    hm[h].bmask = f->bmask + (int64_t)h * ng * f->row_words;
  }
  cudaError_t rc = cudaMalloc((void **)&f->masks, sizeof(head_mask) * (size_t)heads);
  if (rc == cudaSuccess) rc = cudaMemcpy(f->masks, hm, sizeof(head_mask) * (size_t)heads, cudaMemcpyHostToDevice);
  free(hm);
  SA_CUDA(rc);
  size_t b1 = 0, b2 = 0;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(NULL, b1, f->cnt, f->off, (int)(cells + 1)));
  SA_CUDA(cub::DeviceRadixSort::SortKeys(NULL, b2, f->keys[0], f->keys[1], (int)cells));
  f->cub_bytes = b1 > b2 ? b1 : b2;
  SA_CUDA(cudaMalloc(&f->cub_tmp, f->cub_bytes + 1));
  f->ix.dev_bytes = (int64_t)(sizeof(int32_t) + 2 * 2 * sizeof(int64_t)) * cells;
  return SR_OK;
}

void moba_gpu_form_free(moba_gpu_form *f) {
  cudaFree(f->cnt), cudaFree(f->off), cudaFree(f->keys[0]), cudaFree(f->keys[1]), cudaFree(f->ix.order);
  cudaFree(f->ix.d.tile_cnt), cudaFree(f->ix.d.bar_cnt), cudaFree(f->ix.d.bar_idx), cudaFree(f->ix.d.tile_idx);
  cudaFree(f->ix.d.tile_kind), cudaFree(f->bmask), cudaFree(f->masks), cudaFree(f->cub_tmp);
  if (f->host_total) cudaFreeHost(f->host_total);
  memset(f, 0, sizeof *f);
}

int moba_gpu_form_build(moba_gpu_form *f, const uint64_t *bits, void *stream, sr_error *e) {
  cudaStream_t st = (cudaStream_t)stream;
  int64_t cells = f->cells, ng = cdiv(f->n, TILE), words = cdiv(cdiv(f->n, f->block), 64), nbt = f->block / TILE;
  tile_index *d = &f->ix.d;
  if (cells == 0) return SR_OK;
  unsigned gc = (unsigned)cdiv(cells, 128);
  SA_CUDA(cudaMemsetAsync(f->cnt + cells, 0, sizeof(int64_t), st));
  count_kernel<<<gc, 128, 0, st>>>(bits, cells, ng, words, nbt, f->cnt, f->keys[0]);
  SA_CUDA(cudaGetLastError());
  size_t bytes = f->cub_bytes;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(f->cub_tmp, bytes, f->cnt, f->off, (int)(cells + 1), st));
  bytes = f->cub_bytes;
  SA_CUDA(cub::DeviceRadixSort::SortKeys(f->cub_tmp, bytes, f->keys[0], f->keys[1], (int)cells, 0, 64, st));
  order_kernel<<<gc, 128, 0, st>>>(f->keys[1], cells, f->ix.order);
  SA_CUDA(cudaGetLastError());
  SA_CUDA(cudaMemcpyAsync(f->host_total, f->off + cells, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  SA_CUDA(cudaStreamSynchronize(st));
  int64_t total = *f->host_total;
  if (total > f->cap_tiles) {  // grow (the device is idle after the sync)
    cudaFree(d->tile_idx), cudaFree(d->tile_kind);
    d->tile_idx = NULL, d->tile_kind = NULL, f->cap_tiles = 0;
    int64_t cap = total + total / 4 + 1;
    SA_CUDA(cudaMalloc((void **)&d->tile_idx, sizeof(int32_t) * (size_t)cap));
    SA_CUDA(cudaMalloc((void **)&d->tile_kind, (size_t)cap));
    f->cap_tiles = cap;
  }
  d->n_tiles = total, d->n_bars = 0;
  fill_kernel<<<gc, 128, 0, st>>>(bits, cells, ng, words, nbt, f->off, d->tile_cnt, d->tile_idx, d->tile_kind);
  SA_CUDA(cudaGetLastError());
  int64_t mw = cells * f->row_words;
  mask_kernel<<<(unsigned)cdiv(mw, 128), 128, 0, st>>>(bits, cells, ng, words, nbt, f->row_words, f->bmask);
  SA_CUDA(cudaGetLastError());
  f->ix.dev_bytes = (int64_t)(sizeof(int32_t) + 2 * 2 * sizeof(int64_t)) * cells + 5 * f->cap_tiles;
  return SR_OK;
}

// sa_cuda.cuh — device building blocks shared by the sparse attention kernels: warp-level bf16 tensor
// core products (mma.sync m16n8k16, ldmatrix), 16-byte cp.async copies, and the walk over one
// (head, query tile, source) cell of the execution form as 64-key chunks (KV tile halves, then bars).
// Fragment layouts follow the PTX ISA, "Matrix Fragments for mma.m16n8k16" (g = lane / 4, t = lane % 4).
#ifndef SR_SA_CUDA_CUH
#define SR_SA_CUDA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/sa_mask.h"
#include "plan/tile_index.h"

#define SA_BM 128      // query rows per CTA (one tile of the execution form)
#define SA_BN 64       // keys per chunk (half a KV tile, or 64 gathered bar keys)
#define SA_LOG2E 1.4426950408889634f
#define SA_LN2 0.6931471805599453f

// ---- tensor core and copy primitives -----------------------------------------------------------

__device__ __forceinline__ uint32_t sa_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void sa_ldmatrix_x4(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa_smem_addr(p)));
}

__device__ __forceinline__ void sa_ldmatrix_x4_trans(uint32_t *r, const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa_smem_addr(p)));
}

// c[4] += a[4] (16x16 bf16, row) * b[2] (16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void sa_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte global -> shared copy; bytes = 0 zero-fills the destination (rows past the end, absent keys).
__device__ __forceinline__ void sa_cp_async16(void *smem, const void *gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa_smem_addr(smem)), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void sa_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void sa_cp_async_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// 2^x by the special-function unit alone (ex2.approx.ftz: relative error ~2^-22; results below 2^-126
// flush to 0, as do inputs of -inf). exp2f adds a range test and two multiplies to keep denormal
// results, probabilities far below bf16's resolution of the row sum.
__device__ __forceinline__ float sa_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t sa_pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(uint32_t *)&v;
}

// ---- warp-level products on shared-memory tiles (row stride in bf16 elements) ------------------

// A fragments of a 16 x D tile (rows r0.., row-major) for each 16-wide k step: a[D/16][4].
template <int D>
__device__ __forceinline__ void sa_load_a(uint32_t (*a)[4], const __nv_bfloat16 *s, int stride, int lane) {
  int mat = lane >> 3, row = (lane & 7) + (mat & 1) * 8, col = (mat >> 1) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) sa_ldmatrix_x4(a[kk], s + row * stride + kk * 16 + col);
}

// acc[N/8][4] += A (16 x D, fragments) * B^T where B is N x D row-major in shared memory (S = Q K^T).
template <int D, int N>
__device__ __forceinline__ void sa_mma_abt(float (*acc)[4], const uint32_t (*a)[4], const __nv_bfloat16 *b, int stride,
                                           int lane) {
  int mat = lane >> 3, row = (lane & 7) + (mat >> 1) * 8, col = (mat & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
    for (int n = 0; n < N / 16; n++) {
      uint32_t r[4];
      sa_ldmatrix_x4(r, b + (n * 16 + row) * stride + kk * 16 + col);
      sa_mma(acc[2 * n], a[kk], r[0], r[1]);
      sa_mma(acc[2 * n + 1], a[kk], r[2], r[3]);
    }
}

// acc[D/8][4] += P (16 x K, given as fp32 accumulators p[K/8][4]) * B where B is K x D row-major in
// shared memory (O += P V). The accumulator layout of two adjacent n8 tiles is the A layout of k16.
template <int K, int D>
__device__ __forceinline__ void sa_mma_pb(float (*acc)[4], const float (*p)[4], const __nv_bfloat16 *b, int stride,
                                          int lane) {
  int mat = lane >> 3, row = (lane & 7) + (mat & 1) * 8, col = (mat >> 1) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) {
    uint32_t a[4];
    a[0] = sa_pack_bf16(p[2 * kk][0], p[2 * kk][1]);
    a[1] = sa_pack_bf16(p[2 * kk][2], p[2 * kk][3]);
    a[2] = sa_pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = sa_pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
      uint32_t r[4];
      sa_ldmatrix_x4_trans(r, b + (kk * 16 + row) * stride + n * 16 + col);
      sa_mma(acc[2 * n], a, r[0], r[1]);
      sa_mma(acc[2 * n + 1], a, r[2], r[3]);
    }
  }
}

// The same two products for MT 16-row tiles of one warp at once: each B fragment read from shared
// memory feeds MT tensor-core instructions, which halves shared-memory traffic per flop at MT = 2.
// acc[m][N/8][4] += A[m] (one 16-wide k step, fragments) * B^T, B = N rows x 16 columns at b.
template <int N, int MT>
__device__ __forceinline__ void sa_mma_abt_k16(float (*acc)[N / 8][4], const uint32_t (*a)[4],
                                               const __nv_bfloat16 *b, int stride, int lane) {
  int mat = lane >> 3, row = (lane & 7) + (mat >> 1) * 8, col = (mat & 1) * 8;
#pragma unroll
  for (int n = 0; n < N / 16; n++) {
    uint32_t r[4];
    sa_ldmatrix_x4(r, b + (n * 16 + row) * stride + col);
#pragma unroll
    for (int m = 0; m < MT; m++) {
      sa_mma(acc[m][2 * n], a[m], r[0], r[1]);
      sa_mma(acc[m][2 * n + 1], a[m], r[2], r[3]);
    }
  }
}

// acc[m][D/8][4] += P[m] (16 x K accumulators) * B, B = K x D row-major at b.
template <int K, int D, int MT>
__device__ __forceinline__ void sa_mma_pb_mt(float (*acc)[D / 8][4], const float (*p)[K / 8][4],
                                             const __nv_bfloat16 *b, int stride, int lane) {
  int mat = lane >> 3, row = (lane & 7) + (mat & 1) * 8, col = (mat >> 1) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; kk++) {
    uint32_t a[MT][4];
#pragma unroll
    for (int m = 0; m < MT; m++) {
      a[m][0] = sa_pack_bf16(p[m][2 * kk][0], p[m][2 * kk][1]);
      a[m][1] = sa_pack_bf16(p[m][2 * kk][2], p[m][2 * kk][3]);
      a[m][2] = sa_pack_bf16(p[m][2 * kk + 1][0], p[m][2 * kk + 1][1]);
      a[m][3] = sa_pack_bf16(p[m][2 * kk + 1][2], p[m][2 * kk + 1][3]);
    }
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
      uint32_t r[4];
      sa_ldmatrix_x4_trans(r, b + (kk * 16 + row) * stride + n * 16 + col);
#pragma unroll
      for (int m = 0; m < MT; m++) {
        sa_mma(acc[m][2 * n], a[m], r[0], r[1]);
        sa_mma(acc[m][2 * n + 1], a[m], r[2], r[3]);
      }
    }
  }
}

// ---- the chunks of one cell ----------------------------------------------------------------------

// Chunks of a cell: 2 per tile entry (its two 64-key halves), one per run (the forward form), then
// ceil(bars / 64) gathered bar chunks, which start at chunk bar_chunk0.
typedef struct {
  int64_t t0;      // first tile entry
  int n_tile_chunks;
  int64_t r0;      // first run
  int bar_chunk0;  // n_tile_chunks + runs
  int64_t b0, b1;  // bar entries [b0, b1)
  int n_chunks;
} sa_cell;

__device__ __forceinline__ sa_cell sa_cell_of(const tile_index *ti, int h, int qt, int src) {
  int hi = ti->heads == 1 ? 0 : h;
  int64_t off = ((int64_t)hi * ti->n_qtiles + qt) * (ti->world + 1) + src;
  sa_cell c;
  c.t0 = ti->tile_cnt[off];
  c.n_tile_chunks = (int)(2 * (ti->tile_cnt[off + 1] - c.t0));
  c.r0 = ti->run_cnt ? ti->run_cnt[off] : 0;
  c.bar_chunk0 = c.n_tile_chunks + (ti->run_cnt ? (int)(ti->run_cnt[off + 1] - c.r0) : 0);
  c.b0 = ti->bar_cnt[off];
  c.b1 = ti->bar_cnt[off + 1];
  c.n_chunks = c.bar_chunk0 + (int)((c.b1 - c.b0 + SA_BN - 1) / SA_BN);
  return c;
}

enum { SA_CHUNK_FULL = 0, SA_CHUNK_PARTIAL = 1, SA_CHUNK_BAR = 2 };

// Where chunk ci's keys are: key r is base + r (idx == NULL) or idx[r], for r < n_valid. A run is a
// PARTIAL chunk of run_len keys from run_key.
typedef struct {
  int kind;
  int n_valid;
  int64_t base;
  const int32_t *idx;
} sa_chunk;

__device__ __forceinline__ sa_chunk sa_chunk_of(const tile_index *ti, const sa_cell *c, int ci, int64_t n_k) {
  sa_chunk k;
  if (ci < c->bar_chunk0) {
    int64_t len;
    if (ci < c->n_tile_chunks) {
      k.kind = ti->tile_kind[c->t0 + ci / 2] == TILE_FULL ? SA_CHUNK_FULL : SA_CHUNK_PARTIAL;
      k.base = (int64_t)ti->tile_idx[c->t0 + ci / 2] * TILE + (ci & 1) * SA_BN;
      len = SA_BN;
    } else {
      int64_t r = c->r0 + (ci - c->n_tile_chunks);
      k.kind = SA_CHUNK_PARTIAL;
      k.base = ti->run_key[r];
      len = ti->run_len[r];
    }
    k.idx = NULL;
    int64_t left = n_k - k.base;
    k.n_valid = left < 0 ? 0 : left > len ? (int)len : (int)left;
  } else {
    int64_t b = c->b0 + (int64_t)(ci - c->bar_chunk0) * SA_BN, left = c->b1 - b;
    k.kind = SA_CHUNK_BAR;
    k.base = 0;
    k.idx = ti->bar_idx + b;
    k.n_valid = left > SA_BN ? SA_BN : (int)left;
  }
  return k;
}

__device__ __forceinline__ int64_t sa_row_of(int64_t base, const int32_t *idx, int n_valid, int r) {
  return r >= n_valid ? -1 : idx ? (int64_t)idx[r] : base + r;
}

// Copy ROWS rows of a [n, heads, D] bf16 tensor (row r = sa_row_of(...), -1 zero-fills) into a shared
// tile of row stride D + 8 (the pad keeps ldmatrix free of bank conflicts) with 16-byte cp.async.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void sa_load_rows(__nv_bfloat16 *s, const __nv_bfloat16 *g, int64_t base,
                                             const int32_t *idx, int n_valid, int64_t row_stride, int tid) {
  const int segs = D / 8;
#pragma unroll
  for (int i = tid; i < ROWS * segs; i += THREADS) {
    int r = i / segs, sg = i % segs;
    int64_t k = sa_row_of(base, idx, n_valid, r);
    const __nv_bfloat16 *src = g + (k < 0 ? 0 : k * row_stride) + sg * 8;
    sa_cp_async16(s + r * (D + 8) + sg * 8, src, k < 0 ? 0 : 16);
  }
}

// ---- keep bits of partial tiles -----------------------------------------------------------------

// Do the positions pos[col] of this thread's NT * 2 columns (n * 8 + 2t + {0, 1}) below n_valid run on
// from pos[0]? Then the 64-bit forms above give its bits exactly (columns from n_valid on hold no key and
// are masked by the caller); other columns are no concern of this thread.
template <int NT>
__device__ __forceinline__ int sa_cols_run_on(const int64_t *pos, int t, int n_valid = SA_BN) {
  int64_t p0 = pos[0];
  int ok = p0 >= 0;
#pragma unroll
  for (int n = 0; n < NT; n++) {
    int c = n * 8 + 2 * t;
    ok &= (c >= n_valid || pos[c] == p0 + c) & (c + 1 >= n_valid || pos[c + 1] == p0 + c + 1);
  }
  return ok;
}

// Is pred nonzero in any of the 128 threads of warpgroup wg (0 or 1: warps 4wg .. 4wg + 3)? A named
// barrier (id 1 + wg; 0 is __syncthreads) with an OR reduction: every thread of the warpgroup must call
// it. The ids are immediates, so the kernel reserves 3 barriers, not all 16.
__device__ __forceinline__ int sa_wg_any(int pred, int wg) {
  int r;
  if (wg == 0)
    asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.or.pred q, 1, 128, p;\n selp.s32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"(pred));
  else
    asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n bar.red.or.pred q, 2, 128, p;\n selp.s32 %0, 1, 0, q;\n}\n"
                 : "=r"(r) : "r"(pred));
  return r;
}

// Keep bits of a thread's elements of a 16-row score tile over NT n8 tiles in accumulator layout:
// bit n*4+e is row qp[e/2], column n*8 + 2t + e%2, whose key position is kp[col] (-1: no key). FULL
// keeps every present key, BAR applies the causal mask, PARTIAL the head's element mask (causal
// when NULL). A VS head's partial chunk of consecutive keys (the tiles of every shipped layout, and runs,
// which may hold fewer than 64 keys: n_valid) takes its bits from 64-bit windows of the bit sets: a few
// loads a row instead of two an element (the budget mix's scattered slashes make most of its work such
// chunks). Otherwise a rolled loop, so the pattern's predicate is compiled once.
template <int NT = SA_BN / 8>
__device__ __forceinline__ uint32_t sa_keep_bits(int kind, const head_mask *mask, const int64_t *qp,
                                                 const int64_t *kp, int t, int n_valid = SA_BN) {
  uint32_t bits = 0;
  if (kind == SA_CHUNK_PARTIAL && mask && mask->kind == PATTERN_VS && sa_cols_run_on<NT>(kp, t, n_valid)) {
    int64_t k0 = kp[0];
    uint64_t vert = sa_bits64(mask->vbits, mask->n_tokens, k0), valid = n_valid >= 64 ? ~0ull : (1ull << n_valid) - 1;
    uint64_t r0 = sa_vs_row64(mask, vert, qp[0], k0) & valid, r1 = sa_vs_row64(mask, vert, qp[1], k0) & valid;
    bits = sa_quad_cols(r0, t) | sa_quad_cols(r1, t) << 2;
    return NT >= 8 ? bits : bits & ((1u << (NT * 4)) - 1u);
  }
#pragma unroll 1
  for (int i = 0; i < NT * 4; i++) {
    int col = (i >> 2) * 8 + 2 * t + (i & 1);
    int64_t k = kp[col], q = (i & 2) ? qp[1] : qp[0];
    // Columns from n_valid on hold no key (their positions may be stale): never looked up.
    int keep = col < n_valid && k >= 0 &&
               (kind == SA_CHUNK_FULL ? 1 : kind == SA_CHUNK_BAR || !mask ? k <= q : sa_mask_keeps(mask, q, k));
    bits |= (uint32_t)keep << i;
  }
  return bits;
}

// The transposed tile of the dK/dV kernels: rows are keys kp[0], kp[1] (bit n*4+e takes kp[e/2]),
// columns query rows qp[n * 8 + 2t + e%2] (64 of them). Sets *bits and returns 1 for a VS head's partial
// chunk whose query rows run on (the 64-bit form); returns 0 for the caller's general loop otherwise.
__device__ __forceinline__ int sa_keep_bits_t_vs(int kind, const head_mask *mask, const int64_t *qp,
                                                 const int64_t *kp, int t, uint32_t *bits) {
  if (kind != SA_CHUNK_PARTIAL || !mask || mask->kind != PATTERN_VS || !sa_cols_run_on<8>(qp, t)) return 0;
  uint64_t r0 = kp[0] >= 0 ? sa_vs_col64(mask, qp[0], kp[0]) : 0, r1 = kp[1] >= 0 ? sa_vs_col64(mask, qp[0], kp[1]) : 0;
  *bits = sa_quad_cols(r0, t) | sa_quad_cols(r1, t) << 2;
  return 1;
}

#endif

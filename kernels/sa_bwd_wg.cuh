// sa_bwd_wg.cuh — device helpers of the Hopper (wgmma) backward kernels shared by
// kernels/sparse_attn_bwd_wg.cu (the split dQ and dK/dV kernels) and kernels/sparse_attn_bwd_ws.cu
// (the fused KV-major kernel): tile sizes, descriptor offsets of k16 steps in 128-byte swizzled tiles,
// packing of accumulators into A fragments, and the register-operand product of the P/dS tiles.
#ifndef SR_SA_BWD_WG_CUH
#define SR_SA_BWD_WG_CUH

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_wgmma.cuh"

#define BW_THREADS 256
#define BW_KEYS 128  // keys per dK/dV CTA (one KV tile), 64 per warpgroup
#define BW_QB 64     // query rows per dK/dV chunk

// 4-byte global -> shared copy (an LSE or D value).
__device__ __forceinline__ void bw_cp_async4(void *smem, const void *gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa_smem_addr(smem)), "l"(gmem));
}

// Descriptor offsets (16-byte units) of k16 step kk in a swizzled tile of `rows` rows: K-major operand
// (column block kk / 4, 32 bytes per step inside it) and N-major operand (16 rows of 128 bytes a step).
__device__ __forceinline__ uint64_t bw_kmajor(int kk, int rows) {
  return (uint64_t)(((kk >> 2) * rows * 128 + (kk & 3) * 32) >> 4);
}
__device__ __forceinline__ uint64_t bw_nmajor(int kk) { return (uint64_t)((kk * 16 * 128) >> 4); }

// Fragments of a 64 x 64 accumulator tile as the A operand (bf16) of four k16 steps.
__device__ __forceinline__ void bw_pack(uint32_t (*pa)[4], const float (*s)[4]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    pa[kk][0] = sa_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = sa_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = sa_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = sa_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// acc (64 x D) += A (64 x 64 from registers, four k16 steps) * B (64 x D, N-major at descriptor b0).
template <int D>
__device__ __forceinline__ void bw_mma_rs(float *acc, const uint32_t (*pa)[4], uint64_t b0) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    if (D == 128) sa_wgmma_m64n128_rs_tb(acc, pa[kk], b0 + bw_nmajor(kk));
    else sa_wgmma_m64n64_rs_tb(acc, pa[kk], b0 + bw_nmajor(kk));
  }
}

template <int N>
__device__ __forceinline__ void bw_fence_regs(float *r) {
#pragma unroll
  for (int i = 0; i < N; i++) sa_reg_fence(r[i]);
}

// Where query chunk f of a KV-major CTA lies: head, first row, tile kind (and for the fused kernel
// the query tile and half, which name its dQ semaphore, and the KV tile's rank in its dQ order).
typedef struct {
  int h, kind, qt, half, rank;
  int64_t r0;
} bw_qchunk;

#endif

// sa_wgmma.cuh — Hopper warpgroup tensor-core products (wgmma, sm_90a) for the sparse attention
// forward: shared-memory matrix descriptors for 128-byte swizzled tiles, the 16-byte cp.async copy
// into that swizzle, and the three wgmma shapes the forward uses. Layouts follow the PTX ISA
// ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate": matrix descriptor, canonical layouts,
// register fragments). Compiled for other targets the products are empty: the host only launches the
// kernel that uses them after sa_wgmma_built() reports an sm_90a image (kernels/sparse_attn_fwd.cu).
#ifndef SR_SA_WGMMA_CUH
#define SR_SA_WGMMA_CUH

#include <stdint.h>

#include "kernels/sa_cuda.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SA_WGMMA_ARCH 1
#else
#define SA_WGMMA_ARCH 0
#endif

// ---- 128-byte swizzled tiles ----------------------------------------------------------------------
// A tile of R rows x D bf16 columns is stored as D / 64 column blocks of R rows x 128 bytes (block
// stride R * 128 bytes); within a block the 16-byte segment s of row r sits at segment s ^ (r % 8).
// Blocks start 1024-byte aligned (the swizzle repeats every 8 rows), which the descriptors assume.

__device__ __forceinline__ uint32_t sa_sw128_offset(int r, int col, int rows) {
  return (uint32_t)((col >> 6) * rows * 128 + r * 128 + ((((col >> 3) & 7) ^ (r & 7)) << 4) + (col & 7) * 2);
}

// sa_load_rows (kernels/sa_cuda.cuh) into a swizzled tile of ROWS rows: row r from sa_row_of(...),
// absent rows zero-filled.
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void sa_load_rows_sw128(unsigned char *s, const __nv_bfloat16 *g, int64_t base,
                                                   const int32_t *idx, int n_valid, int64_t row_stride, int tid) {
  const int segs = D / 8;
#pragma unroll
  for (int i = tid; i < ROWS * segs; i += THREADS) {
    int r = i / segs, sg = i % segs;
    int64_t k = sa_row_of(base, idx, n_valid, r);
    const __nv_bfloat16 *src = g + (k < 0 ? 0 : k * row_stride) + sg * 8;
    sa_cp_async16(s + sa_sw128_offset(r, sg * 8, ROWS), src, k < 0 ? 0 : 16);
  }
}

// Matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading
// byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1 = 128 B).
__device__ __forceinline__ uint64_t sa_desc_sw128(const void *p, uint32_t lbo, uint32_t sbo) {
  uint64_t a = sa_smem_addr(p);
  return ((a & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) |
         (1ull << 62);
}

// 8-byte global -> shared copy (a key position).
__device__ __forceinline__ void sa_cp_async8(void *smem, const void *gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa_smem_addr(smem)), "l"(gmem));
}

// ---- ordering -------------------------------------------------------------------------------------

// Before the first wgmma that reads registers written by ordinary instructions (accumulators, A).
__device__ __forceinline__ void sa_wgmma_fence(void) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void sa_wgmma_commit(void) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void sa_wgmma_wait(void) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Keeps the compiler from moving accesses of an accumulator across the asynchronous products.
__device__ __forceinline__ void sa_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
// Shared memory written through the generic proxy (cp.async, st.shared) becomes visible to wgmma
// (the async proxy) only after this fence in the writing thread, then a barrier.
__device__ __forceinline__ void sa_fence_proxy_async(void) {
#if SA_WGMMA_ARCH
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- products (accumulator layout per warp w of the warpgroup: rows 16w + g (+8), n8 tile j in
// ---- d[4j..4j+3] as the mma.sync m16n8 C fragment) --------------------------------------------------

// d[32] (+)= A (64 x 16, smem descriptor) * B^T (64 x 16, smem descriptor), both K-major.
__device__ __forceinline__ void sa_wgmma_m64n64_ss(float *d, uint64_t da, uint64_t db) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, 0, 0;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db));
#endif
}

// d[32] (+)= A (64 x 16 in registers, mma.sync A-fragment layout per warp) * B (16 x 64, smem
// descriptor, N-major: imm-trans-b = 1).
__device__ __forceinline__ void sa_wgmma_m64n64_rs_tb(float *d, const uint32_t *a, uint64_t db) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#endif
}

// d[64] (+)= A (64 x 16 in registers, mma.sync A-fragment layout per warp) * B (16 x 128, smem
// descriptor, N-major: imm-trans-b = 1).
__device__ __forceinline__ void sa_wgmma_m64n128_rs_tb(float *d, const uint32_t *a, uint64_t db) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#endif
}

// d[32] (+)= A (64 x 16, smem descriptor, M-major: imm-trans-a = 1) * B (16 x 64, smem descriptor,
// N-major: imm-trans-b = 1): both operands stored with the K dimension as their rows (the backward's
// dQ^T = K^T dS^T from the K tile and the dS^T tile as they sit in shared memory).
__device__ __forceinline__ void sa_wgmma_m64n64_ss_tt(float *d, uint64_t da, uint64_t db) {
#if SA_WGMMA_ARCH
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, 1, 1;\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(da), "l"(db));
#endif
}

// Register-operand variant of sa_reg_fence (wgmma A fragments stay live until the wait).
__device__ __forceinline__ void sa_reg_fence_u32(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

// A fragments (mma.sync / wgmma register layout) of rows r0..r0+15, columns 16 kk.. of a swizzled tile
// of `rows` rows, by ldmatrix: each lane names one 16-byte row segment, whole under the swizzle.
__device__ __forceinline__ void sa_ldmatrix_a_sw128(uint32_t *a, const unsigned char *tile, int rows, int r0, int kk,
                                                    int lane) {
  int mat = lane >> 3, r = r0 + (lane & 7) + (mat & 1) * 8, col = kk * 16 + (mat >> 1) * 8;
  sa_ldmatrix_x4(a, tile + sa_sw128_offset(r, col, rows));
}

// d[32] = (scale_d ? d : 0) + A (64 x 16 in registers) * B^T (64 x 16, smem descriptor, K-major).
__device__ __forceinline__ void sa_wgmma_m64n64_rs(float *d, const uint32_t *a, uint64_t db, int scale_d) {
#if SA_WGMMA_ARCH
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
#endif
}


#endif

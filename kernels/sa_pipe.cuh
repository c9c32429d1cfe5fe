// sa_pipe.cuh — Hopper pipeline primitives for the warp-specialized kernels (sm_90a): shared-memory
// barriers (mbarrier) between a producer warpgroup that copies and consumer warpgroups that compute,
// named barriers that take turns between the consumers, register reallocation between the roles, and
// the 64 x 128 score product. Semantics follow the PTX ISA ("mbarrier", "cp.async.mbarrier.arrive",
// "setmaxnreg", "bar.sync / bar.arrive", "wgmma.mma_async"). Compiled for other targets the bodies are
// empty: the host launches these kernels only after sa_wgmma_built() reports the sm_90a image.
#ifndef SR_SA_PIPE_CUH
#define SR_SA_PIPE_CUH

#include <stdint.h>

#include "kernels/sa_wgmma.cuh"

// ---- mbarrier ---------------------------------------------------------------------------------------
// A barrier completes a phase when `count` arrivals have happened; waiters name the phase by its parity.
// A fresh barrier is in phase 0, so waiting for parity 1 returns at once: a producer waits on its
// "empty" barriers with the parity flipped, which lets it fill every stage once before any release.

__device__ __forceinline__ void sa_mbar_init(uint64_t *bar, int count) {
#if SA_WGMMA_ARCH
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sa_smem_addr(bar)), "r"(count) : "memory");
#endif
}

// Arrive once (release semantics at CTA scope: this thread's earlier shared-memory stores are visible
// to a thread that observes the phase complete).
__device__ __forceinline__ void sa_mbar_arrive(uint64_t *bar) {
#if SA_WGMMA_ARCH
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(sa_smem_addr(bar)) : "memory");
#endif
}

// A consumer warp's release of a stage it has read (the "empty" barriers count SA_RELEASE_LANES arrivals a
// warp). 32 (the default): every lane arrives, so each lane's reads of the stage are ordered before the
// producer's refill by its own arrival's release. 1: lane 0 arrives after __syncwarp, which orders the other
// lanes' reads before that arrival; compute-sanitizer's racecheck does not follow that chain and reports each
// refill as a hazard against the previous occupant's reads (100 reports on the small GPU test's first three
// cases, where the default reports none; same dense speed on one H100: results/kernels/2026-11-27-h100-sanitizers-release).
#ifndef SA_RELEASE_LANES
#define SA_RELEASE_LANES 32
#endif
#if SA_RELEASE_LANES != 1 && SA_RELEASE_LANES != 32
#error "SA_RELEASE_LANES: 1 (lane 0 after __syncwarp) or 32 (every lane)"
#endif
__device__ __forceinline__ void sa_mbar_release_warp(uint64_t *bar, int lane) {
#if SA_RELEASE_LANES == 32
  sa_mbar_arrive(bar);
#else
  __syncwarp();
  if (lane == 0) sa_mbar_arrive(bar);
#endif
}

// Arrive once when every cp.async this thread issued so far has landed (the arrival is counted in the
// barrier's expected count: .noinc).
__device__ __forceinline__ void sa_mbar_arrive_cp_async(uint64_t *bar) {
#if SA_WGMMA_ARCH
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(sa_smem_addr(bar)) : "memory");
#endif
}

// Arrive once and expect `bytes` more from the bulk copies (TMA) that complete on this barrier.
__device__ __forceinline__ void sa_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
#if SA_WGMMA_ARCH
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(sa_smem_addr(bar)),
               "r"(bytes)
               : "memory");
#endif
}

// Wait until the phase of the given parity has completed (acquire semantics at CTA scope).
__device__ __forceinline__ void sa_mbar_wait(uint64_t *bar, uint32_t parity) {
#if SA_WGMMA_ARCH
  uint32_t a = sa_smem_addr(bar), done;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(a), "r"(parity)
                 : "memory");
  } while (!done);
#endif
}

// ---- bulk tensor copies (TMA) -------------------------------------------------------------------------
// A box of a tensor map (built on the host, passed as a __grid_constant__ kernel parameter) into shared
// memory, completing on `bar` with the box's bytes; coordinates innermost first, elements past the
// tensor's bounds read as zero.

__device__ __forceinline__ void sa_tma_load_2d(void *dst, const void *tmap, int c0, int c1, uint64_t *bar) {
#if SA_WGMMA_ARCH
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          sa_smem_addr(dst)),
      "l"(tmap), "r"(c0), "r"(c1), "r"(sa_smem_addr(bar))
      : "memory");
#endif
}

__device__ __forceinline__ void sa_tma_load_1d(void *dst, const void *tmap, int c0, uint64_t *bar) {
#if SA_WGMMA_ARCH
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];\n" ::"r"(
                   sa_smem_addr(dst)),
               "l"(tmap), "r"(c0), "r"(sa_smem_addr(bar))
               : "memory");
#endif
}

// A box of shared memory added into a tensor map's box (fp32 add at L2: the TMA's reduction), in the
// calling thread's bulk group; commit the group, then wait until its reads of shared memory are done
// (the buffer may be written again) or until it has completed.
__device__ __forceinline__ void sa_tma_reduce_add_2d(const void *tmap, int c0, int c1, const void *src) {
#if SA_WGMMA_ARCH
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(tmap),
               "r"(c0), "r"(c1), "r"(sa_smem_addr(src))
               : "memory");
#endif
}
__device__ __forceinline__ void sa_bulk_commit(void) {
#if SA_WGMMA_ARCH
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void sa_bulk_wait_read(void) {
#if SA_WGMMA_ARCH
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
template <int N>
__device__ __forceinline__ void sa_bulk_wait(void) {
#if SA_WGMMA_ARCH
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// ---- named barriers (ids 0..15; 0 is __syncthreads) ---------------------------------------------------
// The consumers' turn taking: a warpgroup syncs on its own id before issuing its products and arrives on
// the other's id after, so one warpgroup's softmax runs while the other's products use the tensor cores.

template <int ID>
__device__ __forceinline__ void sa_named_sync(int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "r"(threads) : "memory");
}
template <int ID>
__device__ __forceinline__ void sa_named_arrive(int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "r"(threads) : "memory");
}

// ---- register reallocation ----------------------------------------------------------------------------
// Per warpgroup; the kernel must carry a register cap at entry (__launch_bounds__(threads, 1)).

template <int N>
__device__ __forceinline__ void sa_setmaxnreg_dec(void) {
#if SA_WGMMA_ARCH
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void sa_setmaxnreg_inc(void) {
#if SA_WGMMA_ARCH
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// ---- the 64 x 128 score product ------------------------------------------------------------------------

#define SA_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d[64] = (scale_d ? d : 0) + A (64 x 16, smem descriptor) * B^T (128 x 16, smem descriptor), both
// K-major (S = Q K^T over 128 keys; accumulator n8 tile j in d[4j..4j+3], as sa_wgmma_m64n64_ss).
__device__ __forceinline__ void sa_wgmma_m64n128_ss(float *d, uint64_t da, uint64_t db, int scale_d) {
#if SA_WGMMA_ARCH
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
      "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
      "%60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : SA_F8(0), SA_F8(8), SA_F8(16), SA_F8(24), SA_F8(32), SA_F8(40), SA_F8(48), SA_F8(56)
      : "l"(da), "l"(db), "r"(scale_d));
#endif
}

#undef SA_F8

#endif

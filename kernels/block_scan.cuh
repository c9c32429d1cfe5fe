// block_scan.cuh — a thread block's exclusive prefix sum, shared by the index builders' kernels
// (kernels/vs_convert.cu, kernels/transpose_gpu.cu).
#pragma once

// Exclusive sum of v over the block's threads in thread order, and the block's total in *total (blockDim a
// multiple of 32, at most 1024). Every thread of the block must call it; it leaves its shared words free for the
// next call.
static __device__ __forceinline__ int block_excl_sum(int v, int *total) {
  __shared__ int s_w[32];
  int lane = threadIdx.x & 31, wi = threadIdx.x / 32, inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    int n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  if (lane == 31) s_w[wi] = inc;
  __syncthreads();
  int before = inc - v, tot = 0;
  for (int k = 0; k < (int)blockDim.x / 32; k++) {
    if (k < wi) before += s_w[k];
    tot += s_w[k];
  }
  __syncthreads();  // s_w free for the next call
  *total = tot;
  return before;
}

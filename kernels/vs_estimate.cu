// vs_estimate.cu — MTraining's vertical-slash estimation on the GPU (vs_gpu.h): the scores of the estimation
// queries against one shard of keys in float64, the distributed softmax pieces (row maxima, fixed-point row
// sums), the column and diagonal sums, and the top-p-with-cap selection, bit for bit as the CPU reference.
//
// Why float64 scores: a float product is exact in float64, and the reference sums them in dimension order
// from 0, so fma(q, k, s) in the same order gives the reference's scores exactly. exp and the rounding to
// fixed point come from plan/vs_fixed.h; sums are 128-bit integers added by 64-bit atomics with carry, which
// is exact in any order. The selection is a radix select on the 128-bit sums, a sort of the picked ones in
// shared memory and the exact top-p test, so ties and the cut fall where vs_est_select puts them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "kernels/sa_gpu.h"
#include "kernels/vs_gpu.h"
#include "plan/vs_fixed.h"

// ---- 128-bit helpers -------------------------------------------------------------------------------

static __device__ __forceinline__ vs_u128 ld128(const uint64_t *p) { return ((vs_u128)p[1] << 64) | p[0]; }

// Exact add into a (lo, hi) pair: the carry of the low word goes into the high word.
static __device__ __forceinline__ void atomic_add_u128(unsigned long long *p, vs_u128 v) {
  unsigned long long lo = (unsigned long long)v, hi = (unsigned long long)(v >> 64);
  unsigned long long old = atomicAdd(p, lo);
  if (old + lo < old) hi++;
  if (hi) atomicAdd(p + 1, hi);
}

static __device__ __forceinline__ vs_u128 warp_sum_u128(vs_u128 v) {
  for (int o = 16; o > 0; o >>= 1) {
    uint64_t lo = __shfl_xor_sync(0xffffffffu, (unsigned long long)v, o);
    uint64_t hi = __shfl_xor_sync(0xffffffffu, (unsigned long long)(v >> 64), o);
    v += ((vs_u128)hi << 64) | lo;
  }
  return v;
}

// Block sum (blockDim a multiple of 32, at most 1024); every thread gets the result. s: 32 slots of scratch.
static __device__ vs_u128 block_sum_u128(vs_u128 v, vs_u128 *s) {
  v = warp_sum_u128(v);
  int w = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s[w] = v;
  __syncthreads();
  vs_u128 t = 0;
  for (int i = 0; i < nw; i++) t += s[i];
  __syncthreads();
  return t;
}

// Exclusive block scan (thread order); s: 32 slots of scratch.
static __device__ vs_u128 block_excl_scan_u128(vs_u128 v, vs_u128 *s) {
  int lane = threadIdx.x & 31, w = threadIdx.x / 32;
  vs_u128 inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    uint64_t lo = __shfl_up_sync(0xffffffffu, (unsigned long long)inc, o);
    uint64_t hi = __shfl_up_sync(0xffffffffu, (unsigned long long)(inc >> 64), o);
    if (lane >= o) inc += ((vs_u128)hi << 64) | lo;
  }
  __syncthreads();
  if (lane == 31) s[w] = inc;
  __syncthreads();
  vs_u128 before = inc - v;
  for (int i = 0; i < w; i++) before += s[i];
  __syncthreads();
  return before;
}

static __device__ void atomic_max_double(double *a, double v) {
  unsigned long long *p = (unsigned long long *)a, old = *p;
  while (__longlong_as_double((long long)old) < v) {
    unsigned long long assumed = old;
    old = atomicCAS(p, assumed, (unsigned long long)__double_as_longlong(v));
    if (old == assumed) break;
  }
}

// ---- pass 1: scores and row maxima ---------------------------------------------------------------------

enum { SC_KEYS = 128, SC_THREADS = 256, SC_DC = 32 };

// Up to 8 bf16 at p (n of them valid, the rest 0) as raw bits: one 16-byte load when vec and all 8 are valid.
static __device__ __forceinline__ uint4 sc_ld8(const __nv_bfloat16 *p, int n, int vec) {
  if (n <= 0) return make_uint4(0, 0, 0, 0);
  if (vec && n >= 8) return __ldg((const uint4 *)p);
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 8; e++)
    if (e < n) w[e / 2] |= (uint32_t)__bfloat16_as_ushort(p[e]) << (16 * (e & 1));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The 8 values of a staged uint4 as float64 at dst[0..7] (bf16 -> float -> double is exact).
static __device__ __forceinline__ void sc_st8(double *dst, uint4 v) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 8; e++) dst[e] = (double)__uint_as_float((w[e / 2] >> (16 * (e & 1))) << 16);
}

// Block: 128 keys x all queries of head blockIdx.y, over the head dimension in chunks of SC_DC. Thread (tq, tk):
// queries 4 tq .. 4 tq + 3, keys tk + 16 c. The chunk's tiles are held as float64 in shared memory, so the
// inner loop is loads and FMAs alone (a float tile cost 12 float-to-double conversions per 32 FMAs); the sum
// still runs in dimension order from 0, so the scores do not change. Each thread stages 8 values of one query
// row and of two key rows of the next chunk in registers (16-byte loads when vec: d a multiple of 8 and q, k
// 16-byte aligned) while the block computes the current one, so the global loads' latency is hidden.
__global__ void __launch_bounds__(SC_THREADS, 2)
    vs_scores_kernel(const __nv_bfloat16 *q, const int64_t *qpos, const __nv_bfloat16 *k, const int64_t *kpos,
                     int64_t n_k, int32_t heads, int32_t kv_heads, int32_t d, int32_t n_q, int32_t vec, double scale,
                     double *scores, double *row_max) {
  extern __shared__ double sm[];
  double *qs = sm, *ks = sm + VS_GPU_MAX_QUERIES * SC_DC;  // ks row stride SC_DC + 1: no bank conflicts
  int h = blockIdx.y, kvh = h / (heads / kv_heads);
  int64_t j0 = (int64_t)blockIdx.x * SC_KEYS;
  int tq = threadIdx.x / 16, tk = threadIdx.x % 16;
  // staging: query row sq, key rows sk and sk + 64, columns sc .. sc + 7 of the chunk
  int sq = threadIdx.x / (SC_DC / 8), sk = sq, sc = threadIdx.x % (SC_DC / 8) * 8;
  int64_t ja = j0 + sk, jb = j0 + sk + SC_KEYS / 2;
  const __nv_bfloat16 *qrow = q + ((int64_t)sq * heads + h) * d, *ka = k + (ja * kv_heads + kvh) * d,
                      *kb = k + (jb * kv_heads + kvh) * d;
  uint4 stq, stka, stkb;
#define SC_STAGE(c0)                                                             \
  do {                                                                           \
    int n_ = min(8, d - (c0) - sc);                                              \
    stq = sc_ld8(qrow + (c0) + sc, sq < n_q ? n_ : 0, vec);                      \
    stka = sc_ld8(ka + (c0) + sc, ja < n_k ? n_ : 0, vec);                       \
    stkb = sc_ld8(kb + (c0) + sc, jb < n_k ? n_ : 0, vec);                       \
  } while (0)
  SC_STAGE(0);
  double acc[4][8];
#pragma unroll
  for (int a = 0; a < 4; a++)
#pragma unroll
    for (int c = 0; c < 8; c++) acc[a][c] = 0.0;
  for (int c0 = 0; c0 < d; c0 += SC_DC) {
    int dc = min((int)SC_DC, d - c0);
    __syncthreads();  // the previous chunk is read
    sc_st8(qs + sq * SC_DC + sc, stq);
    sc_st8(ks + sk * (SC_DC + 1) + sc, stka);
    sc_st8(ks + (sk + SC_KEYS / 2) * (SC_DC + 1) + sc, stkb);
    __syncthreads();
    if (c0 + SC_DC < d) SC_STAGE(c0 + SC_DC);  // in flight while this chunk is computed
#pragma unroll 4
    for (int x = 0; x < dc; x++) {
      double qv[4], kv[8];
#pragma unroll
      for (int a = 0; a < 4; a++) qv[a] = qs[(tq * 4 + a) * SC_DC + x];
#pragma unroll
      for (int c = 0; c < 8; c++) kv[c] = ks[(tk + 16 * c) * (SC_DC + 1) + x];
#pragma unroll
      for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < 8; c++) acc[a][c] = fma(qv[a], kv[c], acc[a][c]);  // exact product: the reference's sum
    }
  }
#undef SC_STAGE
#pragma unroll
  for (int a = 0; a < 4; a++) {
    int i = tq * 4 + a;
    double m = -INFINITY;
    int64_t qp = i < n_q ? qpos[i] : -1;
#pragma unroll
    for (int c = 0; c < 8; c++) {
      int64_t j = j0 + tk + 16 * c;
      if (j >= n_k || i >= n_q) continue;
      double s = kpos[j] <= qp ? __dmul_rn(acc[a][c], scale) : -INFINITY;
      scores[((int64_t)h * n_q + i) * n_k + j] = s;
      m = fmax(m, s);
    }
    for (int o = 8; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));  // the 16 threads of a row
    if (tk == 0 && i < n_q && m > -INFINITY) atomic_max_double(&row_max[(int64_t)h * n_q + i], m);
  }
}

// ---- pass 2: row sums --------------------------------------------------------------------------------

// Block (row, chunk): fixed-point exp(score - max) of the row's keys in the chunk, summed exactly.
__global__ void vs_rowsum_kernel(const double *scores, int64_t n_k, const double *row_max, uint64_t *row_sum) {
  __shared__ vs_u128 red[32];
  int64_t r = blockIdx.y;
  const double *s = scores + r * n_k;
  double m = row_max[r];
  vs_u128 acc = 0;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n_k; j += (int64_t)gridDim.x * blockDim.x)
    acc += vs_to_fixed(vs_exp_neg(s[j] - m));  // -inf (after the query) gives 0
  acc = block_sum_u128(acc, red);
  if (threadIdx.x == 0 && acc) atomic_add_u128((unsigned long long *)&row_sum[2 * r], acc);
}

// ---- pass 3: column and diagonal sums ---------------------------------------------------------------

enum { PS_THREADS = 256, PS_SPAN = 2048 };

// Block: 256 keys of head blockIdx.y, every query. Diagonal sums go through shared memory when the block's
// offsets span at most PS_SPAN (consecutive keys, consecutive queries), else straight to global memory.
__global__ void vs_probs_kernel(const double *scores, int64_t n_k, int32_t n_q, int64_t n_tokens,
                                const int64_t *qpos, const int64_t *kpos, const double *row_max,
                                const uint64_t *row_sum, uint64_t *vert, uint64_t *slash) {
  __shared__ unsigned long long sl_lo[PS_SPAN], sl_hi[PS_SPAN];
  __shared__ double mx[VS_GPU_MAX_QUERIES], tot[VS_GPU_MAX_QUERIES];
  __shared__ int64_t qp[VS_GPU_MAX_QUERIES];
  __shared__ unsigned long long kmin_s, kmax_s;
  int h = blockIdx.y;
  int64_t j = (int64_t)blockIdx.x * PS_THREADS + threadIdx.x;
  if (threadIdx.x == 0) kmin_s = ~0ull, kmax_s = 0;
  for (int i = threadIdx.x; i < n_q; i += blockDim.x) {
    int64_t r = (int64_t)h * n_q + i;
    mx[i] = row_max[r];
    tot[i] = vs_fixed_to_double(ld128(row_sum + 2 * r));
    qp[i] = qpos[i];
  }
  for (int x = threadIdx.x; x < PS_SPAN; x += blockDim.x) sl_lo[x] = 0, sl_hi[x] = 0;
  __syncthreads();
  int64_t kp = j < n_k ? kpos[j] : 0;
  if (j < n_k) atomicMin(&kmin_s, (unsigned long long)kp), atomicMax(&kmax_s, (unsigned long long)kp);
  __syncthreads();
  int64_t qmin = qp[0], qmax = qp[0];
  for (int i = 1; i < n_q; i++) qmin = min(qmin, qp[i]), qmax = max(qmax, qp[i]);
  int64_t dlo = qmin - (int64_t)kmax_s, span = qmax - (int64_t)kmin_s - dlo + 1;
  int local = span <= PS_SPAN;
  unsigned long long *sg = (unsigned long long *)slash + (int64_t)h * n_tokens * 2;
  if (j < n_k) {
    vs_u128 v = 0;
    const double *s = scores + (int64_t)h * n_q * n_k + j;
    for (int i = 0; i < n_q; i++) {
      double sc = s[(int64_t)i * n_k];
      if (sc == -INFINITY || !(tot[i] > 0)) continue;  // after the query, or a row without keys
      uint64_t pr = vs_to_fixed(vs_exp_neg(sc - mx[i]) / tot[i]);
      if (!pr) continue;
      v += pr;
      int64_t dd = qp[i] - kp;
      if (local) {
        unsigned long long old = atomicAdd(&sl_lo[dd - dlo], (unsigned long long)pr);
        if (old + pr < old) atomicAdd(&sl_hi[dd - dlo], 1ull);
      } else {
        atomic_add_u128(sg + 2 * dd, pr);
      }
    }
    if (v) atomic_add_u128((unsigned long long *)vert + ((int64_t)h * n_tokens + kp) * 2, v);
  }
  __syncthreads();
  if (local)
    for (int x = threadIdx.x; x < span; x += blockDim.x)
      if (sl_lo[x] || sl_hi[x]) atomic_add_u128(sg + 2 * (dlo + x), ((vs_u128)sl_hi[x] << 64) | sl_lo[x]);
}

// ---- combining ranks ----------------------------------------------------------------------------------

__global__ void vs_combine_max_kernel(double *dst, const double *g, int world, int64_t n) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
    double m = g[x];
    for (int r = 1; r < world; r++) m = fmax(m, g[r * n + x]);
    dst[x] = m;
  }
}

__global__ void vs_combine_add_kernel(uint64_t *dst, const uint64_t *g, int world, int64_t n) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
    vs_u128 s = 0;
    for (int r = 0; r < world; r++) s += ld128(g + 2 * (r * n + x));
    dst[2 * x] = (uint64_t)s, dst[2 * x + 1] = (uint64_t)(s >> 64);
  }
}

// ---- selection ------------------------------------------------------------------------------------------

enum { SEL_THREADS = 1024 };

typedef struct {
  int64_t forced;
  int32_t cap, topk;
  double p;
} sel_part;

// (value desc, index asc): a before b?
static __device__ __forceinline__ bool sel_before(vs_u128 va, int32_t ia, vs_u128 vb, int32_t ib) {
  return va != vb ? va > vb : ia < ib;
}

// One block per (head, part): part 0 verticals (vert), part 1 slashes (slash).
__global__ void __launch_bounds__(SEL_THREADS) vs_select_kernel(const uint64_t *vert, const uint64_t *slash,
                                                                int64_t N, int64_t words, sel_part pv, sel_part ps,
                                                                uint32_t *vbits, uint32_t *sbits, int32_t *counts) {
  extern __shared__ __align__(16) unsigned char smraw[];
  vs_u128 *val = (vs_u128 *)smraw;                        // [VS_GPU_MAX_PICK]
  int32_t *idx = (int32_t *)(val + VS_GPU_MAX_PICK);      // [VS_GPU_MAX_PICK]
  __shared__ vs_u128 red[32];
  __shared__ int hist[256];
  __shared__ int n_gt, cut, chosen_b, krem_s;
  __shared__ int64_t eqscan[SEL_THREADS];
  int h = blockIdx.x / 2, part = blockIdx.x % 2, t = threadIdx.x;
  const sel_part sp = part ? ps : pv;
  const uint64_t *sc = (part ? slash : vert) + (int64_t)h * N * 2;
  uint32_t *bits = (part ? sbits : vbits) + (int64_t)h * words;
  int64_t F = min(sp.forced, N), m = N - F;
  int64_t K = sp.topk > 0 ? min((int64_t)sp.topk, m) : min(m, max((int64_t)0, (int64_t)sp.cap - F));

  // totals: everything, and the forced part; OR of the candidates for the radix select's first digit
  vs_u128 tot = 0, totF = 0, orv = 0;
  for (int64_t x = t; x < N; x += blockDim.x) {
    vs_u128 v = ld128(sc + 2 * x);
    tot += v;
    if (x < F) totF += v;
    else orv |= v;
  }
  tot = block_sum_u128(tot, red);
  totF = block_sum_u128(totF, red);
  {  // OR-reduce through the same scratch
    for (int o = 16; o > 0; o >>= 1) {
      uint64_t lo = __shfl_xor_sync(0xffffffffu, (unsigned long long)orv, o);
      uint64_t hi = __shfl_xor_sync(0xffffffffu, (unsigned long long)(orv >> 64), o);
      orv |= ((vs_u128)hi << 64) | lo;
    }
    __syncthreads();
    if ((t & 31) == 0) red[t / 32] = orv;
    __syncthreads();
    orv = 0;
    for (int i = 0; i < (int)blockDim.x / 32; i++) orv |= red[i];
    __syncthreads();
  }

  // radix select: T = the K-th largest candidate value; krem of the values equal to T are taken (lowest index)
  vs_u128 prefix = 0, mask = 0;
  int krem = (int)K;
  if (K > 0) {
    int top = 0;
    while (top < 128 && (orv >> top) != 0) top += 8;  // digits below bit `top` hold every set bit
    for (int shift = top - 8; shift >= 0; shift -= 8) {
      for (int b = t; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      for (int64_t x = F + t; x < N; x += blockDim.x) {
        vs_u128 v = ld128(sc + 2 * x);
        if ((v & mask) == prefix) atomicAdd(&hist[(int)(v >> shift) & 255], 1);
      }
      __syncthreads();
      if (t == 0) {
        int cum = 0, b = 255;
        for (; b > 0; b--) {
          if (cum + hist[b] >= krem) break;
          cum += hist[b];
        }
        chosen_b = b;
        krem_s = krem - cum;
      }
      __syncthreads();
      prefix |= (vs_u128)chosen_b << shift;
      mask |= (vs_u128)255 << shift;
      krem = krem_s;
      __syncthreads();
    }
  }
  vs_u128 T = prefix;

  // collect: every candidate above T, and the krem lowest-indexed ones equal to T (contiguous ranges per thread)
  if (t == 0) n_gt = 0, cut = (int)K;
  int64_t per = (m + blockDim.x - 1) / blockDim.x, a0 = F + t * per, a1 = min(N, a0 + per);
  int64_t my_eq = 0;
  if (K > 0)
    for (int64_t x = a0; x < a1; x++) my_eq += ld128(sc + 2 * x) == T;
  eqscan[t] = my_eq;
  __syncthreads();
  if (t == 0)
    for (int i = 0, run = 0; i < (int)blockDim.x; i++) {
      int64_t c = eqscan[i];
      eqscan[i] = run;
      run += (int)c;
    }
  __syncthreads();
  if (K > 0) {
    int64_t r = eqscan[t];
    for (int64_t x = a0; x < a1; x++) {
      vs_u128 v = ld128(sc + 2 * x);
      if (v > T) {
        int at = atomicAdd(&n_gt, 1);
        val[at] = v, idx[at] = (int32_t)x;
      } else if (v == T) {
        if (r < krem) val[K - krem + r] = v, idx[K - krem + r] = (int32_t)x;
        r++;
      }
    }
  }
  __syncthreads();

  // bitonic sort of the K picked by (value desc, index asc); padding sorts last
  int P2 = 1;
  while (P2 < K) P2 <<= 1;
  for (int x = (int)K + t; x < P2; x += blockDim.x) val[x] = 0, idx[x] = 0x7fffffff;
  __syncthreads();
  for (int size = 2; size <= P2; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int x = t; x < P2; x += blockDim.x) {
        int y = x ^ stride;
        if (y > x) {
          bool up = (x & size) == 0;
          bool swap = up ? sel_before(val[y], idx[y], val[x], idx[x]) : sel_before(val[x], idx[x], val[y], idx[y]);
          if (swap) {
            vs_u128 tv = val[x];
            val[x] = val[y], val[y] = tv;
            int32_t ti = idx[x];
            idx[x] = idx[y], idx[y] = ti;
          }
        }
      }
      __syncthreads();
    }

  // top-p: the first position x whose mass before it reaches p (or whose count reaches cap) is the cut
  if (sp.topk <= 0 && K > 0) {
    int per2 = (int)((K + blockDim.x - 1) / blockDim.x), b0 = t * per2, b1 = min((int)K, b0 + per2);
    vs_u128 mine = 0;
    for (int x = b0; x < b1; x++) mine += val[x];
    vs_u128 before = block_excl_scan_u128(mine, red);
    vs_u128 mass = totF + before;
    for (int x = b0; x < b1; x++) {
      if (vs_mass_reached(mass, tot, sp.p) || F + x >= sp.cap) {
        atomicMin(&cut, x);
        break;
      }
      mass += val[x];
    }
  }
  __syncthreads();

  // output bit set: the forced prefix, then the first `cut` picked
  for (int64_t w = t; w < words; w += blockDim.x) {
    int64_t lo = w * 32;
    uint32_t b = 0;
    if (lo + 32 <= F) b = 0xffffffffu;
    else if (lo < F) b = (1u << (F - lo)) - 1;
    bits[w] = b;
  }
  __syncthreads();
  for (int x = t; x < cut; x += blockDim.x) atomicOr(&bits[idx[x] / 32], 1u << (idx[x] % 32));
  if (t == 0) counts[h * 2 + part] = (int32_t)(F + cut);
}

// ---- host API ---------------------------------------------------------------------------------------------

#define ST(s) ((cudaStream_t)(s))

int vs_gpu_est_init(vs_gpu_est *g, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t n_q, int64_t n_tokens,
                    int64_t n_k_max, float scale, sr_error *e) {
  memset(g, 0, sizeof *g);
  if (n_q < 1 || n_q > VS_GPU_MAX_QUERIES)
    return sr_input_error(e, NULL, "n_q", "the GPU estimator takes 1..%d queries, got %d", VS_GPU_MAX_QUERIES, n_q);
  if (head_dim < 1 || head_dim > 128 || heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "heads", "bad estimation shape (%d/%d heads, head_dim %d <= 128)", heads, kv_heads,
                          head_dim);
  if (n_tokens < 1 || n_tokens > INT32_MAX)
    return sr_input_error(e, NULL, "n_tokens", "%lld outside 1..2^31-1", (long long)n_tokens);
  g->heads = heads, g->kv_heads = kv_heads, g->head_dim = head_dim, g->n_q = n_q;
  g->n_tokens = n_tokens, g->n_k_max = n_k_max > 0 ? n_k_max : 1, g->scale = scale;
  g->words = (n_tokens + 31) / 32;
  int64_t rows = (int64_t)heads * n_q;
  SA_CUDA(cudaMalloc((void **)&g->scores, sizeof(double) * (size_t)(rows * g->n_k_max)));
  SA_CUDA(cudaMalloc((void **)&g->row_max, sizeof(double) * (size_t)rows));
  SA_CUDA(cudaMalloc((void **)&g->row_sum, 16 * (size_t)rows));
  SA_CUDA(cudaMalloc((void **)&g->vert, 16 * (size_t)(heads * n_tokens)));
  SA_CUDA(cudaMalloc((void **)&g->slash, 16 * (size_t)(heads * n_tokens)));
  SA_CUDA(cudaMalloc((void **)&g->vbits, 4 * (size_t)(heads * g->words)));
  SA_CUDA(cudaMalloc((void **)&g->sbits, 4 * (size_t)(heads * g->words)));
  SA_CUDA(cudaMalloc((void **)&g->counts, sizeof(int32_t) * 2 * (size_t)heads));
  return SR_OK;
}

void vs_gpu_est_free(vs_gpu_est *g) {
  cudaFree(g->scores), cudaFree(g->row_max), cudaFree(g->row_sum), cudaFree(g->vert), cudaFree(g->slash);
  cudaFree(g->vbits), cudaFree(g->sbits), cudaFree(g->counts);
  memset(g, 0, sizeof *g);
}

__global__ void vs_fill_kernel(double *a, int64_t n, double v) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) a[x] = v;
}

int vs_gpu_est_reset(vs_gpu_est *g, void *stream, sr_error *e) {
  int64_t rows = (int64_t)g->heads * g->n_q;
  vs_fill_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, ST(stream)>>>(g->row_max, rows, -INFINITY);
  SA_CUDA(cudaGetLastError());
  SA_CUDA(cudaMemsetAsync(g->row_sum, 0, 16 * (size_t)rows, ST(stream)));
  SA_CUDA(cudaMemsetAsync(g->vert, 0, 16 * (size_t)(g->heads * g->n_tokens), ST(stream)));
  SA_CUDA(cudaMemsetAsync(g->slash, 0, 16 * (size_t)(g->heads * g->n_tokens), ST(stream)));
  return SR_OK;
}

int vs_gpu_rowmax(vs_gpu_est *g, const void *q, const int64_t *qpos, const void *k, const int64_t *kpos, int64_t n_k,
                  void *stream, sr_error *e) {
  if (n_k < 0 || n_k > g->n_k_max)
    return sr_input_error(e, NULL, "n_k", "%lld keys, the estimator holds at most %lld", (long long)n_k,
                          (long long)g->n_k_max);
  g->n_k = n_k;
  if (n_k == 0) return SR_OK;
  size_t sm = sizeof(double) * (size_t)(VS_GPU_MAX_QUERIES * SC_DC + SC_KEYS * (SC_DC + 1));
  SA_CUDA(cudaFuncSetAttribute(vs_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  dim3 grid((unsigned)((n_k + SC_KEYS - 1) / SC_KEYS), (unsigned)g->heads);
  int vec = g->head_dim % 8 == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)k % 16 == 0;  // 16-byte staging loads
  vs_scores_kernel<<<grid, SC_THREADS, sm, ST(stream)>>>((const __nv_bfloat16 *)q, qpos, (const __nv_bfloat16 *)k, kpos,
                                                         n_k, g->heads, g->kv_heads, g->head_dim, g->n_q, vec,
                                                         (double)g->scale, g->scores, g->row_max);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int vs_gpu_rowsum(vs_gpu_est *g, void *stream, sr_error *e) {
  if (g->n_k == 0) return SR_OK;
  unsigned chunks = (unsigned)((g->n_k + 256 * 16 - 1) / (256 * 16));
  dim3 grid(chunks, (unsigned)(g->heads * g->n_q));
  vs_rowsum_kernel<<<grid, 256, 0, ST(stream)>>>(g->scores, g->n_k, g->row_max, g->row_sum);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int vs_gpu_scores(vs_gpu_est *g, const int64_t *qpos, const int64_t *kpos, void *stream, sr_error *e) {
  if (g->n_k == 0) return SR_OK;
  dim3 grid((unsigned)((g->n_k + PS_THREADS - 1) / PS_THREADS), (unsigned)g->heads);
  vs_probs_kernel<<<grid, PS_THREADS, 0, ST(stream)>>>(g->scores, g->n_k, g->n_q, g->n_tokens, qpos, kpos, g->row_max,
                                                       g->row_sum, g->vert, g->slash);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int64_t vs_gpu_combine_bytes(const vs_gpu_est *g, int what, void **src) {
  int64_t rows = (int64_t)g->heads * g->n_q;
  if (what == VS_GPU_ROWMAX) return *src = g->row_max, rows * 8;
  if (what == VS_GPU_ROWSUM) return *src = g->row_sum, rows * 16;
  *src = what == VS_GPU_VERT ? g->vert : g->slash;
  return (int64_t)g->heads * g->n_tokens * 16;
}

int vs_gpu_combine(vs_gpu_est *g, int what, const void *gathered, int world, void *stream, sr_error *e) {
  void *dst;
  int64_t n = vs_gpu_combine_bytes(g, what, &dst) / (what == VS_GPU_ROWMAX ? 8 : 16);
  unsigned blocks = (unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
  if (what == VS_GPU_ROWMAX)
    vs_combine_max_kernel<<<blocks, 256, 0, ST(stream)>>>((double *)dst, (const double *)gathered, world, n);
  else
    vs_combine_add_kernel<<<blocks, 256, 0, ST(stream)>>>((uint64_t *)dst, (const uint64_t *)gathered, world, n);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int vs_gpu_select(vs_gpu_est *g, const vs_est_opts *o, void *stream, sr_error *e) {
  if (!(o->p > 0 && o->p <= 1) || o->cap < 1)
    return sr_input_error(e, NULL, "estimate", "top-p %g must be in (0, 1] and cap %d >= 1", o->p, o->cap);
  int topk = o->topk_v > 0 && o->topk_s > 0;
  sel_part pv = {o->sinks, o->cap, topk ? o->topk_v : 0, o->p}, ps = {o->window, o->cap, topk ? o->topk_s : 0, o->p};
  for (int part = 0; part < 2; part++) {
    const sel_part *sp = part ? &ps : &pv;
    int64_t F = sp->forced < g->n_tokens ? sp->forced : g->n_tokens, m = g->n_tokens - F;
    int64_t K = sp->topk > 0 ? (sp->topk < m ? sp->topk : m) : (m < sp->cap - F ? m : (sp->cap - F > 0 ? sp->cap - F : 0));
    if (K > VS_GPU_MAX_PICK)
      return sr_input_error(e, NULL, "cap", "the GPU selection picks at most %d indices by score per head, asked %lld",
                            VS_GPU_MAX_PICK, (long long)K);
  }
  size_t sm = (size_t)VS_GPU_MAX_PICK * (16 + 4);
  SA_CUDA(cudaFuncSetAttribute(vs_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
  vs_select_kernel<<<(unsigned)(2 * g->heads), SEL_THREADS, sm, ST(stream)>>>(g->vert, g->slash, g->n_tokens, g->words,
                                                                             pv, ps, g->vbits, g->sbits, g->counts);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int vs_gpu_masks(const vs_gpu_est *g, head_mask **out, sr_error *e) {
  *out = NULL;
  head_mask *m = (head_mask *)calloc((size_t)g->heads, sizeof *m);
  if (!m) return sr_internal_error(e, 0, "vs masks: out of memory");
  for (int h = 0; h < g->heads; h++) {
    m[h].kind = PATTERN_VS;
    m[h].n_tokens = g->n_tokens;
    m[h].vbits = g->vbits + (int64_t)h * g->words;
    m[h].sbits = g->sbits + (int64_t)h * g->words;
  }
  cudaError_t r = cudaMalloc((void **)out, sizeof *m * (size_t)g->heads);
  if (r == cudaSuccess) r = cudaMemcpy(*out, m, sizeof *m * (size_t)g->heads, cudaMemcpyHostToDevice);
  free(m);
  if (r != cudaSuccess) return sr_internal_error(e, 0, "vs masks: %s", cudaGetErrorString(r));
  return SR_OK;
}

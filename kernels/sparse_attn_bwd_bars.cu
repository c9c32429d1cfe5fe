// sparse_attn_bwd_bars.cu — the bars' dK/dV of the Hopper backward with the bars' split walk (sa_bwd_variant 3):
// the same products as the bar kernel of kernels/sparse_attn_bwd.cu (mma.sync, one CTA of four warps owns a
// compute chunk of kernels/bar_chunks.c: up to 64 bar keys of one query head, walking the union of their query
// tiles, 64 rows a step), with three changes where that kernel spends its time:
//   - A vertical line is listed in nearly every query tile after it, so a compute chunk walks about 2 x n_qtiles
//     steps and one CTA of it bounded the whole backward (1,980 steps of the VS-like mask at 128K, against 1,327
//     for an even share of the 264 resident CTAs). Here a walk is cut into parts (consecutive steps, about an
//     eighth of that even share each, at most 16 parts), one CTA each, which add their dK, dV into the outputs
//     with vector reductions (any order: not bit-reproducible, like the warp-specialized kernel's split walks),
//     so neither the scratch rows nor sa_bar_reduce_kernel are used.
//   - Whether a step's query tile lists a key was a binary search over the key's query tiles, ten dependent
//     global loads a step on the CTA's critical path. The steps come in ascending query tile order and a key's
//     list is part of the chunk's union, so each key's thread keeps a cursor into its list instead (one
//     binary search a part), with the next entry loaded one advance ahead.
//   - The rows' positions, LSE and D of the next step come by cp.async, not by loads the thread waits for.
// A key of a bar lies before every row of the tile that lists it (causal masks), so a warp whose keys all lie at
// or before the step's first position takes its keep bits from the listed flags alone.
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

#include "kernels/sa_bwd.cuh"
#include "kernels/sa_bwd_wg.cuh"
#include "kernels/sa_gpu.h"

#define BB_THREADS 128
#define BB_KEYS 64       // bar entries of a compute chunk (kernels/bar_chunks.c), 16 a warp
#define BB_QB 64         // query rows a step (half a query tile)
#define BB_MAX_PARTS 16  // parts of one walk under the automatic rule

int sa_bwd_bar_cap = 0;

// Shared memory of the kernel: K, V of the chunk's keys, two stages of Q, dO, the rows' positions, LSE, D and the
// keys' listed flags, and each key's cursor into its query tile list.
template <int D>
static constexpr size_t bb_smem_bytes() {
  return (size_t)(2 * BB_KEYS + 4 * BB_QB) * (D + 8) * 2 + 2 * BB_QB * (8 + 4 + 4) + 2 * BB_KEYS * 4 +
         BB_KEYS * (8 + 8 + 4 + 4);
}

// CTA x walks part x % splits of compute chunk x / splits: with cap > 0 parts of cap steps (tests), else, when
// splits > 1, parts of an eighth of the even share of all chunks' steps over `slots` resident CTAs (at least 64).
template <int D>
__global__ void __launch_bounds__(BB_THREADS, 1) sa_bwd_bars_kernel(const bwd_args a, int splits, int slots, int cap) {
  const int S = D + 8;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16 *sk = (__nv_bfloat16 *)smem, *sv = sk + BB_KEYS * S, *sq = sv + BB_KEYS * S, *sdo = sq + 2 * BB_QB * S;
  int64_t *sqpos = (int64_t *)(sdo + 2 * BB_QB * S);           // [2][QB]
  float *sl = (float *)(sqpos + 2 * BB_QB), *sd = sl + 2 * BB_QB;  // [2][QB] each: LSE (natural log), D
  int *slisted = (int *)(sd + 2 * BB_QB);                        // [2][KEYS]
  // Key slot k's cursor (kept in shared memory: registers are short): the index of its entry's query tile
  // c_at[k] (its list ends at c_end[k]), that tile c_q[k] and the next one c_nxt[k] (INT_MAX past the end).
  int64_t *c_at = (int64_t *)(slisted + 2 * BB_KEYS), *c_end = c_at + BB_KEYS;
  int32_t *c_q = (int32_t *)(c_end + BB_KEYS), *c_nxt = c_q + BB_KEYS;
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int c = (int)(blockIdx.x / splits), part = (int)(blockIdx.x % splits);
  const int64_t u0 = a.bc.hc_q_cnt[c], total = 2 * (a.bc.hc_q_cnt[c + 1] - u0);  // steps: two halves a query tile
  const int64_t parts = bw_bar_parts(a, total, splits, slots, cap);
  if (total == 0 || part >= parts) return;
  const int f0 = (int)(total * part / parts), f1 = (int)(total * (part + 1) / parts);  // total <= 2 n_qtiles
  const int group = a.heads / a.kv_heads, h = a.bc.hc_head[c], first = a.bc.hc_first[c], n_valid = a.bc.hc_n[c];
  const int kvh = h / group;
  const int32_t *idx = a.tt.bar_key + first;
  const int64_t kstride = (int64_t)a.kv_heads * D, qstride = (int64_t)a.heads * D;
  sa_load_rows<D, BB_KEYS, BB_THREADS>(sk, a.k + kvh * D, 0, idx, n_valid, kstride, tid);
  sa_load_rows<D, BB_KEYS, BB_THREADS>(sv, a.v + kvh * D, 0, idx, n_valid, kstride, tid);
  sa_cp_async_commit();

  // Key slot tid's cursor into its entry's query tiles (ascending): the first at or after the part's first tile,
  // found once by binary search.
  const int32_t *lq = a.tt.bar_q_idx;
  int32_t qt = a.bc.hc_q_idx[u0 + f0 / 2];  // the query tile of the step being loaded
  if (tid < BB_KEYS) {
    int64_t lo = 0, hi = 0, end = 0;
    if (tid < n_valid) lo = a.tt.bar_q_cnt[first + tid], hi = end = a.tt.bar_q_cnt[first + tid + 1];
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (lq[mid] < qt) lo = mid + 1;
      else hi = mid;
    }
    c_at[tid] = lo, c_end[tid] = end;
    c_q[tid] = lo < end ? lq[lo] : INT_MAX;
    c_nxt[tid] = lo + 1 < end ? lq[lo + 1] : INT_MAX;
  }

  // Step f's rows (query tile q, half f % 2) into stage buf: Q, dO, positions, LSE and D by cp.async (rows past
  // n_q: no key kept), and whether each key's entry lists q. The steps of a part ascend in q and every entry's
  // list lies in the union, so a cursor moves at most one entry a new tile, onto the entry copied one move
  // ahead (by cp.async in an earlier step's group: a tile's two halves lie between two moves, so that group is
  // complete), and copies the one after it.
  auto load = [&](int f, int buf, int32_t q) {
    int64_t r0 = (int64_t)q * TILE + (f & 1) * BB_QB, rows = a.n_q - r0;
    int nv = rows < 0 ? 0 : rows > BB_QB ? BB_QB : (int)rows;
    sa_load_rows<D, BB_QB, BB_THREADS>(sq + buf * BB_QB * S, a.q + (int64_t)h * D, r0, NULL, nv, qstride, tid);
    sa_load_rows<D, BB_QB, BB_THREADS>(sdo + buf * BB_QB * S, a.dout + (int64_t)h * D, r0, NULL, nv, qstride, tid);
    if (tid < BB_QB) {
      int x = buf * BB_QB + tid;
      if (tid < nv) {
        int64_t hr = (int64_t)h * a.n_q + r0 + tid;
        sa_cp_async8(sqpos + x, a.qpos + r0 + tid);
        bw_cp_async4(sl + x, a.lse + hr);
        bw_cp_async4(sd + x, a.d_row + hr);
      } else {
        sqpos[x] = -2, sl[x] = -INFINITY, sd[x] = 0.f;
      }
      int32_t cq = c_q[tid];  // BB_QB == BB_KEYS: the same 64 threads own the key slots
      if (cq < q) {
        int64_t at = c_at[tid] + 1, end = c_end[tid];
        cq = c_nxt[tid];
        while (cq < q) cq = ++at < end ? lq[at] : INT_MAX;  // a list outside the union (never, as built): still right
        c_at[tid] = at, c_q[tid] = cq;
        if (at + 1 < end) bw_cp_async4(c_nxt + tid, lq + at + 1);
        else c_nxt[tid] = INT_MAX;
      }
      slisted[buf * BB_KEYS + tid] = cq == q;
    }
  };

  // The two keys (rows g, g + 8 of the warp) this thread's accumulators belong to.
  int kr[2] = {warp * 16 + g, warp * 16 + g + 8};
  int64_t kp[2];
#pragma unroll
  for (int i = 0; i < 2; i++) kp[i] = kr[i] < n_valid ? a.kpos[idx[kr[i]]] : -1;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.f;

  load(f0, 0, qt);
  sa_cp_async_commit();
  if (f0 + 1 < f1) qt = a.bc.hc_q_idx[u0 + (f0 + 1) / 2];
  for (int f = f0; f < f1; f++) {
    int buf = (f - f0) & 1;
    if (f + 1 < f1) {
      load(f + 1, buf ^ 1, qt);
      sa_cp_async_commit();
      if (f + 2 < f1) qt = a.bc.hc_q_idx[u0 + (f + 2) / 2];  // used by the next step's load: loaded under this one
      sa_cp_async_wait<1>();
    } else {
      sa_cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16 *qb = sq + buf * BB_QB * S, *dob = sdo + buf * BB_QB * S;
    const int64_t *qp = sqpos + buf * BB_QB;
    const float *lb = sl + buf * BB_QB, *db = sd + buf * BB_QB;

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against the step's 64 query rows.
    float s[BB_QB / 8][4], dp[BB_QB / 8][4];
    sa_bwd_st_dpt<BB_QB, D>(s, dp, sk, sv, qb, dob, S, warp, lane);
    // Keep bits: the key listed for this tile and causal. Rows past the end carry position -2, so a step with
    // such rows never takes the shortcut; keys past n_valid (position -1) keep nothing.
    int lst[2] = {slisted[buf * BB_KEYS + kr[0]], slisted[buf * BB_KEYS + kr[1]]};
    int64_t qmin = min(qp[lane], qp[lane + 32]);
#pragma unroll
    for (int x = 1; x < 32; x <<= 1) qmin = min(qmin, (int64_t)__shfl_xor_sync(0xffffffffu, (long long)qmin, x));
    uint32_t keep = 0;
    if (qmin >= 0 && kp[0] <= qmin && kp[1] <= qmin) {
      keep = (kp[0] >= 0 && lst[0] ? 0x33333333u : 0u) | (kp[1] >= 0 && lst[1] ? 0xccccccccu : 0u);
    } else {
#pragma unroll 1
      for (int i = 0; i < 32; i++) {  // bit i: column (i >> 2) * 8 + 2t + i % 2, key kp[(i >> 1) & 1]
        int col = (i >> 2) * 8 + 2 * t + (i & 1);
        int64_t q = qp[col], k = (i & 2) ? kp[1] : kp[0];
        int keep_i = q >= 0 && k >= 0 && ((i & 2) ? lst[1] : lst[0]) && k <= q;
        keep |= (uint32_t)keep_i << i;
      }
    }
#pragma unroll
    for (int n = 0; n < BB_QB / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int col = n * 8 + 2 * t + (e & 1);
        float L = lb[col], l2 = L == -INFINITY ? INFINITY : __fmul_rn(L, SA_LOG2E);  // -inf: an empty row, P = 0
        float p = (keep >> (n * 4 + e)) & 1u ? sa_exp2(fmaf(s[n][e], a.scale_log2, -l2)) : 0.f;
        s[n][e] = p;                            // P^T
        dp[n][e] = p * (dp[n][e] - db[col]);  // dS^T
      }
    sa_mma_pb<BB_QB, D>(dv, s, dob, S, lane);
    sa_mma_pb<BB_QB, D>(dk, dp, qb, S, lane);
    __syncthreads();  // the next step's copies overwrite this stage
  }
  // dK, dV of the keys (scaled as sa_bar_reduce_kernel's sum of the scratch rows): the parts, and the query
  // heads of the GQA group that list a key, add into the same rows, in any order.
#pragma unroll
  for (int ri = 0; ri < 2; ri++) {
    if (kr[ri] >= n_valid) continue;
    int64_t key = idx[kr[ri]];
    float *ok = a.dk + (key * a.kv_heads + kvh) * D, *ov = a.dv + (key * a.kv_heads + kvh) * D;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      float2 *pk = (float2 *)(ok + n * 8 + 2 * t), *pv = (float2 *)(ov + n * 8 + 2 * t);
      float2 xk = make_float2(a.scale * dk[n][2 * ri], a.scale * dk[n][2 * ri + 1]);
      float2 xv = make_float2(dv[n][2 * ri], dv[n][2 * ri + 1]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(pk, xk), atomicAdd(pv, xv);  // 8-byte vector reductions
#else  // the sm_80 image compiles this kernel but never runs it (variant 3 needs the sm_90a image)
      atomicAdd(&pk->x, xk.x), atomicAdd(&pk->y, xk.y), atomicAdd(&pv->x, xv.x), atomicAdd(&pv->y, xv.y);
#endif
    }
  }
}

// ---- host ---------------------------------------------------------------------------------------------

template <int D>
static int bb_launch(const bwd_args &a, cudaStream_t st, sr_error *e) {
  const size_t smem = bb_smem_bytes<D>();
  SA_CUDA(cudaFuncSetAttribute(sa_bwd_bars_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  // Resident CTAs (two an SM at d = 128 and 64: registers and shared memory), found once per head dim.
  static int slots;
  if (!slots) {
    int n_sms = 0, per_sm = 0;
    SA_CUDA(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0));
    SA_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sa_bwd_bars_kernel<D>, BB_THREADS, smem));
    slots = (per_sm > 0 ? per_sm : 1) * (n_sms > 0 ? n_sms : 1);
  }
  // A walk has at most two steps a query tile; sa_bwd_bar_cap > 0 sets the part size (tests: up to 64 parts).
  int64_t max_steps = 2 * (int64_t)a.tt.n_qtiles, cap = sa_bwd_bar_cap;
  int splits = cap > 0 ? (int)min((int64_t)64, (max_steps + cap - 1) / cap) : BB_MAX_PARTS;
  if (splits < 1 || (int64_t)a.bc.n_hchunks * splits > INT32_MAX) splits = 1, cap = 0;
  sa_bwd_bars_kernel<D><<<(unsigned)((int64_t)a.bc.n_hchunks * splits), BB_THREADS, smem, st>>>(a, splits, slots, (int)cap);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

int sa_bwd_bars_split(const bwd_args *a, int head_dim, cudaStream_t st, sr_error *e) {
  if (!a->bc.n_hchunks || a->n_q <= 0) return SR_OK;
  return head_dim == 64 ? bb_launch<64>(*a, st, e) : bb_launch<128>(*a, st, e);
}

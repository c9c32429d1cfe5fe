// vs_convert.cu — the execution form (plan/tile_index.h) of VS patterns built on the GPU from the bit sets of
// vs_gpu_select, for one query rank of a layout: the same tile entries, kinds, bars and cell order that
// tiles_build (plan/tiles.c) and sa_gpu_index_upload (kernels/index_gpu.cu) give on the host.
//
// The rule is tiles.c's, evaluated exhaustively instead of from candidate lists: a KV tile is an entry of a
// query tile iff some pair of their global segments has a kept offset d = q - k >= 0 (one range count on
// prefix popcounts of the slash bits); it is FULL iff every offset missing from the slashes in every segment
// pair meets only vertical keys (a walk over the gaps); a vertical k <= the tile's last query is a bar iff its
// KV tile is not an entry. One block per (head, query tile) counts, a scan places, the same block writes.
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/block_scan.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/vs_gpu.h"

// ---- device tables ---------------------------------------------------------------------------------------

template <typename T>
static int dev_copy(T **dst, const T *src, int64_t n, sr_error *e) {
  *dst = NULL;
  SA_CUDA(cudaMalloc((void **)dst, sizeof(T) * (size_t)(n > 0 ? n : 1)));
  if (n > 0) SA_CUDA(cudaMemcpy(*dst, src, sizeof(T) * (size_t)n, cudaMemcpyHostToDevice));
  return SR_OK;
}

int vs_gpu_layout_init(const layout *l, vs_gpu_layout *g, sr_error *e) {
  memset(g, 0, sizeof *g);
  vs_layout_tables t;
  int rc = vs_layout_tables_build(l, &t, e);
  if (rc) return rc;
  g->world = t.world, g->n_tokens = t.n_tokens, g->all_tiles = t.all_tiles;
  g->tile_base_h = (int64_t *)malloc(sizeof(int64_t) * ((size_t)t.world + 1));
  if (!g->tile_base_h) rc = sr_internal_error(e, 0, "vs layout: out of memory");
  else memcpy(g->tile_base_h, t.tile_base, sizeof(int64_t) * ((size_t)t.world + 1));
  if (!rc) rc = dev_copy(&g->tile_base, t.tile_base, t.world + 1, e);
  if (!rc) rc = dev_copy(&g->seg_off, t.seg_off, t.all_tiles + 1, e);
  if (!rc) rc = dev_copy(&g->seg_g, t.seg_g, t.n_segs, e);
  if (!rc) rc = dev_copy(&g->seg_len, t.seg_len, t.n_segs, e);
  if (!rc) rc = dev_copy(&g->tile_gmin, t.tile_gmin, t.all_tiles, e);
  if (!rc) rc = dev_copy(&g->tile_gmax, t.tile_gmax, t.all_tiles, e);
  if (!rc) rc = dev_copy(&g->key_rank, t.key_rank, t.n_tokens, e);
  if (!rc) rc = dev_copy(&g->key_local, t.key_local, t.n_tokens, e);
  vs_layout_tables_free(&t);
  if (rc) vs_gpu_layout_free(g);
  return rc;
}

void vs_gpu_layout_free(vs_gpu_layout *g) {
  free(g->tile_base_h);
  cudaFree(g->tile_base), cudaFree(g->seg_off), cudaFree(g->seg_g), cudaFree(g->seg_len);
  cudaFree(g->tile_gmin), cudaFree(g->tile_gmax), cudaFree(g->key_rank), cudaFree(g->key_local);
  memset(g, 0, sizeof *g);
}

// ---- bit-set queries ---------------------------------------------------------------------------------------

// Set bits below x (cnt: set bits before each word).
static __device__ __forceinline__ int64_t bits_before(const uint32_t *b, const int32_t *cnt, int64_t x) {
  int64_t w = x >> 5, c = cnt[w];
  int r = (int)(x & 31);
  if (r) c += __popc(b[w] & ((1u << r) - 1));
  return c;
}
static __device__ __forceinline__ int64_t bits_in(const uint32_t *b, const int32_t *cnt, int64_t lo, int64_t hi) {
  return bits_before(b, cnt, hi + 1) - bits_before(b, cnt, lo);
}
static __device__ __forceinline__ int bit_at(const uint32_t *b, int64_t x) { return (b[x >> 5] >> (x & 31)) & 1; }

// First position >= x (and < lim) whose bit equals `want`; lim when none.
static __device__ int64_t next_bit(const uint32_t *b, int64_t x, int64_t lim, int want) {
  if (x >= lim) return lim;
  int64_t w = x >> 5;
  uint32_t word = (want ? b[w] : ~b[w]) & (~0u << (x & 31));
  while (!word) {
    w++;
    if (w * 32 >= lim) return lim;
    word = want ? b[w] : ~b[w];
  }
  int64_t p = w * 32 + __ffs(word) - 1;
  return p < lim ? p : lim;
}

typedef struct {
  const int32_t *seg_off, *seg_len, *key_rank, *key_local;
  const int64_t *seg_g, *tile_base, *tile_gmin, *tile_gmax;
  const uint32_t *vbits, *sbits;
  const int32_t *vcnt, *scnt, *vlist;
  const int64_t *vseg;
  int64_t words, n_tokens;
  int32_t W, q_rank, nq;
  int64_t *raw_t, *raw_b;
  const int64_t *tile_cnt, *bar_cnt;
  int32_t *tile_idx, *bar_idx;
  uint8_t *tile_kind;
} conv_args;

// Every element of the segment pair kept? Offsets missing from the slashes must meet vertical keys only.
static __device__ int seg_full(const uint32_t *sb, const uint32_t *vb, const int32_t *vc, int64_t qa, int64_t lq,
                               int64_t ka, int64_t lk) {
  int64_t qe = qa + lq - 1, ke = ka + lk - 1, dmin = qa - ke, dmax = qe - ka;
  if (dmin < 0) return 0;
  int64_t x = dmin;
  while (x <= dmax) {
    if (bit_at(sb, x)) {
      x = next_bit(sb, x, dmax + 1, 0);
      continue;
    }
    int64_t g1 = next_bit(sb, x, dmax + 1, 1) - 1;
    int64_t k0 = max(ka, qa - g1), k1 = min(ke, qe - x);
    if (k0 <= k1 && bits_in(vb, vc, k0, k1) < k1 - k0 + 1) return 0;
    x = g1 + 1;
  }
  return 1;
}

// 0: not an entry, 1: PARTIAL, 2: FULL (want_full = 0 stops at entry or not).
static __device__ int classify(const conv_args &a, const uint32_t *sb, const int32_t *sc, const uint32_t *vb,
                               const int32_t *vc, int64_t qflat, int64_t kflat, int want_full) {
  int q0 = a.seg_off[qflat], q1 = a.seg_off[qflat + 1], k0 = a.seg_off[kflat], k1 = a.seg_off[kflat + 1];
  int any = 0;
  for (int x = q0; x < q1 && !any; x++)
    for (int y = k0; y < k1 && !any; y++) {
      int64_t qa = a.seg_g[x], lq = a.seg_len[x], ka = a.seg_g[y], lk = a.seg_len[y];
      int64_t dmin = qa - (ka + lk - 1), dmax = qa + lq - 1 - ka;
      if (dmax >= 0 && bits_in(sb, sc, max((int64_t)0, dmin), dmax) > 0) any = 1;
    }
  if (!any) return 0;
  if (!want_full) return 1;
  for (int x = q0; x < q1; x++)
    for (int y = k0; y < k1; y++)
      if (!seg_full(sb, vb, vc, a.seg_g[x], a.seg_len[x], a.seg_g[y], a.seg_len[y])) return 1;
  return 2;
}

// Exclusive count of set flags before this thread, and the block's total (blockDim a multiple of 32).
static __device__ int block_excl_count(int flag, int *total) {
  __shared__ int s_w[32];
  unsigned bal = __ballot_sync(0xffffffffu, flag);
  int lane = threadIdx.x & 31, w = threadIdx.x / 32, nw = blockDim.x / 32;
  if (lane == 0) s_w[w] = __popc(bal);
  __syncthreads();
  int base = 0, tot = 0;
  for (int k = 0; k < nw; k++) {
    if (k < w) base += s_w[k];
    tot += s_w[k];
  }
  __syncthreads();
  *total = tot;
  return base + __popc(bal & ((1u << lane) - 1));
}

// ---- kernels --------------------------------------------------------------------------------------------------

// Set bits before each word of every head's vertical (part 0) and slash (part 1) bit set.
__global__ void vs_bitcount_kernel(const uint32_t *vbits, const uint32_t *sbits, int64_t words, int32_t *vcnt,
                                   int32_t *scnt) {
  int h = blockIdx.x / 2, part = blockIdx.x % 2;
  const uint32_t *b = (part ? sbits : vbits) + (int64_t)h * words;
  int32_t *c = (part ? scnt : vcnt) + (int64_t)h * (words + 1);
  int64_t carry = 0;
  for (int64_t w0 = 0; w0 < words; w0 += blockDim.x) {
    int64_t w = w0 + threadIdx.x;
    int tot, before = block_excl_sum(w < words ? __popc(b[w]) : 0, &tot);
    if (w < words) c[w] = (int32_t)(carry + before);
    carry += tot;
  }
  if (threadIdx.x == 0) c[words] = (int32_t)carry;
}

// Block (head, source s): the head's verticals held by s, in global order, at vseg[h][s] (after the verticals
// of sources < s). Two sweeps over the words: the count of lower sources, then the ordered write.
__global__ void vs_vertical_split_kernel(conv_args a, int32_t *vlist, int64_t *vseg) {
  int h = blockIdx.x, s = blockIdx.y, W = a.W;
  const uint32_t *vb = a.vbits + (int64_t)h * a.words;
  int64_t below = 0, mine = 0;
  for (int64_t w = threadIdx.x; w < a.words; w += blockDim.x)
    for (uint32_t b = vb[w]; b; b &= b - 1) below += a.key_rank[w * 32 + __ffs(b) - 1] < s;
  __shared__ unsigned long long s_below;
  if (threadIdx.x == 0) s_below = 0;
  __syncthreads();
  atomicAdd(&s_below, (unsigned long long)below);
  __syncthreads();
  int64_t base = (int64_t)s_below;
  int32_t *out = vlist + (int64_t)h * a.n_tokens;
  for (int64_t w0 = 0; w0 < a.words; w0 += blockDim.x) {
    int64_t w = w0 + threadIdx.x;
    uint32_t b = w < a.words ? vb[w] : 0;
    int n = 0;
    for (uint32_t x = b; x; x &= x - 1) n += a.key_rank[w * 32 + __ffs(x) - 1] == s;
    // exclusive scan of n over the block (thread order = word order)
    __shared__ int s_w[32];
    int inc = n, lane = threadIdx.x & 31, wi = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
      int v = __shfl_up_sync(0xffffffffu, inc, o);
      if (lane >= o) inc += v;
    }
    if (lane == 31) s_w[wi] = inc;
    __syncthreads();
    int before = inc - n, tot = 0;
    for (int k = 0; k < (int)blockDim.x / 32; k++) {
      if (k < wi) before += s_w[k];
      tot += s_w[k];
    }
    int64_t at = base + mine + before;
    for (uint32_t x = b; x; x &= x - 1) {
      int64_t key = w * 32 + __ffs(x) - 1;
      if (a.key_rank[key] == s) out[at++] = (int32_t)key;
    }
    mine += tot;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    vseg[(int64_t)h * (W + 1) + s] = base;
    if (s == W - 1) vseg[(int64_t)h * (W + 1) + W] = base + mine;
  }
}

// Block per (head, query tile) cell: count (WRITE = 0) or write (WRITE = 1) its entries and bars per source.
template <int WRITE>
__global__ void vs_cells_kernel(conv_args a) {
  int64_t cell = blockIdx.x;
  int h = (int)(cell / a.nq), W = a.W;
  int64_t qflat = a.tile_base[a.q_rank] + cell % a.nq, qmax = a.tile_gmax[qflat];
  const uint32_t *sb = a.sbits + (int64_t)h * a.words, *vb = a.vbits + (int64_t)h * a.words;
  const int32_t *sc = a.scnt + (int64_t)h * (a.words + 1), *vc = a.vcnt + (int64_t)h * (a.words + 1);
  const int32_t *vl = a.vlist + (int64_t)h * a.n_tokens;
  int64_t row = cell * (W + 1);
  for (int s = 0; s < W; s++) {
    int64_t kb = a.tile_base[s], nk = a.tile_base[s + 1] - kb, run = 0;
    for (int64_t j0 = 0; j0 < nk; j0 += blockDim.x) {
      if (a.tile_gmin[kb + j0] > qmax) break;  // local order follows global order: later tiles are later too
      int64_t j = j0 + threadIdx.x;
      int kind = 0;
      if (j < nk && a.tile_gmin[kb + j] <= qmax) kind = classify(a, sb, sc, vb, vc, qflat, kb + j, WRITE);
      int tot, pos = block_excl_count(kind != 0, &tot);
      if (WRITE && kind) {
        int64_t o = a.tile_cnt[row + s] + run + pos;
        a.tile_idx[o] = (int32_t)j;
        a.tile_kind[o] = kind == 2 ? TILE_FULL : TILE_PARTIAL;
      }
      run += tot;
    }
    if (!WRITE && threadIdx.x == 0) a.raw_t[row + s] = run;
    int64_t v0 = a.vseg[(int64_t)h * (W + 1) + s], v1 = a.vseg[(int64_t)h * (W + 1) + s + 1];
    run = 0;
    for (int64_t x0 = v0; x0 < v1; x0 += blockDim.x) {
      if (vl[x0] > qmax) break;  // verticals ascend within a source
      int64_t x = x0 + threadIdx.x;
      int flag = 0;
      int32_t local = 0;
      if (x < v1 && vl[x] <= qmax) {
        local = a.key_local[vl[x]];
        flag = !classify(a, sb, sc, vb, vc, qflat, kb + local / TILE, 0);
      }
      int tot, pos = block_excl_count(flag, &tot);
      if (WRITE && flag) a.bar_idx[a.bar_cnt[row + s] + run + pos] = local;
      run += tot;
    }
    if (!WRITE && threadIdx.x == 0) a.raw_b[row + s] = run;
  }
  if (!WRITE && threadIdx.x == 0) a.raw_t[row + W] = 0, a.raw_b[row + W] = 0;
}

// Order keys of sa_gpu_index_upload: per source, cells by work (2 per entry, 1 a run, bars in 64s) descending, then
// cell (cells < 2^24); raw_r NULL where the index has no runs.
__global__ void vs_order_keys_kernel(const int64_t *raw_t, const int64_t *raw_r, const int64_t *raw_b, int32_t W,
                                     int64_t cells, uint64_t *keys) {
  int64_t n = (int64_t)W * cells;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
    int64_t s = x / cells, c = x % cells, r = c * (W + 1) + s;
    uint64_t work = (uint64_t)(2 * raw_t[r] + (raw_r ? raw_r[r] : 0) + (raw_b[r] + 63) / 64);
    if (work > 0xffffffffull) work = 0xffffffffull;
    keys[x] = ((uint64_t)s << 56) | ((0xffffffffull - work) << 24) | (uint64_t)c;
  }
}

__global__ void vs_order_extract_kernel(const uint64_t *keys, int64_t n, int32_t *order) {
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x)
    order[x] = (int32_t)(keys[x] & 0xffffffull);
}

// ---- host API ----------------------------------------------------------------------------------------------------

#define ST(s) ((cudaStream_t)(s))

int vs_gpu_conv_init(vs_gpu_conv *c, const vs_gpu_est *g, const vs_gpu_layout *L, int q_rank, sr_error *e) {
  memset(c, 0, sizeof *c);
  if (L->n_tokens != g->n_tokens)
    return sr_input_error(e, NULL, "seq", "layout has %lld tokens but the estimation %lld", (long long)L->n_tokens,
                          (long long)g->n_tokens);
  if (q_rank < 0 || q_rank >= L->world) return sr_input_error(e, NULL, "rank", "%d outside [0, %d)", q_rank, L->world);
  if (L->world > 255) return sr_input_error(e, NULL, "world", "the GPU conversion takes up to 255 ranks");
  c->q_rank = q_rank, c->heads = g->heads, c->world = L->world, c->words = g->words, c->n_tokens = g->n_tokens;
  c->n_qtiles = (int32_t)(L->tile_base_h[q_rank + 1] - L->tile_base_h[q_rank]);
  c->cells = (int64_t)c->heads * c->n_qtiles;
  if (c->cells >= (1 << 24)) return sr_input_error(e, NULL, "heads", "more than 2^24 (head, query tile) cells");
  int64_t W = c->world, offs = c->cells * (W + 1), nk = W * c->cells;
  SA_CUDA(cudaMalloc((void **)&c->vlist, sizeof(int32_t) * (size_t)(c->heads * c->n_tokens)));
  SA_CUDA(cudaMalloc((void **)&c->vseg, sizeof(int64_t) * (size_t)(c->heads * (W + 1))));
  SA_CUDA(cudaMalloc((void **)&c->scnt, sizeof(int32_t) * (size_t)(c->heads * (c->words + 1))));
  SA_CUDA(cudaMalloc((void **)&c->vcnt, sizeof(int32_t) * (size_t)(c->heads * (c->words + 1))));
  SA_CUDA(cudaMalloc((void **)&c->raw_t, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&c->raw_b, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&c->keys[0], sizeof(uint64_t) * (size_t)(nk + 1)));
  SA_CUDA(cudaMalloc((void **)&c->keys[1], sizeof(uint64_t) * (size_t)(nk + 1)));
  SA_CUDA(cudaMallocHost((void **)&c->host_tot, 2 * sizeof(int64_t)));
  size_t b1 = 0, b2 = 0;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(NULL, b1, c->raw_t, c->raw_b, (int)offs));
  SA_CUDA(cub::DeviceRadixSort::SortKeys(NULL, b2, c->keys[0], c->keys[1], (int)nk));
  c->cub_bytes = b1 > b2 ? b1 : b2;
  SA_CUDA(cudaMalloc(&c->cub_tmp, c->cub_bytes + 16));
  tile_index *d = &c->ix.d;
  d->heads = c->heads, d->world = c->world, d->q_rank = q_rank, d->n_qtiles = c->n_qtiles;
  c->ix.cells = c->cells;
  SA_CUDA(cudaMalloc((void **)&d->tile_cnt, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&d->bar_cnt, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&c->ix.order, sizeof(int32_t) * (size_t)(nk + 1)));
  return SR_OK;
}

void vs_gpu_conv_free(vs_gpu_conv *c) {
  cudaFree(c->vlist), cudaFree(c->vseg), cudaFree(c->scnt), cudaFree(c->vcnt), cudaFree(c->raw_t), cudaFree(c->raw_b);
  cudaFree(c->keys[0]), cudaFree(c->keys[1]), cudaFree(c->cub_tmp), cudaFreeHost(c->host_tot);
  sa_gpu_index_free(&c->ix);
  memset(c, 0, sizeof *c);
}

int vs_gpu_convert(vs_gpu_conv *c, const vs_gpu_est *g, const vs_gpu_layout *L, void *stream, sr_error *e) {
  cudaStream_t st = ST(stream);
  int64_t W = c->world, offs = c->cells * (W + 1), nk = W * c->cells;
  conv_args a;
  memset(&a, 0, sizeof a);
  a.seg_off = L->seg_off, a.seg_len = L->seg_len, a.key_rank = L->key_rank, a.key_local = L->key_local;
  a.seg_g = L->seg_g, a.tile_base = L->tile_base, a.tile_gmin = L->tile_gmin, a.tile_gmax = L->tile_gmax;
  a.vbits = g->vbits, a.sbits = g->sbits, a.vcnt = c->vcnt, a.scnt = c->scnt, a.vlist = c->vlist, a.vseg = c->vseg;
  a.words = c->words, a.n_tokens = c->n_tokens, a.W = (int32_t)W, a.q_rank = c->q_rank, a.nq = c->n_qtiles;
  a.raw_t = c->raw_t, a.raw_b = c->raw_b;
  vs_bitcount_kernel<<<(unsigned)(2 * c->heads), 1024, 0, st>>>(g->vbits, g->sbits, c->words, c->vcnt, c->scnt);
  SA_CUDA(cudaGetLastError());
  vs_vertical_split_kernel<<<dim3((unsigned)c->heads, (unsigned)W), 1024, 0, st>>>(a, c->vlist, c->vseg);
  SA_CUDA(cudaGetLastError());
  if (c->cells > 0) vs_cells_kernel<0><<<(unsigned)c->cells, 128, 0, st>>>(a);
  SA_CUDA(cudaGetLastError());
  tile_index *d = &c->ix.d;
  size_t bytes = c->cub_bytes;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(c->cub_tmp, bytes, c->raw_t, d->tile_cnt, (int)offs, st));
  bytes = c->cub_bytes;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(c->cub_tmp, bytes, c->raw_b, d->bar_cnt, (int)offs, st));
  // The last cell's end (its W slot) is the total; the host needs it to size the arrays.
  c->host_tot[0] = c->host_tot[1] = 0;
  if (offs > 0) {
    SA_CUDA(cudaMemcpyAsync(&c->host_tot[0], d->tile_cnt + offs - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
    SA_CUDA(cudaMemcpyAsync(&c->host_tot[1], d->bar_cnt + offs - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  }
  SA_CUDA(cudaStreamSynchronize(st));
  d->n_tiles = c->host_tot[0], d->n_bars = c->host_tot[1];
  if (d->n_tiles > c->cap_tiles || !d->tile_idx) {
    int64_t cap = c->exact ? (d->n_tiles > 0 ? d->n_tiles : 1) : d->n_tiles + d->n_tiles / 4 + 1024;
    cudaFree(d->tile_idx), cudaFree(d->tile_kind);
    d->tile_idx = NULL, d->tile_kind = NULL;
    SA_CUDA(cudaMalloc((void **)&d->tile_idx, sizeof(int32_t) * (size_t)cap));
    SA_CUDA(cudaMalloc((void **)&d->tile_kind, (size_t)cap));
    c->cap_tiles = cap;
  }
  if (d->n_bars > c->cap_bars || !d->bar_idx) {
    int64_t cap = c->exact ? (d->n_bars > 0 ? d->n_bars : 1) : d->n_bars + d->n_bars / 4 + 1024;
    cudaFree(d->bar_idx);
    d->bar_idx = NULL;
    SA_CUDA(cudaMalloc((void **)&d->bar_idx, sizeof(int32_t) * (size_t)cap));
    c->cap_bars = cap;
  }
  a.tile_cnt = d->tile_cnt, a.bar_cnt = d->bar_cnt, a.tile_idx = d->tile_idx, a.tile_kind = d->tile_kind;
  a.bar_idx = d->bar_idx;
  if (c->cells > 0) vs_cells_kernel<1><<<(unsigned)c->cells, 128, 0, st>>>(a);
  SA_CUDA(cudaGetLastError());
  return vs_gpu_cells_order(c->raw_t, NULL, c->raw_b, (int)W, c->cells, c->keys, c->cub_tmp, c->cub_bytes, c->ix.order,
                            st, e);
}

int vs_gpu_cells_order(const int64_t *raw_t, const int64_t *raw_r, const int64_t *raw_b, int W, int64_t cells,
                       uint64_t *keys[2], void *cub_tmp, size_t cub_bytes, int32_t *order, void *stream, sr_error *e) {
  int64_t nk = (int64_t)W * cells;
  unsigned blocks = (unsigned)((nk + 255) / 256 < 65535 ? (nk + 255) / 256 : 65535);
  vs_order_keys_kernel<<<blocks ? blocks : 1, 256, 0, ST(stream)>>>(raw_t, raw_r, raw_b, (int32_t)W, cells, keys[0]);
  SA_CUDA(cudaGetLastError());
  size_t bytes = cub_bytes;
  SA_CUDA(cub::DeviceRadixSort::SortKeys(cub_tmp, bytes, keys[0], keys[1], (int)nk, 0, 64, ST(stream)));
  vs_order_extract_kernel<<<blocks ? blocks : 1, 256, 0, ST(stream)>>>(keys[1], nk, order);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// transpose_gpu.cu — the backward's transposed index built on the GPU (transpose_gpu.h): tiles_transpose
// (plan/tiles.c) and sa_bar_chunks_build (kernels/bar_chunks.c) as sorts, scans and bit sets, bit for bit.
//
// Tile entries: every entry of source src becomes a pair (head * n_kvtiles + KV tile, query tile << 1 | kind)
// written in (head, query tile, entry) order; a stable radix sort by key then lists each KV tile's query tiles
// in the order the host's counting sort appends them. Bars by counting instead of a sort (a sort of the bar
// entries held 45 bytes an entry, the builder's largest term at 512K tokens): the distinct (head, key) pairs are
// a bit set over the source's keys, ranked by a scan of the words' populations (so in (head, key) order); each
// entry is counted into its key's list, the counts scanned into the lists' offsets, each entry written at a slot
// of its list that an atomic hands out, and each list then ordered through a bit set of query tiles in shared
// memory: a key appears at most once in a cell (the lists of tile_index ascend), so a list is a set of query
// tiles and comes out ascending, as the host appends them. 4 bytes an entry beyond the index. Bar chunks: the
// union of query tiles of a compute chunk is a bit set in shared memory (so sorted and unique by construction);
// the distinct keys of a KV head's group are a bit set over the source's keys, ranked likewise.
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block_scan.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/transpose_gpu.h"
extern "C" {
#include "plan/tiles.h"
}

#define ST(s) ((cudaStream_t)(s))
#define CHUNK 64  // keys per bar chunk (kernels/bar_chunks.c)

// The result arrays of one source, with their capacities in bytes.
enum { R_KV_CNT, R_Q_IDX, R_Q_KIND, R_BKH, R_BK, R_BQC, R_BQI, R_HC_HEAD, R_HC_FIRST, R_HC_N, R_HC_QC, R_HC_QI,
       R_CH_KVH, R_CH_N, R_CH_KEY, R_SLOT, R_SCRATCH, R_N };

typedef struct {
  sa_gpu_index_t ix;
  int64_t cap[R_N];
} tt_result;

struct sa_gpu_transposer {
  int sources;
  int for_download;        // one result for every source, no bars' scratch, buffers at their need (transpose_gpu.h)
  tt_result *res;          // [sources], or [1] for_download
  int64_t *cnt_t, *off_t, *cnt_b, *off_b, cap_cells[4];  // per (head, query tile) cell of the source
  uint32_t *keys[2];
  int32_t *vals[2];
  int64_t cap_keys[2], cap_vals[2];
  uint32_t *kbits;         // [heads * kw] the source's bar keys of each index head, kw = ceil(n_src / 32) words a head
  int64_t *kscan;          // [2 (heads * kw + 1)] bar keys before each word (their ranks), then the words' populations
  int64_t *kfill;          // [n_bar_keys + 1] each distinct key's entries counted, then its list's next free slot
  int64_t cap_kbits, cap_kscan, cap_kfill;
  int64_t *hb, cap_hb;     // bar entries of each index head: [hb[ih], hb[ih+1])
  int64_t *hc_cnt;         // query tiles of each compute chunk
  int64_t cap_hc_cnt;
  uint32_t *bits;          // [kv_heads * words] distinct keys of each KV head's group
  int64_t *wscan, *kv_base, *chunk_base, cap_bits, cap_wscan, cap_kvb, cap_cb;
  void *tmp;
  size_t tmp_bytes;
  int64_t *host;           // pinned, small downloads
};

// ---- buffers ---------------------------------------------------------------------------------------

// Bytes to allocate for `need`: a quarter to spare where calls come every pass (fewer reallocations, each a device
// synchronisation), exactly the need where the results go to the host (the GPU index builder, whose bytes count).
static int64_t room_for(const sa_gpu_transposer *t, int64_t need) {
  return t->for_download ? need : need + need / 4 + 256;
}

// Make *p hold n elements (at least one), reallocating (room_for) when it is too small.
template <typename T>
static int grow(const sa_gpu_transposer *t, T **p, int64_t *cap, int64_t n, sr_error *e) {
  int64_t need = (int64_t)sizeof(T) * (n > 0 ? n : 1);
  if (*p && need <= *cap) return SR_OK;
  cudaFree(*p);
  *p = NULL, *cap = 0;
  int64_t c = room_for(t, need);
  SA_CUDA(cudaMalloc((void **)p, (size_t)c));
  *cap = c;
  return SR_OK;
}

static int tmp_grow(sa_gpu_transposer *t, size_t need, sr_error *e) {
  if (t->tmp && need <= t->tmp_bytes) return SR_OK;
  cudaFree(t->tmp);
  t->tmp = NULL, t->tmp_bytes = 0;
  size_t c = (size_t)room_for(t, (int64_t)(need > 0 ? need : 1));
  SA_CUDA(cudaMalloc(&t->tmp, c));
  t->tmp_bytes = c;
  return SR_OK;
}

static int transposer_new(int sources, int for_download, sa_gpu_transposer **out, sr_error *e) {
  *out = NULL;
  sa_gpu_transposer *t = (sa_gpu_transposer *)calloc(1, sizeof *t);
  if (!t) return sr_internal_error(e, 0, "gpu transpose: out of memory");
  t->sources = sources, t->for_download = for_download;
  t->res = (tt_result *)calloc((size_t)(sources > 0 && !for_download ? sources : 1), sizeof *t->res);
  if (!t->res || cudaMallocHost((void **)&t->host, 64 * sizeof(int64_t)) != cudaSuccess) {
    free(t->res), free(t);
    return sr_internal_error(e, 0, "gpu transpose: out of memory");
  }
  *out = t;
  return SR_OK;
}

int sa_gpu_transposer_new(int sources, sa_gpu_transposer **out, sr_error *e) { return transposer_new(sources, 0, out, e); }

int sa_gpu_transposer_new_for_download(int sources, sa_gpu_transposer **out, sr_error *e) {
  return transposer_new(sources, 1, out, e);
}

static void result_free(tt_result *r) {
  sa_gpu_index_t_free(&r->ix);  // every array of the result, as the upload's copy
  memset(r, 0, sizeof *r);
}

void sa_gpu_transposer_free(sa_gpu_transposer *t) {
  if (!t) return;
  for (int s = 0; s < (t->for_download ? 1 : t->sources); s++) result_free(&t->res[s]);
  cudaFree(t->cnt_t), cudaFree(t->off_t), cudaFree(t->cnt_b), cudaFree(t->off_b);
  cudaFree(t->keys[0]), cudaFree(t->keys[1]), cudaFree(t->vals[0]), cudaFree(t->vals[1]);
  cudaFree(t->kbits), cudaFree(t->kscan), cudaFree(t->kfill), cudaFree(t->hb), cudaFree(t->hc_cnt), cudaFree(t->bits);
  cudaFree(t->wscan), cudaFree(t->kv_base), cudaFree(t->chunk_base), cudaFree(t->tmp);
  cudaFreeHost(t->host);
  free(t->res), free(t);
}

// ---- kernels ---------------------------------------------------------------------------------------

static unsigned blocks_for(int64_t n, int per) {
  int64_t b = (n + per - 1) / per;
  return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}

// Entries of source src in each cell (the last slot 0, so an exclusive scan ends with the total).
__global__ void tt_cell_counts_kernel(const int64_t *tile_cnt, const int64_t *bar_cnt, int64_t cells, int W, int src,
                                      int64_t *cnt_t, int64_t *cnt_b) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c <= cells; c += (int64_t)gridDim.x * blockDim.x) {
    if (c == cells) {
      cnt_t[c] = 0, cnt_b[c] = 0;
      continue;
    }
    int64_t x = c * (W + 1) + src;
    cnt_t[c] = tile_cnt[x + 1] - tile_cnt[x];
    cnt_b[c] = bar_cnt[x + 1] - bar_cnt[x];
  }
}

// One warp per cell: its tile entries as (head, KV tile) keys with (query tile, kind) values, at the cell's place
// in (head, query tile) order.
__global__ void tt_gather_kernel(tile_index d, int src, int64_t n_per_head, const int64_t *off, uint32_t *keys,
                                 int32_t *vals) {
  int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), cells = (int64_t)d.heads * d.n_qtiles;
  for (int64_t c = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; c < cells; c += warps) {
    int64_t x = c * (d.world + 1) + src, h = c / d.n_qtiles, i = c % d.n_qtiles;
    int64_t b = d.tile_cnt[x], en = d.tile_cnt[x + 1], o = off[c] - b;
    for (int64_t a = b + threadIdx.x % 32; a < en; a += 32) {
      keys[o + a] = (uint32_t)(h * n_per_head + d.tile_idx[a]);
      vals[o + a] = (int32_t)(i << 1 | d.tile_kind[a]);
    }
  }
}

// The rank of key k of index head h among the source's distinct bar keys: the keys marked before it.
static __device__ __forceinline__ int64_t bar_key_rank(const uint32_t *kbits, const int64_t *kscan, int64_t kw,
                                                       int64_t h, int32_t k) {
  int64_t w = h * kw + k / 32;
  return kscan[w] + __popc(kbits[w] & ((1u << (k % 32)) - 1));
}

// One warp per cell, over its bars of source src: PASS 0 marks each bar's key of its head in kbits; PASS 1 counts
// the entry into its key's list (kfill[rank]); PASS 2 writes its query tile at the next free slot of the list
// (kfill[rank], from the list's offset on), in whatever order the atomics take (tt_bar_lists_order_kernel orders
// each list). Keys outside the source (an index the host transpose would reject) are skipped, not written.
template <int PASS>
__global__ void tt_bar_pass_kernel(tile_index d, int src, int64_t n_src, int64_t kw, uint32_t *kbits,
                                   const int64_t *kscan, int64_t *kfill, int32_t *bar_q_idx) {
  int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), cells = (int64_t)d.heads * d.n_qtiles;
  for (int64_t c = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; c < cells; c += warps) {
    int64_t x = c * (d.world + 1) + src, h = c / d.n_qtiles, i = c % d.n_qtiles;
    for (int64_t a = d.bar_cnt[x] + threadIdx.x % 32; a < d.bar_cnt[x + 1]; a += 32) {
      int32_t k = d.bar_idx[a];
      if (k < 0 || k >= n_src) continue;
      if (PASS == 0) {
        atomicOr(&kbits[h * kw + k / 32], 1u << (k % 32));
        continue;
      }
      unsigned long long *slot = (unsigned long long *)&kfill[bar_key_rank(kbits, kscan, kw, h, k)];
      if (PASS == 1) atomicAdd(slot, 1ull);
      else bar_q_idx[atomicAdd(slot, 1ull)] = (int32_t)i;
    }
  }
}

// The distinct bar keys in (head, key) order: each marked bit at its rank.
__global__ void tt_bar_keys_kernel(const uint32_t *kbits, const int64_t *kscan, int64_t nw, int64_t kw,
                                   int32_t *key_head, int32_t *key) {
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < nw; w += (int64_t)gridDim.x * blockDim.x) {
    int64_t u = kscan[w];
    for (uint32_t x = kbits[w]; x; x &= x - 1, u++)
      key_head[u] = (int32_t)(w / kw), key[u] = (int32_t)((w % kw) * 32 + __ffs(x) - 1);
  }
}

// One block per list of bar_q_idx (lists [q_cnt[u], q_cnt[u + 1]), u < n_lists): its query tiles, distinct, ascending
// through a bit set of the `words` words of query tiles in shared memory.
__global__ void tt_bar_lists_order_kernel(const int64_t *q_cnt, int64_t n_lists, int words, int32_t *q_idx) {
  extern __shared__ uint32_t set[];
  for (int64_t u = blockIdx.x; u < n_lists; u += gridDim.x) {
    int64_t b = q_cnt[u], en = q_cnt[u + 1];
    if (en - b < 2) continue;  // the same for every thread of the block
    for (int w = threadIdx.x; w < words; w += blockDim.x) set[w] = 0;
    __syncthreads();
    for (int64_t y = b + threadIdx.x; y < en; y += blockDim.x) atomicOr(&set[q_idx[y] / 32], 1u << (q_idx[y] % 32));
    __syncthreads();
    int64_t at = b;
    for (int w0 = 0; w0 < words; w0 += blockDim.x) {
      int w = w0 + threadIdx.x, tot;
      uint32_t bits = w < words ? set[w] : 0;
      int64_t o = at + block_excl_sum(__popc(bits), &tot);
      for (; bits; bits &= bits - 1) q_idx[o++] = w * 32 + __ffs(bits) - 1;
      at += tot;
    }
    __syncthreads();  // set free for the next list
  }
}

__global__ void tt_split_tiles_kernel(const int32_t *vals, int64_t n, int32_t *q_idx, uint8_t *q_kind) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n; p += (int64_t)gridDim.x * blockDim.x)
    q_idx[p] = vals[p] >> 1, q_kind[p] = (uint8_t)(vals[p] & 1);
}

// out[x] = number of sorted keys below x, for x in [0, m]: the offsets of a counting sort.
template <typename K>
__global__ void tt_lower_bound_kernel(const K *keys, int64_t n, int64_t m, int64_t *out) {
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x <= m; x += (int64_t)gridDim.x * blockDim.x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if ((int64_t)keys[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    out[x] = lo;
  }
}

// One block per compute chunk: the union of its entries' query tiles as a bit set in shared memory; WRITE = 0
// counts it, WRITE = 1 writes it ascending at the chunk's offset.
template <int WRITE>
__global__ void tt_chunk_tiles_kernel(const int32_t *hc_first, const int32_t *hc_n, const int64_t *bar_q_cnt,
                                      const int32_t *bar_q_idx, int words, int64_t *hc_cnt, const int64_t *hc_q_cnt,
                                      int32_t *hc_q_idx) {
  extern __shared__ uint32_t set[];
  __shared__ int total;
  int ch = blockIdx.x;
  for (int w = threadIdx.x; w < words; w += blockDim.x) set[w] = 0;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  int64_t b = bar_q_cnt[hc_first[ch]], en = bar_q_cnt[hc_first[ch] + hc_n[ch]];  // the chunk's keys are consecutive
  for (int64_t y = b + threadIdx.x; y < en; y += blockDim.x) atomicOr(&set[bar_q_idx[y] / 32], 1u << (bar_q_idx[y] % 32));
  __syncthreads();
  if (!WRITE) {
    int n = 0;
    for (int w = threadIdx.x; w < words; w += blockDim.x) n += __popc(set[w]);
    atomicAdd(&total, n);
    __syncthreads();
    if (threadIdx.x == 0) hc_cnt[ch] = total;
    if (threadIdx.x == 0 && ch == gridDim.x - 1) hc_cnt[ch + 1] = 0;  // the scan's last slot: the total
  } else if (threadIdx.x == 0) {
    int64_t o = hc_q_cnt[ch];
    for (int w = 0; w < words; w++)
      for (uint32_t x = set[w]; x; x &= x - 1) hc_q_idx[o++] = w * 32 + __ffs(x) - 1;
  }
}

// The distinct keys of each KV head's group of query heads (every KV head: an index serving all heads).
__global__ void tt_mark_keys_kernel(const int32_t *key_head, const int32_t *key, int64_t n, int ih_n, int group,
                                    int kv_heads, int64_t words, uint32_t *bits) {
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
    int k = key[x];
    if (ih_n == 1) {
      for (int kvh = 0; kvh < kv_heads; kvh++) atomicOr(&bits[kvh * words + k / 32], 1u << (k % 32));
    } else {
      atomicOr(&bits[(key_head[x] / group) * words + k / 32], 1u << (k % 32));
    }
  }
}

__global__ void tt_popcount_kernel(const uint32_t *bits, int64_t n, int64_t *pop) {
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w <= n; w += (int64_t)gridDim.x * blockDim.x)
    pop[w] = w < n ? __popc(bits[w]) : 0;
}

__global__ void tt_kv_base_kernel(const int64_t *wscan, int kv_heads, int64_t words, int64_t *kv_base) {
  int kvh = blockIdx.x * blockDim.x + threadIdx.x;
  if (kvh <= kv_heads) kv_base[kvh] = wscan[(int64_t)kvh * words];
}

// Each distinct key into its reduce chunk's slot: rank r among its KV head's keys -> chunk base + r / 64.
__global__ void tt_chunk_keys_kernel(const uint32_t *bits, const int64_t *wscan, const int64_t *kv_base,
                                     const int64_t *chunk_base, int kv_heads, int64_t words, int32_t *chunk_key) {
  for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < kv_heads * words; w += (int64_t)gridDim.x * blockDim.x) {
    int kvh = (int)(w / words);
    int64_t r = wscan[w] - kv_base[kvh];
    for (uint32_t x = bits[w]; x; x &= x - 1, r++) {
      int64_t key = (w - kvh * words) * 32 + __ffs(x) - 1;
      chunk_key[(chunk_base[kvh] + r / CHUNK) * CHUNK + r % CHUNK] = (int32_t)key;
    }
  }
}

// slot_entry: for (chunk, head of the group, slot) the bar entry of that head holding the slot's key, or -1.
__global__ void tt_slots_kernel(const int32_t *chunk_kvh, const int32_t *chunk_n, const int32_t *chunk_key,
                                const int32_t *bar_key, const int64_t *hb, int ih_n, int group, int64_t n_slots,
                                int32_t *slot_entry) {
  for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < n_slots; s += (int64_t)gridDim.x * blockDim.x) {
    int64_t ch = s / ((int64_t)group * CHUNK);
    int gi = (int)(s / CHUNK % group), r = (int)(s % CHUNK);
    int32_t ent = -1;
    if (r < chunk_n[ch]) {
      int ih = ih_n == 1 ? 0 : chunk_kvh[ch] * group + gi;
      int32_t k = chunk_key[ch * CHUNK + r];
      int64_t lo = hb[ih], hi = hb[ih + 1];
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (bar_key[mid] < k) lo = mid + 1;
        else hi = mid;
      }
      if (lo < hb[ih + 1] && bar_key[lo] == k) ent = (int32_t)lo;
    }
    slot_entry[s] = ent;
  }
}

// ---- the transpose -----------------------------------------------------------------------------------

// Download n int64 values from device memory (stream order), waiting for them.
static int fetch(sa_gpu_transposer *t, const int64_t *dev, int n, cudaStream_t st, sr_error *e) {
  SA_CUDA(cudaMemcpyAsync(t->host, dev, sizeof(int64_t) * (size_t)n, cudaMemcpyDeviceToHost, st));
  SA_CUDA(cudaStreamSynchronize(st));
  return SR_OK;
}

// Sort n (key, value) pairs from slot 0 into slot 1, stable, on the low `bits` bits of the key.
static int sort_pairs(sa_gpu_transposer *t, int64_t n, int bits, cudaStream_t st, sr_error *e) {
  size_t need = 0;
  SA_CUDA(cub::DeviceRadixSort::SortPairs(NULL, need, t->keys[0], t->keys[1], t->vals[0], t->vals[1], (int)n, 0, bits, st));
  if (tmp_grow(t, need, e)) return e->code;
  SA_CUDA(cub::DeviceRadixSort::SortPairs(t->tmp, need, t->keys[0], t->keys[1], t->vals[0], t->vals[1], (int)n, 0, bits, st));
  return SR_OK;
}

static int scan64(sa_gpu_transposer *t, const int64_t *in, int64_t *out, int64_t n, cudaStream_t st, sr_error *e) {
  size_t need = 0;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(NULL, need, in, out, (int)n, st));
  if (tmp_grow(t, need, e)) return e->code;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(t->tmp, need, in, out, (int)n, st));
  return SR_OK;
}

static int bits_for(int64_t n) {
  int b = 1;
  while (b < 32 && ((int64_t)1 << b) < n) b++;
  return b;
}

// The n tile entries of source src gathered as pairs and sorted into slot 1.
static int gather_sorted(sa_gpu_transposer *t, const tile_index *d, int src, int64_t per_head, int64_t n,
                         cudaStream_t st, sr_error *e) {
  int64_t cells = (int64_t)d->heads * d->n_qtiles;
  if (n == 0) return SR_OK;
  tt_gather_kernel<<<blocks_for(cells, 8), 256, 0, st>>>(*d, src, per_head, t->off_t, t->keys[0], t->vals[0]);
  SA_CUDA(cudaGetLastError());
  return sort_pairs(t, n, bits_for((int64_t)d->heads * per_head), st, e);
}

// The bars of source src (n_uses entries) transposed into r: the distinct (head, key) pairs in order (bar_key_head,
// bar_key), their lists' offsets (bar_q_cnt) and query tiles ascending (bar_q_idx), by counting (see the top); and
// t->hb, each index head's range of keys.
static int bar_lists(sa_gpu_transposer *t, tt_result *r, const tile_index *d, int src, int64_t n_src, int64_t n_uses,
                     cudaStream_t st, sr_error *e) {
  tile_index_t *tt = &r->ix.d;
  int64_t kw = (n_src + 31) / 32, nw = (int64_t)d->heads * kw, cells = (int64_t)d->heads * d->n_qtiles;
  if (grow(t, &t->kbits, &t->cap_kbits, nw, e) || grow(t, &t->kscan, &t->cap_kscan, 2 * (nw + 1), e) ||
      grow(t, &t->hb, &t->cap_hb, (int64_t)d->heads + 1, e))
    return e->code;
  int64_t *pop = t->kscan + nw + 1;
  SA_CUDA(cudaMemsetAsync(t->kbits, 0, sizeof(uint32_t) * (size_t)(nw > 0 ? nw : 1), st));
  if (n_uses > 0) {
    tt_bar_pass_kernel<0><<<blocks_for(cells, 8), 256, 0, st>>>(*d, src, n_src, kw, t->kbits, NULL, NULL, NULL);
    SA_CUDA(cudaGetLastError());
  }
  tt_popcount_kernel<<<blocks_for(nw + 1, 256), 256, 0, st>>>(t->kbits, nw, pop);
  SA_CUDA(cudaGetLastError());
  if (scan64(t, pop, t->kscan, nw + 1, st, e) || fetch(t, t->kscan + nw, 1, st, e)) return e->code;
  int64_t nbk = t->host[0];  // below heads x (n_src + 1) < 2^31 (sa_gpu_transpose's bound)
  tt->n_bar_keys = (int32_t)nbk;
  if (grow(t, &tt->bar_key_head, &r->cap[R_BKH], nbk, e) || grow(t, &tt->bar_key, &r->cap[R_BK], nbk, e) ||
      grow(t, &tt->bar_q_cnt, &r->cap[R_BQC], nbk + 1, e) || grow(t, &tt->bar_q_idx, &r->cap[R_BQI], n_uses, e) ||
      grow(t, &t->kfill, &t->cap_kfill, nbk + 1, e))
    return e->code;
  if (nw > 0) {
    tt_bar_keys_kernel<<<blocks_for(nw, 256), 256, 0, st>>>(t->kbits, t->kscan, nw, kw, tt->bar_key_head, tt->bar_key);
    SA_CUDA(cudaGetLastError());
  }
  // each key's entries counted (the last slot 0, so the scan ends with the total), scanned into the lists' offsets
  SA_CUDA(cudaMemsetAsync(t->kfill, 0, sizeof(int64_t) * (size_t)(nbk + 1), st));
  if (n_uses > 0) {
    tt_bar_pass_kernel<1><<<blocks_for(cells, 8), 256, 0, st>>>(*d, src, n_src, kw, t->kbits, t->kscan, t->kfill, NULL);
    SA_CUDA(cudaGetLastError());
  }
  if (scan64(t, t->kfill, tt->bar_q_cnt, nbk + 1, st, e)) return e->code;
  if (n_uses > 0) {  // the query tiles placed from each list's offset on, then each list ordered
    SA_CUDA(cudaMemcpyAsync(t->kfill, tt->bar_q_cnt, sizeof(int64_t) * (size_t)(nbk + 1), cudaMemcpyDeviceToDevice, st));
    tt_bar_pass_kernel<2><<<blocks_for(cells, 8), 256, 0, st>>>(*d, src, n_src, kw, t->kbits, t->kscan, t->kfill,
                                                                tt->bar_q_idx);
    SA_CUDA(cudaGetLastError());
    int words = (d->n_qtiles + 31) / 32;
    tt_bar_lists_order_kernel<<<blocks_for(nbk, 1), 128, sizeof(uint32_t) * (size_t)words, st>>>(tt->bar_q_cnt, nbk, words,
                                                                                                tt->bar_q_idx);
    SA_CUDA(cudaGetLastError());
  }
  tt_lower_bound_kernel<int32_t><<<1, 64 * ((d->heads + 64) / 64), 0, st>>>(tt->bar_key_head, nbk, d->heads, t->hb);
  SA_CUDA(cudaGetLastError());
  return SR_OK;
}

// Bar chunks of the transposed index r (kernels/bar_chunks.c on the device); t->hb holds the head ranges.
static int bar_chunks(sa_gpu_transposer *t, tt_result *r, int32_t heads, int32_t kv_heads, int64_t n_src,
                      cudaStream_t st, sr_error *e) {
  tile_index_t *tt = &r->ix.d;
  sa_bar_chunks *bc = &r->ix.bc;
  int ih_n = tt->heads, group = heads / kv_heads, nq = tt->n_qtiles;
  int64_t nbk = tt->n_bar_keys;
  int64_t *hb = (int64_t *)malloc(sizeof(int64_t) * (size_t)(ih_n + 1));
  if (!hb) return sr_internal_error(e, 0, "gpu transpose: out of memory");
  int rc = SR_OK;
  for (int base = 0; base <= ih_n && !rc; base += 64) {  // the pinned buffer holds 64 values a fetch
    int m = ih_n + 1 - base < 64 ? ih_n + 1 - base : 64;
    if (!(rc = fetch(t, t->hb + base, m, st, e))) memcpy(hb + base, t->host, sizeof(int64_t) * (size_t)m);
  }
  // Compute chunks: up to 64 consecutive entries of one query head (host arrays, one value a chunk).
  int64_t nh = 0;
  for (int h = 0; h < heads && !rc; h++) {
    int ih = ih_n == 1 ? 0 : h;
    nh += (hb[ih + 1] - hb[ih] + CHUNK - 1) / CHUNK;
  }
  int32_t *hh = rc ? NULL : (int32_t *)malloc(sizeof(int32_t) * (size_t)(3 * nh + 1));
  if (!rc && !hh) rc = sr_internal_error(e, 0, "gpu transpose: out of memory");
  for (int h = 0, c = 0; h < heads && !rc; h++) {
    int ih = ih_n == 1 ? 0 : h;
    for (int64_t f = hb[ih]; f < hb[ih + 1]; f += CHUNK, c++)
      hh[c] = h, hh[nh + c] = (int32_t)f, hh[2 * nh + c] = (int32_t)(hb[ih + 1] - f < CHUNK ? hb[ih + 1] - f : CHUNK);
  }
  free(hb);
  bc->group = group, bc->scratch_heads = ih_n == 1 ? heads : 1, bc->n_hchunks = (int32_t)nh;
  if (!rc && (grow(t, &bc->hc_head, &r->cap[R_HC_HEAD], nh, e) || grow(t, &bc->hc_first, &r->cap[R_HC_FIRST], nh, e) ||
              grow(t, &bc->hc_n, &r->cap[R_HC_N], nh, e) || grow(t, &bc->hc_q_cnt, &r->cap[R_HC_QC], nh + 1, e) ||
              grow(t, &t->hc_cnt, &t->cap_hc_cnt, nh + 1, e)))
    rc = e->code;
  if (!rc && nh > 0) {
    cudaError_t ce = cudaMemcpyAsync(bc->hc_head, hh, sizeof(int32_t) * (size_t)nh, cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(bc->hc_first, hh + nh, sizeof(int32_t) * (size_t)nh, cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(bc->hc_n, hh + 2 * nh, sizeof(int32_t) * (size_t)nh, cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);  // hh is pageable memory freed next
    if (ce != cudaSuccess) rc = sr_internal_error(e, 0, "gpu transpose: %s", cudaGetErrorString(ce));
  }
  free(hh);
  if (rc) return rc;
  // The union of query tiles of each compute chunk: counted, scanned into hc_q_cnt, written.
  int words = (nq + 31) / 32;
  size_t smem = sizeof(uint32_t) * (size_t)(words + 1);
  if (nh > 0) {
    tt_chunk_tiles_kernel<0><<<(unsigned)nh, 128, smem, st>>>(bc->hc_first, bc->hc_n, tt->bar_q_cnt, tt->bar_q_idx, words,
                                                             t->hc_cnt, NULL, NULL);
    SA_CUDA(cudaGetLastError());
  } else {
    SA_CUDA(cudaMemsetAsync(t->hc_cnt, 0, sizeof(int64_t), st));
  }
  if (scan64(t, t->hc_cnt, bc->hc_q_cnt, nh + 1, st, e) || fetch(t, bc->hc_q_cnt + nh, 1, st, e)) return e->code;
  int64_t nhq = t->host[0];
  if (grow(t, &bc->hc_q_idx, &r->cap[R_HC_QI], nhq, e)) return e->code;
  if (nh > 0) {
    tt_chunk_tiles_kernel<1><<<(unsigned)nh, 128, smem, st>>>(bc->hc_first, bc->hc_n, tt->bar_q_cnt, tt->bar_q_idx, words,
                                                             NULL, bc->hc_q_cnt, bc->hc_q_idx);
    SA_CUDA(cudaGetLastError());
  }
  // Reduce chunks: the distinct keys of each KV head's group as bit sets over the source's keys, ranked by
  // a scan of the words' populations, 64 a chunk.
  int64_t kw = (n_src + 31) / 32, nw = (int64_t)kv_heads * kw;
  if (grow(t, &t->bits, &t->cap_bits, nw, e) || grow(t, &t->wscan, &t->cap_wscan, 2 * (nw + 1), e) ||
      grow(t, &t->kv_base, &t->cap_kvb, kv_heads + 1, e) || grow(t, &t->chunk_base, &t->cap_cb, kv_heads + 1, e))
    return e->code;
  int64_t *pop = t->wscan + nw + 1;
  SA_CUDA(cudaMemsetAsync(t->bits, 0, sizeof(uint32_t) * (size_t)(nw > 0 ? nw : 1), st));
  if (nbk > 0) {
    tt_mark_keys_kernel<<<blocks_for(nbk, 256), 256, 0, st>>>(tt->bar_key_head, tt->bar_key, nbk, ih_n, group, kv_heads,
                                                              kw, t->bits);
    SA_CUDA(cudaGetLastError());
  }
  tt_popcount_kernel<<<blocks_for(nw + 1, 256), 256, 0, st>>>(t->bits, nw, pop);
  SA_CUDA(cudaGetLastError());
  if (scan64(t, pop, t->wscan, nw + 1, st, e)) return e->code;
  tt_kv_base_kernel<<<1, 64 * ((kv_heads + 64) / 64), 0, st>>>(t->wscan, kv_heads, kw, t->kv_base);
  SA_CUDA(cudaGetLastError());
  int64_t *kb = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * (kv_heads + 1)));
  if (!kb) return sr_internal_error(e, 0, "gpu transpose: out of memory");
  for (int base = 0; base <= kv_heads && !rc; base += 64) {
    int m = kv_heads + 1 - base < 64 ? kv_heads + 1 - base : 64;
    if (!(rc = fetch(t, t->kv_base + base, m, st, e))) memcpy(kb + base, t->host, sizeof(int64_t) * (size_t)m);
  }
  int64_t nc = 0, *cb = kb + kv_heads + 1;
  for (int kvh = 0; kvh < kv_heads && !rc; kvh++) cb[kvh] = nc, nc += (kb[kvh + 1] - kb[kvh] + CHUNK - 1) / CHUNK;
  if (!rc) cb[kv_heads] = nc;
  int32_t *cn = rc ? NULL : (int32_t *)malloc(sizeof(int32_t) * (size_t)(2 * nc + 1));
  if (!rc && !cn) rc = sr_internal_error(e, 0, "gpu transpose: out of memory");
  for (int kvh = 0, c = 0; kvh < kv_heads && !rc; kvh++)
    for (int64_t x = 0; x < kb[kvh + 1] - kb[kvh]; x += CHUNK, c++)
      cn[c] = kvh, cn[nc + c] = (int32_t)(kb[kvh + 1] - kb[kvh] - x < CHUNK ? kb[kvh + 1] - kb[kvh] - x : CHUNK);
  bc->n_chunks = (int32_t)nc;
  int64_t ns = nc * group * CHUNK;
  if (!rc && (grow(t, &bc->chunk_kvh, &r->cap[R_CH_KVH], nc, e) || grow(t, &bc->chunk_n, &r->cap[R_CH_N], nc, e) ||
              grow(t, &bc->chunk_key, &r->cap[R_CH_KEY], nc * CHUNK, e) || grow(t, &bc->slot_entry, &r->cap[R_SLOT], ns, e)))
    rc = e->code;
  if (!rc) {
    cudaError_t ce = cudaMemcpyAsync(t->chunk_base, cb, sizeof(int64_t) * (size_t)(kv_heads + 1), cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess && nc > 0) ce = cudaMemcpyAsync(bc->chunk_kvh, cn, sizeof(int32_t) * (size_t)nc, cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess && nc > 0) ce = cudaMemcpyAsync(bc->chunk_n, cn + nc, sizeof(int32_t) * (size_t)nc, cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaMemsetAsync(bc->chunk_key, 0xff, sizeof(int32_t) * (size_t)(nc > 0 ? nc * CHUNK : 1), st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);  // cb and cn are pageable memory freed next
    if (ce != cudaSuccess) rc = sr_internal_error(e, 0, "gpu transpose: %s", cudaGetErrorString(ce));
  }
  free(kb), free(cn);
  if (rc) return rc;
  if (nw > 0) {
    tt_chunk_keys_kernel<<<blocks_for(nw, 256), 256, 0, st>>>(t->bits, t->wscan, t->kv_base, t->chunk_base, kv_heads, kw,
                                                              bc->chunk_key);
    SA_CUDA(cudaGetLastError());
  }
  if (ns > 0) {
    tt_slots_kernel<<<blocks_for(ns, 256), 256, 0, st>>>(bc->chunk_kvh, bc->chunk_n, bc->chunk_key, tt->bar_key, t->hb, ih_n,
                                                         group, ns, bc->slot_entry);
    SA_CUDA(cudaGetLastError());
  }
  // Scratch for the bar entries' partial dK, dV (head_dim up to 128), as sa_gpu_index_t_upload; none where the result
  // goes to the host (a download leaves the scratch behind).
  if (t->for_download) return SR_OK;
  return grow(t, &bc->scratch, &r->cap[R_SCRATCH], (int64_t)bc->scratch_heads * nbk * 2 * 128, e);
}

int sa_gpu_transpose(sa_gpu_transposer *t, const tile_index *d, int src, int64_t n_src_tokens, int32_t heads,
                     int32_t kv_heads, void *stream, const sa_gpu_index_t **out, sr_error *e) {
  cudaStream_t st = ST(stream);
  *out = NULL;
  if (src < 0 || src >= d->world || src >= t->sources)
    return sr_input_error(e, NULL, "src", "%d outside [0, %d)", src, d->world < t->sources ? d->world : t->sources);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  if (d->heads != 1 && d->heads != heads)
    return sr_input_error(e, NULL, "heads", "index built for %d heads, shape has %d", d->heads, heads);
  int64_t nkv = (n_src_tokens + TILE - 1) / TILE, nq = d->n_qtiles, cells = (int64_t)d->heads * nq;
  if ((int64_t)d->heads * (n_src_tokens + 1) >= ((int64_t)1 << 31))
    return sr_input_error(e, NULL, "seq", "the GPU transpose takes heads x source tokens below 2^31");
  tt_result *r = &t->res[t->for_download ? 0 : src];
  tile_index_t *tt = &r->ix.d;
  tt->heads = d->heads, tt->n_kvtiles = (int32_t)nkv, tt->n_qtiles = (int32_t)nq;
  // entries of the source per cell, and where each cell's entries go
  if (grow(t, &t->cnt_t, &t->cap_cells[0], cells + 1, e) || grow(t, &t->off_t, &t->cap_cells[1], cells + 1, e) ||
      grow(t, &t->cnt_b, &t->cap_cells[2], cells + 1, e) || grow(t, &t->off_b, &t->cap_cells[3], cells + 1, e))
    return e->code;
  tt_cell_counts_kernel<<<blocks_for(cells + 1, 256), 256, 0, st>>>(d->tile_cnt, d->bar_cnt, cells, d->world, src, t->cnt_t,
                                                                    t->cnt_b);
  SA_CUDA(cudaGetLastError());
  if (scan64(t, t->cnt_t, t->off_t, cells + 1, st, e) || scan64(t, t->cnt_b, t->off_b, cells + 1, st, e)) return e->code;
  SA_CUDA(cudaMemcpyAsync(t->host, t->off_t + cells, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  SA_CUDA(cudaMemcpyAsync(t->host + 1, t->off_b + cells, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  SA_CUDA(cudaStreamSynchronize(st));
  int64_t n_entries = t->host[0], n_uses = t->host[1];
  // the sort buffers first: growing frees, which must not meet queued work mid-call
  if (grow(t, &t->keys[0], &t->cap_keys[0], n_entries, e) || grow(t, &t->keys[1], &t->cap_keys[1], n_entries, e) ||
      grow(t, &t->vals[0], &t->cap_vals[0], n_entries, e) || grow(t, &t->vals[1], &t->cap_vals[1], n_entries, e))
    return e->code;
  // tile entries: query tiles per (head, KV tile)
  if (grow(t, &tt->kv_cnt, &r->cap[R_KV_CNT], (int64_t)d->heads * nkv + 1, e) || grow(t, &tt->q_idx, &r->cap[R_Q_IDX], n_entries, e) ||
      grow(t, &tt->q_kind, &r->cap[R_Q_KIND], n_entries, e) || gather_sorted(t, d, src, nkv, n_entries, st, e))
    return e->code;
  if (n_entries > 0) {
    tt_split_tiles_kernel<<<blocks_for(n_entries, 256), 256, 0, st>>>(t->vals[1], n_entries, tt->q_idx, tt->q_kind);
    SA_CUDA(cudaGetLastError());
  }
  tt_lower_bound_kernel<uint32_t><<<blocks_for((int64_t)d->heads * nkv + 1, 256), 256, 0, st>>>(
      t->keys[1], n_entries, (int64_t)d->heads * nkv, tt->kv_cnt);
  SA_CUDA(cudaGetLastError());
  if (bar_lists(t, r, d, src, n_src_tokens, n_uses, st, e)) return e->code;
  int rc = bar_chunks(t, r, heads, kv_heads, n_src_tokens, st, e);
  if (rc) return rc;
  r->ix.dev_bytes = 0;
  for (int i = 0; i < R_N; i++) r->ix.dev_bytes += r->cap[i];
  *out = &r->ix;
  return SR_OK;
}

// ---- download (tests) --------------------------------------------------------------------------------

template <typename T>
static int to_host(T **dst, const T *src, int64_t n, sr_error *e) {
  *dst = (T *)malloc(sizeof(T) * (size_t)(n > 0 ? n : 1));
  if (!*dst) return sr_internal_error(e, 0, "gpu transpose: out of memory");
  if (n > 0) SA_CUDA(cudaMemcpy(*dst, src, sizeof(T) * (size_t)n, cudaMemcpyDeviceToHost));
  return SR_OK;
}

int sa_gpu_index_t_download(const sa_gpu_index_t *g, tile_index_t *tt, sa_bar_chunks *bc, sr_error *e) {
  memset(tt, 0, sizeof *tt), memset(bc, 0, sizeof *bc);
  const tile_index_t *d = &g->d;
  const sa_bar_chunks *b = &g->bc;
  tt->heads = d->heads, tt->n_kvtiles = d->n_kvtiles, tt->n_qtiles = d->n_qtiles, tt->n_bar_keys = d->n_bar_keys;
  bc->group = b->group, bc->scratch_heads = b->scratch_heads, bc->n_hchunks = b->n_hchunks, bc->n_chunks = b->n_chunks;
  int64_t nkv = (int64_t)d->heads * d->n_kvtiles, nbk = d->n_bar_keys, nh = b->n_hchunks, nc = b->n_chunks;
  int rc = to_host(&tt->kv_cnt, d->kv_cnt, nkv + 1, e);
  int64_t nq = rc ? 0 : tt->kv_cnt[nkv];
  if (!rc) rc = to_host(&tt->q_idx, d->q_idx, nq, e);
  if (!rc) rc = to_host(&tt->q_kind, d->q_kind, nq, e);
  if (!rc) rc = to_host(&tt->bar_key_head, d->bar_key_head, nbk, e);
  if (!rc) rc = to_host(&tt->bar_key, d->bar_key, nbk, e);
  if (!rc) rc = to_host(&tt->bar_q_cnt, d->bar_q_cnt, nbk + 1, e);
  if (!rc && !g->compact_bars) rc = to_host(&tt->bar_q_idx, d->bar_q_idx, tt->bar_q_cnt[nbk], e);
  if (!rc && g->compact_bars) {  // the lists the copy does not hold, expanded on the host from what it does
    tt->bar_q_idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(tt->bar_q_cnt[nbk] + 1));
    if (!tt->bar_q_idx) rc = sr_internal_error(e, 0, "gpu transpose: out of memory");
    else if (tiles_transpose_bars_expand(tt, tt->bar_q_idx)) rc = sr_internal_error(e, 0, "gpu transpose: compact bars inexact");
  }
  if (!rc) rc = to_host(&bc->hc_head, b->hc_head, nh, e);
  if (!rc) rc = to_host(&bc->hc_first, b->hc_first, nh, e);
  if (!rc) rc = to_host(&bc->hc_n, b->hc_n, nh, e);
  if (!rc) rc = to_host(&bc->hc_q_cnt, b->hc_q_cnt, nh + 1, e);
  if (!rc) rc = to_host(&bc->hc_q_idx, b->hc_q_idx, bc->hc_q_cnt[nh], e);
  if (!rc) rc = to_host(&bc->chunk_kvh, b->chunk_kvh, nc, e);
  if (!rc) rc = to_host(&bc->chunk_n, b->chunk_n, nc, e);
  if (!rc) rc = to_host(&bc->chunk_key, b->chunk_key, nc * CHUNK, e);
  if (!rc) rc = to_host(&bc->slot_entry, b->slot_entry, nc * b->group * CHUNK, e);
  return rc;
}

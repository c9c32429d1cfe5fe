// vs_runs.cu — the forward form (plan/tiles_runs.c) of a tile index built on the GPU (vs_gpu.h vs_gpu_runs_build),
// step for step as its CPU mirror kernels/vs_runs.c, through the same cell code (kernels/vs_runs_cell.h): the heads'
// slash counts and dilated sets (a block a head), every (cell, source) counted (a thread each), exclusive scans, the
// arrays allocated at their need, every cell written at its offsets, then the cells' heaviest-first order of
// sa_gpu_index_upload (work 2 a tile, 1 a run, bars in 64s). A thread walks its cell's entries in order: the
// heaviest cells (late query tiles) take longest, a few hundred entries at 128K tokens.
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <string.h>

#include "kernels/block_scan.cuh"
#include "kernels/sa_gpu.h"
#include "kernels/vs_gpu.h"
#include "kernels/vs_runs_cell.h"

// Block per head: slashes before each word (a block scan of the words' populations), then the dilated set.
__global__ void vs_runs_heads_kernel(const uint32_t *sbits, int64_t words, int64_t n_tokens, int32_t *scnt,
                                     uint32_t *dil) {
  int64_t h = blockIdx.x;
  const uint32_t *b = sbits + h * words;
  int32_t *c = scnt + h * (words + 1);
  int64_t carry = 0;
  for (int64_t w0 = 0; w0 < words; w0 += blockDim.x) {
    int64_t w = w0 + threadIdx.x;
    int tot, before = block_excl_sum(w < words ? __popc(b[w]) : 0, &tot);
    if (w < words) c[w] = (int32_t)(carry + before);
    carry += tot;
  }
  if (threadIdx.x == 0) c[words] = (int32_t)carry;
  __syncthreads();  // the counts, written by the whole block, read by every thread below
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) dil[h * words + w] = vs_runs_dil_word(b, c, n_tokens, w);
}

// Thread per (cell, source): count (WRITE 0, into raw with each cell's end slot 0) or write (WRITE 1).
template <int WRITE>
__global__ void vs_runs_cells_kernel(vs_runs_args a, int64_t *raw0, int64_t *raw1, int64_t *raw2) {
  int W = a.world;
  int64_t items = (int64_t)a.heads * a.n_qtiles * W;
  for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; x < items; x += (int64_t)gridDim.x * blockDim.x) {
    int64_t cell = x / W, n[3];
    int s = (int)(x % W);
    vs_runs_cell(&a, cell, s, WRITE, n);
    if (WRITE) continue;
    int64_t r = cell * (W + 1);
    raw0[r + s] = n[0], raw1[r + s] = n[1], raw2[r + s] = n[2];
    if (s == 0) raw0[r + W] = 0, raw1[r + W] = 0, raw2[r + W] = 0;
  }
}

// ---- host API ----------------------------------------------------------------------------------------------------

int vs_gpu_runs_init(vs_gpu_runs *r, const vs_gpu_est *g, const vs_gpu_layout *L, int q_rank, sr_error *e) {
  memset(r, 0, sizeof *r);
  if (L->n_tokens != g->n_tokens)
    return sr_input_error(e, NULL, "seq", "layout has %lld tokens but the bit sets %lld", (long long)L->n_tokens,
                          (long long)g->n_tokens);
  if (q_rank < 0 || q_rank >= L->world) return sr_input_error(e, NULL, "rank", "%d outside [0, %d)", q_rank, L->world);
  if (L->world > 255) return sr_input_error(e, NULL, "world", "the GPU forward form takes up to 255 ranks");
  r->q_rank = q_rank, r->heads = g->heads, r->world = L->world, r->words = g->words, r->n_tokens = g->n_tokens;
  r->n_qtiles = (int32_t)(L->tile_base_h[q_rank + 1] - L->tile_base_h[q_rank]);
  r->cells = (int64_t)r->heads * r->n_qtiles;
  if (r->cells >= (1 << 24)) return sr_input_error(e, NULL, "heads", "more than 2^24 (head, query tile) cells");
  int64_t W = r->world, offs = r->cells * (W + 1), nk = W * r->cells;
  SA_CUDA(cudaMalloc((void **)&r->scnt, sizeof(int32_t) * (size_t)(r->heads * (r->words + 1))));
  SA_CUDA(cudaMalloc((void **)&r->dil, sizeof(uint32_t) * (size_t)(r->heads * r->words + 1)));
  for (int k = 0; k < 3; k++) SA_CUDA(cudaMalloc((void **)&r->raw[k], sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&r->keys[0], sizeof(uint64_t) * (size_t)(nk + 1)));
  SA_CUDA(cudaMalloc((void **)&r->keys[1], sizeof(uint64_t) * (size_t)(nk + 1)));
  SA_CUDA(cudaMallocHost((void **)&r->host_tot, 3 * sizeof(int64_t)));
  size_t b1 = 0, b2 = 0;
  SA_CUDA(cub::DeviceScan::ExclusiveSum(NULL, b1, r->raw[0], r->raw[1], (int)offs));
  SA_CUDA(cub::DeviceRadixSort::SortKeys(NULL, b2, r->keys[0], r->keys[1], (int)nk));
  r->cub_bytes = b1 > b2 ? b1 : b2;
  SA_CUDA(cudaMalloc(&r->cub_tmp, r->cub_bytes + 16));
  tile_index *d = &r->ix.d;
  d->heads = r->heads, d->world = r->world, d->q_rank = q_rank, d->n_qtiles = r->n_qtiles;
  r->ix.cells = r->cells;
  SA_CUDA(cudaMalloc((void **)&d->tile_cnt, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&d->run_cnt, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&d->bar_cnt, sizeof(int64_t) * (size_t)(offs + 1)));
  SA_CUDA(cudaMalloc((void **)&r->ix.order, sizeof(int32_t) * (size_t)(nk + 1)));
  return SR_OK;
}

void vs_gpu_runs_free(vs_gpu_runs *r) {
  cudaFree(r->scnt), cudaFree(r->dil), cudaFree(r->keys[0]), cudaFree(r->keys[1]), cudaFree(r->cub_tmp);
  for (int k = 0; k < 3; k++) cudaFree(r->raw[k]);
  cudaFreeHost(r->host_tot);
  sa_gpu_index_free(&r->ix);
  memset(r, 0, sizeof *r);
}

// Room for n entries of `width` bytes and (second, when size2) as many of size2: at the need (exact) or a quarter more.
static int grow(void **a, void **b, size_t width, size_t width2, int64_t n, int64_t *cap, int exact, sr_error *e) {
  if (n <= *cap && *a) return SR_OK;
  int64_t c = exact ? (n > 0 ? n : 1) : n + n / 4 + 1024;
  cudaFree(*a), *a = NULL;
  if (b) cudaFree(*b), *b = NULL;
  SA_CUDA(cudaMalloc(a, width * (size_t)c));
  if (b) SA_CUDA(cudaMalloc(b, width2 * (size_t)c));
  *cap = c;
  return SR_OK;
}

static unsigned grid_of(int64_t n, int block) {
  int64_t b = (n + block - 1) / block;
  return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

int vs_gpu_runs_build(vs_gpu_runs *r, const tile_index *in, const vs_gpu_est *g, const vs_gpu_layout *L, void *stream,
                      sr_error *e) {
  cudaStream_t st = (cudaStream_t)stream;
  if (in->heads != r->heads || in->world != r->world || in->q_rank != r->q_rank || in->n_qtiles != r->n_qtiles ||
      g->heads != r->heads || g->words != r->words)
    return sr_input_error(e, NULL, "index", "%d heads, %d ranks, query rank %d, %d query tiles; the build was made for "
                          "%d, %d, %d, %d", in->heads, in->world, in->q_rank, in->n_qtiles, r->heads, r->world, r->q_rank,
                          r->n_qtiles);
  if (in->n_runs) return sr_input_error(e, NULL, "index", "already has runs");
  int64_t W = r->world, offs = r->cells * (W + 1), nk = W * r->cells;
  if (r->heads > 0) vs_runs_heads_kernel<<<(unsigned)r->heads, 1024, 0, st>>>(g->sbits, r->words, r->n_tokens, r->scnt, r->dil);
  SA_CUDA(cudaGetLastError());
  tile_index *d = &r->ix.d;
  vs_runs_args a;
  memset(&a, 0, sizeof a);
  a.heads = r->heads, a.world = r->world, a.n_qtiles = r->n_qtiles, a.q_rank = r->q_rank;
  a.tile_cnt = in->tile_cnt, a.bar_cnt = in->bar_cnt, a.tile_idx = in->tile_idx, a.bar_idx = in->bar_idx;
  a.tile_kind = in->tile_kind;
  a.n_tokens = r->n_tokens, a.words = r->words, a.vbits = g->vbits, a.sbits = g->sbits, a.scnt = r->scnt, a.dil = r->dil;
  a.vs = NULL;  // every head of a GPU build is vertical-slash
  a.tile_base = L->tile_base, a.tile_gmin = L->tile_gmin, a.tile_gmax = L->tile_gmax;
  a.seg_off = L->seg_off, a.seg_len = L->seg_len;
  unsigned blocks = grid_of(nk, 128);
  if (nk > 0) vs_runs_cells_kernel<0><<<blocks, 128, 0, st>>>(a, r->raw[0], r->raw[1], r->raw[2]);
  SA_CUDA(cudaGetLastError());
  int64_t *cnt[3] = {d->tile_cnt, d->run_cnt, d->bar_cnt};
  for (int k = 0; k < 3; k++) {
    size_t bytes = r->cub_bytes;
    SA_CUDA(cub::DeviceScan::ExclusiveSum(r->cub_tmp, bytes, r->raw[k], cnt[k], (int)offs, st));
  }
  // The last cell's end slot holds the totals; the host needs them to size the arrays.
  for (int k = 0; k < 3; k++) {
    r->host_tot[k] = 0;
    if (offs > 0) SA_CUDA(cudaMemcpyAsync(&r->host_tot[k], cnt[k] + offs - 1, sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  }
  SA_CUDA(cudaStreamSynchronize(st));
  d->n_tiles = r->host_tot[0], d->n_runs = r->host_tot[1], d->n_bars = r->host_tot[2];
  if (grow((void **)&d->tile_idx, (void **)&d->tile_kind, 4, 1, d->n_tiles, &r->cap_tiles, r->exact, e) ||
      grow((void **)&d->run_key, (void **)&d->run_len, 4, 1, d->n_runs, &r->cap_runs, r->exact, e) ||
      grow((void **)&d->bar_idx, NULL, 4, 0, d->n_bars, &r->cap_bars, r->exact, e))
    return e->code;
  a.out_tile_cnt = d->tile_cnt, a.out_run_cnt = d->run_cnt, a.out_bar_cnt = d->bar_cnt;
  a.out_tile_idx = d->tile_idx, a.out_tile_kind = d->tile_kind;
  a.out_run_key = d->run_key, a.out_run_len = d->run_len, a.out_bar_idx = d->bar_idx;
  if (nk > 0) vs_runs_cells_kernel<1><<<blocks, 128, 0, st>>>(a, NULL, NULL, NULL);
  SA_CUDA(cudaGetLastError());
  return vs_gpu_cells_order(r->raw[0], r->raw[1], r->raw[2], (int)W, r->cells, r->keys, r->cub_tmp, r->cub_bytes,
                            r->ix.order, st, e);
}

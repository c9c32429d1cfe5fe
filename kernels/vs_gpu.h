// vs_gpu.h — online pattern estimation on the GPU: MTraining's vertical-slash (VS) estimation with top-p
// and cap selection, the conversion of the selected indices into the execution form (tile_index.h) for a
// layout and query rank, and AdaSpa's block search (block mass with a cached LSE, per-row top-k). The VS
// estimation gives the CPU reference's bits; AdaSpa's masses are fp32 tensor-core sums within a stated bound of it.
//
// VS estimation follows the CPU reference plan/pattern_estimate.h pass by pass and gives the same bits:
// scores in float64 summed in the same order, exp and the fixed-point rounding of plan/vs_fixed.h, exact
// 128-bit sums (order-free atomics with carry), and the same selection (scores descending, ties to the
// lower index, the exact top-p test). So the selected verticals and slashes equal vs_est_select's.
//   vs_gpu_est_reset                        row maxima -inf, sums 0
//   vs_gpu_rowmax  (per rank's keys)        scores of the queries against the keys, kept; max-merged row maxima
//   vs_gpu_rowsum                           fixed-point sums of exp(score - max)                 (combine: add)
//   vs_gpu_scores                           column (vertical) and diagonal (slash) sums           (combine: add)
//   vs_gpu_select                           bit sets of the kept verticals / slashes per head
// Between passes ranks combine the small arrays (vs_gpu_combine over an all-gather); one process holding
// several key shards just calls a pass once per shard on the same state.
//
// Tensors are device memory, bf16 Q [n_q, heads, d] (the estimation queries, n_q <= 64) and K
// [n_k, kv_heads, d], positions int64 (global). Functions return SR_OK or an sr_error; `stream` is a
// cudaStream_t (NULL: default stream).
#ifndef SR_VS_GPU_H
#define SR_VS_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {  // the CUDA files are compiled as C++; the API and the planner's headers keep C linkage
#endif

#include "kernels/sparse_attn.h"
#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern_estimate.h"
#include "plan/tile_index.h"

#define VS_GPU_MAX_QUERIES 64
#define VS_GPU_MAX_PICK 8192  // most indices picked by score per head and kind (cap or top-k after the forced ones)

// ---- estimation ---------------------------------------------------------------------------------------

typedef struct {
  int32_t heads, kv_heads, head_dim, n_q;
  int64_t n_tokens, n_k_max;
  float scale;
  int64_t words;        // ceil(n_tokens / 32): bit-set words per head
  int64_t n_k;          // keys of the last vs_gpu_rowmax call (its scores are kept for the next passes)
  double *scores;       // device [heads, n_q, n_k_max]; -inf where the key is after the query
  double *row_max;      // device [heads * n_q]
  uint64_t *row_sum;    // device [heads * n_q][2]: 128-bit fixed point (lo, hi), 2^62 = 1.0
  uint64_t *vert;       // device [heads * n_tokens][2] column sums, by global key
  uint64_t *slash;      // device [heads * n_tokens][2] diagonal sums, by offset q - k
  uint32_t *vbits;      // device [heads * words] kept verticals (bit k)
  uint32_t *sbits;      // device [heads * words] kept slashes (bit d)
  int32_t *counts;      // device [heads][2]: verticals, slashes kept
} vs_gpu_est;

// Allocate the state for `heads` query heads over n_tokens positions and key shards of up to n_k_max keys.
int vs_gpu_est_init(vs_gpu_est *g, int32_t heads, int32_t kv_heads, int32_t head_dim, int32_t n_q, int64_t n_tokens,
                    int64_t n_k_max, float scale, sr_error *e);
// Release the state.
void vs_gpu_est_free(vs_gpu_est *g);
// Start a new estimation: row maxima -inf, row sums and score sums 0.
int vs_gpu_est_reset(vs_gpu_est *g, void *stream, sr_error *e);
// Pass 1 over one shard of keys: scores (kept for passes 2 and 3 of the same shard) and max-merged row maxima.
int vs_gpu_rowmax(vs_gpu_est *g, const void *q, const int64_t *qpos, const void *k, const int64_t *kpos, int64_t n_k,
                  void *stream, sr_error *e);
// Pass 2 over the shard of the last vs_gpu_rowmax: add sums of exp(score - row max) into row_sum.
int vs_gpu_rowsum(vs_gpu_est *g, void *stream, sr_error *e);
// Pass 3 over the same shard: add its probabilities into vert (by key) and slash (by offset).
int vs_gpu_scores(vs_gpu_est *g, const int64_t *qpos, const int64_t *kpos, void *stream, sr_error *e);

enum { VS_GPU_ROWMAX, VS_GPU_ROWSUM, VS_GPU_VERT, VS_GPU_SLASH };
// Combine `world` copies of one array (an all-gather of row_max, row_sum, vert or slash) into the state:
// maxima for ROWMAX, exact 128-bit sums for the others.
int vs_gpu_combine(vs_gpu_est *g, int what, const void *gathered, int world, void *stream, sr_error *e);
// Bytes of one rank's copy of an array for vs_gpu_combine (what as there); its device address is *src.
int64_t vs_gpu_combine_bytes(const vs_gpu_est *g, int what, void **src);

// Select each head's verticals and slashes into vbits / sbits (and counts) by vs_est_select's rule.
int vs_gpu_select(vs_gpu_est *g, const vs_est_opts *o, void *stream, sr_error *e);
// Device array of `heads` head_mask (kind VS) pointing at the state's bit sets, for sa_fwd / sa_bwd.
int vs_gpu_masks(const vs_gpu_est *g, head_mask **out, sr_error *e);

// ---- conversion into the execution form ----------------------------------------------------------------

// A layout's local tiles in device memory (built once per layout): global segments of every local tile,
// the first and last global position of each tile, and every global token's rank and local index.
typedef struct {
  int32_t world;
  int64_t n_tokens, all_tiles;
  int64_t *tile_base_h;   // host [world + 1]: flattened tile index base of each rank
  int64_t *tile_base;     // device [world + 1]
  int32_t *seg_off;       // device [all_tiles + 1]
  int64_t *seg_g;         // device [segments] global start
  int32_t *seg_len;       // device [segments]
  int64_t *tile_gmin;     // device [all_tiles] smallest global position in the tile
  int64_t *tile_gmax;     // device [all_tiles] largest
  int32_t *key_rank;      // device [n_tokens]
  int32_t *key_local;     // device [n_tokens]
} vs_gpu_layout;

// Host form of the same tables (kernels/vs_layout.c), so they are tested on the CPU.
typedef struct {
  int32_t world;
  int64_t n_tokens, all_tiles, n_segs;
  int64_t *tile_base;     // [world + 1]
  int32_t *seg_off;       // [all_tiles + 1]
  int64_t *seg_g;
  int32_t *seg_len;
  int64_t *tile_gmin, *tile_gmax;
  int32_t *key_rank, *key_local;
} vs_layout_tables;

// Build the tables of a layout whose local order follows global order on every rank (contiguous, zigzag,
// striped with any G; an input error otherwise, since bars are emitted in global order per source).
int vs_layout_tables_build(const layout *l, vs_layout_tables *t, sr_error *e);
// Release host tables.
void vs_layout_tables_free(vs_layout_tables *t);
// Copy a layout's tables to the device.
int vs_gpu_layout_init(const layout *l, vs_gpu_layout *g, sr_error *e);
// Release device tables.
void vs_gpu_layout_free(vs_gpu_layout *g);

// Conversion state for one query rank: scratch and the output index (grown as needed between calls).
typedef struct {
  int32_t q_rank, heads, world, n_qtiles;
  int64_t cells, cap_tiles, cap_bars, words, n_tokens;
  int32_t exact;          // 0 (vs_gpu_conv_init's): the index's tile and bar arrays grown with a quarter to spare (the
                          // online estimate, converted every forward); 1: at each conversion's need (the GPU index
                          // builder, which converts a layer at a time and whose bytes count), set after the init
  int32_t *vlist;         // device [heads * n_tokens] verticals by (source rank, global position)
  int64_t *vseg;          // device [heads * (world + 1)] offsets into vlist per (head, source)
  int32_t *scnt, *vcnt;   // device [heads * (words + 1)] set bits before each word
  int64_t *raw_t, *raw_b; // device [cells * (world + 1)] entries per (cell, source)
  uint64_t *keys[2];      // device [world * cells] cell order keys
  void *cub_tmp;
  size_t cub_bytes;
  int64_t *host_tot;      // pinned [2]: entries and bars
  sa_gpu_index ix;        // the result: device arrays owned here, host scalars filled by vs_gpu_convert
} vs_gpu_conv;

// Prepare the conversion of an estimation's patterns for query rank q_rank of a layout.
int vs_gpu_conv_init(vs_gpu_conv *c, const vs_gpu_est *g, const vs_gpu_layout *L, int q_rank, sr_error *e);
// Release it (and its index).
void vs_gpu_conv_free(vs_gpu_conv *c);
// Build c->ix (tile entries, bars, heaviest-first cell order of every source) from g's bit sets: the same
// arrays tiles_build and sa_gpu_index_upload give for the selected pattern. Syncs the stream once (sizes).
int vs_gpu_convert(vs_gpu_conv *c, const vs_gpu_est *g, const vs_gpu_layout *L, void *stream, sr_error *e);

// The heaviest-first order of sa_gpu_index_upload from per-(cell, source) counts at row cell * (W + 1) + source:
// per source, cells by work descending (2 a tile entry, 1 a run, bars in 64s; raw_r NULL: no runs), then cell, into
// order[W * cells]. keys: two device arrays of W * cells; cub_tmp of cub_bytes, as sized for a radix sort of them.
int vs_gpu_cells_order(const int64_t *raw_t, const int64_t *raw_r, const int64_t *raw_b, int W, int64_t cells,
                       uint64_t *keys[2], void *cub_tmp, size_t cub_bytes, int32_t *order, void *stream, sr_error *e);

// ---- the forward form (plan/tiles_runs.c) built from the tile form ---------------------------------------------

// The forward form of a converted index on the GPU: for query rank q_rank of a layout, from the tile form (the
// conversion's, or any index of the same heads whose entries ascend within a cell) and the heads' bit sets, the
// arrays tiles_runs_build gives (every head vertical-slash; the same order, bit for bit) and sa_gpu_index_upload's
// cell order. Steps (kernels/vs_runs_cell.h): the heads' slash counts and dilated sets, every (cell, source) counted
// by one thread, exclusive scans, the arrays allocated, every cell written; one stream sync (the sizes).
typedef struct {
  int32_t q_rank, heads, world, n_qtiles;
  int64_t cells, words, n_tokens, cap_tiles, cap_runs, cap_bars;
  int32_t exact;          // as vs_gpu_conv's: 1 allocates the arrays at each build's need (the GPU index builder)
  int32_t *scnt;          // device [heads * (words + 1)] slashes before each word
  uint32_t *dil;          // device [heads * words] the dilated slash sets
  int64_t *raw[3];        // device [cells * (world + 1) + 1] tiles, runs, bars per (cell, source)
  uint64_t *keys[2];      // device [world * cells] cell order keys
  void *cub_tmp;
  size_t cub_bytes;
  int64_t *host_tot;      // pinned [3]
  sa_gpu_index ix;        // the result: device arrays owned here (run_cnt, run_key, run_len set), host scalars
} vs_gpu_runs;

// Prepare the forward form's build for query rank q_rank of a layout, the heads of g.
int vs_gpu_runs_init(vs_gpu_runs *r, const vs_gpu_est *g, const vs_gpu_layout *L, int q_rank, sr_error *e);
// Release it (and its index).
void vs_gpu_runs_free(vs_gpu_runs *r);
// Build r->ix from the tile form `in` (device arrays, host scalars: e.g. a vs_gpu_conv's ix.d) and g's bit sets
// (vbits, sbits, heads, words, n_tokens are read).
int vs_gpu_runs_build(vs_gpu_runs *r, const tile_index *in, const vs_gpu_est *g, const vs_gpu_layout *L, void *stream,
                      sr_error *e);
// The CPU mirror of vs_gpu_runs_build (kernels/vs_runs.c): the same steps and cell code on host arrays, for a layout
// whose local order follows global order (else an input error); tiles_runs_build's result.
int vs_runs_build_host(const tile_index *in, const head_mask *masks, const layout *l, tile_index *out, sr_error *e);
// One head's slash counts before each word (scnt [words + 1]) and dilated slash set (dil [words]), the first step.
void vs_runs_head_tables(const uint32_t *sbits, int64_t n_tokens, int32_t *scnt, uint32_t *dil);

// ---- AdaSpa --------------------------------------------------------------------------------------------

// Block mass of every head with a cached LSE, on the tensor cores: mass[h][pb][cb] = sum over rows i of query
// block pb and keys j <= i of key block cb of exp(q_i.k_j * scale - lse[h][i]); q [n, heads, d], k [n, kv_heads, d]
// bf16 (query head h reads KV head h / (heads / kv_heads)), lse [heads, n] fp32 (natural log; rows whose LSE is not
// finite add nothing), mass [heads, nb, nb] fp32 (device; blocks above the diagonal 0), nb = ceil(n / block).
// block a multiple of 16 up to 128, head_dim 64 or 128. Each mass is within a relative error bound of the float64
// reference adaspa_block_mass (docs/design.md, "AdaSpa's block masses on the GPU"); the same bits run to run.
// Two kernels compute them: mma.sync m16n8k16 (every block, any device of the build) and, on Hopper, wgmma with
// a warp-specialized copy pipeline (block 64 or 128); by default the wgmma one where it applies, and the
// environment variable SR_ADASPA_KERNEL=mma|wgmma forces one (a forced kernel that does not apply is an error).
int adaspa_gpu_block_mass(const void *q, const void *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                          float scale, int32_t block, const float *lse, float *mass, void *stream, sr_error *e);
// The kernels of adaspa_gpu_block_mass; AUTO is its choice (environment included).
typedef enum { ADASPA_KERNEL_AUTO = 0, ADASPA_KERNEL_MMA = 1, ADASPA_KERNEL_WGMMA = 2 } adaspa_kernel;
// adaspa_gpu_block_mass by the given kernel (MMA or WGMMA ignore the environment; WGMMA where it does not apply:
// an input error).
int adaspa_gpu_block_mass_by(adaspa_kernel kernel, const void *q, const void *k, int64_t n, int32_t heads,
                             int32_t kv_heads, int32_t head_dim, float scale, int32_t block, const float *lse,
                             float *mass, void *stream, sr_error *e);
// 1 when the wgmma kernel can compute this call on the current device (an sm_90a image that runs here, block 64 or
// 128, head_dim 64 or 128, n below 2^31 - 256, Q and K 16-byte aligned for the tensor maps), else 0.
int adaspa_gpu_wgmma_applies(const void *q, const void *k, int64_t n, int32_t head_dim, int32_t block);
// The same masses from the block table of a dense pass (kernels/sparse_attn.h, sa_fwd_block_lse, block 64 or 128):
// mass[h][pb][cb] = sum over the rows i of query block pb of exp2(blk[h, i's tile, cb, i's row] - lse[h][i] log2e),
// lse the pass's own LSE [heads, n] (natural log). One warp a (query block, key block): each lane sums its
// block / 32 rows in order, then a shuffle tree; no atomics, the same bits run to run. Blocks above the diagonal 0.
int adaspa_gpu_mass_from_table(const float *blk, const float *lse, int64_t n, int32_t heads, int32_t block,
                               float *mass, void *stream, sr_error *e);
// Per head h and causal block row, the top ceil((1 - sparsity[h]) * (row + 1)) blocks by mass (ties: lower
// column), as adaspa_select on the same masses: mask [heads, nb, row_words] bits, kept [heads] and total [heads]
// masses (device, float64 sums; recall = kept / total). sparsity is a host array [heads]; nb <= 8192.
int adaspa_gpu_select(const float *mass, int32_t heads, int64_t nb, const double *sparsity, int64_t row_words,
                      uint64_t *mask, double *kept, double *total, void *stream, sr_error *e);

#ifdef __cplusplus
}
#endif

#endif

// sparse_attn.h — sparse flash attention kernels (CUDA) and their CPU reference, one ring step at a time.
//
// The API of the kernels work (issue 6); the executor codes against these signatures.
// Layouts: Q, O [n_q, heads, head_dim]; K, V [n_k, kv_heads, head_dim] (row-major, tokens outermost);
// LSE [heads, n_q] fp32 (natural log). Query head h uses KV head h / (heads / kv_heads) (GQA).
// qpos / kpos: global positions of the local query rows / source keys (layout_positions()).
// The tile index (plan/tile_index.h) selects, for source rank `src`, the tiles and bars to run; an index
// built for one head (ti->heads == 1) serves every head. masks: one head_mask per query head (NULL =
// causal only); PARTIAL tiles apply it, FULL tiles run unmasked, bars apply the causal mask.
// The reference functions return 0, or -1 on a shape that does not fit the index or out of memory.
#ifndef SR_SPARSE_ATTN_H
#define SR_SPARSE_ATTN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {  // the CUDA files are compiled as C++; the API keeps C linkage for C callers
#endif

#include "plan/error.h"
#include "plan/tile_index.h"

typedef struct {
  int64_t n_q, n_k;        // local query rows; keys of the source shard
  int32_t heads, kv_heads, head_dim;
  float scale;             // softmax scale, usually 1/sqrt(head_dim)
  int32_t deterministic;   // GPU backward: 1 = bit-reproducible (no float atomics; slower), 0 = the fastest
} sa_shape;

// CPU reference forward (float64 accumulation) of one ring step: computes the step's partial (O_b, L_b)
// for source `src` and merges it into the running fp32 (o_run, lse_run) by the stable LSE merge of
// docs/design.md, "The LSE merge"; rows without work in this step are left unchanged. Initialise o_run = 0,
// lse_run = -inf.
int sa_ref_fwd(const sa_shape *s, const float *q, const float *k, const float *v, const int64_t *qpos,
               const int64_t *kpos, const tile_index *ti, int src, const head_mask *masks, float *o_run,
               float *lse_run);

// CPU reference backward of one ring step, with the final O and LSE: accumulates (+=) into dq [n_q, heads, d]
// and into dk, dv [n_k, kv_heads, d] of the source shard. D = rowsum(dO * O) is computed inside.
int sa_ref_bwd(const sa_shape *s, const float *q, const float *k, const float *v, const float *o,
               const float *lse, const float *dout, const int64_t *qpos, const int64_t *kpos, const tile_index *ti,
               int src, const head_mask *masks, float *dq, float *dk, float *dv);

// Merge a partial (o_b, lse_b) into running (o, lse) for n rows x heads (stable form, fp32).
void sa_ref_merge(int64_t n_q, int32_t heads, int32_t head_dim, float *o, float *lse, const float *o_b,
                  const float *lse_b);

// ---- GPU (CUDA; built only where nvcc exists, SR_HAVE_CUDA) ---------------------------------------
// Tensors are device memory: Q, K, V, O_b, dO bf16 in the layouts above; running O, dQ, dK, dV fp32.
// `stream` is a cudaStream_t (NULL = default stream). Every call returns SR_OK or an sr_error.

// A tile index in device memory: the host struct's scalar fields with device arrays, plus per source
// rank the order in which the forward runs the (head, query tile) cells, heaviest first (so the
// longest CTAs start first and the grid's tail is short).
typedef struct {
  tile_index d;       // arrays point to device memory
  int32_t *order;     // device [world * cells], cells = heads * n_qtiles, entry = head * n_qtiles + qtile
  int64_t cells;
  int64_t dev_bytes;  // device bytes the copy holds (what sa_gpu_index_upload allocated)
  // Compact bars (sa_gpu_index_upload_compact): d.bar_idx is NULL and a call writes the lists into memory of its
  // own (sa_bars_expand) from the columns of every (head, source); both NULL where the copy holds its lists.
  int64_t *col_cnt;   // device [heads * world + 1]
  int32_t *col_key;   // device [n_cols]
  int64_t bars_bytes; // device bytes the expanded lists take (4 x d.n_bars where compact, else 0)
} sa_gpu_index;

// Bar keys of the transposed index regrouped for the deterministic dK/dV of bars. Compute chunks:
// up to 64 consecutive bar entries of one query head with the union of their query tiles; each CTA
// writes the partial dK/dV of its entries into a scratch row of its own. Reduce chunks: per KV head,
// the distinct bar keys of its GQA group, 64 a chunk, with per (chunk, head of group, slot) the bar
// entry to sum (-1: none), so one thread sums a key's heads in a fixed order into dK/dV.
typedef struct {
  int32_t group;          // query heads per KV head
  int32_t scratch_heads;  // 1, or heads when the index serves every head (scratch per head)
  int32_t n_hchunks;
  int32_t *hc_head;       // [n_hchunks] query head
  int32_t *hc_first;      // [n_hchunks] first bar entry (index into bar_key)
  int32_t *hc_n;          // [n_hchunks] entries (<= 64)
  int64_t *hc_q_cnt;      // [n_hchunks + 1] offsets into hc_q_idx
  int32_t *hc_q_idx;      // query tiles, sorted and unique per chunk
  int32_t n_chunks;
  int32_t *chunk_kvh;     // [n_chunks] KV head
  int32_t *chunk_n;       // [n_chunks] keys in the chunk (<= 64)
  int32_t *chunk_key;     // [n_chunks * 64] source-local keys
  int32_t *slot_entry;    // [n_chunks * group * 64] bar entry, or -1
  float *scratch;         // device only: [scratch_heads * n_bar_keys][2][128] partial dK, dV per entry
} sa_bar_chunks;

// The transposed index in device memory, with its bar chunks (arrays of both in device memory).
typedef struct {
  tile_index_t d;
  sa_bar_chunks bc;    // bc.scratch: the copy's own (sa_gpu_index_t_upload), or NULL: the caller's (_upload_chunks)
  int64_t dev_bytes;   // device bytes the copy holds (what the upload allocated): index_bytes + chunks_bytes,
                       // plus scratch_bytes when the scratch is its own
  int64_t index_bytes, chunks_bytes;  // the transposed arrays, the bar chunks' arrays (sa_index_t_dev_bytes, ...)
  int64_t scratch_bytes;  // the bars' scratch the backward writes (sa_bar_scratch_bytes), held or not
  int32_t compact_bars;   // 1: d.bar_q_idx is NULL, a call writes it into memory of its own (sa_bars_t_expand)
  int64_t bars_bytes;     // device bytes the expanded bar_q_idx takes where compact, else 0
} sa_gpu_index_t;

// Group the bar keys of a transposed index into chunks (host memory; free with sa_bar_chunks_free).
int sa_bar_chunks_build(const tile_index_t *t, int32_t heads, int32_t kv_heads, sa_bar_chunks *out, sr_error *e);
// Release host bar chunks.
void sa_bar_chunks_free(sa_bar_chunks *b);

// ---- device footprint (plain C, kernels/index_bytes.c): the bytes the uploads below allocate ----------------
// Every array takes at least one element. The executor's plan accounting and the trainer's plan fitting read these.

// Bytes sa_gpu_index_upload allocates for host index t (cell order, offsets, tiles, bars, runs).
int64_t sa_index_dev_bytes(const tile_index *t);
// The same from counts: heads x n_qtiles cells over `world` sources, n_tiles tile and n_bars bar entries, n_runs
// runs (-1: no runs arrays; the simulator's memory model sizes an index it never builds with it); n_bars < 0: the
// compact form's arrays, no bar_idx (add sa_bar_cols_count_bytes for its columns).
int64_t sa_index_count_bytes(int32_t heads, int64_t n_qtiles, int32_t world, int64_t n_tiles, int64_t n_bars,
                             int64_t n_runs);
// Bytes sa_gpu_index_upload_compact allocates for host index t with columns c (no bar_idx; the columns instead).
int64_t sa_index_compact_dev_bytes(const tile_index *t, const tile_bar_cols *c);
// Bytes of a host transposed index's arrays on the device (without its bar chunks).
int64_t sa_index_t_dev_bytes(const tile_index_t *t);
// Those of sa_gpu_index_t_upload_compact (no bar_q_idx).
int64_t sa_index_t_compact_dev_bytes(const tile_index_t *t);
// The same from counts: heads x n_kvtiles KV tiles, n_tiles tile entries, n_bar_keys distinct (head, key) bars
// holding n_bars bar entries (n_bars < 0: the compact form, no bar_q_idx).
int64_t sa_index_t_count_bytes(int32_t heads, int64_t n_kvtiles, int64_t n_tiles, int64_t n_bar_keys, int64_t n_bars);
// Bytes of the compact form's columns on the device: heads x world lists holding n_cols keys.
int64_t sa_bar_cols_count_bytes(int32_t heads, int32_t world, int64_t n_cols);
// Bytes of host bar chunks' arrays on the device (without the scratch).
int64_t sa_bar_chunks_dev_bytes(const sa_bar_chunks *c);
// The same from counts: n_hchunks compute chunks holding n_hc_q query tiles together, n_chunks reduce chunks of
// `group` query heads a KV head.
int64_t sa_bar_chunks_count_bytes(int64_t n_hchunks, int64_t n_hc_q, int64_t n_chunks, int32_t group);
// Bytes of the bars' partial dK/dV scratch of chunks c over a transposed index of n_bar_keys keys.
int64_t sa_bar_scratch_bytes(const sa_bar_chunks *c, int32_t n_bar_keys);
// Bytes sa_gpu_masks_upload allocates for `heads` host masks (the head_mask array and every bit set).
int64_t sa_masks_dev_bytes(const head_mask *masks, int heads);

// Copy a host tile index to the device and compute the heaviest-first cell order of every source.
int sa_gpu_index_upload(const tile_index *host, sa_gpu_index *out, sr_error *e);
// Release a device tile index.
void sa_gpu_index_free(sa_gpu_index *g);
// Copy a host transposed index (for heads / kv_heads of the model) and its bar chunks to the device, with the
// bars' scratch of its own.
int sa_gpu_index_t_upload(const tile_index_t *host, int32_t heads, int32_t kv_heads, sa_gpu_index_t *out, sr_error *e);
// The same with its bar chunks already built on the host (sa_bar_chunks_build; the executor keeps them to upload
// again) and without the scratch: the caller sets bc.scratch (scratch_bytes of device memory, which one stream's
// calls may share: a backward uses it only while it runs) on the copy it passes to sa_bwd.
int sa_gpu_index_t_upload_chunks(const tile_index_t *host, const sa_bar_chunks *chunks, sa_gpu_index_t *out, sr_error *e);
// sa_gpu_index_upload with compact bars: every array but bar_idx, and the columns cols (tiles_bar_cols_build, whose
// expansion the caller has found exact: tiles_bars_compact_exact).
int sa_gpu_index_upload_compact(const tile_index *host, const tile_bar_cols *cols, sa_gpu_index *out, sr_error *e);
// sa_gpu_index_t_upload_chunks with compact bars: every array but bar_q_idx (tiles_transpose_bars_compact_exact
// found by the caller).
int sa_gpu_index_t_upload_compact(const tile_index_t *host, const sa_bar_chunks *chunks, sa_gpu_index_t *out,
                                  sr_error *e);
// Write the bar lists of a compact index (every source's) into bar_idx [ix->d.n_bars], device memory, on `stream`:
// what tiles_bars_expand gives on the host. Point a copy of *ix at it (d.bar_idx) for the kernels.
int sa_bars_expand(const sa_gpu_index *ix, int32_t *bar_idx, void *stream, sr_error *e);
// Write a compact transposed index's bar_q_idx [bar_q_cnt[n_bar_keys]] (device) on `stream`, as
// tiles_transpose_bars_expand does on the host.
int sa_bars_t_expand(const sa_gpu_index_t *ixt, int32_t *bar_q_idx, void *stream, sr_error *e);
// Release a device transposed index.
void sa_gpu_index_t_free(sa_gpu_index_t *g);
// Copy `heads` host masks (with their bit sets) to a device array of head_mask with device pointers.
int sa_gpu_masks_upload(const head_mask *host, int heads, head_mask **out, sr_error *e);
// Release device masks made by sa_gpu_masks_upload (heads as given there).
void sa_gpu_masks_free(head_mask *dev, int heads);

// Forward of one ring step: per-step O_b (bf16, may be NULL) and LSE_b (fp32 [heads, n_q], may be NULL),
// and, when o_run != NULL, the stable merge into the running fp32 (o_run, lse_run) in the epilogue.
// Rows without work get O_b = 0, LSE_b = -inf and leave the running state as it is. head_dim 64 or 128.
int sa_fwd(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *qpos, const int64_t *kpos,
           const sa_gpu_index *ix, int src, const head_mask *masks, void *o_b, float *lse_b, float *o_run,
           float *lse_run, void *stream, sr_error *e);

// AdaSpa's block masses out of a dense pass (the searches that need their own dense pass; docs/kernels.md,
// "AdaSpa's masses from the dense pass"): the forward of sa_fwd over ix, a dense causal index of one sequence's
// tokens in order (pos = 0 .. n - 1, queries = keys, masks NULL), merged into (o_run, lse_run) as sa_fwd does, that
// also writes, per (head, 128-row query tile qt, key block J of `block` keys with J < (qt + 1) 128 / block, row r
// of the tile), m + log2(sum over the block's causal keys of exp2(scale log2e q.k - m)) at the row's running max m
// (base 2) into blk[((head T(T+1)/2 + qt(qt+1)/2) 128 / block + J) 128 + r], T the query tiles (-inf: nothing
// kept). Rows past n are not written. adaspa_gpu_mass_from_table (kernels/vs_gpu.h) sums it into block masses.
// With o_run NULL the pass has no output and no P V product: it writes the rows' LSE into lse_run (not merged) and
// the table, about the work of the masses kernel (a search that needs no attention output from its pass).
// Hopper only (sa_block_lse_applies); blk holds sa_block_lse_floats floats.
int64_t sa_block_lse_floats(int64_t n, int32_t heads, int32_t block);
int sa_block_lse_applies(const sa_shape *s, int32_t block);
int sa_fwd_block_lse(const sa_shape *s, const void *q, const void *k, const void *v, const int64_t *pos,
                     const sa_gpu_index *ix, float *o_run, float *lse_run, int32_t block, float *blk, void *stream,
                     sr_error *e);

// Forward kernel variant (benchmark and GPU test only): -1 = the default (5 where the sm_90a image runs,
// else 0); 0 = mma.sync (sm_80 and up); on Hopper (0 elsewhere): 2 = wgmma without warp specialization
// (kept for comparison), 3 = warp-specialized with the consumers taking turns (the default before 5),
// 4 = warp-specialized without turns, 5 = 3 with the partial chunks' keep bits in the windowed form (one
// 64-bit word a lane, shared by shuffles). All compute the same function.
extern int sa_fwd_variant;
// 1 when the current device runs the sm_90a image of the library (the wgmma forward), else 0.
int sa_wgmma_built(void);

// Merge a partial (o_b bf16, lse_b) into running fp32 (o, lse), [n_q, heads, head_dim] / [heads, n_q].
int sa_merge(int64_t n_q, int32_t heads, int32_t head_dim, float *o, float *lse, const void *o_b, const float *lse_b,
             void *stream, sr_error *e);

// D = rowsum(dO * O) per (head, row) into d_row [heads, n_q] (fp32), once per backward (O, dO bf16).
int sa_bwd_prepare(int64_t n_q, int32_t heads, int32_t head_dim, const void *o, const void *dout, float *d_row,
                   void *stream, sr_error *e);

// Backward of one ring step with the final LSE and D from sa_bwd_prepare: dq +=, and dk, dv += for the
// source shard (KV-major over ixt, then the bar chunks). With s->deterministic (or off Hopper) no float
// atomics: the result repeats bit for bit. The Hopper default adds dQ by the TMA's reductions and, for KV
// tiles walked by several CTAs, dK and dV by vector reductions, in any order.
int sa_bwd(const sa_shape *s, const void *q, const void *k, const void *v, const float *lse, const float *d_row,
           const void *dout, const int64_t *qpos, const int64_t *kpos, const sa_gpu_index *ix,
           const sa_gpu_index_t *ixt, int src, const head_mask *masks, float *dq, float *dk, float *dv, void *stream,
           sr_error *e);
// Backward tile kernels (benchmark and GPU test only): -1 = the default (5 where the sm_90a image runs,
// 1 there with sa_shape.deterministic, else 0); 0 = mma.sync (sm_80 and up, bit-reproducible); on Hopper
// (0 elsewhere): 1 = split dQ and dK/dV kernels with wgmma (bit-reproducible), 2 = one warp-specialized
// KV-major kernel, dQ added by the tensor-copy engine's reduction (any order), 3 = variant 2 with the bars'
// dK/dV walks cut into parts that add into dK, dV by vector reductions (any order), 4 = variant 2's tiles and the
// bars on the same warp-specialized machinery (gathered keys; dK, dV by vector reductions, dQ by the tensor-copy
// engine's; the default earlier on 2026-11-28, docs/kernels.md), 5 = variant 4 with the bars in pairs of compute chunks
// of one head (128 gathered keys a CTA walking the merged list of both chunks' query steps once; the default since,
// docs/kernels.md).
// The bars' dK/dV use mma.sync kernels in 0 to 3. With sa_bwd_variant = -1 the environment's SR_BWD_VARIANT (0 to 5),
// where set, replaces the default of a shape that is not deterministic (A/B runs of the executor, the trainer and
// the benchmark; another value: an input error).
extern int sa_bwd_variant;
// The variant sa_bwd runs with sa_bwd_variant = -1 and a shape that is not deterministic, on the current device.
int sa_bwd_default_variant(void);
// Variants 3's, 4's and 5's parts of a bar walk (5: counting both chunks' steps, cut at query tiles): 0 = automatic
// (an eighth of an even share of all walks' steps over the resident CTAs, at least 64 steps, at most 16 parts);
// > 0 = parts of that many 64-row steps (tests).
extern int sa_bwd_bar_cap;
// Variant 2's split of a heavy KV tile's walk over several CTAs (dK, dV then added by atomics): 0 = automatic
// (a tile whose query chunks exceed an SM's share of the call's, in parts of half that share); > 0 = every
// tile in parts of that many chunks (tests).
extern int sa_bwd_ws_cap;

#ifdef __cplusplus
}
#endif

#endif

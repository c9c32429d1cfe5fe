// tiles.h — from a pattern and a layout to the execution form (tile_index.h) and to exact work
// counts per (layer, head, query rank, source rank), which the simulator maps to ring steps through
// the schedule. One library for both consumers: sim/ uses the counts, exec/ and kernels/ the index.
#ifndef SR_TILES_H
#define SR_TILES_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tile_index.h"

// Work of one (head, query rank, source rank) cell.
typedef struct {
  int64_t full;      // FULL tile entries (TILE x TILE, unmasked)
  int64_t partial;   // PARTIAL tile entries (TILE x TILE computed, element mask applied)
  int64_t bars;      // bar entries: (query tile, gathered key column) pairs, TILE rows each
  double pairs;      // exact kept (q, k) elements (the pattern's true work)
  int64_t runs;      // runs of up to 64 keys, TILE rows each, element mask applied (the forward form of
                     // tiles_runs_account_layer; 0 in the tile form's counts)
} work_count;

// Execution form of `layer` for query rank q_rank over all source ranks (all heads).
int tiles_build(const pattern *p, int layer, const layout *l, int q_rank, tile_index *out, sr_error *e);
// Release a tile_index.
void tiles_free(tile_index *t);
// The forward form of an index (plan/tiles_runs.c): each PARTIAL tile of a VS head whose keys and whose
// query tile's rows have consecutive positions is replaced by runs of up to 64 consecutive keys covering
// the columns its slashes keep (a scattered slash costs two 64-key runs a query tile instead of two
// 128-key tiles), and its verticals outside the runs become bars. The same kept elements, each
// computed once. masks: one per head of `in` (tiles_masks_build); other heads and tiles are copied.
// The backward takes the tile form (sa_bwd refuses an index with runs).
int tiles_runs_build(const tile_index *in, const head_mask *masks, const layout *l, tile_index *out, sr_error *e);
// Does `in` belong to layout l with no runs yet, and do the VS masks span its tokens? (tiles_runs_build's check, and
// its GPU build's.) Input error naming the part that does not fit.
int tiles_runs_check(const tile_index *in, const head_mask *masks, const layout *l, sr_error *e);

// Entries of the forward form of `layer`, summed over heads and query and source ranks (each rank's
// tiles_build, then tiles_runs_build: as slow as building the executor's indices); work = TILE^2 (full +
// partial) + TILE * 64 runs + TILE bars, the elements the forward kernels compute on that form.
typedef struct {
  double full, partial, runs, bars, work;
} runs_count;
int tiles_runs_count_layer(const pattern *p, int layer, const layout *l, runs_count *out, sr_error *e);
// The same entries per (query rank, source rank), summed over heads: counts[q_rank * W + src] (full,
// partial, runs, bars; pairs 0), what the simulator costs the forward with when plan.spec.fwd_runs is set. Each
// (query rank, head) is built and counted alone, on the host's threads (sr_parallel_for; serial inside another
// loop), without writing the forward form; the counts do not depend on the threads.
int tiles_runs_account_layer(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e);
// Transposed form of the entries of source rank src (for deterministic backward).
int tiles_transpose(const tile_index *t, int src, int64_t n_src_tokens, tile_index_t *out, sr_error *e);
// Release a tile_index_t.
void tiles_transpose_free(tile_index_t *t);

// ---- compact bars (plan/tiles_bars.c) -------------------------------------------------------------
// A column (vertical, sink) becomes a bar in every query tile after it whose KV tile holding it is not an entry:
// O(columns x query tiles) entries, stored twice (bar_idx; the transpose's bar_q_idx), where the pattern is
// O(columns). The compact form keeps the columns of each (head, source) only: a cell's bars are the first
// bar_cnt-many of them that no tile entry or run of the cell covers, a bar key's query tiles the last
// bar_q_cnt-many without a tile entry on its KV tile (exact where local orders ascend with positions; *_exact
// says whether a given index is one of those). The columns are tile_bar_cols (plan/tile_index.h).
// The columns of every (head, source) of t (its bars' distinct keys).
int tiles_bar_cols_build(const tile_index *t, tile_bar_cols *out, sr_error *e);
// tiles_bar_cols_build with the heads over at most `threads` threads (sr_parallel_for), and *exact (when not NULL)
// what tiles_bars_compact_exact says of the columns; results do not depend on the thread count.
int tiles_bar_cols_find(const tile_index *t, int threads, tile_bar_cols *out, int *exact, sr_error *e);
// Release columns.
void tiles_bar_cols_free(tile_bar_cols *c);
// Write t's bar lists (bar_idx[n_bars], at t's bar_cnt offsets) from the columns and t's entries: 0, or -1
// where a cell's columns run out before its count (t is not of the compact form's kind).
int tiles_bars_expand(const tile_index *t, const tile_bar_cols *cols, int32_t *bar_idx);
// 1 when tiles_bars_expand gives t->bar_idx exactly, else 0 (also for columns not ascending from key 0, which
// tiles_bar_cols_build never gives).
int tiles_bars_compact_exact(const tile_index *t, const tile_bar_cols *cols);
// Write a transpose's bar_q_idx (at its bar_q_cnt offsets) from its bar keys and tile part: 0, or -1 as above.
int tiles_transpose_bars_expand(const tile_index_t *t, int32_t *bar_q_idx);
// 1 when tiles_transpose_bars_expand gives t->bar_q_idx exactly, else 0.
int tiles_transpose_bars_compact_exact(const tile_index_t *t);

// Element masks of every head of `layer` (host memory; free with tiles_masks_free).
int tiles_masks_build(const pattern *p, int layer, head_mask **out, sr_error *e);
// The element masks the index tiles_build(p, layer, l, q_rank) runs with: tiles_masks_build's, except that a head
// whose PARTIAL tiles there keep every causal element they hold (a BLOCK head on a tile-aligned layout, e.g. of
// TILE-token blocks) gets a DENSE mask, which the kernels run as the causal mask with no bit set to read or upload.
int tiles_masks_build_for(const pattern *p, int layer, const layout *l, int q_rank, head_mask **out, sr_error *e);
// Release masks built by tiles_masks_build (heads entries).
void tiles_masks_free(head_mask *m, int heads);

// Exact work counts of `layer`: counts[(head * W + q_rank) * W + src], W = l->world. Fast: uses the
// Toeplitz structure of slashes and the sortedness of verticals, never the N x N mask.
int tiles_account_layer(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e);
// The tables of one layout that accounting builds (the fast path's period, the class tables, the scan's
// bookkeeping), kept for accounting many heads: open one per layout (and per thread), then add heads.
typedef struct tiles_accounter tiles_accounter;
// Prepare exact accounting on layout l (l must outlive the accounter).
int tiles_accounter_open(const layout *l, tiles_accounter **out, sr_error *e);
// Release an accounter (NULL is fine).
void tiles_accounter_close(tiles_accounter *a);
// Add the exact counts of head h (over l->n_tokens tokens) to counts[q_rank * W + src]: the numbers
// tiles_account_layer gives that head, added, so a layer's heads may be summed in one array.
int tiles_account_head_add(tiles_accounter *a, const head_pattern *h, work_count *counts, sr_error *e);
// The same, but part of the counts may stay pending in the accounter (a periodic layout's sums by residue,
// folded into the W x W cells once for many heads instead of once a head) until tiles_accounter_fold with the
// same counts: call it before reading counts or adding heads of this accounter to other counts.
int tiles_account_head_add_pending(tiles_accounter *a, const head_pattern *h, work_count *counts, sr_error *e);
// Add the pending counts into counts (the array the pending heads were added to) and clear them.
void tiles_accounter_fold(tiles_accounter *a, work_count *counts);
// Count kept pairs per cell (1, the default) or, where that costs, in total only (0), for the heads added from now on
// (call it with nothing pending). With 0 a head the fast path takes whole (vertical-slash, window, dense, on an
// aligned layout) adds nothing to its cells' pairs and its kept pairs to the accounter's total instead
// (tiles_accounter_take_pairs); other heads count theirs per cell as before. So a head's kept pairs are in its
// cells or in the total, never both. The pairs per cell cost more than all the rest there (the pairs both a slash
// and a vertical keep, per pair of residues), and the simulator only sums them.
void tiles_accounter_pairs_per_cell(tiles_accounter *a, int per_cell);
// The kept pairs added to the total since the last call (0 with pairs per cell).
int64_t tiles_accounter_take_pairs(tiles_accounter *a);
// Whether a head added since the last call (or the opening) counted kept pairs per cell: with none, the pairs of the
// cells are as they were (the simulator then skips taking them out of a thousand ranks' W x W cells).
int tiles_accounter_take_cell_pairs(tiles_accounter *a);

// ---- additive (patterns area): a layer's totals and imbalance, for reports ------------------------

typedef struct {
  double pairs;             // kept (q, k) pairs over all heads and ranks
  double causal_pairs;      // heads * N(N+1)/2
  double density;           // pairs / causal_pairs
  double work;              // computed elements: TILE^2 (full + partial) + TILE * bars, all heads and ranks
  double full, partial, bars;  // the entries behind `work`, by kind, all heads and ranks
  double worker_imbalance;  // max over ranks / mean of each rank's work (1 = balanced)
  double step_mean;         // flat ring, step t: rank r works on source (r - t) mod W; per step max/mean
  double step_worst;        //   over ranks, averaged over the W steps (mean) and its largest value (worst)
} layer_summary;

// Summarise counts from tiles_account_layer (W = l->world) into a layer_summary.
void tiles_layer_summary(const pattern *p, const layout *l, const work_count *counts, layer_summary *out);

#endif

// tiles_internal.h — shared machinery of tiles.c, tiles_account.c and tiles_fast.c (not a public API).
//
// A head is viewed as two integer sets stored as sorted disjoint intervals:
//   D  the Toeplitz part: offsets d = q - k kept on every row (VS slashes; WINDOW's window; DENSE all d >= 0)
//   K  the column part: keys k kept on every row q >= k (VS verticals; WINDOW's sinks)
// so (q, k) is kept iff k <= q and (q - k in D or k in K). BLOCK heads use their block mask directly.
// The execution rule everywhere: the Toeplitz part (or the block mask) forms tile entries; columns of K
// outside every tile entry of a query tile become bars.
#ifndef SR_TILES_INTERNAL_H
#define SR_TILES_INTERNAL_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/gating.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tile_index.h"
#include "plan/tiles.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// integer sets as sorted disjoint inclusive intervals

typedef struct {
  int64_t n, cap;
  int64_t *lo, *hi;  // [n] interval i = [lo[i], hi[i]]
  int64_t *cum;      // [n + 1] elements in intervals before i
} iset;

// Append [a, b] (a > every element so far; merges when adjacent); returns 0 or -1 on out of memory.
int iset_push(iset *s, int64_t a, int64_t b);
// Recompute cum after pushes.
void iset_finish(iset *s);
// Release an iset.
void iset_free(iset *s);
// Index of the first interval with hi >= x (n when none).
int64_t iset_first_ge(const iset *s, int64_t x);
// Number of elements in [a, b].
int64_t iset_count(const iset *s, int64_t a, int64_t b);
// Is any element in [a, b]?
int iset_any(const iset *s, int64_t a, int64_t b);

// ---------------------------------------------------------------------------------------------
// a head as (D, K), or BLOCK
//
// MOBA heads are block heads whose row blocks are the query groups (TILE rows) and column blocks B keys,
// kept when the column block is the group's own or one it selected. TOKENS heads are D = [0, window) plus
// per-group keys under row masks (plan/gating.h): those keys become bars masked per element, or, inside a
// tile entry, part of that PARTIAL tile.

typedef struct {
  const head_pattern *h;
  int64_t n_tokens;
  int is_block;    // BLOCK or MOBA
  int is_moba, is_tokens;
  int64_t row_block, col_block;  // block heads: rows and keys of a block (BLOCK: both `block`; MOBA: TILE, B)
  iset d, k;   // Toeplitz offsets and columns (empty for BLOCK)
  iset dg;     // D's intervals merged across gaps <= TILE: candidate search only
  // A lean view (head_view_build_lean) of a vertical-slash head holds its columns only as the head's sorted
  // verticals: k and dg stay empty, for the fast path when it counts kept pairs in total (tiles_fast_lean).
  int lean;
  const int32_t *keys;
  int64_t n_keys;
} head_view;

// Build the view of a head; returns SR_OK or an internal error.
int head_view_build(const head_pattern *h, int64_t n_tokens, head_view *v, sr_error *e);
// The same, but a vertical-slash head's columns stay in its array (lean = 1: k, dg empty); other heads whole.
int head_view_build_lean(const head_pattern *h, int64_t n_tokens, head_view *v, sr_error *e);
// Release a view.
void head_view_free(head_view *v);

// ---------------------------------------------------------------------------------------------
// counting (q, k) pairs of two global ranges

// Pairs (q, k) with q in [qa, qa+lq), k in [ka, ka+lk) and d0 <= q - k <= d1 (closed form).
int64_t pairs_in_d_range(int64_t qa, int64_t lq, int64_t ka, int64_t lk, int64_t d0, int64_t d1);

// ---------------------------------------------------------------------------------------------
// layouts seen as local tiles

typedef struct {
  int64_t g, len;  // global start, length
} tile_seg;

typedef struct {
  const layout *l;
  int world;
  int64_t *n_tiles;    // [world] ceil(rank_count / TILE)
  int64_t *tile_base;  // [world + 1] flattened tile index base of each rank
} layout_tiles;

// Prepare tile bookkeeping of a layout.
int layout_tiles_init(const layout *l, layout_tiles *lt, sr_error *e);
// Release it.
void layout_tiles_free(layout_tiles *lt);
// Global segments of local tile i of rank r into segs (at most TILE); returns the count.
int tile_segments(const layout_tiles *lt, int r, int64_t i, tile_seg *segs);
// Index into l->runs of the run holding global token t (-1 when outside).
int64_t layout_run_of_global(const layout *l, int64_t t);

// ---------------------------------------------------------------------------------------------
// the per query-tile scan: the exact classification both tiles_build and accounting use

typedef struct {
  int32_t src, j;
  uint8_t kind;
  int64_t pairs;  // kept elements of the tile (only when pairs were asked for)
} scan_tile;

typedef struct {
  int32_t src;
  int32_t key;    // source-local key index
  int64_t rows;   // rows q of the query tile with q >= k (kept pairs of the bar)
} scan_bar;

typedef struct {
  layout_tiles lt;
  int64_t *stamp;     // [all tiles] the scan number that last marked the tile
  int64_t *slot;      // [all tiles] its index in tiles
  int64_t scan_no;
  scan_tile *tiles;
  int64_t n_tiles, cap_tiles;
  scan_bar *bars;
  int64_t n_bars, cap_bars;
  tile_seg qs[TILE], ks[TILE];
  int n_qs;
  int monotone;       // every rank's local order ascends in global position (all kinds but permutation)
  // the head prepared by tile_scan_head: its columns K per source rank, ascending local index
  const head_view *hv;
  int64_t *vk_begin;  // [world + 1] columns of rank s are vk_*[vk_begin[s] .. vk_begin[s+1])
  int32_t *vk_local;  // source-local key index
  int64_t *vk_global; // global position
  int64_t vk_cap;
  int64_t *vt_first;  // [all tiles + 1] monotone layouts: first column (index into vk_*) of each flat tile
  // accounting on monotone layouts: bars summed per source rank instead of listed (bars_counted = 1)
  int bars_counted;
  int64_t *bar_n;     // [world] bars of the query tile per source rank
  int64_t *bar_rows;  // [world] their kept pairs (rows q >= k)
  // MOBA and TOKENS heads: the query groups the current query tile's rows fall in (ascending), the tile's
  // rows of each as a 128-bit mask, and each group's selection (MOBA: blocks kept, own included, as a bit
  // set of gw words; TOKENS: its spans)
  int64_t n_grp, grp[TILE];
  uint64_t grp_rows[TILE][2];
  int64_t gw;
  uint64_t *grp_bits;        // [TILE * gw]
  int32_t *grp_buf;          // MOBA: one group's blocks (room for grp_buf_cap)
  int64_t grp_buf_cap;
  tokens_span *spans;        // TOKENS: every group's spans, group x's from grp_span[x]
  int64_t grp_span[TILE + 1];
  int64_t span_cap;
} tile_scan;

// Prepare a scanner for a layout.
int tile_scan_init(tile_scan *s, const layout *l, sr_error *e);
// Release it.
void tile_scan_free(tile_scan *s);
// Prepare the scanner for a head (its columns per source rank); call before scanning its query tiles.
int tile_scan_head(tile_scan *s, const head_view *v, sr_error *e);
// Classify query tile i of q_rank for the head prepared by tile_scan_head: fills s->tiles (sorted by (src, j)) and s->bars (sorted by
// (src, key)); with want_pairs also the exact kept pairs of each entry, and on monotone layouts the bars
// only as per-source sums (bar_n, bar_rows; bars_counted = 1), which is all accounting needs.
int tile_scan_qtile(tile_scan *s, const head_view *v, int q_rank, int64_t i, int want_pairs, sr_error *e);

// Mark the KV tiles holding keys of the global range [ka, kb] as candidates of the query tile being
// scanned (once each); -1 on out of memory.
int tile_scan_mark_keys(tile_scan *s, int64_t ka, int64_t kb);
// Append a bar (source-local key, kept pairs); -1 on out of memory.
int tile_scan_push_bar(tile_scan *s, int32_t src, int32_t key, int64_t rows);

// Add a scanned query tile's entries and bars to row[src] (the counts of its head and query rank).
void tiles_account_scan(const tile_scan *s, work_count *row);
// Exact counts of one head over every query tile of every rank into hc[q_rank * W + src].
int tiles_account_head_generic(tile_scan *s, const head_view *v, work_count *hc, sr_error *e);
// Exact counts of one layer by building each query rank's tiles (any layout; the reference path).
int tiles_account_generic(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e);
// ---------------------------------------------------------------------------------------------
// striped layouts whose stripe divides a tile (tiles_comb.c): per-class entries instead of per-pair scans

typedef struct tile_comb tile_comb;
// Off in tests that want the per-tile scan as the reference (1 by default).
extern int tiles_comb_enabled;
// Open the class tables for a layout; *out stays NULL when the layout is not such a striped layout.
int tiles_comb_open(const layout *l, tile_comb **out, sr_error *e);
// Release them.
void tiles_comb_close(tile_comb *c);
// Full super tiles: local tiles i below this are interior on every rank and handled here.
int64_t tiles_comb_interior(const tile_comb *c);
// Classes of a non-BLOCK head (after tile_scan_head on s); want_pairs also counts D-kept pairs.
int tiles_comb_head(tile_comb *c, const tile_scan *s, const head_view *v, int want_pairs, sr_error *e);
// Growable output arrays of tiles_build (kind only for tile entries).
typedef struct {
  int32_t *idx;
  uint8_t *kind;
  int64_t n, cap;
} tile_buf;
// Make room for `need` entries; returns 0 or -1 on out of memory.
int tile_buf_grow(tile_buf *g, int64_t need, int with_kind);
// Append interior query tile i of q_rank to the index arrays (what tile_scan_qtile would give), writing the
// absolute offsets tile_cnt[0..W] and bar_cnt[0..W] of its (head, query tile) cell.
int tiles_comb_emit(tile_comb *c, const tile_scan *s, int q_rank, int64_t i, tile_buf *tiles, tile_buf *bars,
                    int64_t *tile_cnt, int64_t *bar_cnt, sr_error *e);
// Add the exact counts of every interior query tile of the head to hc[q_rank * W + src] (want_pairs classes).
int tiles_comb_account_head(tile_comb *c, const tile_scan *s, const head_view *v, work_count *hc, sr_error *e);

// ---------------------------------------------------------------------------------------------
// MOBA and TOKENS heads (tiles_gated.c)

// The query tile's groups and their selections (after the tile's segments are in s->qs); SR_OK or out of memory.
int gated_tile_prepare(tile_scan *s, const head_view *v, sr_error *e);
// MOBA: mark the KV tiles of every kept block of the tile's groups as candidates; -1 on out of memory.
int gated_mark_moba(tile_scan *s);
// Does the tile's group p keep column block c (MOBA)?
int gated_moba_kept(const tile_scan *s, int64_t p, int64_t c);
// TOKENS: after the tile entries are classified, the groups' keys outside every entry become bars (rows:
// kept pairs), those inside an entry add their pairs to it (want_pairs); bars sorted by (src, key).
int gated_tokens_bars(tile_scan *s, const head_view *v, int want_pairs, sr_error *e);
// Counts of the interior query tiles (global tiles t < nbi, local tile = group t on rank tile_rank[t]) of a
// MOBA head, or of a TOKENS head's group keys (its window part is counted as any Toeplitz part), on a
// layout whose local tiles are aligned global tiles; hc[q_rank * W + src]. -1 on out of memory.
int gated_fast_moba(const int32_t *tile_rank, int64_t nbi, int W, const head_view *v, work_count *hc);
int gated_fast_tokens(const int32_t *tile_rank, int64_t nbi, int W, const head_view *v, work_count *hc);
// Element masks (host): a MOBA head as a BLOCK mask of TILE-token blocks, a TOKENS head as its window and
// every group's keys with their row masks (a stand-in's drawn here); -1 on out of memory.
int gated_mask_moba(const head_pattern *h, int64_t n_tokens, head_mask *m);
int gated_mask_tokens(const head_pattern *h, int64_t n_tokens, head_mask *m);

// ---------------------------------------------------------------------------------------------
// BLOCK heads on layouts whose local tiles are aligned global tiles (tiles_blocks.c): entries straight from
// the block bitmap

// Off in tests and benchmarks that want the per-tile scan as the reference (1 by default).
extern int tiles_blocks_enabled;
typedef struct tiles_blocks tiles_blocks;
// Open the tables of an aligned layout; *out stays NULL when the layout is not aligned or the path is off.
int tiles_blocks_open(const layout *l, tiles_blocks **out, sr_error *e);
// Release them (NULL is fine).
void tiles_blocks_close(tiles_blocks *b);
// Append a BLOCK head's entries for every query tile of q_rank to tiles (what tile_scan_qtile gives), writing
// the absolute offsets of its cells: tile_cnt / bar_cnt [nq * (W + 1)] (no bars: each bar offset is n_bars).
int tiles_blocks_head(tiles_blocks *b, const head_pattern *h, int q_rank, tile_buf *tiles, int64_t n_bars,
                      int64_t *tile_cnt, int64_t *bar_cnt, sr_error *e);
// *plain = 1 when every PARTIAL entry of the BLOCK head on q_rank's query tiles keeps all its causal elements.
int tiles_blocks_plain(tiles_blocks *b, const head_pattern *h, int q_rank, int *plain, sr_error *e);

// Longest period for which the fast path defers the columns' sums to the fold (48 P^2 bytes an accounter); tests
// lower it.
extern int64_t tiles_fast_colbuf_max_period;
// How the fast path counts the pairs both D and K keep without periodicity (tiles_fast.c, overlap): 0 the walk
// estimated cheapest, 1 in closed form per run, 2 key by key over the runs, 3 key by key over the tiles D's
// intervals reach. The counts are the same; tests force each.
extern int tiles_fast_overlap_walk;
// Periodic layouts sum the verticals' overlap rows in 32-bit lanes, spilled into 64-bit sums before they could
// overflow; a positive value spills at least every that many verticals (tests force frequent spills).
extern int64_t tiles_fast_overlap_spill_keys;
// How periodic layouts with a column buffer count those pairs: 0 the cheaper way by estimate, 1 by vertical
// (histogram rows), 2 by offset tile. The counts are the same; tests force each.
extern int tiles_fast_overlap_by_tiles;
// The fast path's tables for a layout whose local tiles are aligned global tiles (its period, the rank of
// each residue); *out stays NULL when the layout is not aligned (the generic path applies).
// The most heads whose kept diagonals' sums (tiles_fast_periodic.c, kept_apply) are kept in 32 bits before they are
// added into the 64-bit ones: 0 as many as surely fit, -1 none (64 bits only). For the tests.
extern int64_t tiles_fast_kept32_heads;
typedef struct tiles_fast tiles_fast;
int tiles_fast_open(const layout *l, tiles_fast **out, sr_error *e);
// The same tables without the period (every tile its own residue, as for a contiguous layout), for a striped layout
// whose period is long and stripes are long (tiles_fast_flat_cheaper); *out stays NULL when the layout is not aligned.
int tiles_fast_open_flat(const layout *l, tiles_fast **out, sr_error *e);
// Release them (NULL is fine).
void tiles_fast_close(tiles_fast *f);
// Would a head added alone with its pairs per cell cost less on the tables without the period? The periodic columns
// cost P^2 a fold and about P a vertical for their pairs; without the period they cost about the runs of equal ranks
// over the tiles, so long stripes (few runs, a long period: P = W G / TILE) are cheaper without it. Either way the
// counts are the same.
int tiles_fast_flat_cheaper(const tiles_fast *f);
// Add one head's exact counts to hc[q_rank * W + src] (BLOCK heads through the scan s, as every short last
// query tile).
int tiles_fast_head(tiles_fast *f, tile_scan *s, const head_view *v, work_count *hc, sr_error *e);
// The same, leaving a periodic layout's residue sums (diagonals and columns by residue pair) in f for
// tiles_fast_fold: heads added to one hc this way fold once, not once a head (two passes over P^2 cells).
int tiles_fast_head_pending(tiles_fast *f, tile_scan *s, const head_view *v, work_count *hc, sr_error *e);
// Add the residue sums left by tiles_fast_head_pending into hc and clear them.
void tiles_fast_fold(tiles_fast *f, work_count *hc);
// Kept pairs per cell (1) or, for heads D and K describe whole, in total only (0; tiles_accounter_pairs_per_cell).
void tiles_fast_pairs_per_cell(tiles_fast *f, int per_cell);
// Does the fast path take head h from a lean view (its columns read only from its sorted verticals)? Vertical-slash
// heads whose pairs it counts in total, where no short last tile is scanned.
int tiles_fast_lean(const tiles_fast *f, const head_pattern *h);
// The kept pairs counted in total since the last call.
int64_t tiles_fast_take_pairs(tiles_fast *f);
// The column tiles a lean view's sorted unique keys make below n_tiles tiles, on the code path sr_isa picks: each
// tile's kb, keys, sum of their own-tile rows and runs at its two edges into out[5 t .. 5 t + 4] (room for
// min(n_keys, n_tiles) tiles); returns the tiles, or -1 when memory runs out. For the tests.
int64_t tiles_fast_key_tiles(const int32_t *keys, int64_t n_keys, int64_t n_tiles, int64_t *out);
// Whether a head added since the last call counted kept pairs per cell (tiles_accounter_take_cell_pairs).
int tiles_fast_take_cell_pairs(tiles_fast *f);
// Fast exact counts for layouts whose local tiles are aligned global tiles (*handled = 1); when the layout
// is not aligned it sets *handled = 0 and writes nothing, so the caller falls back to the generic path.
int tiles_account_fast(const pattern *p, int layer, const layout *l, work_count *counts, int *handled, sr_error *e);

#endif

// tile_index.h — the execution form of a pattern for one query rank: what the kernels run.
//
// Plain arrays (no pointers into other structures), so the same struct is copied to the GPU by the
// executor and read by the CPU reference kernels. Built by plan/tiles.c from a pattern and a layout.
//
// Query tiles are TILE consecutive rows of the query rank's *local* order; KV tiles are TILE
// consecutive keys of the source rank's local order. For (head h, query tile i) the entries touching
// source rank s are contiguous: tile entries tile_idx[a..b) with a = tile_cnt[(h*n_qtiles + i)*(W+1) + s],
// b = tile_cnt[... + s + 1] (absolute offsets; cumulative counts per source rank), and likewise bars.
//   tile entry: source-local KV tile j and its kind (FULL: every element kept and causal-visible, run
//               unmasked; PARTIAL: run with the element mask of the head: causal + pattern).
//   bar entry:  a source-local key index whose column is kept for some row of the tile but whose KV
//               tile is not a tile entry of that query tile (a vertical not covered by a kept tile).
//               Bars run with the causal mask only (the column is kept for every row q >= k).
// Each kept (q, k) element is computed by exactly one entry: tiles and bars never overlap.
#ifndef SR_TILE_INDEX_H
#define SR_TILE_INDEX_H

#include <stdint.h>

#define TILE 128

enum { TILE_FULL = 0, TILE_PARTIAL = 1 };

typedef struct {
  int32_t heads;         // query heads indexed (1 when built for a single head)
  int32_t world;         // W: number of source ranks
  int32_t q_rank;        // the query rank this index belongs to
  int32_t n_qtiles;      // ceil(rank_count[q_rank] / TILE)
  int64_t n_tiles;       // total tile entries
  int64_t n_bars;        // total bar entries
  int64_t *tile_cnt;     // [heads * n_qtiles * (W+1)] absolute offsets into tile_idx / tile_kind
  int32_t *tile_idx;     // [n_tiles] source-local KV tile index j
  uint8_t *tile_kind;    // [n_tiles] TILE_FULL or TILE_PARTIAL
  int64_t *bar_cnt;      // [heads * n_qtiles * (W+1)] absolute offsets into bar_idx
  int32_t *bar_idx;      // [n_bars] source-local key index (ascending within a segment)
  // Runs: the forward form only (tiles_runs_build; tiles_build leaves them NULL / 0). A run is up to
  // 64 consecutive source-local keys run_key .. run_key + run_len - 1, computed for the whole query
  // tile under the head's element mask like a PARTIAL tile; a cell's runs are run_key[a..b) with
  // a = run_cnt[(h*n_qtiles + i)*(W+1) + s], as for tiles. Runs, tiles and bars never overlap.
  int64_t n_runs;
  int64_t *run_cnt;      // [heads * n_qtiles * (W+1)] absolute offsets into run_key / run_len, or NULL
  int32_t *run_key;      // [n_runs] first source-local key of the run (ascending within a segment)
  uint8_t *run_len;      // [n_runs] keys in the run, 1..64
} tile_index;

// The transposed form for deterministic backward (dK/dV owned by one KV tile, no atomics): for
// (head h, source rank s, KV tile j) the query tiles that use it, and for each bar key the query tiles
// whose bar list holds it. Built per source rank s against one query rank (a ring step's pair).
typedef struct {
  int32_t heads;
  int32_t n_kvtiles;     // ceil(rank_count[src] / TILE)
  int32_t n_qtiles;
  int64_t *kv_cnt;       // [heads * n_kvtiles + 1] offsets into q_idx / q_kind
  int32_t *q_idx;        // query tile i
  uint8_t *q_kind;       // TILE_FULL / TILE_PARTIAL
  int32_t n_bar_keys;    // distinct bar keys over all heads
  int32_t *bar_key_head; // [n_bar_keys] head of the key
  int32_t *bar_key;      // [n_bar_keys] source-local key index, sorted by (head, key)
  int64_t *bar_q_cnt;    // [n_bar_keys + 1] offsets into bar_q_idx
  int32_t *bar_q_idx;    // query tiles using the bar key
} tile_index_t;

// The bars' compact form (plan/tiles.h, "compact bars"): the columns of every (head, source) of a tile_index,
// from which its bar lists and its transposes' follow with the counts they keep (bar_cnt, bar_q_cnt).
typedef struct {
  int32_t heads, world;
  int64_t n_cols;
  int64_t *col_cnt;  // [heads * world + 1] offsets into col_key: the columns of (head h, source s) at h * world + s
  int32_t *col_key;  // source-local keys, ascending per (head, source): every key some cell has as a bar
} tile_bar_cols;

// The element mask of one head as plain data, for partial tiles (kernels and CPU reference).
// Bit sets are over global positions: vbits bit k set = key k is a vertical; sbits bit d set = slash
// offset d kept. Pointers are host or device memory, matching the function they are passed to.
// A MOBA head's mask is a BLOCK mask of TILE-token blocks (its group rows against its kept blocks); a TOKENS
// head's is its window plus its groups' keys and row masks (kind TOKENS: the CPU reference reads it; the
// GPU kernels do not, so token top-k does not run there).
typedef struct {
  int32_t kind;            // pattern_kind (pattern.h): DENSE, WINDOW, VS, BLOCK, TOKENS
  int64_t n_tokens;
  int64_t sinks, window;   // WINDOW
  const uint32_t *vbits;   // VS: [ceil(n_tokens / 32)]
  const uint32_t *sbits;   // VS: [ceil(n_tokens / 32)]
  int32_t block;           // BLOCK: block size
  int64_t row_words;       // BLOCK: 64-bit words per block row
  const uint64_t *bmask;   // BLOCK: [n_blocks * row_words]
  const int64_t *tok_off;  // TOKENS (window in `window`): [ceil(n_tokens / TILE) + 1] offsets into tok_key
  const int32_t *tok_key;  //   keys of each query group, ascending
  const uint64_t *tok_rows;//   [2 per key] rows of the group keeping the key
} head_mask;

#endif

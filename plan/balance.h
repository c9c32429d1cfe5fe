// balance.h — how evenly a pattern's attention work falls on the ranks and ring steps of a layout, and
// the layout balanced by that work.
//
// Work is what the kernels compute (plan/tiles.h): TILE^2 per tile entry (FULL or PARTIAL) and TILE per
// bar. Two figures (docs/traces.md, "Balance"):
//   worker imbalance  max over ranks / mean of each rank's work summed over layers and heads (the
//                     simulator's worker imbalance, in work instead of seconds);
//   step imbalance    over every layer and flat-ring step t (rank r computes source (r - t) mod W), the sum
//                     of the step's slowest rank's work / the sum of the mean rank's: the ring's attention
//                     compute when every step waits for its slowest rank, over a perfectly balanced one.
//                     It is the work-weighted form of tiles_layer_summary's per-step max / mean, so a
//                     light step weighs little, and it is never below the worker imbalance.
//
// The balanced layout ("balanced", LAYOUT_BALANCED) deals blocks of TILE tokens to ranks by their work,
// heaviest first to the least loaded rank that still has room, the way MagiAttention dispatches chunks by
// mask area (a min-heap over ranks); every rank holds floor or ceil(blocks / W) blocks, so token counts,
// KV shards and memory stay as even as striped's. A block's work is its query rows' causal work against
// every key (the causal structure: a row sees keys at or before it), which on any layout of aligned tiles
// does not depend on where the keys live. A rank's blocks sit in global order, so its local order ascends
// like contiguous, zigzag and striped (the tile forms and the GPU estimator's conversion accept it).
// Which rank a dealt group becomes moves work between ring steps only. The candidates: striped's own blocks,
// the dealing numbered as dealt and numbered like striped (each group takes the rank whose striped blocks it
// shares most), striped's blocks in snake order (every other round of W blocks backwards), striped with turned
// rounds (round k of W blocks turned by k d ranks, d chosen on the pair work; up to BALANCE_TURN_ROUNDS blocks
// a rank: it keeps each slash's pairs of a round on one ring step and changes which ranks come last in a
// round), each of those dealings refined ring step by ring step, with and without a plateau walk
// (balance_steps.c: swaps of two blocks and renumberings of two ranks that lower the sum over layers and steps
// of the slowest rank's work, on the exact tile-pair work, the heaviest rank rising at most to 1% over the
// mean; tiles only, up to 2^23 layers x tiles^2), and zigzag's 2W chunks when N divides into them. The planner
// keeps the lowest sum of the step sum and the slowest rank's work (then the lowest step sum) among those no
// worse than striped on both figures, compared in work rather than in ratios: chunks smaller than a tile put
// far-apart rows in one kernel tile and add work, which a ratio hides. So the balanced layout is
// never worse than striped:128 on either. Deterministic: no draw, fixed orders and budgets.
#ifndef SR_BALANCE_H
#define SR_BALANCE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern.h"

typedef struct {
  double worker;  // max over ranks / mean of per-rank work, all layers and heads (1 = balanced)
  double step;    // sum over layers and ring steps of the slowest rank's work / of the mean rank's (>= worker)
  double work;    // total work, all layers, heads and ranks
} balance_figures;

// Worker and step imbalance of pattern p on layout l (exact tile accounting of every layer).
int balance_of(const pattern *p, const layout *l, balance_figures *out, sr_error *e);

// Work of every TILE-row query block b (global rows [b TILE, (b + 1) TILE)) summed over layers and heads,
// into work[0 .. ceil(N / TILE)): what the block costs on any layout whose local tiles are aligned global tiles.
int balance_block_work(const pattern *p, double *work, sr_error *e);

// Deal n_blocks blocks of the given work over `world` ranks into block_rank: every rank takes floor or
// ceil(n_blocks / world) blocks; heaviest first (ties: lower block) to the least loaded rank with room (ties:
// lower rank), then swaps of two blocks that lower the heaviest rank's load, while one does.
int balance_assign(const double *work, int64_t n_blocks, int world, int32_t *block_rank, sr_error *e);

// The balanced layout of pattern p over `world` ranks: blocks of TILE tokens (of max(1, N / W) when
// N < W x TILE, as striped), dealt by balance_assign on their work (a block smaller than a tile takes its
// rows' share of the tile's work), numbered, refined by steps and guarded against striped as above (or
// zigzag's chunks as blocks).
int balance_layout(const pattern *p, int world, layout *out, sr_error *e);

// Lower bounds on pattern p's worker and step imbalance over every layout of whole TILE blocks with floor or
// ceil(blocks / W) blocks a rank (balance_bound.c: the mean, pigeonhole over the heaviest tiles, and per layer
// the heaviest rank's query and key work); the step bound is the worker bound alone past the pair-work size.
int balance_tile_bound(const pattern *p, int world, balance_figures *out, sr_error *e);

// Build the layout a layout string names (layout_parse_kind: contiguous, zigzag, striped[:G], balanced;
// permutation:PATH reads its file) for pattern p's tokens over `world` ranks; "balanced" is balanced by p.
int balance_layout_named(const pattern *p, const char *text, int world, layout *out, sr_error *e);

// Tokens that change rank between two layouts of the same sequence, per source rank: moved[r] = tokens
// rank r holds in `from` and not in `to` (what a re-shard all-to-all sends).
int balance_moved_tokens(const layout *from, const layout *to, int64_t *moved, sr_error *e);

#endif

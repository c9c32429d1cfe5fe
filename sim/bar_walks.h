// bar_walks.h — the backward bar kernel's compute chunks of a call and their walks' 64-row steps, counted from the
// pattern's columns as the executor forms them (kernels/bar_chunks.c), per (query rank, source) cell, for
// cost_bar_walk's waves (sim/cost.h, cost_bar_waves_chunks). sim/bar_walks.c says how close the count comes and why
// not exact.
#ifndef SR_BAR_WALKS_H
#define SR_BAR_WALKS_H

#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/util.h"

typedef struct {
  const layout *l;
  int W;
  int64_t *tile_off;   // [W + 1] rank q's query tiles at tile_last[tile_off[q] ..]
  int64_t *tile_last;  // the last position of each query tile of each rank
  int64_t *last_q;     // [W] the last position a rank holds
  int64_t *keys;       // [W * W] the current head's bar keys a cell
  int64_t *touched;    // cells whose keys are not 0
  int64_t n_touched;
} bar_walks;

// Every rank's query tiles' last positions and each rank's last position on layout l (also the memory model's,
// sim/attn_memory.c); the per-head scratch comes at the first head counted.
int bar_walks_open(const layout *l, bar_walks *b, sr_error *e);
void bar_walks_close(bar_walks *b);
// Query tiles of rank q whose last position is at or after p: the tiles a bar key at p is listed in (a rank's local
// order ascends with positions wherever the executor runs compact bars, so its tiles' last positions ascend).
int64_t bar_walks_tiles_after(const bar_walks *b, int q, int64_t p);
// Add head hp's compute chunks and their walks' steps into cw[2 * (q * W + s)] and cw[2 * (q * W + s) + 1]; returns 1
// where the head's bar keys are not known from its pattern (kinds other than VERTICAL-SLASH and WINDOW: their bars
// come from blocks or selections) or would take too long to count (its columns x the ranks above 2^18: bar_walks.c),
// 0 where they were added.
int bar_walks_head(bar_walks *b, const head_pattern *hp, int64_t n_tokens, double *cw);

#endif

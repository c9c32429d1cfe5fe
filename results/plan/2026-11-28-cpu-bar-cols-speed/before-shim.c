// the old dist_bar_cols's two calls, serial, under the new name (for the "before" bench binary only)
#include <string.h>
#include "plan/tiles.h"
int tiles_bar_cols_find(const tile_index *t, int threads, tile_bar_cols *out, int *exact, sr_error *e) {
  (void)threads;
  if (tiles_bar_cols_build(t, out, e)) return e->code;
  if (exact) *exact = tiles_bars_compact_exact(t, out);
  return SR_OK;
}

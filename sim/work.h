// work.h — attention work of a layer from the planner's exact tile accounting (tiles.h), summed over
// heads per (query rank, source rank), with a cache so heads with identical patterns (every head of a
// dense or windowed model, repeated layers) are accounted once.
#ifndef SR_WORK_H
#define SR_WORK_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tiles.h"

#define WORK_CACHE 4

typedef struct {
  const layout *l;
  int world;
  work_count *scratch;                 // [W * W] one head's counts
  const head_pattern *key[WORK_CACHE]; // cached heads (compared by content)
  work_count *val[WORK_CACHE];         // their counts [W * W]
  int n_cached, next;
  double wall_s;                       // seconds spent in tiles_account_layer
} work_cache;

// Prepare a cache for a layout (counts are W x W per head).
int work_cache_init(work_cache *c, const layout *l, sr_error *e);
// Release a cache.
void work_cache_free(work_cache *c);
// Counts of one head (layer, head) of pat: out[q_rank * W + src] (points into the cache; valid until the
// next call).
int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e);
// Sum of every head of `layer` into agg[q_rank * W + src] (zeroed first).
int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, sr_error *e);
// Do two heads keep exactly the same (q, k) pairs (same kind, parameters and index arrays)?
int work_heads_equal(const head_pattern *a, const head_pattern *b);
// Add b into a.
void work_add(work_count *a, const work_count *b);

#endif

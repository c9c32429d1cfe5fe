// work.h — attention work of a layer from the planner's exact tile accounting (tiles.h), summed over
// heads per (query rank, source rank), with a cache so heads with identical patterns (every head of a
// dense or windowed model, repeated layers) are accounted once, and an optional store that keeps the
// counts across simulations (the tuner simulates hundreds of plans over a handful of layouts).
#ifndef SR_WORK_H
#define SR_WORK_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tiles.h"

#define WORK_CACHE 4

// Counts that outlive one simulation, keyed by (layout kind, n_tokens, world, granularity; head pattern
// contents as pattern_heads_equal compares them). The heads are copied, so patterns may be freed while
// the store lives. Explicit-permutation and balanced layouts are not stored (their identity is their order).
typedef struct work_store work_store;

typedef struct {
  work_store *store;                   // shared counts (NULL: this cache only); kept by work_cache_init
  const layout *l;
  int world;
  work_count *scratch;                 // [W * W] one head's counts
  const head_pattern *key[WORK_CACHE]; // cached heads (compared by content)
  work_count *val[WORK_CACHE];         // their counts [W * W]
  int n_cached, next;
  double wall_s;                       // seconds spent in tiles_account_layer
} work_cache;

// Open a store holding at most max_bytes of counts and copied heads (once full, further heads are
// accounted per cache as without a store: results do not change, only speed).
int work_store_open(int64_t max_bytes, work_store **out, sr_error *e);
// Release a store (NULL is fine). Counts it returned must no longer be used.
void work_store_close(work_store *s);
// Heads stored, and bytes they hold (counts + copied heads).
int64_t work_store_entries(const work_store *s);
int64_t work_store_bytes(const work_store *s);

// Prepare a cache for a layout (counts are W x W per head); c->store, set before, is kept.
int work_cache_init(work_cache *c, const layout *l, sr_error *e);
// Release a cache.
void work_cache_free(work_cache *c);
// Counts of one head (layer, head) of pat: out[q_rank * W + src] (points into the cache; valid until the
// next call).
int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e);
// Sum of every head of `layer` into agg[q_rank * W + src] (zeroed first).
int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, sr_error *e);
// Add b into a.
void work_add(work_count *a, const work_count *b);

#endif

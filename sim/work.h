// work.h — attention work of a layer from the planner's exact tile accounting (tiles.h), summed over
// heads per (query rank, source rank), with a cache so heads with identical patterns (every head of a
// dense or windowed model, repeated layers) are accounted once, and an optional store that keeps the
// counts across simulations (whatif's strategies and the tuner's points share layouts and patterns).
//
// A layer's distinct heads, or several layers, are accounted in parallel (plan/parallel.h), one accounter a thread;
// counts are integers (pairs too: integer-valued doubles far below 2^53), so their sums do not depend on the
// order and the result is the same for any thread count.
#ifndef SR_WORK_H
#define SR_WORK_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/tiles.h"

#define WORK_CACHE 4

// Counts that outlive one simulation, keyed by (layout kind, n_tokens, world, granularity) and by head
// contents (pattern_heads_equal): a layer's sum under the layer's heads, a head's counts under the head.
// Each distinct head is copied once (interned), whatever the layouts it is accounted on, so patterns may
// be freed while the store lives. Explicit-permutation and balanced layouts are not stored (their
// identity is their token order). Simulations on several threads may share one store (its lookups and
// insertions lock).
typedef struct work_store work_store;

typedef struct {
  work_store *store;                   // shared counts (NULL: this cache only); kept by work_cache_init
  const layout *l;
  int world;
  int threads;                         // accounters in use (sr_threads when work is large enough)
  tiles_accounter **acct;              // [threads] opened on first use
  work_count **part;                   // [threads] partial layer sums [W * W]
  work_count **scratch;                // [threads] one head's counts [W * W]
  const head_pattern *key[WORK_CACHE]; // work_head's cached heads (compared by content)
  work_count *val[WORK_CACHE];         // their counts [W * W]
  int n_cached, next;
  double wall_s;                       // seconds spent accounting (wall clock)
} work_cache;

// Open a store holding at most max_bytes of counts and copied heads (once full, further heads are
// accounted per cache as without a store: results do not change, only speed).
int work_store_open(int64_t max_bytes, work_store **out, sr_error *e);
// Release a store (NULL is fine). Counts it returned must no longer be used.
void work_store_close(work_store *s);
// Entries stored (layer sums and head counts), and bytes they hold (counts + copied heads).
int64_t work_store_entries(const work_store *s);
int64_t work_store_bytes(const work_store *s);
// Distinct heads copied into the store.
int64_t work_store_heads(const work_store *s);

// Prepare a cache for a layout (counts are W x W per head); c->store, set before, is kept.
int work_cache_init(work_cache *c, const layout *l, sr_error *e);
// Release a cache.
void work_cache_free(work_cache *c);
// Counts of one head (layer, head) of pat: out[q_rank * W + src] (points into the cache or the store;
// valid until the next call).
int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e);
// Sum of every head of `layer` into agg[q_rank * W + src] (zeroed first), and the layer's kept pairs into *pairs:
// agg's cells hold none (pairs per cell cost most of the accounting on aligned layouts, and the simulator needs only
// their sum: the step's density and MFU).
int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, double *pairs, sr_error *e);
// work_layer's sums of layers[0 .. count) into agg[i] and pairs[i], the layers over threads (a thread a layer, its
// heads in order: one fold of the residue sums a layer, where work_layer's threads fold one each).
int work_layers(work_cache *c, const pattern *pat, const int *layers, int count, work_count *const *agg, double *pairs,
                sr_error *e);
// work_layer's sums of one layer on thread t's accounter alone (0 <= t < c->threads: a caller's parallel loop over
// layers, each item on its thread), as work_layers gives each of its layers; c->wall_s is left to the caller.
int work_layer_on(work_cache *c, int t, const pattern *pat, int layer, work_count *agg, double *pairs, sr_error *e);
// A layer whose heads come one at a time (drawn as they are accounted, plan/pattern_spec.h's pattern_drawer), on
// thread t's accounter (0 <= t < c->threads: a caller's parallel loop over layers, each item on its thread): begin
// (agg zeroed), each head added, end (its sums by residue folded into agg, the kept pairs into *pairs, which the
// heads' sum started: set it to 0 before the first head). The layer's counts are work_layer's; no store is used.
int work_layer_begin(work_cache *c, int t, work_count *agg, sr_error *e);
int work_layer_head(work_cache *c, int t, const head_pattern *h, work_count *agg, double *pairs, sr_error *e);
void work_layer_end(work_cache *c, int t, work_count *agg, double *pairs);
// Add b into a.
void work_add(work_count *a, const work_count *b);

#endif

// parallel.h — a parallel loop over independent items on POSIX threads, for the planner's and the
// simulator's CPU work (synthetic patterns, tile accounting, the tuner's points).
//
// Results never depend on the thread count: items are independent, each writes only its own output,
// and when items fail the error of the lowest-numbered failing item is the one returned (the error a
// serial loop that went on after failures would report first). Threads take items in order from a
// shared counter, so uneven items balance. A loop started from inside another one's item runs serially
// on that item's thread.
#ifndef SR_PARALLEL_H
#define SR_PARALLEL_H

#include "plan/error.h"

// Work on item `item` (0 <= item < n) as thread `thread` (0 <= thread < threads): its scratch may be
// indexed by thread. Returns SR_OK or an error code with e filled.
typedef int (*sr_item_fn)(void *ctx, int item, int thread, sr_error *e);

// Threads to use: $SR_THREADS when set (1 .. 256), else the online CPUs (at most 64).
int sr_threads(void);
// Run fn on items 0..n-1 over at most `threads` threads (<= 1, or inside another loop: in the caller, in
// order). Returns SR_OK, or the error of the lowest-numbered failing item (items after a failure may not
// run).
int sr_parallel_for(int n, int threads, sr_item_fn fn, void *ctx, sr_error *e);

// Items run in order on a thread of their own as the caller hands them over, while the caller goes on making the next
// ones' inputs (the simulator's forwards beside the accounting of later layers): fn(ctx, item, 0, e) for items 0, 1,
// ... once each is handed over, stopping at the first failure. (Nested: see sr_parallel_for; the items' thread is no
// loop's.)
typedef struct sr_ordered sr_ordered;
// Start one for n items; NULL when no thread can be started (the caller then runs the items itself).
sr_ordered *sr_ordered_start(int n, sr_item_fn fn, void *ctx);
// Hand items [0, ready) over.
void sr_ordered_hand(sr_ordered *o, int ready);
// No more items: wait for those handed over (or the first failure), release o. *done: the items done before any
// failure. Returns SR_OK, or the failing item's code with e filled.
int sr_ordered_finish(sr_ordered *o, int *done, sr_error *e);

// Items through two stages (the simulator's layers: each accounted on any thread, then added to the step in layer
// order): work(ctx, item, thread, e) on up to `threads` threads, items taken in order, at most `window` of them past
// the last committed one (their inputs and outputs may live in slot item % window); then commit(ctx, item, e), one
// item at a time, in item order, on whichever thread finished the items before it, each once its work is done.
// Returns SR_OK, or the error of the lowest-numbered item whose work or commit failed (no item is committed after
// it; later items may not run). With one thread (or nested: see sr_parallel_for) work and commit alternate, in order.
typedef int (*sr_commit_fn)(void *ctx, int item, sr_error *e);
int sr_pipeline(int n, int threads, int window, sr_item_fn work, sr_commit_fn commit, void *ctx, sr_error *e);

#endif

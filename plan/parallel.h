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

#endif

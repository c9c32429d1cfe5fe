// timeline.h — per (layer, rank, step, phase, stream) timings of a real run, recorded as the simulator's
// events (plan/timeline.h: the same streams, phases and writer, so both timelines line up).
//
// Each rank records its own events (host clock on CPU, CUDA events on GPU, converted to host time
// when the layer is done); timeline_write gathers them to rank 0, which writes both files atomically.
#ifndef SR_EXEC_TIMELINE_H
#define SR_EXEC_TIMELINE_H

#include <stdint.h>

#include "exec/comm.h"
#include "plan/error.h"
#include "plan/timeline.h"

typedef struct {
  int32_t run;        // run number of the events recorded now (the CSV's first column)
  double origin_s;    // host time (sr_now) of the origin
  int64_t n, cap;
  timeline_event *ev; // stream: STREAM_COMPUTE, STREAM_INTRA or STREAM_INTER; phase: PHASE_ATTN,
                      // PHASE_ATTN_BWD, PHASE_KV_SEND, PHASE_DKV_SEND or PHASE_A2A
} timeline;

// Start an empty timeline whose time origin is now (call right after a barrier so ranks agree).
void timeline_init(timeline *t, int run);
// Record one event (times in host seconds, sr_now); returns 0 or -1 when memory runs out.
int timeline_add(timeline *t, int layer, int rank, int step, timeline_phase phase, timeline_stream stream,
                 double start_s, double end_s);
// Release a timeline's events.
void timeline_free(timeline *t);
// Gather every rank's events to rank 0 and write csv_path and/or json_path there (NULL skips one).
int timeline_write(timeline *t, comm *c, const char *csv_path, const char *json_path, sr_error *e);

#endif

// timeline.h — per (layer, rank, step, phase, stream) timings of a real run, written in the same
// formats as the simulator: a CSV (run,layer,rank,step,phase,stream,start_us,dur_us) and a Chrome
// trace-event JSON (pid = rank, tid = stream, ts/dur in microseconds) that opens in Perfetto.
//
// Each rank records its own events (host clock on CPU, CUDA events on GPU, converted to host time
// when the layer is done); timeline_write gathers them to rank 0, which writes both files atomically.
#ifndef SR_EXEC_TIMELINE_H
#define SR_EXEC_TIMELINE_H

#include <stdint.h>

#include "exec/comm.h"
#include "plan/error.h"

// Stream ids (tid in the Chrome trace; the CSV writes the name), numbered as the simulator's streams
// (compute, intra, inter) so both timelines line up.
enum { TL_COMPUTE = 0, TL_INTRA = 1, TL_INTER = 2 };

typedef struct {
  int32_t run, layer, rank, step;
  int32_t stream;     // TL_COMPUTE, TL_INTRA or TL_INTER
  char phase[24];     // the simulator's names: "attn", "attn_bwd", "kv_send", "dkv_send", "a2a"
  double start_us;    // since the run's origin (the barrier before the first layer)
  double dur_us;
} tl_event;

typedef struct {
  int32_t run;        // run number written in the first column
  double origin_s;    // host time (sr_now) of the origin
  int64_t n, cap;
  tl_event *ev;
} timeline;

// Start an empty timeline whose time origin is now (call right after a barrier so ranks agree).
void timeline_init(timeline *t, int run);
// Record one event (times in host seconds, sr_now); returns 0 or -1 when memory runs out.
int timeline_add(timeline *t, int layer, int rank, int step, const char *phase, int stream, double start_s,
                 double end_s);
// Release a timeline's events.
void timeline_free(timeline *t);
// Name of a stream id ("compute", "intra", "inter").
const char *timeline_stream_name(int stream);
// Gather every rank's events to rank 0 and write csv_path and/or json_path there (NULL skips one).
int timeline_write(timeline *t, comm *c, const char *csv_path, const char *json_path, sr_error *e);

#endif

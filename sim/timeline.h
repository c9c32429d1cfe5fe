// timeline.h — writing a simulated step's tasks as a Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing: pid = rank, tid = stream, ts/dur in microseconds) and as a CSV with columns
// run,layer,rank,step,phase,stream,start_us,dur_us. The executor writes the same two formats.
#ifndef SR_TIMELINE_H
#define SR_TIMELINE_H

#include "plan/error.h"
#include "sim/sim.h"

// Write the trace-event JSON of timeline t to path (atomically). run names the run in the metadata.
int timeline_write_json(const sim_timeline *t, const char *run, int world, const char *path, sr_error *e);
// Write the CSV of timeline t to path (atomically).
int timeline_write_csv(const sim_timeline *t, const char *run, const char *path, sr_error *e);

#endif

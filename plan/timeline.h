// timeline.h — the tasks of a training step (or of one attention layer) per rank, stream and phase, as
// the simulator predicts them (sim/) and the executor measures them (exec/), with the stream and phase
// names and the one writer of both file formats, so predicted and measured timelines line up:
//   CSV   columns run,layer,rank,step,phase,stream,start_us,dur_us (microseconds, 3 decimals);
//   JSON  Chrome trace events that open in Perfetto and chrome://tracing: a complete event (ph "X") a
//         task with pid = rank, tid = stream id, name = phase, cat = stream name, ts/dur in
//         microseconds, args run/layer/step; metadata events name each process "rank R" and each
//         thread by its stream (Google, "Trace Event Format", 2016).
#ifndef SR_TIMELINE_H
#define SR_TIMELINE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/util.h"

// Streams of a rank (the trace's tid). STREAM_COPY carries host->device copies and STREAM_COPY_OUT
// device->host copies (GPUs have a copy engine per direction and PCIe is full duplex); STREAM_COLL
// carries collectives (gradient reduction, the estimation's broadcasts), as DDP/NCCL do on a stream of
// their own. The executor records compute, intra and inter.
typedef enum { STREAM_COMPUTE, STREAM_INTRA, STREAM_INTER, STREAM_COPY, STREAM_COLL, STREAM_COPY_OUT, STREAM_COUNT } timeline_stream;

// What a task does (the "phase" column). The executor records attn, attn_bwd, kv_send, dkv_send, a2a.
typedef enum {
  PHASE_QKV,          // QKV projection (+ norm, RoPE)
  PHASE_ESTIMATE,     // online pattern estimation: scores of the last 64 queries, top-p
  PHASE_INDEX,        // building the tile index from the selected verticals and slashes
  PHASE_ATTN,         // attention forward (a ring step)
  PHASE_KV_SEND,      // KV shard transfer
  PHASE_POST,         // output projection, MLP, residuals
  PHASE_LOSS,         // LM head and cross-entropy (forward + backward)
  PHASE_POST_BWD,     // backward of output projection and MLP
  PHASE_ATTN_BWD,     // attention backward (a ring step)
  PHASE_DKV_SEND,     // dK/dV transfer
  PHASE_QKV_BWD,      // backward of the QKV projection
  PHASE_RECOMPUTE,    // recomputed forward GEMMs and elementwise ops of a layer
  PHASE_A2A,          // Ulysses all-to-all
  PHASE_COLLECTIVE,   // broadcasts / all-reduces of the estimation
  PHASE_GRAD_REDUCE,  // gradient all-reduce / reduce-scatter
  PHASE_OPTIMIZER,    // AdamW update (+ parameter all-gather under ZeRO-1)
  PHASE_H2D,          // host -> device copy (FPDT prefetch)
  PHASE_D2H,          // device -> host copy (FPDT offload)
  PHASE_COUNT
} timeline_phase;

// Name of a stream ("compute", "intra", "inter", "copy", "coll", "copy_out"; "?" outside the enum).
const char *timeline_stream_name(int stream);
// Name of a phase ("qkv", "attn", "kv_send", ...; "?" outside the enum).
const char *timeline_phase_name(int phase);

// The CSV's columns, in order.
enum { TIMELINE_COLUMNS = 8 };
extern const char *const timeline_columns[TIMELINE_COLUMNS];

// One task (seconds since the timeline's origin; written as microseconds).
typedef struct {
  double start, dur;
  int32_t rank, layer, step;
  int32_t run;            // the run it belongs to where one file holds several (the executor's), else 0
  uint8_t stream, phase;  // timeline_stream, timeline_phase
} timeline_event;

// Append ev[0..n) as the CSV text (header first) to b; run as for timeline_write_csv. Returns 0, or -1
// when memory runs out.
int timeline_csv_text(const timeline_event *ev, int64_t n, const char *run, sr_buf *b);
// Write ev[0..n) as the CSV to path (atomically). run: the run column of every event, or NULL for each
// event's run number.
int timeline_write_csv(const timeline_event *ev, int64_t n, const char *run, const char *path, sr_error *e);
// Write ev[0..n) as the trace-event JSON to path (atomically), naming ranks 0..world-1 and their streams;
// run as for the CSV (each event's args), source names the program in the file's otherData.
int timeline_write_json(const timeline_event *ev, int64_t n, const char *run, int world, const char *source,
                        const char *path, sr_error *e);

#endif

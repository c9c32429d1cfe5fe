// ring.h — the task graph of one ring attention pass (forward or backward) over a plan's routes
// (plan/ring_plan.h): the transfers the executor posts, costed one by one.
//
// Forward, per ring step s and rank r: C(r,s) computes r's queries against the KV shard kv_src(r,s)
// (none when the routes skip it); it waits for that shard's delivery. A KV transfer posted at step p
// (post_at) starts when both ends have begun step p (sender and receiver finished computing step p-1:
// a rendezvous, and the receiver's buffer is free again) and when the sender holds the shard it
// forwards. An ordinary transfer (p = s-1) overlaps one step; an early one (the owner's own shard,
// posted steps ahead) overlaps every step between p and the step that computes on it. So a slow rank
// delays its successors as in a real ring. Backward adds dK/dV: after computing step s, r adds its
// contribution to the shard's accumulator (once the accumulator it adds to has arrived) and passes it
// on (ACC) or sends it to the shard's owner (FLUSH); the owner ends the pass when its last compute is
// done and every flush of its shard has arrived.
#ifndef SR_RING_H
#define SR_RING_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/ring_plan.h"
#include "sim/engine.h"
#include "sim/sim.h"

typedef struct {
  int world;
  const cluster_desc *c;
  int nic_shared;               // NICs are fewer than GPUs per node: inter-node sends contend (resource = node)
  double comm_slowdown;         // gpu.comm_slowdown
  int layer;
  sim_transfers *log;           // when set, every transfer costed is appended (sim_options.transfers)
  int32_t *deliv;               // scratch [world * world]: task that delivered shard s's KV to rank r
  int32_t *deliv_d;             // scratch [world * world]: task that delivered shard s's dK/dV partial to r
  int32_t *prev;                // scratch [2 * world]
  int64_t *link_bytes;          // scratch [world * 2 levels * link classes]: bytes a rank sends in a step
  struct ring_compiled *compiled; // the routes last run on a lean engine, compiled (ring_fast.c)
  const float *step_s;          // when set, a pass on a lean engine (no log) reads its step seconds from here, in
                                // single precision as a layer's work holds them, in place of `compute` (not read)
} ring_ctx;

// Allocate the context's scratch for `world` ranks; free with ring_ctx_free.
int ring_ctx_init(ring_ctx *x, int world, const cluster_desc *c, sr_error *e);
// Release the scratch.
void ring_ctx_free(ring_ctx *x);
// Drop what the context keeps of the routes it ran last (their compiled form, keyed by the routes' arrays): call it
// before freeing routes the context ran, while the context lives on.
void ring_ctx_forget(ring_ctx *x);
// Seconds of a transfer of `bytes` over a link class (Hockney, cost.h).
double ring_link_time(const cluster_desc *c, link_class link, double bytes);
// Add a forward pass over routes rt: compute[step * world + rank] seconds of attention per step (before
// slowdown). start[r] (or NULL) must end before rank r's first compute and sends; done[r] gets r's last task.
int ring_forward(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int phase_compute,
                 int phase_send, const int32_t *start, int32_t *done, sr_error *e);
// Add a backward pass (KV as in the forward, dK/dV as rt's ACC and FLUSH transfers; a rank is done when
// its last compute ended and every flush of its own shard arrived).
int ring_backward(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int phase_compute,
                  int phase_send, int phase_dkv, const int32_t *start, int32_t *done, sr_error *e);

// ---- internal to sim/ring.c and sim/ring_fast.c ----
typedef struct ring_compiled ring_compiled;
// Seconds of the transfers each rank posts at `step` (backward: with the dK/dV ones) into comm[rank].
void ring_step_comm(ring_ctx *x, const ring_routes *rt, int step, int bwd, double *comm);
// The stream a transfer over `link` runs on.
timeline_stream ring_stream_of(link_class link);
// A pass (bwd: backward) on a lean engine, the same tasks and times as ring_forward / ring_backward's.
int ring_fast_pass(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int bwd, const int32_t *start,
                   int32_t *done, sr_error *e);

#endif

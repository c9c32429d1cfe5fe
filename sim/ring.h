// ring.h — the task graph of one ring attention pass (forward or backward) over a schedule.
//
// Forward, per ring step s and rank r: C(r,s) computes r's queries against the KV shard kv_src(r,s);
// it waits for that shard's delivery. X(r,s), r's send of the step, starts when both ends have begun
// step s (sender and receiver finished computing step s-1: a rendezvous, and the receiver's second
// buffer is free again) and when r holds the shard it forwards. So a slow rank delays its successors
// as in a real ring. Backward adds dK/dV: after computing step s, r adds its contribution to the
// shard's dK/dV (once the accumulated dK/dV from the previous holder arrived) and sends it on; the
// shard's owner ends the pass when its own dK/dV has come home.
#ifndef SR_RING_H
#define SR_RING_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/schedule.h"
#include "sim/engine.h"

typedef struct {
  const schedule *s;
  const cluster_desc *c;
  int nic_shared;               // NICs are fewer than GPUs per node: inter-node sends contend (resource = node)
  double comm_slowdown;         // gpu.comm_slowdown
  int layer;
  int32_t *deliv;               // scratch [world * world]: task that delivered shard s's KV to rank r
  int32_t *deliv_d;             // scratch [world * world]: task that delivered shard s's dK/dV partial to r
  int32_t *prev;                // scratch [2 * world]
} ring_ctx;

// Allocate the context's scratch for a schedule; free with ring_ctx_free.
int ring_ctx_init(ring_ctx *x, const schedule *s, const cluster_desc *c, sr_error *e);
// Release the scratch.
void ring_ctx_free(ring_ctx *x);
// Seconds of a transfer of `bytes` over a link class (Hockney, cost.h).
double ring_link_time(const cluster_desc *c, link_class link, double bytes);
// Add a forward pass: compute[step * world + rank] seconds of attention per step (before slowdown).
// start[r] (or NULL) must end before rank r's first compute and sends; done[r] gets r's last task.
int ring_forward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                 const int32_t *start, int32_t *done, sr_error *e);
// Add a backward pass (KV and dK/dV travel as the schedule's backward transfers say; a rank is done
// when its last compute ended and its own dK/dV came home).
int ring_backward(sim_engine *g, ring_ctx *x, const double *compute, int phase_compute, int phase_send,
                  int phase_dkv, const int32_t *start, int32_t *done, sr_error *e);

#endif

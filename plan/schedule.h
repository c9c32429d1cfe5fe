// schedule.h — who sends which KV shard to whom at each ring step, over which link, as data.
//
// Ring steps are numbered 0..n_steps-1. At step s rank r attends its queries to the KV shard owned
// by `kv_src` (for s = 0, its own). Transfers listed at step s run during step s and deliver the shard
// needed at a later step (the next for the flat ring; for the double ring's outer transfer, the start
// of the next inner ring). Backward repeats the schedule with dK/dV travelling with their KV.
#ifndef SR_SCHEDULE_H
#define SR_SCHEDULE_H

#include <stdint.h>

#include "plan/cluster.h"
#include "plan/error.h"
#include "plan/layout.h"
#include "plan/model.h"

typedef enum {
  SCHED_RING,         // flat ring over all ranks
  SCHED_DOUBLE_RING,  // inner ring inside a node (or a group of `inner` GPUs), outer ring across
  SCHED_ULYSSES,      // all-to-all over heads: every rank gets all tokens of H/W heads
  SCHED_USP,          // Ulysses (degree U, inside a node) x ring (degree R = W/U)
} schedule_kind;

typedef enum { LINK_NONE, LINK_INTRA, LINK_INTER, LINK_HOST } link_class;

typedef struct {
  int32_t peer;        // rank sent to / received from (-1: none)
  int32_t shard;       // owner rank of the KV shard carried
  int64_t bytes;       // bytes carried (forward: K+V; backward adds dK+dV)
  link_class link;
  int32_t level;       // 0 = inner/flat ring, 1 = outer ring, 2 = all-to-all
} transfer;

typedef struct {
  int32_t kv_src;      // owner of the KV shard computed against at this step (-1: idle)
  transfer send, recv;          // forward
  transfer send_bwd, recv_bwd;  // backward (KV + dK/dV)
} ring_step;

typedef struct {
  schedule_kind kind;
  int world, nodes, gpus_per_node;
  int inner;                   // inner ring size (double ring), group of GPUs sharing a node
  int ulysses, ring;           // degrees: ulysses * ring == world (ring == world for ring kinds)
  int kv_heads_replicated;     // Ulysses degree > KV heads: KV heads are replicated (stated in `show`)
  int n_steps;
  ring_step *steps;            // [n_steps * world], index step * world + rank
  // Ulysses all-to-all volumes per rank per layer (bytes sent = received), forward; backward doubles.
  int64_t a2a_bytes_qkv, a2a_bytes_out;
  int kv_bytes_per_elem;       // 2 (bf16) unless the plan says otherwise
  int grad_bytes_per_elem;     // dK/dV bytes per element on the wire (4: fp32 accumulators)
} schedule;

// Build a schedule for a layout on a cluster. inner: double-ring inner size (0 = gpus_per_node);
// ulysses: USP/Ulysses degree (0 = choose: gpus_per_node for USP, world for Ulysses).
int schedule_build(schedule_kind kind, const cluster_desc *c, const model_config *m, const layout *l, int inner,
                   int ulysses, int kv_bytes_per_elem, schedule *out, sr_error *e);
// Release a schedule's arrays.
void schedule_free(schedule *s);
// Step entry of rank r at step s.
static inline const ring_step *schedule_at(const schedule *s, int step, int rank) {
  return &s->steps[(int64_t)step * s->world + rank];
}
// Parse "ring", "double-ring", "ulysses", "usp".
int schedule_parse_kind(const char *text, schedule_kind *kind, sr_error *e);
// Name of a kind.
const char *schedule_kind_name(schedule_kind kind);

#endif

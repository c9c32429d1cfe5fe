// schedule.h — who sends which KV shard to whom at each ring step, over which link, as data.
//
// Step semantics (every kind; the tests in tests/test_schedule.c check each statement):
//  - Ranks are numbered node-major (rank r is on node r / gpus_per_node). A "shard" is named by the
//    rank that owns it at the start: for ring kinds rank o's shard is the KV of o's layout tokens; for
//    ulysses/usp it is the KV of o's Ulysses group's tokens restricted to o's slice of KV heads.
//  - Steps run 0..n_steps-1. At step s rank r computes its queries against shard kv_src (at s = 0
//    its own). Over all steps a rank meets every shard of its ring exactly once.
//  - A forward transfer listed at step s (send/recv, level 0) is issued at the start of step s,
//    overlaps step s's compute, and delivers the shard the receiver computes at step s+1.
//  - Double ring: steps s = o*inner + j (outer round o, inner step j). The outer transfer
//    (send_outer/recv_outer, level 1) is listed at j = 0: it carries the round's base shard to the
//    same local rank of the next group and overlaps the whole inner ring; the receiver computes it at
//    step (o+1)*inner. Its link is INTER when the groups are on different nodes.
//  - Backward runs the same steps in the same order. A backward transfer at step s carries the KV of
//    the shard the receiver computes next (`shard`, as forward) and/or the dK+dV partial sums of
//    shard `grad_shard`, which includes step s's contribution: that part (grad_bytes) leaves once step
//    s's compute is done and overlaps step s+1, while the KV part (bytes - grad_bytes) can leave at the
//    start of step s, as in forward. The last hop of each gradient (grad only, shard = -1) ends at the
//    shard's owner, so after the last step every owner holds the full dK/dV of its shard. Double
//    ring: the inner ring's last hop of round o (at j = inner-1) brings the group's partial of the
//    base shard home; the outer backward transfer at that same step then carries it on to the next
//    group (after the inner hop arrives), and at j = 0 the outer transfer carries the next base KV.
//  - Ulysses: one step; the all-to-all before it (q, k, v: scatter heads, gather sequence) and after
//    it (o: the reverse) moves a2a_bytes_* per rank; kv_src = the rank itself (it holds every token of
//    its heads after the all-to-all). USP: a flat ring of degree R = world/ulysses over ranks with the
//    same Ulysses index (stride `ulysses`), run after the intra-group all-to-all.
//  - Bytes are per layer. KV: 2 (K and V) * tokens * kv heads carried * head_dim * kv_bytes_per_elem.
//    dK+dV: the same count at grad_bytes_per_elem = 4: the partial sums are added on W ranks in turn,
//    and rounding the running sum to bf16 at every hop would compound like a bf16 running output does
//    (docs/design.md, "The LSE merge"), so they travel in fp32.
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
  int32_t shard;       // owner rank of the KV shard carried (-1: no KV, e.g. a gradient-only hop)
  int64_t bytes;       // bytes carried (forward: K+V; backward adds dK+dV)
  link_class link;
  int32_t level;       // 0 = inner/flat ring, 1 = outer ring, 2 = all-to-all
  int32_t grad_shard;  // owner of the dK/dV partial sums carried (backward; -1: none)
  int64_t grad_bytes;  // the part of `bytes` that is dK+dV
} transfer;

typedef struct {
  int32_t kv_src;      // owner of the KV shard computed against at this step (-1: idle)
  transfer send, recv;          // forward
  transfer send_bwd, recv_bwd;  // backward (KV + dK/dV)
  transfer send_outer, recv_outer;          // double ring's outer ring, forward (level 1)
  transfer send_outer_bwd, recv_outer_bwd;  // double ring's outer ring, backward (level 1)
} ring_step;

typedef struct {
  schedule_kind kind;
  int world, nodes, gpus_per_node;
  int inner;                   // inner ring size (double ring; world for the flat ring; ulysses for ulysses/usp)
  int outer;                   // double ring: number of inner rings (world / inner); 1 otherwise
  int ulysses, ring;           // degrees: ulysses * ring == world (ring == world for ring kinds)
  int heads_per_rank;          // query heads each rank computes (num_heads / ulysses)
  int kv_heads_per_rank;       // KV heads each rank holds (replicated ones counted once per rank)
  link_class a2a_link;         // link of the Ulysses all-to-all (INTRA when every group is inside a node)
  int kv_heads_replicated;     // Ulysses degree > KV heads: KV heads are replicated (stated in `show`)
  int n_steps;
  ring_step *steps;            // [n_steps * world], index step * world + rank
  // Ulysses all-to-all volumes per rank per layer (bytes sent = received), forward; backward doubles.
  int64_t a2a_bytes_qkv, a2a_bytes_out;
  int kv_bytes_per_elem;       // 2 (bf16) unless the plan says otherwise
  int grad_bytes_per_elem;     // dK/dV bytes per element on the wire (4: fp32 accumulators)
} schedule;

// dK/dV travel as fp32 partial sums (see the top of this file).
#define SCHEDULE_GRAD_BYTES_PER_ELEM 4

// Build a schedule for a layout on a cluster. inner: double-ring inner size (0 = gpus_per_node);
// ulysses: USP/Ulysses degree (0 = choose: gpus_per_node for USP, world for Ulysses). Input errors name
// the field: inner not dividing a node, a Ulysses degree not dividing the GPUs or the heads, a layout
// over another number of ranks than the cluster has.
int schedule_build(schedule_kind kind, const cluster_desc *c, const model_config *m, const layout *l, int inner,
                   int ulysses, int kv_bytes_per_elem, schedule *out, sr_error *e);
// Release a schedule's arrays.
void schedule_free(schedule *s);
// Step entry of rank r at step s.
static inline const ring_step *schedule_at(const schedule *s, int step, int rank) {
  return &s->steps[(int64_t)step * s->world + rank];
}
// Bytes of K+V (or dK+dV) for `tokens` tokens and `kv_heads` heads at `bytes_per_elem`: 2*tokens*kv_heads*head_dim*b.
int64_t schedule_kv_bytes(const model_config *m, int64_t tokens, int kv_heads, int bytes_per_elem);
// Tokens of rank r's KV shard: its layout tokens (ring kinds) or its Ulysses group's (ulysses, usp).
int64_t schedule_shard_tokens(const schedule *s, const layout *l, int rank);
// The Ulysses degree U the executor runs a plan's attention at: every rank for ulysses and for FPDT (fpdt: the
// plan has an FPDT chunk; Ulysses inside each chunk), schedule.ulysses for usp, 1 for the ring kinds.
int schedule_exec_ulysses(const schedule *s, int fpdt);
// Member j of a Ulysses group of U computes query heads [h_lo[j], h_lo[j+1]) with KV heads [kv_lo[j], kv_hi[j])
// (h_lo [U + 1], kv_lo and kv_hi [U]): whole KV groups a member where U <= Hkv (so the kernels' GQA rule h / (nh /
// nkv) holds), else each KV head replicated on the members that split its query heads.
void schedule_head_split(int H, int Hkv, int U, int *h_lo, int *kv_lo, int *kv_hi);
// Name of a link class ("none", "intra", "inter", "host").
const char *link_class_name(link_class c);
// Parse "ring", "double-ring", "ulysses", "usp".
int schedule_parse_kind(const char *text, schedule_kind *kind, sr_error *e);
// Name of a kind.
const char *schedule_kind_name(schedule_kind kind);

#endif

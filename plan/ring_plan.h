// ring_plan.h — who sends which KV shard (and which dK/dV accumulators) to whom, step by step, for
// one ring of R members: the schedule's compute order turned into concrete transfers, with the
// plan's skipping of shards that carry no work for the receiver.
//
// Pure data, no MPI: every rank builds the same ring_plan from the plan and the pattern's tile
// counts, so a sender knows what its receivers need without asking them.
//
// Rules. At step s member g computes against shard src[s*R+g] (step 0: its own). Before step s+1 it
// fetches that step's shard from the nearest member that holds it at step s (its current buffer, or
// the owner's own memory), preferring the same node, then the shortest backward ring distance, so a
// flat ring is the classic neighbour-to-neighbour ring. Backward: dK/dV accumulators travel with
// their shard to one receiver; an accumulator whose chain ends (the shard is not passed on, or the
// ring is over) is flushed to the shard's owner, which sums what arrives. Each contribution thus
// reaches the owner exactly once, whatever the skipping.
//
// Early inter-node transfers (the double ring's outer ring). A reception whose nearest holder sits on
// another node (node_of given) is instead sent by the shard's owner from its own, unchanging memory,
// and posted as early as the receiver has room: each member has two outer buffers, so the k-th such
// reception is posted once the (k-1)-th has arrived (its step) and the buffer of the (k-2)-th is no
// longer the member's current shard. In the double ring this posts the next round's shard at the
// start of the round, so the transfer runs under the whole inner ring, not under one inner step.
// Receptions that gain nothing (post step = the step before) keep the ordinary sender.
#ifndef SR_RING_PLAN_H
#define SR_RING_PLAN_H

#include <stdint.h>

#include "plan/error.h"

typedef struct {
  int R, n_steps;
  int32_t *src;        // [n_steps*R] shard computed by member g at step s (-1: nothing, skipped or idle)
  int32_t *from;       // [n_steps*R] member that sends g its step-s shard (-1: none needed)
  uint8_t *from_own;   // [n_steps*R] that sender sends its own original shard (not its step s-1 buffer)
  int32_t *acc_from;   // [n_steps*R] member whose accumulators g receives for step s (-1: start at zero)
  uint8_t *flush;      // [n_steps*R] after step s, g's accumulators go to the shard's owner
  int32_t *post_at;    // [n_steps*R] step at which g's reception for step s is posted (s-1, or earlier when early; -1: none)
  uint8_t *early;      // [n_steps*R] 0: ordinary reception; 1 + b: early, into g's outer buffer b (0 or 1), from the owner
  int64_t n_early;     // early receptions in the plan
  int64_t transfers;          // shard transfers performed
  int64_t transfers_noskip;   // shard transfers of the same order without skipping
  int64_t *recv_count;        // [R] shard transfers each member receives (forward)
  int64_t *recv_count_noskip; // [R] the same without skipping
} ring_plan;

// Build the transfers for compute order src [n_steps*R] (src[g] == g at step 0; -1 entries idle).
// needs [R*R] (needs[g*R + s]: member g has work against shard s) enables skipping (NULL: none);
// node_of [R] (NULL: one node) steers the choice of sender.
int ring_plan_build(int R, int n_steps, const int32_t *src, const uint8_t *needs, const int *node_of, ring_plan *out,
                    sr_error *e);
// Release a ring_plan.
void ring_plan_free(ring_plan *rp);
// Flat ring order: src[s*R + g] = (g - s) mod R for s in 0..R-1.
int ring_order_flat(int R, int32_t **src, sr_error *e);

#endif

// ring_plan.h — transfer routing: who sends which KV shard (and which dK/dV accumulators) to whom,
// step by step. Two levels:
//  - ring_plan: one ring of R members, from a compute order, a skip map and the members' nodes.
//  - ring_routes: a plan's rings for one layer as a list of transfers in plan ranks, with bytes,
//    link and the step each is posted at. The executor posts exactly these (it reads the ring_plan of
//    its ring); the simulator costs exactly these.
//
// Pure data, no MPI: every rank builds the same routes from the plan and the pattern's tile counts,
// so a sender knows what its receivers need without asking them.
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
#include "plan/plan.h"
#include "plan/tiles.h"

typedef struct {
  int R, n_steps;
  int32_t *order;      // [n_steps*R] the compute order given (before skipping)
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

// ---- a plan's routes -------------------------------------------------------------------------------
//
// Rings. The ring kinds run one ring over all W ranks (U = 1); ulysses and usp run U = schedule.ulysses
// rings of R = W/U members: ring b holds ranks b, b+U, ..., member g being rank g*U + b, and computes
// query heads [b*H/U, (b+1)*H/U) (the schedule's heads_per_rank). A ring's compute order is the
// schedule's kv_src when that is a valid order (each member starts on its own shard and meets a shard
// at most once), else the flat ring; node_of is the cluster's; with plan.spec.skip_empty_sends and tile
// counts, member q skips shard k when q has no tile, bar or run against it over the ring's heads.
//
// Transfers (all in plan ranks; a shard is named by its owner rank, as in schedule.h):
//  - KV, in the forward and again in the backward: posted by both ends at the start of step post_at;
//    the receiver computes on it at `step`. Ordinary (level 0): post_at = step - 1, under the step
//    before. Early (level 1): the owner sends its own shard at an earlier step into the receiver's
//    outer buffer, so it runs under every step in between (the double ring's outer ring).
//  - ACC, backward: the dK/dV accumulator of `shard`, sent once the sender's compute of step post_at is
//    done, to the member that computes the shard at `step` = post_at + 1 and adds its part.
//  - FLUSH, backward: an accumulator whose chain ends after the sender's step post_at (= step) goes to
//    the shard's owner, which sums what arrives after its last step. A chain that ends at the owner
//    moves nothing and is not listed.
// Bytes: KV 2 * shard tokens * kv_heads_per_rank * head_dim * kv_bytes_per_elem (schedule_kv_bytes on
// schedule_shard_tokens); ACC and FLUSH the same count at grad_bytes_per_elem (fp32).

typedef enum { ROUTE_KV, ROUTE_ACC, ROUTE_FLUSH } route_kind;

typedef struct {
  route_kind kind;
  int32_t post_at;   // KV: posted at the start of this step; ACC, FLUSH: leaves after the sender's compute of it
  int32_t step;      // KV, ACC: the step at which the receiver uses it; FLUSH: post_at
  int32_t from, to;  // plan ranks
  int32_t shard;     // owner rank of the shard whose KV or dK/dV it carries
  int64_t bytes;
  link_class link;   // LINK_INTRA or LINK_INTER (the two ranks' nodes)
  int32_t level;     // KV: 1 early, 0 ordinary; ACC, FLUSH: 0
} route;

typedef struct {
  int world, n_steps;
  int ulysses, ring;       // U rings of R members, U * R = world
  ring_plan *rings;        // [U] ring b in members (the executor reads its own)
  int32_t *kv_src;         // [n_steps * world] shard (owner rank) rank r computes at step s (-1: none: skipped or idle)
  route *kv, *grad;        // KV transfers; ACC and FLUSH transfers (backward); each by (post_at, from)
  int64_t n_kv, n_grad;
  int64_t *kv_at, *grad_at;  // [n_steps + 1]: kv[kv_at[s] .. kv_at[s+1]) are posted at step s; grad likewise
  int64_t skipped;         // receptions skipping removed (the same orders' transfers without skipping, less these)
} ring_routes;

// Sum per-head counts [H * R * R] (tiles_account_layer over the rings' layout: the plan's, or the Ulysses
// groups' under ulysses/usp) over each ring's heads into ring_counts [U * R * R].
void ring_counts_from_heads(const plan *p, const work_count *head_counts, work_count *ring_counts);
// The routes of plan p for one layer. counts [U * R * R] (ring b, query member q, shard member k) enable
// skipping when plan.spec.skip_empty_sends is on (NULL: nothing skipped).
int ring_routes_build(const plan *p, const work_count *counts, ring_routes *out, sr_error *e);
// Release routes.
void ring_routes_free(ring_routes *rt);
// Bytes the routes move in one forward pass (KV) and one backward pass (KV, ACC, FLUSH).
void ring_routes_bytes(const ring_routes *rt, double *fwd, double *bwd);

#endif

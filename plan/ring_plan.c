// ring_plan.c — concrete transfers of a ring from its compute order (see ring_plan.h).
#include "plan/ring_plan.h"

#include <stdlib.h>
#include <string.h>

int ring_order_flat(int R, int32_t **src, sr_error *e) {
  *src = malloc(sizeof(int32_t) * (size_t)R * (size_t)R);
  if (!*src) return sr_internal_error(e, 0, "out of memory");
  for (int s = 0; s < R; s++)
    for (int g = 0; g < R; g++) (*src)[s * R + g] = ((g - s) % R + R) % R;
  return SR_OK;
}

void ring_plan_free(ring_plan *rp) {
  free(rp->order);
  free(rp->src);
  free(rp->from);
  free(rp->from_own);
  free(rp->acc_from);
  free(rp->flush);
  free(rp->post_at);
  free(rp->early);
  free(rp->recv_count);
  free(rp->recv_count_noskip);
  memset(rp, 0, sizeof *rp);
}

// Whether h is a better sender to g than best (key best_key): same node first, then the ring neighbour
// behind, then the lower member.
static int better_sender(int R, int h, int g, const int *node_of, int best, int *best_key) {
  int far = node_of && node_of[h] != node_of[g];
  int key = far * 4 * R + ((g - h) % R + R) % R;
  if (best >= 0 && (key > *best_key || (key == *best_key && h > best))) return 0;
  *best_key = key;
  return 1;
}

// The member that should send shard `need` to g, given what every member holds now (cur, -1 none): a
// member whose current buffer holds it (the list first[need], next_holder[...]) or its owner.
static int pick_sender(int R, const int32_t *cur, const int32_t *first, const int32_t *next_holder, int need, int g,
                       const int *node_of, int *own) {
  int best = -1, best_key = 0;
  for (int h = first[need]; h >= 0; h = next_holder[h])
    if (h != g && better_sender(R, h, g, node_of, best, &best_key)) best = h;
  if (cur[need] != need && need != g && better_sender(R, need, g, node_of, best, &best_key)) best = need;
  *own = best >= 0 && cur[best] != need;
  return best;
}

// Walk the order once; with needs == NULL nothing is skipped. Fills rp when rp != NULL.
static int64_t walk(int R, int n_steps, const int32_t *order, const uint8_t *needs, const int *node_of, ring_plan *rp,
                    int64_t *recv_count) {
  int32_t *cur = malloc(sizeof(int32_t) * (size_t)R), *nxt = malloc(sizeof(int32_t) * (size_t)R);
  uint8_t *taken = malloc((size_t)R);
  // Outer buffers per member: early receptions so far, the step of the last one, which buffer is the
  // current shard (-1: none), and the last step each buffer was current.
  int32_t *n_early = calloc((size_t)R, sizeof(int32_t)), *t_last = calloc((size_t)R, sizeof(int32_t));
  int32_t *cur_slot = malloc(sizeof(int32_t) * (size_t)R), *busy = malloc(sizeof(int32_t) * (size_t)R * 2);
  // Who holds each shard now, as lists (first[shard], next_holder[member]): a sender is found in O(1)
  // per reception rather than by scanning the ring, so a ring of 1024 members plans in milliseconds.
  int32_t *first = malloc(sizeof(int32_t) * (size_t)R), *next_holder = malloc(sizeof(int32_t) * (size_t)R);
  int64_t transfers = 0;
  if (!cur || !nxt || !taken || !n_early || !t_last || !cur_slot || !busy || !first || !next_holder) {
    free(cur), free(nxt), free(taken), free(n_early), free(t_last), free(cur_slot), free(busy);
    free(first), free(next_holder);
    return -1;
  }
  for (int g = 0; g < R; g++) cur_slot[g] = -1, busy[2 * g] = busy[2 * g + 1] = -1;
  for (int g = 0; g < R; g++) {
    int s0 = order[g];
    cur[g] = s0 >= 0 && (!needs || needs[g * R + s0]) ? s0 : -1;
    if (rp) rp->src[g] = cur[g], rp->from[g] = -1, rp->acc_from[g] = -1, rp->post_at[g] = -1;
  }
  for (int s = 1; s < n_steps; s++) {
    memset(taken, 0, (size_t)R);
    for (int k = 0; k < R; k++) first[k] = -1;
    for (int h = R - 1; h >= 0; h--)
      if (cur[h] >= 0) next_holder[h] = first[cur[h]], first[cur[h]] = h;
    for (int g = 0; g < R; g++) {
      int need = order[s * R + g];
      int64_t i = (int64_t)s * R + g;
      if (need < 0 || (needs && !needs[g * R + need])) {
        nxt[g] = -1;
        if (rp) rp->src[i] = -1, rp->from[i] = -1, rp->acc_from[i] = -1, rp->post_at[i] = -1;
        if (cur_slot[g] >= 0) busy[2 * g + cur_slot[g]] = s;  // the executor keeps its buffer
        continue;
      }
      nxt[g] = need;
      // Own shard, or the same shard as this step: nothing moves.
      int own = 0;
      int h = need == g || cur[g] == need ? -1 : pick_sender(R, cur, first, next_holder, need, g, node_of, &own);
      int early = 0, post = h >= 0 ? s - 1 : -1;
      if (h >= 0) {
        transfers++;
        if (recv_count) recv_count[g]++;
        if (rp && node_of && node_of[h] != node_of[g]) {
          int k = n_early[g], s0 = k >= 1 ? t_last[g] : 0;
          if (k >= 2 && busy[2 * g + k % 2] + 1 > s0) s0 = busy[2 * g + k % 2] + 1;
          if (s0 < s - 1) {  // the owner's copy never changes, so it can leave that early
            early = 1 + k % 2, post = s0, h = need, own = 1;
            n_early[g]++, t_last[g] = s;
          }
        }
      }
      if (early) cur_slot[g] = early - 1;
      else if (h >= 0 || need == g) cur_slot[g] = -1;
      if (cur_slot[g] >= 0) busy[2 * g + cur_slot[g]] = s;
      if (rp) {
        rp->src[i] = need;
        rp->from[i] = h;
        rp->from_own[i] = (uint8_t)own;
        rp->post_at[i] = post;
        rp->early[i] = (uint8_t)early;
        rp->n_early += early > 0;
        // Accumulators follow the shard to the first member that takes the sender's current buffer.
        int acc = -1;
        if (h >= 0 && !own && !taken[h]) acc = h, taken[h] = 1;
        else if (h < 0 && cur[g] == need && !taken[g]) acc = g, taken[g] = 1;  // kept in place
        rp->acc_from[i] = acc;
      }
    }
    if (rp)
      for (int g = 0; g < R; g++) rp->flush[(int64_t)(s - 1) * R + g] = (uint8_t)(cur[g] >= 0 && !taken[g]);
    memcpy(cur, nxt, sizeof(int32_t) * (size_t)R);
  }
  if (rp)
    for (int g = 0; g < R; g++) rp->flush[(int64_t)(n_steps - 1) * R + g] = (uint8_t)(cur[g] >= 0);
  free(cur), free(nxt), free(taken), free(n_early), free(t_last), free(cur_slot), free(busy);
  free(first), free(next_holder);
  return transfers;
}

int ring_plan_build(int R, int n_steps, const int32_t *src, const uint8_t *needs, const int *node_of, ring_plan *rp,
                    sr_error *e) {
  memset(rp, 0, sizeof *rp);
  if (R < 1 || n_steps < 1) return sr_internal_error(e, 0, "ring_plan_build: %d members, %d steps", R, n_steps);
  for (int g = 0; g < R; g++)
    if (src[g] != g) return sr_internal_error(e, 0, "ring_plan_build: member %d starts on shard %d, not its own", g, src[g]);
  for (int64_t i = 0; i < (int64_t)n_steps * R; i++)
    if (src[i] < -1 || src[i] >= R) return sr_internal_error(e, 0, "ring_plan_build: shard %d out of range", src[i]);
  size_t n = (size_t)n_steps * (size_t)R;
  rp->R = R, rp->n_steps = n_steps;
  rp->order = malloc(sizeof(int32_t) * n);
  rp->src = malloc(sizeof(int32_t) * n);
  rp->from = malloc(sizeof(int32_t) * n);
  rp->from_own = calloc(n, 1);
  rp->acc_from = malloc(sizeof(int32_t) * n);
  rp->flush = calloc(n, 1);
  rp->post_at = malloc(sizeof(int32_t) * n);
  rp->early = calloc(n, 1);
  rp->recv_count = calloc((size_t)R, sizeof(int64_t));
  rp->recv_count_noskip = calloc((size_t)R, sizeof(int64_t));
  if (!rp->order || !rp->src || !rp->from || !rp->from_own || !rp->acc_from || !rp->flush || !rp->post_at || !rp->early || !rp->recv_count || !rp->recv_count_noskip) {
    ring_plan_free(rp);
    return sr_internal_error(e, 0, "out of memory");
  }
  memcpy(rp->order, src, sizeof(int32_t) * n);
  rp->transfers = walk(R, n_steps, src, needs, node_of, rp, rp->recv_count);
  rp->transfers_noskip = walk(R, n_steps, src, NULL, node_of, NULL, rp->recv_count_noskip);
  if (rp->transfers < 0 || rp->transfers_noskip < 0) {
    ring_plan_free(rp);
    return sr_internal_error(e, 0, "out of memory");
  }
  return SR_OK;
}

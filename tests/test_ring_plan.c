// test_ring_plan.c — the ring plan (plan/ring_plan.h): transfers of a ring, skipping, and the
// rule that every dK/dV contribution reaches its shard's owner exactly once, checked by replaying
// the plan's messages as token counts (an independent walk of the transfers, not the builder's).
#include <stdlib.h>
#include <string.h>

#include "plan/ring_plan.h"
#include "tests/test.h"

// Replay: each compute adds 1 to the accumulator it holds; accumulators move as the plan says; flushes
// add into the owner's total. Afterwards the owner of shard s must hold the number of computes on s.
static int replay_accumulators(const ring_plan *rp) {
  int R = rp->R;
  double *held = calloc((size_t)R, sizeof(double)), *next = calloc((size_t)R, sizeof(double));
  double *total = calloc((size_t)R, sizeof(double)), *expect = calloc((size_t)R, sizeof(double));
  for (int s = 0; s < rp->n_steps; s++) {
    for (int g = 0; g < R; g++) {
      int i = s * R + g;
      next[g] = 0;
      if (rp->src[i] < 0) continue;
      int af = rp->acc_from[i];
      next[g] = (af >= 0 ? held[af] : 0) + 1;  // incoming accumulator plus this step's contribution
      expect[rp->src[i]] += 1;
    }
    for (int g = 0; g < R; g++) {
      held[g] = next[g];
      if (rp->src[s * R + g] >= 0 && rp->flush[s * R + g]) total[rp->src[s * R + g]] += held[g];
    }
  }
  int ok = 1;
  for (int g = 0; g < R; g++) ok = ok && total[g] == expect[g];
  free(held), free(next), free(total), free(expect);
  return ok;
}

TEST(ring_plan_flat_ring_receives_from_the_previous_neighbour) {
  for (int R = 1; R <= 9; R++) {
    int32_t *src;
    sr_error e = {0};
    CHECK_EQ_INT(ring_order_flat(R, &src, &e), SR_OK);
    ring_plan rp;
    CHECK_EQ_INT(ring_plan_build(R, R, src, NULL, NULL, &rp, &e), SR_OK);
    CHECK_EQ_INT(rp.transfers, (int64_t)R * (R - 1));
    for (int s = 1; s < R; s++)
      for (int g = 0; g < R; g++) {
        CHECK_EQ_INT(rp.from[s * R + g], (g - 1 + R) % R);
        CHECK_EQ_INT(rp.acc_from[s * R + g], (g - 1 + R) % R);
        CHECK_EQ_INT(rp.flush[(s - 1) * R + g], 0);
      }
    for (int g = 0; g < R; g++) CHECK_EQ_INT(rp.flush[(R - 1) * R + g], 1);
    CHECK(replay_accumulators(&rp));
    ring_plan_free(&rp);
    free(src);
  }
}

TEST(ring_plan_skipping_never_loses_a_gradient_contribution) {
  // Random work maps: whatever is skipped, each shard's owner ends with exactly its computes' sum.
  uint64_t x = 12345;
  for (int trial = 0; trial < 200; trial++) {
    int R = 2 + trial % 9;
    uint8_t *needs = malloc((size_t)R * R);
    for (int i = 0; i < R * R; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      needs[i] = (x >> 33) % 3 != 0;
    }
    int32_t *src;
    sr_error e = {0};
    ring_order_flat(R, &src, &e);
    int *node_of = malloc(sizeof(int) * R);
    for (int g = 0; g < R; g++) node_of[g] = g / 2;
    ring_plan rp;
    CHECK_EQ_INT(ring_plan_build(R, R, src, needs, trial % 2 ? node_of : NULL, &rp, &e), SR_OK);
    CHECK(replay_accumulators(&rp));
    CHECK(rp.transfers <= rp.transfers_noskip);
    for (int s = 1; s < R; s++)
      for (int g = 0; g < R; g++) {
        int i = s * R + g, k = src[i];
        CHECK_EQ_INT(rp.src[i], needs[g * R + k] ? k : -1);  // computes exactly the shards it needs
        if (rp.from[i] >= 0) {
          // The sender really holds the shard: its own, or the one it computed at the previous step.
          int h = rp.from[i];
          CHECK(rp.from_own[i] ? h == k : rp.src[(s - 1) * R + h] == k);
        }
      }
    ring_plan_free(&rp);
    free(src), free(needs), free(node_of);
  }
}

TEST(ring_plan_skips_shards_a_window_pattern_never_touches) {
  // Contiguous layout with a short window: member g only needs shards g and g-1.
  int R = 6;
  uint8_t needs[36] = {0};
  for (int g = 0; g < R; g++) {
    needs[g * R + g] = 1;
    if (g) needs[g * R + g - 1] = 1;
  }
  int32_t *src;
  sr_error e = {0};
  ring_order_flat(R, &src, &e);
  ring_plan rp;
  CHECK_EQ_INT(ring_plan_build(R, R, src, needs, NULL, &rp, &e), SR_OK);
  CHECK_EQ_INT(rp.transfers, R - 1);  // one transfer each (member 0 needs none)
  CHECK_EQ_INT(rp.transfers_noskip, R * (R - 1));
  CHECK(replay_accumulators(&rp));
  ring_plan_free(&rp);
  free(src);
}

// ---------------------------------------------------------------------------------------------
// calibration fit

#include "exec/calibrate.h"

TEST(calib_fit_link_recovers_latency_and_bandwidth_of_exact_points) {
  // t = 5 us + bytes / 100 GB/s, sizes 1 KiB .. 256 MiB.
  double b[10], t[10], lat, gbps;
  for (int i = 0; i < 10; i++) b[i] = (double)(1024ll << (2 * i)), t[i] = 5e-6 + b[i] / 100e9;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_link(b, t, 10, &lat, &gbps, &e), SR_OK);
  CHECK_REL(lat, 5.0, 1e-6);
  CHECK_REL(gbps, 100.0, 1e-6);
}

TEST(calib_fit_link_rejects_timings_that_do_not_grow_with_size) {
  double b[3] = {1e3, 1e6, 1e9}, t[3] = {3e-3, 2e-3, 1e-3}, lat, gbps;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_link(b, t, 3, &lat, &gbps, &e), SR_EINPUT);
  CHECK_EQ_INT(calib_fit_link(b, t, 1, &lat, &gbps, &e), SR_EINPUT);
}

TEST(calib_fit_rate_separates_the_fixed_time_per_call_from_the_rate) {
  // t = 20 us + flops / 400 TFLOP/s at 1, 2, 4 units of 1e12 FLOPs: the rate is the slope, not flops / t.
  double f[3] = {1e12, 2e12, 4e12}, t[3], tflops, over;
  for (int i = 0; i < 3; i++) t[i] = 20e-6 + f[i] / 400e12;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_rate(f, t, 3, &tflops, &over, &e), SR_OK);
  CHECK_REL(tflops, 400.0, 1e-6);
  CHECK_REL(over, 20.0, 1e-6);
  CHECK(f[0] / t[0] / 1e12 < 400.0);  // the naive ratio of the smallest run is lower
}

TEST(calib_fit_rate_rejects_kernel_times_that_do_not_grow_with_work) {
  double f[2] = {1e12, 2e12}, t[2] = {2e-3, 1e-3}, tflops, over;
  sr_error e = {0};
  CHECK_EQ_INT(calib_fit_rate(f, t, 2, &tflops, &over, &e), SR_EINPUT);
}

// ---------------------------------------------------------------------------------------------
// early inter-node transfers (double ring)

// The double ring's compute order (as plan/schedule.c builds it): member (n, i) = n * K + i computes
// at step o * K + j the shard of member ((n - o) mod N, (i - j) mod K).
static int32_t *double_ring_order(int N, int K) {
  int R = N * K;
  int32_t *o = malloc(sizeof(int32_t) * (size_t)R * R);
  for (int n = 0; n < N; n++)
    for (int i = 0; i < K; i++)
      for (int r = 0; r < N; r++)
        for (int j = 0; j < K; j++) o[(r * K + j) * R + n * K + i] = ((n - r + N) % N) * K + (i - j + K) % K;
  return o;
}

// Replay the executors' buffers (own, two ring buffers, two outer buffers per member; exec/ring.c):
// every compute must find its shard in the current buffer, an ordinary transfer copies what its sender
// holds at the step before, and an early transfer comes from the owner's own shard into an outer
// buffer that is not current (nor awaited by another early transfer) from its post step until it is used.
static int replay_buffers(const ring_plan *rp) {
  int R = rp->R, n = rp->n_steps, ok = 1;
  int *content = malloc(sizeof(int) * (size_t)R * 5), *cur = calloc((size_t)R, sizeof(int));
  int *ncontent = malloc(sizeof(int) * (size_t)R * 5), *ncur = malloc(sizeof(int) * (size_t)R);
  int *pend = malloc(sizeof(int) * (size_t)R * 2);  // target step of the awaited early transfer, -1 none
  for (int g = 0; g < R; g++) {
    for (int b = 0; b < 5; b++) content[g * 5 + b] = b == 0 ? g : -1;
    pend[2 * g] = pend[2 * g + 1] = -1;
  }
  for (int s = 0; s < n && ok; s++) {
    for (int t = s + 1; t < n; t++)
      for (int g = 0; g < R; g++) {
        int i = t * R + g;
        if (!rp->early[i] || rp->post_at[i] != s) continue;
        int b = rp->early[i] - 1;
        ok = ok && pend[2 * g + b] < 0 && rp->from[i] == rp->src[i] && rp->from_own[i];
        pend[2 * g + b] = t;
      }
    for (int g = 0; g < R; g++) {
      int k = rp->src[s * R + g];
      if (k >= 0) ok = ok && content[g * 5 + cur[g]] == k;
      for (int b = 0; b < 2; b++) ok = ok && !(pend[2 * g + b] >= 0 && cur[g] == 3 + b);
    }
    if (s + 1 == n) break;
    memcpy(ncontent, content, sizeof(int) * (size_t)R * 5);
    for (int g = 0; g < R; g++) {
      int i1 = (s + 1) * R + g, h = rp->from[i1];
      if (h >= 0 && rp->early[i1]) {
        int b = rp->early[i1] - 1;
        ok = ok && pend[2 * g + b] == s + 1;
        pend[2 * g + b] = -1;
        ncontent[g * 5 + 3 + b] = h;  // the owner's own shard
        ncur[g] = 3 + b;
      } else if (h >= 0) {
        int rb = cur[g] == 1 ? 2 : 1;
        ncontent[g * 5 + rb] = rp->from_own[i1] ? content[h * 5] : content[h * 5 + cur[h]];
        ncur[g] = rb;
      } else {
        ncur[g] = rp->src[i1] == g ? 0 : cur[g];
      }
    }
    memcpy(content, ncontent, sizeof(int) * (size_t)R * 5);
    memcpy(cur, ncur, sizeof(int) * (size_t)R);
  }
  free(content), free(cur), free(ncontent), free(ncur), free(pend);
  return ok;
}

TEST(ring_plan_double_ring_posts_the_next_rounds_shard_at_the_start_of_the_round) {
  for (int N = 2; N <= 4; N++)
    for (int K = 2; K <= 4; K++) {
      int R = N * K, *node_of = malloc(sizeof(int) * R);
      for (int g = 0; g < R; g++) node_of[g] = g / K;
      int32_t *order = double_ring_order(N, K);
      ring_plan rp;
      sr_error e = {0};
      CHECK_EQ_INT(ring_plan_build(R, R, order, NULL, node_of, &rp, &e), SR_OK);
      for (int s = 1; s < R; s++)
        for (int g = 0; g < R; g++) {
          int i = s * R + g;
          if (s % K == 0) {  // a round starts: its shard comes from the owner, posted a whole round before
            CHECK(rp.early[i] != 0);
            CHECK_EQ_INT(rp.post_at[i], s - K);
            CHECK_EQ_INT(rp.from[i], order[i]);
            CHECK(node_of[rp.from[i]] != node_of[g]);
          } else {  // inside a round: the inner neighbour, one step ahead
            CHECK_EQ_INT(rp.early[i], 0);
            CHECK_EQ_INT(rp.post_at[i], s - 1);
            CHECK_EQ_INT(node_of[rp.from[i]], node_of[g]);
          }
        }
      CHECK_EQ_INT(rp.n_early, (int64_t)R * (N - 1));
      CHECK_EQ_INT(rp.transfers, rp.transfers_noskip);
      CHECK(replay_buffers(&rp));
      CHECK(replay_accumulators(&rp));
      ring_plan_free(&rp);
      free(order), free(node_of);
    }
}

TEST(ring_plan_early_transfers_keep_buffers_and_gradients_right_under_skipping) {
  uint64_t x = 777;
  for (int trial = 0; trial < 300; trial++) {
    int N = 2 + trial % 3, K = 1 + (trial / 3) % 4, R = N * K;
    uint8_t *needs = malloc((size_t)R * R);
    for (int i = 0; i < R * R; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      needs[i] = (x >> 33) % 3 != 0;
    }
    int *node_of = malloc(sizeof(int) * R);
    for (int g = 0; g < R; g++) node_of[g] = g / K;
    int32_t *order = trial % 2 ? double_ring_order(N, K) : NULL;
    sr_error e = {0};
    if (!order) ring_order_flat(R, &order, &e);
    ring_plan rp;
    CHECK_EQ_INT(ring_plan_build(R, R, order, needs, node_of, &rp, &e), SR_OK);
    CHECK(replay_buffers(&rp));
    CHECK(replay_accumulators(&rp));
    for (int i = R; i < R * R; i++) CHECK(rp.from[i] < 0 || (rp.post_at[i] >= 0 && rp.post_at[i] < i / R));
    ring_plan_free(&rp);
    free(order), free(needs), free(node_of);
  }
}

TEST(ring_plan_one_node_has_no_early_transfers) {
  int32_t *order = double_ring_order(1, 5);
  int node_of[5] = {0};
  ring_plan rp;
  sr_error e = {0};
  CHECK_EQ_INT(ring_plan_build(5, 5, order, NULL, node_of, &rp, &e), SR_OK);
  CHECK_EQ_INT(rp.n_early, 0);
  for (int i = 5; i < 25; i++) CHECK_EQ_INT(rp.post_at[i], i / 5 - 1);
  ring_plan_free(&rp);
  free(order);
}

// test_exec_ring_plan.c — the ring plan (exec/ring_plan.h): transfers of a ring, skipping, and the
// rule that every dK/dV contribution reaches its shard's owner exactly once, checked by replaying
// the plan's messages as token counts (an independent walk of the transfers, not the builder's).
#include <stdlib.h>
#include <string.h>

#include "exec/ring_plan.h"
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

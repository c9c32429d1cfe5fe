// test_sim_engine.c — the event engine and the ring task graphs against closed forms.
#include <stdlib.h>
#include <string.h>

#include "sim/engine.h"
#include "sim/ring.h"
#include "tests/test.h"

// ---- engine ----------------------------------------------------------------------------------

TEST(sim_engine_stream_runs_tasks_one_after_another) {
  sim_engine g;
  sr_error e;
  CHECK_EQ_INT(engine_init(&g, 1, 0, NULL, &e), SR_OK);
  int32_t a = engine_add(&g, 0, STREAM_COMPUTE, 1.0, -1, 0, 0, 0, NULL, 0);
  int32_t b = engine_add(&g, 0, STREAM_COMPUTE, 2.0, -1, 0, 0, 1, NULL, 0);
  int32_t c = engine_add(&g, 0, STREAM_INTRA, 0.5, -1, 0, 0, 0, NULL, 0);  // other stream: runs at once
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  CHECK_NEAR(g.tasks[a].start, 0, 1e-12);
  CHECK_NEAR(g.tasks[b].start, 1.0, 1e-12);
  CHECK_NEAR(g.tasks[b].end, 3.0, 1e-12);
  CHECK_NEAR(g.tasks[c].start, 0, 1e-12);
  CHECK_NEAR(engine_makespan(&g), 3.0, 1e-12);
  engine_free(&g);
}

TEST(sim_engine_task_waits_for_its_slowest_dependency) {
  sim_engine g;
  sr_error e;
  CHECK_EQ_INT(engine_init(&g, 3, 0, NULL, &e), SR_OK);
  int32_t a = engine_add(&g, 0, STREAM_COMPUTE, 1.0, -1, 0, 0, 0, NULL, 0);
  int32_t b = engine_add(&g, 1, STREAM_COMPUTE, 4.0, -1, 0, 0, 0, NULL, 0);
  int32_t d[2] = {a, b};
  int32_t c = engine_add(&g, 2, STREAM_INTER, 1.5, -1, 0, 0, 0, d, 2);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  CHECK_NEAR(g.tasks[c].start, 4.0, 1e-12);
  CHECK_NEAR(g.tasks[c].end, 5.5, 1e-12);
  engine_free(&g);
}

TEST(sim_engine_shared_resource_serialises_transfers_beyond_its_servers) {
  // Four GPUs send 1 s transfers at once through a node resource of two servers (two NICs): two go
  // at t=0, two at t=1; the makespan is 2 s. With four servers all finish at 1 s.
  for (int servers = 2; servers <= 4; servers += 2) {
    sim_engine g;
    sr_error e;
    CHECK_EQ_INT(engine_init(&g, 4, 1, &servers, &e), SR_OK);
    for (int r = 0; r < 4; r++) engine_add(&g, r, STREAM_INTER, 1.0, 0, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
    CHECK_NEAR(engine_makespan(&g), servers == 2 ? 2.0 : 1.0, 1e-12);
    engine_free(&g);
  }
}

TEST(sim_engine_resource_is_granted_in_ready_order_not_insertion_order) {
  // Task x is added first but becomes ready at t=3; task y is added later and ready at t=0. With one
  // server y must go first (0..1) and x at 3..4, not y after x.
  int one = 1;
  sim_engine g;
  sr_error e;
  CHECK_EQ_INT(engine_init(&g, 3, 1, &one, &e), SR_OK);
  int32_t w = engine_add(&g, 0, STREAM_COMPUTE, 3.0, -1, 0, 0, 0, NULL, 0);
  int32_t x = engine_add(&g, 1, STREAM_INTER, 1.0, 0, 0, 0, 0, &w, 1);
  int32_t y = engine_add(&g, 2, STREAM_INTER, 1.0, 0, 0, 0, 0, NULL, 0);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  CHECK_NEAR(g.tasks[y].start, 0.0, 1e-12);
  CHECK_NEAR(g.tasks[x].start, 3.0, 1e-12);
  engine_free(&g);
}

TEST(sim_engine_stream_free_times_carry_over_chunks) {
  sim_engine g;
  sr_error e;
  CHECK_EQ_INT(engine_init(&g, 1, 0, NULL, &e), SR_OK);
  engine_add(&g, 0, STREAM_COMPUTE, 2.0, -1, 0, 0, 0, NULL, 0);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  engine_clear(&g);
  int32_t b = engine_add(&g, 0, STREAM_COMPUTE, 1.0, -1, 0, 1, 0, NULL, 0);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  CHECK_NEAR(g.tasks[b].start, 2.0, 1e-12);
  CHECK_NEAR(engine_makespan(&g), 3.0, 1e-12);
  engine_free(&g);
}

// ---- ring task graphs --------------------------------------------------------------------------

// A flat ring by hand, as schedule.h describes it: at step s rank r computes on shard (r - s) mod W and
// sends it to r + 1; backward, the same KV hops carry the partial dK/dV of the step's shard, and at the
// last step a gradient-only hop takes each partial home.
static schedule flat_ring(int W, int64_t bytes, int64_t grad_bytes, link_class link) {
  schedule s;
  memset(&s, 0, sizeof s);
  s.kind = SCHED_RING;
  s.world = W;
  s.nodes = 1;
  s.gpus_per_node = W;
  s.ring = W;
  s.inner = W;
  s.outer = 1;
  s.ulysses = 1;
  s.n_steps = W;
  s.steps = calloc((size_t)W * W, sizeof *s.steps);
  transfer none = {.peer = -1, .shard = -1, .grad_shard = -1, .link = LINK_NONE};
  for (int st = 0; st < W; st++)
    for (int r = 0; r < W; r++) {
      ring_step *rs = &s.steps[st * W + r];
      rs->kv_src = ((r - st) % W + W) % W;
      rs->send = rs->recv = rs->send_bwd = rs->recv_bwd = none;
      rs->send_outer = rs->recv_outer = rs->send_outer_bwd = rs->recv_outer_bwd = none;
      int next = (r + 1) % W;
      if (st < W - 1) {
        rs->send = (transfer){next, rs->kv_src, bytes, link, 0, -1, 0};
        rs->send_bwd = (transfer){next, rs->kv_src, bytes + grad_bytes, link, 0, rs->kv_src, grad_bytes};
      } else {
        rs->send_bwd = (transfer){next, -1, grad_bytes, link, 0, rs->kv_src, grad_bytes};
      }
    }
  return s;
}

static cluster_desc one_node(int W, double gbps) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  c.nodes = 1;
  c.gpus_per_node = W;
  c.nics_per_node = W;
  c.intra.gbps = gbps;
  c.intra.latency_us = 0;
  c.nic = c.intra;
  c.gpu.comm_slowdown = 1;
  return c;
}

static double ring_fwd_makespan(int W, double step_compute, double bytes, double gbps) {
  schedule s = flat_ring(W, (int64_t)bytes, 0, LINK_INTRA);
  cluster_desc c = one_node(W, gbps);
  double *comp = malloc((size_t)W * W * sizeof *comp);
  for (int i = 0; i < W * W; i++) comp[i] = step_compute;
  ring_ctx x;
  sim_engine g;
  sr_error e;
  int32_t *done = malloc((size_t)W * sizeof *done);
  CHECK_EQ_INT(ring_ctx_init(&x, &s, &c, &e), SR_OK);
  CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
  CHECK_EQ_INT(ring_forward(&g, &x, comp, 0, 1, NULL, done, &e), SR_OK);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  double m = engine_makespan(&g);
  engine_free(&g);
  ring_ctx_free(&x);
  free(done);
  free(comp);
  free(s.steps);
  return m;
}

TEST(sim_ring_compute_bound_takes_world_times_step_compute) {
  // Transfer 1 MB at 1000 GB/s = 1 us against 1 ms of compute per step: W x 1 ms.
  for (int W = 2; W <= 8; W *= 2) CHECK_REL(ring_fwd_makespan(W, 1e-3, 1e6, 1000), W * 1e-3, 1e-9);
}

TEST(sim_ring_link_bound_takes_w_minus_one_transfers_plus_one_compute) {
  // 1 GB at 10 GB/s = 0.1 s per hop against 1 ms of compute: (W-1) x 0.1 s + 1 ms.
  for (int W = 2; W <= 8; W *= 2) CHECK_REL(ring_fwd_makespan(W, 1e-3, 1e9, 10), (W - 1) * 0.1 + 1e-3, 1e-9);
}

TEST(sim_ring_slow_rank_delays_its_successors) {
  // Rank 0 computes 10x slower at step 0 in a compute-bound ring of 4 (1 ms a step elsewhere).
  int W = 4;
  schedule s = flat_ring(W, 1000, 0, LINK_INTRA);
  cluster_desc c = one_node(W, 1000);
  double comp[16];
  for (int i = 0; i < 16; i++) comp[i] = 1e-3;
  comp[0 * W + 0] = 10e-3;
  ring_ctx x;
  sim_engine g;
  sr_error e;
  int32_t done[4];
  CHECK_EQ_INT(ring_ctx_init(&x, &s, &c, &e), SR_OK);
  CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
  CHECK_EQ_INT(ring_forward(&g, &x, comp, 0, 1, NULL, done, &e), SR_OK);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  // Rank 0 ends at 10 + 3 x 1 ms. Rank 0's send of step 1 (shard 3, for rank 1's step 2) waits for its
  // step 0, so rank 1 runs steps 2..3 from 10 ms: 12 ms; rank 2 gets shard 3 one hop later for its
  // last step: 11 ms. Rank 3 needs nothing that passes through rank 0 after step 0: 4 ms.
  CHECK_NEAR(g.tasks[done[0]].end, 13e-3, 1e-6);
  CHECK_NEAR(g.tasks[done[1]].end, 12e-3, 1e-6);
  CHECK_NEAR(g.tasks[done[2]].end, 11e-3, 1e-6);
  CHECK_NEAR(g.tasks[done[3]].end, 4e-3, 1e-6);
  engine_free(&g);
  ring_ctx_free(&x);
  free(s.steps);
}

TEST(sim_ring_backward_returns_dkv_to_the_owner) {
  // Link-bound backward on 3 ranks: every rank's pass ends when its own dK/dV came home.
  int W = 3;
  schedule s = flat_ring(W, 1, 2, LINK_INTRA);  // KV 1 byte, dK/dV 2 bytes a hop
  cluster_desc c = one_node(W, 1e-9);           // 1 byte/s: a KV hop takes 1 s, a dK/dV hop 2 s
  double comp[9];
  for (int i = 0; i < 9; i++) comp[i] = 1e-6;
  ring_ctx x;
  sim_engine g;
  sr_error e;
  int32_t done[3];
  CHECK_EQ_INT(ring_ctx_init(&x, &s, &c, &e), SR_OK);
  CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
  CHECK_EQ_INT(ring_backward(&g, &x, comp, 0, 1, 2, NULL, done, &e), SR_OK);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  // Each sender's link, in order: step 0 KV 0..1, its own shard's partial 1..3; step 1 KV 3..4, the
  // partial received at 3 plus its step-1 share 4..6; step 2 the partial received at 6 goes home 6..8.
  for (int r = 0; r < W; r++) CHECK_NEAR(g.tasks[done[r]].end, 8.0, 1e-4);
  engine_free(&g);
  ring_ctx_free(&x);
  free(s.steps);
}

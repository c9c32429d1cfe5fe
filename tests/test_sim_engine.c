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

// Routes by hand, in plan/ring_plan.h's form: routes are added in (post step, sender) order and
// indexed by post step when done.
static void routes_open(ring_routes *rt, int W, int n_steps) {
  memset(rt, 0, sizeof *rt);
  rt->world = W, rt->n_steps = n_steps, rt->ulysses = 1, rt->ring = W;
  rt->kv_src = malloc(sizeof *rt->kv_src * (size_t)(W * n_steps));
  rt->kv = malloc(sizeof *rt->kv * (size_t)(2 * W * n_steps));
  rt->grad = malloc(sizeof *rt->grad * (size_t)(2 * W * n_steps));
  rt->kv_at = calloc((size_t)n_steps + 1, sizeof *rt->kv_at);
  rt->grad_at = calloc((size_t)n_steps + 1, sizeof *rt->grad_at);
}

static void route_add(ring_routes *rt, route_kind kind, int post_at, int step, int from, int to, int shard,
                      int64_t bytes, link_class link, int level) {
  route r = {kind, post_at, step, from, to, shard, bytes, link, level};
  if (kind == ROUTE_KV) rt->kv[rt->n_kv++] = r;
  else rt->grad[rt->n_grad++] = r;
}

static void routes_close(ring_routes *rt) {
  for (int s = 0; s <= rt->n_steps; s++) {
    rt->kv_at[s] = rt->grad_at[s] = 0;
    for (int64_t i = 0; i < rt->n_kv; i++) rt->kv_at[s] += rt->kv[i].post_at < s;
    for (int64_t i = 0; i < rt->n_grad; i++) rt->grad_at[s] += rt->grad[i].post_at < s;
  }
}

// A flat ring: at step s rank r computes on shard (r - s) mod W and sends it to r + 1; backward, the
// accumulator of the step's shard follows the same hop, and after the last step each accumulator
// goes to its owner (r + 1).
static ring_routes flat_ring(int W, int64_t bytes, int64_t grad_bytes, link_class link) {
  ring_routes rt;
  routes_open(&rt, W, W);
  for (int st = 0; st < W; st++)
    for (int r = 0; r < W; r++) {
      int shard = ((r - st) % W + W) % W, next = (r + 1) % W;
      rt.kv_src[st * W + r] = shard;
      if (st < W - 1) {
        route_add(&rt, ROUTE_KV, st, st + 1, r, next, shard, bytes, link, 0);
        route_add(&rt, ROUTE_ACC, st, st + 1, r, next, shard, grad_bytes, link, 0);
      } else {
        route_add(&rt, ROUTE_FLUSH, st, st, r, next, shard, grad_bytes, link, 0);
      }
    }
  routes_close(&rt);
  return rt;
}

static void routes_drop(ring_routes *rt) {
  free(rt->kv_src), free(rt->kv), free(rt->grad), free(rt->kv_at), free(rt->grad_at);
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

static double ring_fwd_makespan(int lean, int W, double step_compute, double bytes, double gbps) {
  ring_routes s = flat_ring(W, (int64_t)bytes, 0, LINK_INTRA);
  cluster_desc c = one_node(W, gbps);
  double *comp = malloc((size_t)W * W * sizeof *comp);
  for (int i = 0; i < W * W; i++) comp[i] = step_compute;
  ring_ctx x;
  sim_engine g;
  sr_error e;
  int32_t *done = malloc((size_t)W * sizeof *done);
  CHECK_EQ_INT(ring_ctx_init(&x, W, &c, &e), SR_OK);
  CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
  if (lean) engine_lean(&g);
  CHECK_EQ_INT(ring_forward(&g, &x, &s, comp, 0, 1, NULL, done, &e), SR_OK);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  double m = engine_makespan(&g);
  engine_free(&g);
  ring_ctx_free(&x);
  free(done);
  free(comp);
  routes_drop(&s);
  return m;
}

TEST(sim_ring_compute_bound_takes_world_times_step_compute) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // Transfer 1 MB at 1000 GB/s = 1 us against 1 ms of compute per step: W x 1 ms.
    for (int W = 2; W <= 8; W *= 2) CHECK_REL(ring_fwd_makespan(lean, W, 1e-3, 1e6, 1000), W * 1e-3, 1e-9);
  }
}

TEST(sim_ring_link_bound_takes_w_minus_one_transfers_plus_one_compute) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // 1 GB at 10 GB/s = 0.1 s per hop against 1 ms of compute: (W-1) x 0.1 s + 1 ms.
    for (int W = 2; W <= 8; W *= 2) CHECK_REL(ring_fwd_makespan(lean, W, 1e-3, 1e9, 10), (W - 1) * 0.1 + 1e-3, 1e-9);
  }
}

TEST(sim_ring_slow_rank_delays_its_successors) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // Rank 0 computes 10x slower at step 0 in a compute-bound ring of 4 (1 ms a step elsewhere).
    int W = 4;
    ring_routes s = flat_ring(W, 1000, 0, LINK_INTRA);
    cluster_desc c = one_node(W, 1000);
    double comp[16];
    for (int i = 0; i < 16; i++) comp[i] = 1e-3;
    comp[0 * W + 0] = 10e-3;
    ring_ctx x;
    sim_engine g;
    sr_error e;
    int32_t done[4];
    CHECK_EQ_INT(ring_ctx_init(&x, W, &c, &e), SR_OK);
    CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
    if (lean) engine_lean(&g);
    CHECK_EQ_INT(ring_forward(&g, &x, &s, comp, 0, 1, NULL, done, &e), SR_OK);
    CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
    // Rank 0 ends at 10 + 3 x 1 ms. Rank 0's send of step 1 (shard 3, for rank 1's step 2) waits for its
    // step 0, so rank 1 runs steps 2..3 from 10 ms: 12 ms; rank 2 gets shard 3 one hop later for its
    // last step: 11 ms. Rank 3 needs nothing that passes through rank 0 after step 0: 4 ms.
    CHECK_NEAR(engine_end(&g, done[0]), 13e-3, 1e-6);
    CHECK_NEAR(engine_end(&g, done[1]), 12e-3, 1e-6);
    CHECK_NEAR(engine_end(&g, done[2]), 11e-3, 1e-6);
    CHECK_NEAR(engine_end(&g, done[3]), 4e-3, 1e-6);
    engine_free(&g);
    ring_ctx_free(&x);
    routes_drop(&s);
  }
}

TEST(sim_ring_backward_returns_dkv_to_the_owner) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // Link-bound backward on 3 ranks: every rank's pass ends when its own dK/dV came home.
    int W = 3;
    ring_routes s = flat_ring(W, 1, 2, LINK_INTRA);  // KV 1 byte, dK/dV 2 bytes a hop
    cluster_desc c = one_node(W, 1e-9);           // 1 byte/s: a KV hop takes 1 s, a dK/dV hop 2 s
    double comp[9];
    for (int i = 0; i < 9; i++) comp[i] = 1e-6;
    ring_ctx x;
    sim_engine g;
    sr_error e;
    int32_t done[3];
    CHECK_EQ_INT(ring_ctx_init(&x, W, &c, &e), SR_OK);
    CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
    if (lean) engine_lean(&g);
    CHECK_EQ_INT(ring_backward(&g, &x, &s, comp, 0, 1, 2, NULL, done, &e), SR_OK);
    CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
    // Each sender's link, in order: step 0 KV 0..1, its own shard's partial 1..3; step 1 KV 3..4, the
    // partial received at 3 plus its step-1 share 4..6; step 2 the partial received at 6 goes home 6..8.
    for (int r = 0; r < W; r++) CHECK_NEAR(engine_end(&g, done[r]), 8.0, 1e-4);
    engine_free(&g);
    ring_ctx_free(&x);
    routes_drop(&s);
  }
}

// Rank 3 of 4 computes its own shard, then shards 2 and 1 (ordinary hops from ranks 2 and 1, 2 s each)
// and last shard 0, which rank 0 sends from its own memory, posted at step `post` (5 s). The other
// ranks compute only their own shard. Steps take 2 s; 1 byte/s. Returns rank 3's end.
static double early_ring_end(int lean, int post) {
  int W = 4;
  ring_routes rt;
  routes_open(&rt, W, W);
  for (int i = 0; i < W * W; i++) rt.kv_src[i] = -1;
  for (int r = 0; r < W; r++) rt.kv_src[r] = r;
  rt.kv_src[1 * W + 3] = 2, rt.kv_src[2 * W + 3] = 1, rt.kv_src[3 * W + 3] = 0;
  route_add(&rt, ROUTE_KV, 0, 1, 2, 3, 2, 2, LINK_INTRA, 0);
  if (post == 0) route_add(&rt, ROUTE_KV, 0, 3, 0, 3, 0, 5, LINK_INTRA, 1);
  route_add(&rt, ROUTE_KV, 1, 2, 1, 3, 1, 2, LINK_INTRA, 0);
  if (post == 2) route_add(&rt, ROUTE_KV, 2, 3, 0, 3, 0, 5, LINK_INTRA, 0);
  routes_close(&rt);
  cluster_desc c = one_node(W, 1e-9);
  double comp[16];
  for (int i = 0; i < 16; i++) comp[i] = 2;
  ring_ctx x;
  sim_engine g;
  sr_error e;
  int32_t done[4];
  CHECK_EQ_INT(ring_ctx_init(&x, W, &c, &e), SR_OK);
  CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
  if (lean) engine_lean(&g);
  CHECK_EQ_INT(ring_forward(&g, &x, &rt, comp, 0, 1, NULL, done, &e), SR_OK);
  CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
  double end = engine_end(&g, done[3]);
  engine_free(&g);
  ring_ctx_free(&x);
  routes_drop(&rt);
  return end;
}

TEST(sim_ring_early_transfer_runs_under_the_steps_in_between) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // Posted at step 0, shard 0's 5 s transfer runs under steps 0..2 (0..6 s): step 3 runs 6..8 s.
    // Posted at step 2 as an ordinary transfer, it starts when rank 3 ends step 1 (4 s): step 3 runs 9..11 s.
    CHECK_NEAR(early_ring_end(lean, 0), 8.0, 1e-6);
    CHECK_NEAR(early_ring_end(lean, 2), 11.0, 1e-6);
  }
}

TEST(sim_ring_owner_is_done_when_every_flush_of_its_shard_arrived) {
  for (int lean = 0; lean < 2; lean++) {  // ring.c's task graph, then ring_fast.c's passes in time
    // Shard 0 is computed by rank 1 at step 1 and by rank 2 at step 2 (each sent from rank 0's own memory),
    // two accumulator chains that each end with a flush home: rank 1's (5 bytes) after its step 1 ends at
    // 2 s, arriving at 7 s; rank 2's (1 byte) after its step 2 ends at 3 s, arriving at 4 s. Rank 0 is
    // done at 7 s: after both, not after the last one posted. Steps take 1 s; 1 byte/s.
    int W = 3;
    ring_routes rt;
    routes_open(&rt, W, W);
    for (int i = 0; i < W * W; i++) rt.kv_src[i] = -1;
    for (int r = 0; r < W; r++) rt.kv_src[r] = r;
    rt.kv_src[1 * W + 1] = 0, rt.kv_src[2 * W + 2] = 0;
    route_add(&rt, ROUTE_KV, 0, 1, 0, 1, 0, 1, LINK_INTRA, 0);
    route_add(&rt, ROUTE_KV, 1, 2, 0, 2, 0, 1, LINK_INTRA, 0);
    route_add(&rt, ROUTE_FLUSH, 1, 1, 1, 0, 0, 5, LINK_INTRA, 0);
    route_add(&rt, ROUTE_FLUSH, 2, 2, 2, 0, 0, 1, LINK_INTRA, 0);
    routes_close(&rt);
    cluster_desc c = one_node(W, 1e-9);
    double comp[9];
    for (int i = 0; i < 9; i++) comp[i] = 1;
    ring_ctx x;
    sim_engine g;
    sr_error e;
    int32_t done[3];
    CHECK_EQ_INT(ring_ctx_init(&x, W, &c, &e), SR_OK);
    CHECK_EQ_INT(engine_init(&g, W, 0, NULL, &e), SR_OK);
    if (lean) engine_lean(&g);
    CHECK_EQ_INT(ring_backward(&g, &x, &rt, comp, 0, 1, 2, NULL, done, &e), SR_OK);
    CHECK_EQ_INT(engine_run(&g, &e), SR_OK);
    CHECK_NEAR(engine_end(&g, done[0]), 7.0, 1e-6);
    CHECK_NEAR(engine_end(&g, done[1]), 2.0, 1e-6);
    CHECK_NEAR(engine_end(&g, done[2]), 3.0, 1e-6);
    engine_free(&g);
    ring_ctx_free(&x);
    routes_drop(&rt);
  }
}

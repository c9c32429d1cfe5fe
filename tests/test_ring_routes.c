// test_ring_routes.c — a plan's routes (plan/ring_plan.h): the transfers of a flat ring on one node are
// the schedule's own; skipping removes exactly the shards a window never touches; the double ring's
// outer transfers leave the owner at the start of the round; USP runs one ring per Ulysses index.
// Expected transfers are derived from the layouts and patterns by hand, not from the builder.
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/ring_plan.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/strategy.h"
#include "tests/test.h"

// A cluster of nodes x gpus (the links do not matter here), written into the test's scratch folder.
static const char *cluster(int nodes, int gpus) {
  static char path[700];
  snprintf(path, sizeof path, "%s/r%dx%d.json", test_tmpdir(), nodes, gpus);
  char text[1200];
  snprintf(text, sizeof text,
           "{\"nodes\": %d, \"gpus_per_node\": %d, \"gpu\": {\"name\": \"t\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5,"
           " \"attn_fwd_bar\": 0.5, \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8},"
           " \"comm_slowdown\": 1.0}, \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},"
           " \"inter_node\": {\"nics_per_node\": %d, \"nic_gbps\": 25, \"latency_us\": 5},"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}",
           nodes, gpus, gpus);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

// Plan tiny-test (4 heads, 2 KV heads, head_dim 16) over nodes x gpus.
static int build(plan *p, int nodes, int gpus, int64_t seq, const char *layout, const char *sched, const char *pattern,
                 int skip) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster(nodes, gpus));
  snprintf(s.layout, sizeof s.layout, "%s", layout);
  snprintf(s.schedule, sizeof s.schedule, "%s", sched);
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  s.seq = seq;
  s.skip_empty_sends = skip;
  sr_error e;
  int rc = plan_build(&s, p, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  return rc;
}

// The routes of layer 0 of p, with the pattern's counts (U = 1: every head is ring 0's).
static int routes_of(const plan *p, ring_routes *rt) {
  sr_error e;
  pattern pat;
  if (sim_pattern_build(p, &pat, &e)) return -1;
  int W = p->layout.world, U = p->schedule.ulysses, R = W / U, H = (int)p->model.num_heads;
  const layout *l = &p->layout;
  // Counts over the ring's layout: the plan's for U = 1; under USP, group g is ranks g*U .. g*U+U-1,
  // and each member of a ring computes its group's queries against a group's keys.
  work_count *head = calloc((size_t)H * W * W, sizeof *head), *grp = calloc((size_t)H * R * R, sizeof *grp);
  work_count *ring = calloc((size_t)U * R * R, sizeof *ring);
  int rc = tiles_account_layer(&pat, 0, l, head, &e);
  for (int h = 0; h < H && !rc; h++)
    for (int q = 0; q < W; q++)
      for (int k = 0; k < W; k++) {
        work_count *a = &grp[((int64_t)h * R + q / U) * R + k / U];
        const work_count *c = &head[((int64_t)h * W + q) * W + k];
        a->full += c->full, a->partial += c->partial, a->bars += c->bars;
      }
  if (!rc) ring_counts_from_heads(p, grp, ring);
  if (!rc) rc = ring_routes_build(p, ring, rt, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  free(head), free(grp), free(ring);
  pattern_free(&pat);
  return rc;
}

static int64_t kv_bytes(const plan *p, int64_t tokens, int kv_heads, int per_elem) {
  return 2 * tokens * kv_heads * p->model.head_dim * per_elem;
}

TEST(ring_routes_of_a_flat_ring_on_one_node_are_the_schedules_transfers) {
  // Without skipping, a flat ring's KV transfers are the schedule's forward sends, and its accumulator
  // hops and flushes are the dK/dV parts of the schedule's backward sends, one for one.
  const char *layouts[] = {"contiguous", "zigzag", "striped"};
  for (int k = 0; k < 3; k++) {
    plan p;
    CHECK_EQ_INT(build(&p, 1, 4, 4096, layouts[k], "ring", "dense", 0), SR_OK);
    ring_routes rt;
    CHECK_EQ_INT(routes_of(&p, &rt), 0);
    const schedule *s = &p.schedule;
    int W = s->world, nk = 0, ng = 0;
    for (int st = 0; st < s->n_steps; st++)
      for (int r = 0; r < W; r++) {
        const ring_step *rs = schedule_at(s, st, r);
        CHECK_EQ_INT(rt.kv_src[st * W + r], rs->kv_src);
        if (rs->send.peer >= 0) {
          const route *x = &rt.kv[nk++];
          CHECK(x->post_at == st && x->step == st + 1 && x->from == r && x->to == rs->send.peer);
          CHECK(x->shard == rs->send.shard && x->bytes == rs->send.bytes && x->link == rs->send.link && x->level == 0);
        }
        if (rs->send_bwd.grad_bytes > 0) {
          const route *x = &rt.grad[ng++];
          CHECK_EQ_INT(x->kind, st < s->n_steps - 1 ? ROUTE_ACC : ROUTE_FLUSH);
          CHECK(x->post_at == st && x->from == r && x->to == rs->send_bwd.peer && x->shard == rs->send_bwd.grad_shard);
          CHECK(x->bytes == rs->send_bwd.grad_bytes && x->link == rs->send_bwd.link);
        }
      }
    CHECK_EQ_INT(rt.n_kv, nk);
    CHECK_EQ_INT(rt.n_grad, ng);
    CHECK_EQ_INT(rt.n_kv, W * (W - 1));
    ring_routes_free(&rt);
    plan_free(&p);
  }
}

TEST(ring_routes_skip_exactly_the_shards_a_window_never_touches) {
  // Contiguous layout, 4 ranks of 1024 tokens, a causal window of 256 and no sinks: rank q's queries
  // reach its own keys and the last 255 of rank q-1, nothing else. With skipping, q-1 sends q its shard
  // at step 1 (posted at 0) and nothing more moves; the accumulator of shard q-1 goes back to q-1 after
  // step 1, and rank q's own accumulator travels with its shard to q+1 after step 0.
  int W = 4;
  for (int skip = 0; skip <= 1; skip++) {
    plan p;
    CHECK_EQ_INT(build(&p, 1, W, 4096, "contiguous", "ring", "window:0:256", skip), SR_OK);
    ring_routes rt;
    CHECK_EQ_INT(routes_of(&p, &rt), 0);
    int64_t shard = kv_bytes(&p, 1024, 2, 2), grad = kv_bytes(&p, 1024, 2, 4);
    if (!skip) {
      CHECK_EQ_INT(rt.n_kv, W * (W - 1));
      CHECK_EQ_INT(rt.skipped, 0);
    } else {
      CHECK_EQ_INT(rt.n_kv, W - 1);
      CHECK_EQ_INT(rt.skipped, W * (W - 1) - (W - 1));
      for (int64_t i = 0; i < rt.n_kv; i++) {
        const route *x = &rt.kv[i];
        CHECK(x->to == x->from + 1 && x->shard == x->from && x->post_at == 0 && x->step == 1 && x->bytes == shard);
      }
      int acc = 0, flush = 0;
      for (int64_t i = 0; i < rt.n_grad; i++) {
        const route *x = &rt.grad[i];
        CHECK_EQ_INT(x->bytes, grad);
        if (x->kind == ROUTE_ACC) {
          acc++;
          CHECK(x->to == x->from + 1 && x->shard == x->from && x->post_at == 0);
        } else {
          flush++;
          CHECK(x->kind == ROUTE_FLUSH && x->to == x->from - 1 && x->shard == x->to && x->post_at == 1);
        }
      }
      CHECK_EQ_INT(acc, W - 1);
      CHECK_EQ_INT(flush, W - 1);
      for (int r = 0; r < W; r++)
        for (int st = 0; st < W; st++) CHECK_EQ_INT(rt.kv_src[st * W + r], st == 0 ? r : st == 1 && r > 0 ? r - 1 : -1);
    }
    ring_routes_free(&rt);
    plan_free(&p);
  }
}

TEST(ring_routes_double_ring_sends_the_next_rounds_shard_from_its_owner_at_the_round_start) {
  // 2 nodes x 2 GPUs, double ring with inner rings of a node: round 1 (steps 2, 3) computes the other
  // node's shards. Its base shard (rank r's counterpart r +- 2) leaves its owner over the inter-node
  // link at step 0, so it runs under the whole first round; every other KV transfer is an ordinary
  // one inside the node.
  plan p;
  CHECK_EQ_INT(build(&p, 2, 2, 4096, "striped", "double-ring", "dense", 0), SR_OK);
  ring_routes rt;
  CHECK_EQ_INT(routes_of(&p, &rt), 0);
  int W = 4, early = 0;
  for (int64_t i = 0; i < rt.n_kv; i++) {
    const route *x = &rt.kv[i];
    if (x->level == 1) {
      early++;
      CHECK(x->from == (x->to + 2) % W && x->shard == x->from && x->post_at == 0 && x->step == 2);
      CHECK_EQ_INT(x->link, LINK_INTER);
    } else {
      CHECK(x->post_at == x->step - 1 && x->link == LINK_INTRA);
    }
  }
  CHECK_EQ_INT(early, W);
  CHECK_EQ_INT(rt.n_kv, W * (W - 1));
  // Backward: every shard's two accumulator chains (one per node) end at its owner.
  int flush_in[4] = {0};
  for (int64_t i = 0; i < rt.n_grad; i++)
    if (rt.grad[i].kind == ROUTE_FLUSH) {
      flush_in[rt.grad[i].to]++;
      CHECK_EQ_INT(rt.grad[i].shard, rt.grad[i].to);
    }
  for (int r = 0; r < W; r++) CHECK_EQ_INT(flush_in[r], 2);
  ring_routes_free(&rt);
  plan_free(&p);
}

TEST(ring_routes_usp_runs_one_ring_per_ulysses_index) {
  // USP of degree 2 on 2 nodes x 2: ring b holds ranks b and b + 2 (one per node); a shard is the
  // other group's 2048 tokens of one KV head (tiny-test has 2 KV heads over 2 members).
  plan p;
  CHECK_EQ_INT(build(&p, 2, 2, 4096, "zigzag", "usp", "dense", 0), SR_OK);
  ring_routes rt;
  CHECK_EQ_INT(routes_of(&p, &rt), 0);
  CHECK_EQ_INT(rt.ulysses, 2);
  CHECK_EQ_INT(rt.ring, 2);
  CHECK_EQ_INT(rt.n_kv, 4);
  for (int64_t i = 0; i < rt.n_kv; i++) {
    const route *x = &rt.kv[i];
    CHECK(x->to == (x->from + 2) % 4 && x->shard == x->from && x->post_at == 0 && x->link == LINK_INTER);
    CHECK_EQ_INT(x->bytes, kv_bytes(&p, 2048, 1, 2));
  }
  ring_routes_free(&rt);
  plan_free(&p);
}

// test_schedule.c — schedules: every rank meets every shard once, sends match receives, shards are
// held before they are used, gradients reach their owners complete, bytes and links follow closed forms.
#include <stdlib.h>
#include <string.h>

#include "plan/schedule.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------------------------
// hand-built inputs (the unit tests do not depend on shipped files)

static cluster_desc make_cluster(int nodes, int gpus) {
  cluster_desc c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "test-%dx%d", nodes, gpus);
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.intra.gbps = 300, c.nic.gbps = 25, c.nics_per_node = gpus;
  return c;
}

static model_config make_model(int heads, int kv_heads, int head_dim) {
  model_config m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "test-model");
  m.num_heads = heads, m.num_kv_heads = kv_heads, m.head_dim = head_dim;
  m.hidden_size = (int64_t)heads * head_dim, m.num_layers = 2;
  return m;
}

static const int shapes[][2] = {{1, 1}, {1, 2}, {1, 8}, {2, 1}, {2, 4}, {3, 5}, {4, 8}, {2, 3}, {5, 2}};
#define N_SHAPES (int)(sizeof shapes / sizeof *shapes)

static int build(schedule_kind kind, int nodes, int gpus, int inner, int ulysses, int64_t n, layout_kind lk,
                 const model_config *m, schedule *s) {
  sr_error e;
  cluster_desc c = make_cluster(nodes, gpus);
  layout l;
  if (layout_build(lk, n, nodes * gpus, 4, NULL, &l, &e)) return -1;
  int rc = schedule_build(kind, &c, m, &l, inner, ulysses, 2, s, &e);
  layout_free(&l);
  return rc;
}

// Every (kind, shape, inner/Ulysses degree) combination the tests walk through; calls fn on each.
typedef void (*sched_check)(const schedule *s);
static int for_each_schedule(sched_check fn) {
  model_config m = make_model(16, 8, 8);
  int count = 0;
  for (int si = 0; si < N_SHAPES; si++) {
    int nodes = shapes[si][0], gpus = shapes[si][1];
    schedule s;
    for (int kind = SCHED_RING; kind <= SCHED_USP; kind++)
      for (int d = 1; d <= nodes * gpus; d++) {
        int inner = 0, uly = 0;
        if (kind == SCHED_RING && d > 1) continue;
        if (kind == SCHED_DOUBLE_RING) { if (gpus % d) continue; inner = d; }
        if (kind == SCHED_ULYSSES) { if (d != nodes * gpus || 16 % d) continue; uly = d; }
        if (kind == SCHED_USP) { if ((nodes * gpus) % d || 16 % d || (8 % d && d % 8)) continue; uly = d; }
        if (build((schedule_kind)kind, nodes, gpus, inner, uly, 1000 + 7 * si, LAYOUT_ZIGZAG, &m, &s) != SR_OK) {
          CHECK(0);
          continue;
        }
        fn(&s);
        schedule_free(&s);
        count++;
      }
  }
  return count;
}

// The ring a rank belongs to: ranks sharing its Ulysses index (all ranks for ring kinds).
static int same_ring(const schedule *s, int a, int b) { return a % s->ulysses == b % s->ulysses; }

// ---------------------------------------------------------------------------------------------
// coverage and matching

static void check_meets_every_shard_once(const schedule *s) {
  for (int r = 0; r < s->world; r++) {
    int seen[64] = {0};
    for (int t = 0; t < s->n_steps; t++) {
      int src = schedule_at(s, t, r)->kv_src;
      CHECK(src >= 0 && src < s->world);
      if (src >= 0 && src < s->world) seen[src]++;
    }
    for (int o = 0; o < s->world; o++) CHECK_EQ_INT(seen[o], same_ring(s, r, o) ? 1 : 0);
    CHECK_EQ_INT(schedule_at(s, 0, r)->kv_src, r);
  }
}

TEST(schedule_every_rank_meets_every_kv_shard_exactly_once) {
  CHECK(for_each_schedule(check_meets_every_shard_once) > 40);
}

static int same_transfer(const transfer *a, const transfer *b) {
  return a->shard == b->shard && a->bytes == b->bytes && a->link == b->link && a->level == b->level &&
         a->grad_shard == b->grad_shard && a->grad_bytes == b->grad_bytes;
}

static void check_sends_match_receives(const schedule *s) {
  for (int t = 0; t < s->n_steps; t++)
    for (int r = 0; r < s->world; r++) {
      const ring_step *st = schedule_at(s, t, r);
      const transfer *sends[4] = {&st->send, &st->send_bwd, &st->send_outer, &st->send_outer_bwd};
      const transfer *recvs[4] = {&st->recv, &st->recv_bwd, &st->recv_outer, &st->recv_outer_bwd};
      for (int k = 0; k < 4; k++) {
        if (sends[k]->peer >= 0) {
          CHECK(sends[k]->peer != r && sends[k]->peer < s->world);
          const ring_step *p = schedule_at(s, t, sends[k]->peer);
          const transfer *match[4] = {&p->recv, &p->recv_bwd, &p->recv_outer, &p->recv_outer_bwd};
          CHECK_EQ_INT(match[k]->peer, r);
          CHECK(same_transfer(sends[k], match[k]));
        }
        if (recvs[k]->peer >= 0) {
          const ring_step *p = schedule_at(s, t, recvs[k]->peer);
          const transfer *match[4] = {&p->send, &p->send_bwd, &p->send_outer, &p->send_outer_bwd};
          CHECK_EQ_INT(match[k]->peer, r);
        }
        CHECK(sends[k]->bytes >= 0 && sends[k]->grad_bytes <= sends[k]->bytes);
      }
    }
}

TEST(schedule_every_send_has_the_matching_receive_at_the_same_step) {
  CHECK(for_each_schedule(check_sends_match_receives) > 40);
}

// Forward data flow: simulate which shards each rank holds; the shard computed at every step must
// already be there (own, or delivered by an earlier step's transfer).
static void check_shards_arrive_before_use(const schedule *s) {
  unsigned char *held = calloc((size_t)s->world * (size_t)s->world, 1);
  for (int r = 0; r < s->world; r++) held[r * s->world + r] = 1;
  for (int t = 0; t < s->n_steps; t++) {
    for (int r = 0; r < s->world; r++) {
      const ring_step *st = schedule_at(s, t, r);
      CHECK(held[r * s->world + st->kv_src]);
      if (st->send.peer >= 0) CHECK(held[r * s->world + st->send.shard]);
      if (st->send_outer.peer >= 0) CHECK(held[r * s->world + st->send_outer.shard]);
    }
    for (int r = 0; r < s->world; r++) {
      const ring_step *st = schedule_at(s, t, r);
      if (st->recv.peer >= 0) held[r * s->world + st->recv.shard] = 1;
      if (st->recv_outer.peer >= 0) held[r * s->world + st->recv_outer.shard] = 1;
    }
  }
  free(held);
}

TEST(schedule_every_shard_is_held_before_it_is_computed_or_sent) {
  CHECK(for_each_schedule(check_shards_arrive_before_use) > 40);
}

// Backward data flow: a dK/dV buffer is a set of contributing ranks (a bit mask) travelling with the
// transfers; each step's compute adds its rank's bit, inner hops move buffers, then outer hops do.
// At the end each owner must hold its own shard's buffer with every ring member's bit exactly once.
static void move_grad(uint64_t *buf, int world, int from, const transfer *t, int *bad) {
  if (t->peer < 0 || t->grad_shard < 0) return;
  uint64_t *src = &buf[from * world + t->grad_shard], *dst = &buf[t->peer * world + t->grad_shard];
  if (*src == 0 || (*src & *dst)) (*bad)++;
  *dst |= *src;
  *src = 0;
}

static void check_gradients_reach_owners_complete(const schedule *s) {
  const int w = s->world;
  uint64_t *buf = calloc((size_t)w * (size_t)w, sizeof *buf);
  int bad = 0;
  for (int t = 0; t < s->n_steps; t++) {
    for (int r = 0; r < w; r++) {
      uint64_t *b = &buf[r * w + schedule_at(s, t, r)->kv_src];
      if (*b & (1ull << r)) bad++;
      *b |= 1ull << r;
    }
    for (int pass = 0; pass < 2; pass++)
      for (int r = 0; r < w; r++) {
        const ring_step *st = schedule_at(s, t, r);
        move_grad(buf, w, r, pass == 0 ? &st->send_bwd : &st->send_outer_bwd, &bad);
      }
  }
  for (int r = 0; r < w; r++) {
    uint64_t ring_mask = 0;
    for (int o = 0; o < w; o++)
      if (same_ring(s, r, o)) ring_mask |= 1ull << o;
    for (int x = 0; x < w; x++) CHECK_EQ_INT(buf[r * w + x], x == r ? ring_mask : 0);
  }
  CHECK_EQ_INT(bad, 0);
  free(buf);
}

TEST(schedule_backward_brings_every_dkdv_home_with_each_contribution_once) {
  CHECK(for_each_schedule(check_gradients_reach_owners_complete) > 40);
}

// ---------------------------------------------------------------------------------------------
// double ring against flat ring

TEST(schedule_double_ring_meets_the_same_pairs_as_the_flat_ring) {
  model_config m = make_model(16, 8, 8);
  const int shp[][3] = {{2, 4, 4}, {4, 8, 8}, {4, 8, 2}, {3, 5, 5}, {8, 2, 1}};
  for (int k = 0; k < 5; k++) {
    schedule flat, dbl;
    CHECK_EQ_INT(build(SCHED_RING, shp[k][0], shp[k][1], 0, 0, 999, LAYOUT_STRIPED, &m, &flat), SR_OK);
    CHECK_EQ_INT(build(SCHED_DOUBLE_RING, shp[k][0], shp[k][1], shp[k][2], 0, 999, LAYOUT_STRIPED, &m, &dbl), SR_OK);
    CHECK_EQ_INT(flat.n_steps, dbl.n_steps);
    for (int r = 0; r < flat.world; r++) {
      uint64_t a = 0, b = 0;
      for (int t = 0; t < flat.n_steps; t++) {
        a |= 1ull << schedule_at(&flat, t, r)->kv_src;
        b |= 1ull << schedule_at(&dbl, t, r)->kv_src;
      }
      CHECK(a == b);
    }
    CHECK_EQ_INT(dbl.outer, shp[k][0] * shp[k][1] / shp[k][2]);
    schedule_free(&flat);
    schedule_free(&dbl);
  }
}

static int same_step(const ring_step *a, const ring_step *b) {
  return a->kv_src == b->kv_src && a->send.peer == b->send.peer && same_transfer(&a->send, &b->send) &&
         a->recv.peer == b->recv.peer && same_transfer(&a->recv, &b->recv) && a->send_bwd.peer == b->send_bwd.peer &&
         same_transfer(&a->send_bwd, &b->send_bwd) && a->recv_bwd.peer == b->recv_bwd.peer &&
         same_transfer(&a->recv_bwd, &b->recv_bwd) && a->send_outer.peer == -1 && b->send_outer.peer == -1 &&
         a->send_outer_bwd.peer == -1 && b->send_outer_bwd.peer == -1;
}

TEST(schedule_double_ring_on_one_node_is_the_flat_ring) {
  model_config m = make_model(16, 8, 8);
  for (int gpus = 1; gpus <= 8; gpus++) {
    schedule flat, dbl;
    CHECK_EQ_INT(build(SCHED_RING, 1, gpus, 0, 0, 1234, LAYOUT_ZIGZAG, &m, &flat), SR_OK);
    CHECK_EQ_INT(build(SCHED_DOUBLE_RING, 1, gpus, 0, 0, 1234, LAYOUT_ZIGZAG, &m, &dbl), SR_OK);
    for (int t = 0; t < flat.n_steps; t++)
      for (int r = 0; r < gpus; r++) CHECK(same_step(schedule_at(&flat, t, r), schedule_at(&dbl, t, r)));
    schedule_free(&flat);
    schedule_free(&dbl);
  }
}

TEST(schedule_double_ring_outer_transfer_starts_each_inner_ring_over_the_network) {
  model_config m = make_model(16, 8, 8);
  schedule s;
  const int nodes = 4, gpus = 8;
  CHECK_EQ_INT(build(SCHED_DOUBLE_RING, nodes, gpus, 0, 0, 4096, LAYOUT_STRIPED, &m, &s), SR_OK);
  for (int t = 0; t < s.n_steps; t++)
    for (int r = 0; r < s.world; r++) {
      const ring_step *st = schedule_at(&s, t, r);
      int round = t / gpus, j = t % gpus;
      if (j == 0 && round < nodes - 1) {
        CHECK_EQ_INT(st->send_outer.peer, (r + gpus) % s.world);  // same local rank, next node
        CHECK_EQ_INT(st->send_outer.level, 1);
        CHECK_EQ_INT(st->send_outer.link, LINK_INTER);
        // It carries what the receiver computes at the start of the next inner ring.
        CHECK_EQ_INT(st->send_outer.shard, schedule_at(&s, (round + 1) * gpus, st->send_outer.peer)->kv_src);
      } else {
        CHECK_EQ_INT(st->send_outer.peer, -1);
      }
      if (st->send.peer >= 0) CHECK_EQ_INT(st->send.link, LINK_INTRA);
      CHECK_EQ_INT(st->send.peer >= 0, j < gpus - 1);
    }
  schedule_free(&s);
}

TEST(schedule_double_ring_with_smaller_inner_ring_keeps_outer_hops_inside_a_node_when_possible) {
  model_config m = make_model(16, 8, 8);
  schedule s;
  CHECK_EQ_INT(build(SCHED_DOUBLE_RING, 2, 8, 4, 0, 4096, LAYOUT_STRIPED, &m, &s), SR_OK);
  CHECK_EQ_INT(s.inner, 4);
  CHECK_EQ_INT(s.outer, 4);
  for (int r = 0; r < 16; r++) {
    const transfer *t = &schedule_at(&s, 0, r)->send_outer;
    CHECK_EQ_INT(t->peer, (r + 4) % 16);
    CHECK_EQ_INT(t->link, r / 8 == ((r + 4) % 16) / 8 ? LINK_INTRA : LINK_INTER);
  }
  schedule_free(&s);
}

// ---------------------------------------------------------------------------------------------
// bytes and links

TEST(schedule_ring_bytes_follow_the_closed_form_for_uneven_shards) {
  // N = 1001 = 8*125 + 1 over 8 ranks, contiguous: rank 0 holds 126 tokens, the others 125 (remainder rule).
  // A KV shard of n tokens is 2 * n * kv_heads * head_dim * 2 bytes (bf16); dK+dV the same at 4 bytes.
  model_config m = make_model(32, 4, 64);
  schedule s;
  CHECK_EQ_INT(build(SCHED_RING, 2, 4, 0, 0, 1001, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  int64_t fwd_total = 0, bwd_total = 0;
  for (int t = 0; t < s.n_steps; t++)
    for (int r = 0; r < 8; r++) {
      const ring_step *st = schedule_at(&s, t, r);
      int64_t n_src = st->kv_src == 0 ? 126 : 125;
      if (t < 7) {
        CHECK_EQ_INT(st->send.peer, (r + 1) % 8);
        CHECK_EQ_INT(st->send.shard, st->kv_src);
        CHECK_EQ_INT(st->send.bytes, 2 * n_src * 4 * 64 * 2);
        CHECK_EQ_INT(st->send_bwd.bytes, 2 * n_src * 4 * 64 * 2 + 2 * n_src * 4 * 64 * 4);
        CHECK_EQ_INT(st->send.link, r == 3 || r == 7 ? LINK_INTER : LINK_INTRA);
      } else {
        CHECK_EQ_INT(st->send.peer, -1);
        CHECK_EQ_INT(st->send_bwd.shard, -1);                  // the last hop carries dK/dV only,
        CHECK_EQ_INT(st->send_bwd.grad_shard, (r + 1) % 8);    // to the owner of the shard
        CHECK_EQ_INT(st->send_bwd.bytes, 2 * n_src * 4 * 64 * 4);
      }
      fwd_total += st->send.bytes;
      bwd_total += st->send_bwd.bytes;
    }
  // Every shard travels W-1 hops forward; backward W-1 hops of KV and W hops of dK+dV.
  const int64_t kv_all = 2 * 1001 * 4 * 64 * 2, grad_all = 2 * 1001 * 4 * 64 * 4;
  CHECK_EQ_INT(fwd_total, 7 * kv_all);
  CHECK_EQ_INT(bwd_total, 7 * kv_all + 8 * grad_all);
  schedule_free(&s);
}

TEST(schedule_double_ring_bytes_follow_the_closed_form) {
  // 4 nodes x 8 GPUs, inner 8, outer 4; N = 10007 (prime), zigzag. With KV_all = K+V of all tokens:
  // forward every shard makes K-1 inner hops in each of O groups and O-1 outer hops: (W-1) * KV_all,
  // of which (O-1) * KV_all crosses nodes. Backward adds dK/dV: K hops per group (K-1 riding with
  // the KV, one home) and O outer hops (O-1 to the next group, one to the owner): (O*K + O) * GRAD_all.
  model_config m = make_model(16, 4, 64);
  schedule s;
  const int64_t n = 10007, W = 32, K = 8, O = 4;
  CHECK_EQ_INT(build(SCHED_DOUBLE_RING, 4, 8, 0, 0, n, LAYOUT_ZIGZAG, &m, &s), SR_OK);
  const int64_t kv_all = 2 * n * 4 * 64 * 2, grad_all = 2 * n * 4 * 64 * 4;
  int64_t fwd = 0, fwd_inter = 0, bwd = 0, bwd_grad = 0;
  for (int t = 0; t < s.n_steps; t++)
    for (int r = 0; r < W; r++) {
      const ring_step *st = schedule_at(&s, t, r);
      fwd += st->send.bytes + st->send_outer.bytes;
      fwd_inter += (st->send.link == LINK_INTER ? st->send.bytes : 0) + (st->send_outer.link == LINK_INTER ? st->send_outer.bytes : 0);
      bwd += st->send_bwd.bytes + st->send_outer_bwd.bytes;
      bwd_grad += st->send_bwd.grad_bytes + st->send_outer_bwd.grad_bytes;
    }
  CHECK_EQ_INT(fwd, (W - 1) * kv_all);
  CHECK_EQ_INT(fwd_inter, (O - 1) * kv_all);
  CHECK_EQ_INT(bwd_grad, (O * K + O) * grad_all);
  CHECK_EQ_INT(bwd, (W - 1) * kv_all + (O * K + O) * grad_all);
  schedule_free(&s);
}

TEST(schedule_ranks_without_tokens_still_relay_the_ring) {
  // 5 tokens on 8 ranks: ranks 5..7 hold nothing, but every rank still meets all 8 (possibly empty)
  // shards and forwards them; empty shards cost 0 bytes.
  model_config m = make_model(4, 2, 16);
  schedule s;
  CHECK_EQ_INT(build(SCHED_RING, 1, 8, 0, 0, 5, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  check_meets_every_shard_once(&s);
  check_shards_arrive_before_use(&s);
  for (int t = 0; t < 7; t++)
    for (int r = 0; r < 8; r++) {
      const transfer *x = &schedule_at(&s, t, r)->send;
      CHECK_EQ_INT(x->peer, (r + 1) % 8);
      CHECK_EQ_INT(x->bytes, x->shard < 5 ? 2 * 1 * 2 * 16 * 2 : 0);
    }
  schedule_free(&s);
}

TEST(schedule_single_rank_has_one_step_and_no_transfers) {
  model_config m = make_model(4, 2, 16);
  schedule s;
  CHECK_EQ_INT(build(SCHED_RING, 1, 1, 0, 0, 100, LAYOUT_STRIPED, &m, &s), SR_OK);
  CHECK_EQ_INT(s.n_steps, 1);
  CHECK_EQ_INT(schedule_at(&s, 0, 0)->kv_src, 0);
  CHECK_EQ_INT(schedule_at(&s, 0, 0)->send.peer, -1);
  CHECK_EQ_INT(schedule_at(&s, 0, 0)->send_bwd.peer, -1);
  schedule_free(&s);
}

// ---------------------------------------------------------------------------------------------
// Ulysses and USP

TEST(schedule_ulysses_all_to_all_volumes_follow_the_closed_form) {
  // 8 ranks, 1024 tokens each; 32 heads, 8 KV heads, head_dim 128, bf16. Degree 8: 4 q heads and 1 KV
  // head a rank. q,k,v: each rank sends 7/8 of its tokens' (32 + 2*8) heads; o: 7 peers' tokens of 4 heads.
  model_config m = make_model(32, 8, 128);
  schedule s;
  CHECK_EQ_INT(build(SCHED_ULYSSES, 1, 8, 0, 0, 8192, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  CHECK_EQ_INT(s.n_steps, 1);
  CHECK_EQ_INT(s.ulysses, 8);
  CHECK_EQ_INT(s.heads_per_rank, 4);
  CHECK_EQ_INT(s.kv_heads_per_rank, 1);
  CHECK_EQ_INT(s.kv_heads_replicated, 0);
  CHECK_EQ_INT(s.a2a_bytes_qkv, 7LL * 1024 * (4 + 2 * 1) * 128 * 2);
  CHECK_EQ_INT(s.a2a_bytes_qkv, 1024LL * (32 + 2 * 8) * 128 * 2 * 7 / 8);
  CHECK_EQ_INT(s.a2a_bytes_out, 7LL * 1024 * 4 * 128 * 2);
  CHECK_EQ_INT(s.a2a_link, LINK_INTRA);
  for (int r = 0; r < 8; r++) CHECK_EQ_INT(schedule_at(&s, 0, r)->kv_src, r);
  schedule_free(&s);
}

TEST(schedule_ulysses_beyond_kv_heads_replicates_them_and_says_so) {
  model_config m = make_model(16, 2, 64);
  schedule s;
  CHECK_EQ_INT(build(SCHED_ULYSSES, 1, 8, 0, 0, 800, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  CHECK_EQ_INT(s.kv_heads_replicated, 1);
  CHECK_EQ_INT(s.kv_heads_per_rank, 1);
  schedule_free(&s);
  CHECK_EQ_INT(build(SCHED_ULYSSES, 1, 2, 0, 0, 800, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  CHECK_EQ_INT(s.kv_heads_replicated, 0);
  schedule_free(&s);
}

TEST(schedule_ulysses_degree_that_does_not_split_heads_is_an_input_error) {
  sr_error e;
  model_config m = make_model(12, 4, 64);
  cluster_desc c = make_cluster(1, 8);
  layout l;
  schedule s;
  layout_build(LAYOUT_CONTIGUOUS, 800, 8, 1, NULL, &l, &e);
  CHECK_EQ_INT(schedule_build(SCHED_ULYSSES, &c, &m, &l, 0, 0, 2, &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "ulysses");
  CHECK_STR_CONTAINS(e.msg, "12 attention heads");
  CHECK_EQ_INT(schedule_build(SCHED_USP, &c, &m, &l, 0, 3, 2, &s, &e), SR_EINPUT);
  CHECK_EQ_INT(schedule_build(SCHED_ULYSSES, &c, &m, &l, 0, 4, 2, &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "usp");
  layout_free(&l);
}

TEST(schedule_usp_runs_a_ring_across_nodes_over_ulysses_groups) {
  // 4 nodes x 4 GPUs, U = 4 (inside a node), R = 4. Rank r = 4a + u: ring over a, stride 4.
  model_config m = make_model(16, 4, 32);
  schedule s;
  CHECK_EQ_INT(build(SCHED_USP, 4, 4, 0, 0, 1600, LAYOUT_CONTIGUOUS, &m, &s), SR_OK);
  CHECK_EQ_INT(s.ulysses, 4);
  CHECK_EQ_INT(s.ring, 4);
  CHECK_EQ_INT(s.n_steps, 4);
  CHECK_EQ_INT(s.a2a_link, LINK_INTRA);
  for (int t = 0; t < 4; t++)
    for (int r = 0; r < 16; r++) {
      const ring_step *st = schedule_at(&s, t, r);
      int a = r / 4, u = r % 4;
      CHECK_EQ_INT(st->kv_src, ((a - t + 4) % 4) * 4 + u);
      if (t < 3) {
        CHECK_EQ_INT(st->send.peer, ((a + 1) % 4) * 4 + u);
        CHECK_EQ_INT(st->send.link, LINK_INTER);
        // A group holds 400 tokens; each rank carries its 1 KV head of them.
        CHECK_EQ_INT(st->send.bytes, 2LL * 400 * 1 * 32 * 2);
      }
    }
  schedule_free(&s);
}

// ---------------------------------------------------------------------------------------------
// errors and names

TEST(schedule_rejects_inner_ring_that_does_not_divide_a_node) {
  sr_error e;
  model_config m = make_model(16, 8, 8);
  cluster_desc c = make_cluster(2, 8);
  layout l;
  schedule s;
  layout_build(LAYOUT_STRIPED, 4096, 16, 128, NULL, &l, &e);
  CHECK_EQ_INT(schedule_build(SCHED_DOUBLE_RING, &c, &m, &l, 3, 0, 2, &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "inner");
  CHECK_EQ_INT(schedule_build(SCHED_RING, &c, &m, &l, 4, 0, 2, &s, &e), SR_EINPUT);
  layout_free(&l);
  layout_build(LAYOUT_STRIPED, 4096, 8, 128, NULL, &l, &e);
  CHECK_EQ_INT(schedule_build(SCHED_RING, &c, &m, &l, 0, 0, 2, &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "16 GPUs");
  layout_free(&l);
}

TEST(schedule_names_parse_and_print) {
  sr_error e;
  schedule_kind k;
  CHECK_EQ_INT(schedule_parse_kind("double-ring", &k, &e), SR_OK);
  CHECK_EQ_INT(k, SCHED_DOUBLE_RING);
  CHECK(strcmp(schedule_kind_name(SCHED_USP), "usp") == 0);
  CHECK_EQ_INT(schedule_parse_kind("torus", &k, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "schedule");
  CHECK_STR_CONTAINS(e.msg, "torus");
  CHECK(strcmp(link_class_name(LINK_INTER), "inter") == 0);
}

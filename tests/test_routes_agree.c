// test_routes_agree.c — the simulator costs exactly the transfers the executor posts. For a plan and
// its pattern, every ring transfer sim_run_transfers costs (layer, pass, kind, post step, use step,
// from, to, shard, bytes, link, level) is held against the operations the CPU backend posts
// (exec/ring_ops.c on the ring plan of exec's dist_routes_build, as ring.c turns them into MPI calls),
// transfer by transfer, on flat rings over every layout, double rings over two nodes and USP, with and
// without skipping. The executor's sends must also meet a matching receive (same pair, tag and count).
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

// A cluster of nodes x gpus, written into the test's scratch folder.
static const char *cluster(int nodes, int gpus) {
  static char path[700];
  snprintf(path, sizeof path, "%s/a%dx%d.json", test_tmpdir(), nodes, gpus);
  char text[1200];
  snprintf(text, sizeof text,
           "{\"nodes\": %d, \"gpus_per_node\": %d, \"gpu\": {\"name\": \"t\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5,"
           " \"attn_fwd_bar\": 0.5, \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8},"
           " \"comm_slowdown\": 1.0}, \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},"
           " \"inter_node\": {\"nics_per_node\": 1, \"nic_gbps\": 25, \"latency_us\": 5},"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}",
           nodes, gpus);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

typedef struct {
  int layer, backward, kind, post_at, step, from, to, shard, link, level;
  int64_t bytes;
} xfer;

static int cmp_xfer(const void *a, const void *b) {
  const xfer *x = a, *y = b;
  const int kx[] = {x->layer, x->backward, x->post_at, x->from, x->to, x->kind, x->step, x->shard, x->level, x->link};
  const int ky[] = {y->layer, y->backward, y->post_at, y->from, y->to, y->kind, y->step, y->shard, y->level, y->link};
  for (int i = 0; i < 10; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

typedef struct {
  xfer *v;
  int n, cap;
} xfers;

static void push(xfers *l, xfer x) {
  if (l->n == l->cap) l->cap = l->cap ? 2 * l->cap : 256, l->v = realloc(l->v, sizeof *l->v * (size_t)l->cap);
  l->v[l->n++] = x;
}

// What one rank's operations send in one pass of one layer (ring b, member g = rank r); and each of its
// operations as (from, to, tag, count) into sends or recvs, for the matching check.
static void exec_rank(const plan *p, const struct dist_attn *a, int layer, int backward, int r, xfers *out,
                      xfers *sends, xfers *recvs) {
  const int U = a->U, b = r % U, g = r / U;
  const ring_plan *rp = &a->routes.rings[b];
  const int kv_elem = p->schedule.kv_bytes_per_elem, kv_heads = a->Hkv >= U ? a->Hkv / U : 1;
  ring_op ro[64];
  for (int s = 0; s < rp->n_steps; s++)
    for (int part = 0; part < 3; part++) {
      int kind = backward ? RING_TAG_KV_BWD : RING_TAG_KV_FWD, m;
      if (part == 0) m = ring_ops_kv(rp, g, s, kind, ro, 64);
      else if (part == 1) m = ring_ops_early(rp, g, s, kind, ro, 64);
      else m = backward ? ring_ops_grad(rp, g, s, ro, 64) : 0;
      CHECK(m >= 0);
      for (int i = 0; i < m; i++) {
        int peer = ro[i].peer * U + b;  // dist_ring_rank
        int64_t count = 2 * a->glay->rank_count[ro[i].shard] * kv_heads * p->model.head_dim;
        xfer op = {layer, backward, ro[i].tag_kind, ro[i].tag_step, 0, ro[i].is_send ? r : peer, ro[i].is_send ? peer : r,
                   0, 0, 0, count};
        push(ro[i].is_send ? sends : recvs, op);
        if (!ro[i].is_send) continue;
        int grad = ro[i].tag_kind == RING_TAG_ACC || ro[i].tag_kind == RING_TAG_FLUSH;
        xfer x = {layer, backward, ROUTE_KV, s, s + 1, r, peer, ro[i].shard * U + b, LINK_INTRA, 0,
                  count * (grad ? 4 : kv_elem)};
        if (ro[i].tag_kind >= RING_TAG_OUTER) x.level = 1, x.step = ro[i].tag_step;
        if (ro[i].tag_kind == RING_TAG_ACC) x.kind = ROUTE_ACC;
        if (ro[i].tag_kind == RING_TAG_FLUSH) x.kind = ROUTE_FLUSH, x.step = s;
        if (cluster_node_of(&p->cluster, r) != cluster_node_of(&p->cluster, peer)) x.link = LINK_INTER;
        push(out, x);
      }
    }
  if (backward) {  // the owner's flush receptions, posted at the start of the backward
    int n = ring_ops_flush_recv(rp, g, NULL, 0);
    ring_op *fo = malloc(sizeof *fo * (size_t)(n > 0 ? n : 1));
    CHECK_EQ_INT(ring_ops_flush_recv(rp, g, fo, n), n);
    for (int i = 0; i < n; i++)
      push(recvs, (xfer){layer, 1, fo[i].tag_kind, fo[i].tag_step, 0, fo[i].peer * U + b, r, 0, 0, 0,
                         2 * a->glay->rank_count[g] * kv_heads * p->model.head_dim});
    free(fo);
  }
}

// The transfers the CPU backend posts for every layer of p, through exec's own derivation.
static void exec_transfers(const plan *p, const pattern *pat, xfers *out, xfers *sends, xfers *recvs) {
  const int W = p->layout.world, U = p->schedule.ulysses > 1 ? p->schedule.ulysses : 1;
  layout group;
  sr_error e;
  const layout *glay = &p->layout;
  if (U > 1) {
    CHECK_EQ_INT(layout_group_ranks(&p->layout, U, &group, &e), SR_OK);
    glay = &group;
  }
  for (int l = 0; l < pat->layers; l++) {
    struct dist_attn a;
    memset(&a, 0, sizeof a);
    a.p = p, a.pat = pat, a.layer = l, a.glay = glay, a.skipping = p->spec.skip_empty_sends;
    a.H = (int)p->model.num_heads, a.Hkv = (int)p->model.num_kv_heads, a.d = (int)p->model.head_dim;
    a.U = U, a.R = W / U, a.nkv = a.Hkv >= U ? a.Hkv / U : 1, a.elem_kv = 4;
    CHECK_EQ_INT(dist_routes_build(&a, &e), SR_OK);
    for (int backward = 0; backward <= 1; backward++)
      for (int r = 0; r < W; r++) exec_rank(p, &a, l, backward, r, out, sends, recvs);
    ring_routes_free(&a.routes);
  }
  if (U > 1) layout_free(&group);
}

// Build the plan, run both sides, compare; returns the number of transfers (-1 on a setup failure).
static int agree(int nodes, int gpus, const char *layout, const char *sched, const char *source, int skip) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster(nodes, gpus));
  snprintf(s.layout, sizeof s.layout, "%s", layout);
  snprintf(s.schedule, sizeof s.schedule, "%s", sched);
  snprintf(s.pattern, sizeof s.pattern, "%s", source);
  s.seq = 4096;
  s.skip_empty_sends = skip;
  s.recompute = 0;  // one forward pass per layer: each forward transfer is costed once
  plan p;
  pattern pat;
  sr_error e;
  if (plan_build(&s, &p, &e) || sim_pattern_build(&p, &pat, &e)) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return -1;
  }
  // The simulator's side: every transfer its ring passes cost.
  sim_transfers st = {0};
  sim_result res;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_EQ_INT(sim_run_transfers(&p, &pat, &o, &st, &res, NULL, &e), SR_OK);
  xfers sim = {0}, ex = {0}, sends = {0}, recvs = {0};
  for (int64_t i = 0; i < st.n; i++) {
    const route *r = &st.t[i].r;
    push(&sim, (xfer){st.t[i].layer, st.t[i].backward, r->kind, r->post_at, r->step, r->from, r->to, r->shard, r->link,
                      r->level, r->bytes});
  }
  exec_transfers(&p, &pat, &ex, &sends, &recvs);
  qsort(sim.v, (size_t)sim.n, sizeof *sim.v, cmp_xfer);
  qsort(ex.v, (size_t)ex.n, sizeof *ex.v, cmp_xfer);
  CHECK_EQ_INT(sim.n, ex.n);
  for (int i = 0; i < sim.n && i < ex.n; i++)
    if (cmp_xfer(&sim.v[i], &ex.v[i])) {
      const xfer *a = &sim.v[i], *b = &ex.v[i];
      test_fail(__FILE__, __LINE__,
                "%s %s %s skip=%d: transfer %d: sim (layer %d bwd %d kind %d post %d step %d %d->%d shard %d %lld B "
                "link %d level %d) vs exec (layer %d bwd %d kind %d post %d step %d %d->%d shard %d %lld B link %d level %d)",
                layout, sched, source, skip, i, a->layer, a->backward, a->kind, a->post_at, a->step, a->from, a->to,
                a->shard, (long long)a->bytes, a->link, a->level, b->layer, b->backward, b->kind, b->post_at, b->step,
                b->from, b->to, b->shard, (long long)b->bytes, b->link, b->level);
      break;
    }
  // Every send the executor posts meets one receive of the same pair, tag and count.
  qsort(sends.v, (size_t)sends.n, sizeof *sends.v, cmp_xfer);
  qsort(recvs.v, (size_t)recvs.n, sizeof *recvs.v, cmp_xfer);
  CHECK_EQ_INT(sends.n, recvs.n);
  for (int i = 0; i < sends.n && i < recvs.n; i++)
    if (cmp_xfer(&sends.v[i], &recvs.v[i])) {
      test_fail(__FILE__, __LINE__, "%s %s %s skip=%d: send %d->%d tag (%d, %d) meets no receive", layout, sched, source,
                skip, sends.v[i].from, sends.v[i].to, sends.v[i].post_at, sends.v[i].kind);
      break;
    }
  int n = sim.n;
  sim_transfers_free(&st);
  free(sim.v), free(ex.v), free(sends.v), free(recvs.v);
  pattern_free(&pat);
  plan_free(&p);
  return n;
}

TEST(sim_and_exec_post_the_same_transfers_on_a_flat_ring_over_every_layout) {
  const char *layouts[] = {"contiguous", "zigzag", "striped"};
  for (int k = 0; k < 3; k++)
    for (int skip = 0; skip <= 1; skip++) {
      CHECK(agree(1, 4, layouts[k], "ring", "dense", skip) > 0);
      CHECK(agree(1, 4, layouts[k], "ring", "window:64:512", skip) > 0);
    }
}

TEST(sim_and_exec_post_the_same_transfers_on_a_flat_ring_over_two_nodes) {
  // Crossing nodes, the flat ring fetches some shards early from their owners.
  for (int skip = 0; skip <= 1; skip++) CHECK(agree(2, 2, "zigzag", "ring", "window:0:512", skip) > 0);
}

TEST(sim_and_exec_post_the_same_transfers_on_a_double_ring_over_two_nodes) {
  const char *layouts[] = {"contiguous", "zigzag", "striped"};
  for (int k = 0; k < 3; k++)
    for (int skip = 0; skip <= 1; skip++) {
      CHECK(agree(2, 2, layouts[k], "double-ring", "dense", skip) > 0);
      CHECK(agree(2, 2, layouts[k], "double-ring", "vs-like:64:256:4", skip) > 0);
    }
}

TEST(sim_and_exec_post_the_same_transfers_under_usp) {
  for (int skip = 0; skip <= 1; skip++) CHECK(agree(2, 2, "zigzag", "usp", "window:0:512", skip) > 0);
}

TEST(sim_and_exec_post_the_same_transfers_where_skipping_removes_sends) {
  // A window on the contiguous layout leaves most shards untouched: fewer transfers, still the same.
  int all = agree(1, 4, "contiguous", "ring", "window:0:256", 0), kept = agree(1, 4, "contiguous", "ring", "window:0:256", 1);
  CHECK(kept > 0 && kept < all);
  all = agree(2, 2, "contiguous", "double-ring", "window:0:256", 0);
  kept = agree(2, 2, "contiguous", "double-ring", "window:0:256", 1);
  CHECK(kept > 0 && kept < all);
}

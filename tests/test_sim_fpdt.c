// test_sim_fpdt.c — the simulated FPDT step as its executor runs it (sim/step_fpdt.c, exec/fpdt.h), read off
// the recorded timeline: a chunk's fetch back from the host waits for its copy to the host, the fetches are
// double-buffered in the forward and in the backward, without offload nothing crosses PCIe, selective
// recomputation reruns no chunk's attention, and a backward chunk pair with bars lasts at least its bar kernel's walk.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/strategy.h"
#include "tests/test.h"

// Two GPUs with a slow PCIe link (1 GB/s), so copies are long next to a chunk pair's compute.
static const char *slow_pcie_cluster(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/slow-pcie.json", test_tmpdir());
  const char *text =
      "{\"nodes\": 1, \"gpus_per_node\": 2,\n"
      " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, \"mem_gib\": 40,\n"
      "   \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_fwd_bar\": 0.5,\n"
      "     \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8},\n"
      "   \"comm_slowdown\": 1.0},\n"
      " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
      " \"host\": {\"pcie_gbps\": 1, \"latency_us\": 0, \"mem_gib\": 512}}\n";
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

// FPDT on tiny-test, 4096 tokens in 4 chunks of 1024, with recomputation or not, the rerun keeping attention's
// output (sim_options.keep_attn) or not.
static int fpdt_timeline_with(int offload, int recompute, int keep_attn, sim_timeline *tl) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "fpdt", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", slow_pcie_cluster());
  s.seq = 4096, s.fpdt_chunk = 1024, s.fpdt_offload = offload, s.recompute = recompute;
  plan p;
  if (plan_build(&s, &p, &e)) return -1;
  sim_options o = {0, 1, 0, keep_attn, 0, 0, 0, 0};
  sim_result r;
  int rc = sim_plan(&p, &o, &r, tl, &e);
  plan_free(&p);
  return rc;
}

// No recomputation (one forward and one backward a layer).
static int fpdt_timeline(int offload, sim_timeline *tl) { return fpdt_timeline_with(offload, 0, 0, tl); }

static int count_phase(const sim_timeline *tl, int phase) {
  int n = 0;
  for (int64_t i = 0; i < tl->n; i++) n += tl->ev[i].phase == phase;
  return n;
}

TEST(sim_fpdt_without_offload_copies_nothing) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(fpdt_timeline(0, &tl), SR_OK);
  CHECK_EQ_INT(count_phase(&tl, PHASE_H2D) + count_phase(&tl, PHASE_D2H), 0);
  sim_timeline_free(&tl);
}

TEST(sim_fpdt_a_fetch_waits_for_its_chunks_copy_to_the_host) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(fpdt_timeline(1, &tl), SR_OK);
  int fetches = 0;
  for (int64_t i = 0; i < tl.n; i++) {
    const timeline_event *f = &tl.ev[i];
    if (f->phase != PHASE_H2D) continue;
    fetches++;
    // the latest copy out of the same chunk (rank, layer, step) begun before the fetch must have ended before it
    const timeline_event *d = NULL;
    for (int64_t k = 0; k < tl.n; k++) {
      const timeline_event *x = &tl.ev[k];
      if (x->phase == PHASE_D2H && x->rank == f->rank && x->layer == f->layer && x->step == f->step &&
          x->start <= f->start && (!d || x->start > d->start))
        d = x;
    }
    CHECK(d != NULL);
    if (d) CHECK(d->start + d->dur <= f->start + 1e-12);
  }
  // 2 layers x 2 ranks x (6 forward + 10 backward fetches of 4 chunks)
  CHECK_EQ_INT(fetches, 2 * 2 * (6 + 10));
  sim_timeline_free(&tl);
}

static int by_start(const void *x, const void *y) {
  double a = (*(const timeline_event *const *)x)->start, b = (*(const timeline_event *const *)y)->start;
  return a < b ? -1 : a > b;
}

// The fetched computes of a pass of (rank, layer) in order: the forward's pairs but each chunk's first (its own
// KV chunk, just gathered), every pair of the backward; and that pass's fetches.
static void check_pass(const sim_timeline *tl, int rank, int layer, int bwd, int u) {
  const timeline_event **c = malloc(sizeof *c * (size_t)tl->n), **f = malloc(sizeof *f * (size_t)tl->n);
  int nc = 0, nf = 0;
  double fwd_end = 0;  // the forward's last compute: every forward fetch starts before it, every backward one after
  for (int64_t i = 0; i < tl->n; i++)
    if (tl->ev[i].phase == PHASE_ATTN && tl->ev[i].rank == rank && tl->ev[i].layer == layer)
      fwd_end = fwd_end > tl->ev[i].start + tl->ev[i].dur ? fwd_end : tl->ev[i].start + tl->ev[i].dur;
  for (int i = 0; i < u; i++) {
    int first = nc;
    for (int64_t k = 0; k < tl->n; k++) {
      const timeline_event *x = &tl->ev[k];
      if (x->rank == rank && x->layer == layer && x->step == i && x->phase == (bwd ? PHASE_ATTN_BWD : PHASE_ATTN))
        c[nc++] = x;
    }
    qsort(c + first, (size_t)(nc - first), sizeof *c, by_start);
    if (!bwd && nc > first) memmove(c + first, c + first + 1, sizeof *c * (size_t)(--nc - first));
  }
  qsort(c, (size_t)nc, sizeof *c, by_start);
  for (int64_t k = 0; k < tl->n; k++) {
    const timeline_event *x = &tl->ev[k];
    if (x->phase == PHASE_H2D && x->rank == rank && x->layer == layer && (x->start >= fwd_end) == bwd) f[nf++] = x;
  }
  qsort(f, (size_t)nf, sizeof *f, by_start);
  CHECK_EQ_INT(nc, bwd ? u * (u + 1) / 2 : u * (u - 1) / 2);
  CHECK_EQ_INT(nf, nc);
  for (int k = 0; k < nc && k < nf; k++) {
    CHECK(f[k]->start + f[k]->dur <= c[k]->start + 1e-12);                     // a compute waits for its fetch
    if (k >= 2) CHECK(f[k]->start >= c[k - 2]->start + c[k - 2]->dur - 1e-12);  // two buffers: k after k-2's compute
  }
  free(c), free(f);
}

TEST(sim_fpdt_fetches_are_double_buffered_in_the_forward_and_the_backward) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(fpdt_timeline(1, &tl), SR_OK);
  for (int r = 0; r < 2; r++)
    for (int l = 0; l < 2; l++)
      for (int bwd = 0; bwd < 2; bwd++) check_pass(&tl, r, l, bwd, 4);
  sim_timeline_free(&tl);
}

TEST(sim_fpdt_selective_recomputation_runs_the_chunks_attention_once_a_layer) {
  // With recomputation the backward reruns each layer's forward; keeping attention's output and LSE (selective
  // recomputation, as the exec trainer runs it) leaves the chunk pairs out of the rerun. 4 chunks: 4 x 5 / 2 = 10
  // forward pairs a rank and layer, 2 ranks, 2 layers: 40 forward pair computes once, 80 with the full rerun; the
  // backward's 40 either way.
  sim_timeline keep = {0}, full = {0};
  CHECK_EQ_INT(fpdt_timeline_with(0, 1, 1, &keep), SR_OK);
  CHECK_EQ_INT(fpdt_timeline_with(0, 1, 0, &full), SR_OK);
  CHECK_EQ_INT(count_phase(&keep, PHASE_ATTN), 2 * 2 * 10);
  CHECK_EQ_INT(count_phase(&full, PHASE_ATTN), 2 * 2 * 2 * 10);
  CHECK_EQ_INT(count_phase(&keep, PHASE_ATTN_BWD), 2 * 2 * 10);
  CHECK_EQ_INT(count_phase(&full, PHASE_ATTN_BWD), 2 * 2 * 10);
  sim_timeline_free(&keep);
  sim_timeline_free(&full);
}

// ---------------------------------------------------------------------------------------------
// the bars' backward walk (sim/cost.h, cost_bar_walk)

// FPDT on tiny-test over 2 GPUs, 3600 tokens in chunks of 1024 (the last 528: 5 query tiles of 128, the others 8),
// resident, no recomputation, on a cluster whose GPU walks the bars at walk_us a CTA and 64-row step (0: not
// modelled); the step's time and (tl not NULL) its timeline.
static double fpdt_walk_step(const char *pattern, double walk_us, sim_timeline *tl) {
  char path[700], text[2048];
  snprintf(path, sizeof path, "%s/walk-%g.json", test_tmpdir(), walk_us);
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"bar_walk_us\": %g}, \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},"
           " \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}}",
           walk_us);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "fpdt", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", path);
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  s.seq = 3600, s.fpdt_chunk = 1024, s.fpdt_offload = 0, s.recompute = 0;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  sim_options o = {0, tl != NULL, 0, 0, 0, 0, 0, 0};
  sim_result r;
  CHECK_EQ_INT(sim_plan(&p, &o, &r, tl, &e), SR_OK);
  plan_free(&p);
  return r.step_s;
}

// The backward chunk pairs' durations of two runs, event by event (both timelines list the same tasks in the same
// order): how many differ, and whether each that does differs by 2 x its query chunk's tiles x dwalk_s.
static int walk_diffs(const sim_timeline *a, const sim_timeline *b, double dwalk_s, int *changed) {
  static const double tiles[4] = {8, 8, 8, 5};  // ceil(1024 / 128) x 3, ceil(528 / 128)
  int ok = a->n == b->n;
  *changed = 0;
  for (int64_t k = 0; ok && k < a->n; k++) {
    const timeline_event *x = &a->ev[k], *y = &b->ev[k];
    ok = x->phase == y->phase && x->rank == y->rank && x->layer == y->layer && x->step == y->step;
    if (!ok || x->phase != PHASE_ATTN_BWD || y->dur == x->dur) continue;
    (*changed)++;
    double want = 2 * tiles[x->step] * dwalk_s;
    ok = fabs((y->dur - x->dur) - want) <= 1e-9 * want;
  }
  return ok;
}

// The window pattern's 4 sinks are bars in every query tile past the window whose KV tile 0 is no entry: the chunk
// pairs (i, 0) of each query chunk i (chunk 0's own tiles from 640 on), and no other (later KV chunks hold only
// window tiles). A walk of 1 and 2 ms a step is far longer than those bars' work, so each of those 4 calls a rank and
// layer lasts 2 x its chunk's query tiles x the walk: 1 ms more a step adds 16, 16, 16 and 10 ms to them, and
// nothing to the other 6; 2 ranks x 2 layers x 4 calls.
TEST(sim_fpdt_a_backward_chunk_pair_with_bars_lasts_its_walk) {
  sim_timeline a = {0}, b = {0};
  fpdt_walk_step("window:4:512", 1000, &a);
  fpdt_walk_step("window:4:512", 2000, &b);
  int changed = 0;
  CHECK(walk_diffs(&a, &b, 1e-3, &changed));
  CHECK_EQ_INT(changed, 2 * 2 * 4);
  sim_timeline_free(&a);
  sim_timeline_free(&b);
}

// vs-topp's bars (its vertical lines) land where its scores put them: every chunk pair it changes grows by 2 x its
// query chunk's tiles x the further walk, and some do.
TEST(sim_fpdt_vs_topp_chunk_pairs_grow_by_the_walk_of_their_query_chunk) {
  sim_timeline a = {0}, b = {0};
  fpdt_walk_step("vs-topp:0.9", 1000, &a);
  fpdt_walk_step("vs-topp:0.9", 2000, &b);
  int changed = 0;
  CHECK(walk_diffs(&a, &b, 1e-3, &changed));
  CHECK(changed > 0);
  sim_timeline_free(&a);
  sim_timeline_free(&b);
}

// A walk shorter than every call's own bar work (2 x 8 x 1e-6 us against whole 128-row bars) is no floor: the step
// is the one without the walk, to the bit.
TEST(sim_fpdt_a_walk_below_the_bars_work_changes_nothing) {
  CHECK(fpdt_walk_step("vs-topp:0.9", 1e-6, NULL) == fpdt_walk_step("vs-topp:0.9", 0, NULL));
  CHECK(fpdt_walk_step("window:4:512", 1e-6, NULL) == fpdt_walk_step("window:4:512", 0, NULL));
}

TEST(sim_fpdt_dense_has_no_bars_and_no_walk) {
  CHECK(fpdt_walk_step("dense", 2000, NULL) == fpdt_walk_step("dense", 0, NULL));
}

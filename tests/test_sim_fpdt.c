// test_sim_fpdt.c — the simulated FPDT step as its executor runs it (sim/step_fpdt.c, exec/fpdt.h), read off
// the recorded timeline: a chunk's fetch back from the host waits for its copy to the host, the fetches are
// double-buffered in the forward and in the backward, without offload nothing crosses PCIe, and selective
// recomputation reruns no chunk's attention.
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
  sim_options o = {0, 1, 0, keep_attn, 0};
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

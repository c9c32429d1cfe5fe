// test_exec_adaspa.c — `sparsering-exec attn --pattern adaspa-online:S:B` on the CPU backend (mpirun,
// oversubscribed): the ranks search the block mask from their own Q and K over the ring, the mask the run wrote
// (--trace-out) is bit for bit what one process's exact search selects on the same generated inputs for 1 to 4
// ranks and several layouts, the attention over it equals float64 dense attention under that mask (--check), the
// mask is reused between searches (--search-every) with its recall reported, and the plans it cannot run are
// refused as input errors (the C API too, which runs given patterns).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "kernels/attn_inputs.h"
#include "plan/pattern_estimate.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "traces/trace.h"

#define DATA_SEED 7
enum { H = 4, HKV = 2, D = 16, SEQ = 517, BLOCK = 32 };  // tiny-test's attention; a last block row cut short
#define SPARSITY 0.6

// One process, whole sequence: Q and K of `layer` as every rank generates them, the exact search of
// plan/pattern_estimate.h with its own dense pass, into layer 0 of out.
static int reference_search(int layer, pattern *out) {
  sr_error e = {0};
  float *q = malloc(sizeof(float) * SEQ * H * D), *k = malloc(sizeof(float) * SEQ * HKV * D);
  int64_t *pos = malloc(sizeof(int64_t) * SEQ);
  int rc = -1;
  if (!q || !k || !pos) goto done;
  for (int64_t t = 0; t < SEQ; t++) pos[t] = t;
  if (attn_inputs_fill(ATTN_INPUTS_VS, DATA_SEED, layer, ATTN_Q, pos, SEQ, SEQ, H, HKV, D, q, &e) ||
      attn_inputs_fill(ATTN_INPUTS_VS, DATA_SEED, layer, ATTN_K, pos, SEQ, SEQ, H, HKV, D, k, &e))
    goto done;
  adaspa_query qs = {H, HKV, D, BLOCK, SEQ, SEQ, 1.0f / sqrtf((float)D), q, pos};
  adaspa_opts o = {SPARSITY, BLOCK, 0.8};
  double recall[H];
  if (pattern_alloc(out, SEQ, 1, H, &e) || adaspa_search_exact(&qs, k, pos, SEQ, NULL, &o, out, 0, recall, &e)) goto done;
  rc = 0;
done:
  free(q), free(k), free(pos);
  return rc;
}

// `sparsering-exec attn ARGS` on `ranks` CPU ranks over `nodes` nodes (tiny-test's attention unless ARGS say otherwise).
static int attn_on(int nodes, int ranks, const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s "
           "--seq %d --inputs vs --data-seed %d %s 2>&1", ranks, test_bin_dir(), mpi_cpu_cluster(nodes, ranks / nodes),
           SEQ, DATA_SEED, args);
  return test_run(cmd, out);
}

static int attn_run(int ranks, const char *args, char **out) { return attn_on(1, ranks, args, out); }

TEST(exec_adaspa_online_mask_equals_one_process_search_on_1_to_4_ranks_and_passes_the_check) {
  pattern want[2];
  CHECK_EQ_INT(reference_search(0, &want[0]), 0);
  CHECK_EQ_INT(reference_search(1, &want[1]), 0);
  // layouts whose block rows are whole on a rank (striped:32), split over ranks (striped:16, zigzag), one rank; the
  // flat ring, and the double ring over 2 nodes (its early inter-node transfers carry the search's shards too)
  const struct {
    int nodes, ranks;
    const char *layout, *schedule;
  } runs[] = {{1, 1, "contiguous", "ring"}, {1, 2, "striped:16", "ring"}, {1, 3, "zigzag", "ring"},
              {1, 4, "striped:32", "ring"}, {2, 4, "striped:16", "double-ring"}};
  for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
    char trace[600], args[1200], *out = NULL;
    snprintf(trace, sizeof trace, "%s/adaspa-%zu.safetensors", test_tmpdir(), r);
    snprintf(args, sizeof args, "--layout %s --schedule %s --pattern adaspa-online:%g:%d --layers 2 --check --trace-out %s",
             runs[r].layout, runs[r].schedule, SPARSITY, BLOCK, trace);
    CHECK_EQ_INT(attn_on(runs[r].nodes, runs[r].ranks, args, &out), 0);
    CHECK_EQ_INT(count_lines(out, "  check layer ", " ok"), 2);  // float64 dense attention under the searched mask
    free(out);
    trace_file t;
    sr_error e = {0};
    pattern got = {0};
    CHECK_EQ_INT(trace_open(trace, &t, &e), 0);
    CHECK_EQ_INT(trace_read_step(&t, 0, &got, &e), 0);
    trace_close(&t);
    for (int layer = 0; layer < 2 && got.h; layer++)
      for (int h = 0; h < H; h++) {
        const head_pattern *g = pattern_head(&got, layer, h), *w = pattern_head(&want[layer], 0, h);
        CHECK_EQ_INT(g->kind, PATTERN_BLOCK);
        CHECK_EQ_INT(g->block, BLOCK);
        CHECK_EQ_INT(g->n_blocks == w->n_blocks && g->row_words == w->row_words, 1);
        if (g->mask && g->n_blocks == w->n_blocks)
          CHECK_EQ_INT(memcmp(g->mask, w->mask, sizeof(uint64_t) * (size_t)(w->n_blocks * w->row_words)), 0);
      }
    pattern_free(&got);
  }
  pattern_free(&want[0]), pattern_free(&want[1]);
}

TEST(exec_adaspa_online_reuses_the_mask_between_searches_and_reports_its_recall) {
  // five repetitions (steps 0..4) searching every 2 steps: searches at 0, 2 and 4 (the first one's dense pass serves
  // the later ones: the inputs stay), the kept mask at 1 and 3, whose recall on these very inputs is the search's
  char *out = NULL;
  char args[600];
  snprintf(args, sizeof args, "--layout striped:16 --schedule ring --pattern adaspa-online:%g:%d --repeat 5 "
           "--search-every 2 --check", SPARSITY, BLOCK);
  CHECK_EQ_INT(attn_run(2, args, &out), 0);
  CHECK_STR_CONTAINS(out, "layer 0: search: 3 search(es), 2 reuse(s), 1 dense pass(es); recall ");
  const char *p = out ? strstr(out, "dense pass(es); recall ") : NULL;
  double at_search = -1, sparsity = -1, reused = -1;
  int forwards = -1;
  if (p) sscanf(p, "dense pass(es); recall %lf at the search (mean sparsity %lf), %lf reused (%d forwards)", &at_search,
                &sparsity, &reused, &forwards);
  CHECK(at_search > 0 && at_search <= 1);
  CHECK_NEAR(sparsity, SPARSITY, 5e-4);  // the budgets keep the base sparsity on average (printed to 4 places)
  CHECK_EQ_INT(forwards, 2);
  CHECK_NEAR(reused, at_search, 2e-4);   // the same mask on the same inputs keeps the same share of the mass
  CHECK_EQ_INT(count_lines(out, "  check layer ", " ok"), 1);
  free(out);
}

TEST(exec_adaspa_online_is_refused_where_it_cannot_search) {
  // skipping decides the shards at plan time (before any mask), Ulysses splits the heads over the ranks, FPDT
  // chunks the sequence: input errors found before any rank starts (exit 2)
  const char *bad[] = {"--layout striped:16 --schedule ring --skip-empty-sends", "--layout contiguous --schedule ulysses",
                       "--layout contiguous --schedule ulysses --fpdt-chunk 256"};
  const char *why[] = {"skip", "ring and double-ring", "FPDT"};
  for (int i = 0; i < 3; i++) {
    char args[600], *out = NULL;
    snprintf(args, sizeof args, "%s --pattern adaspa-online:0.5:32", bad[i]);
    CHECK_EQ_INT(attn_run(2, args, &out), 2);
    CHECK_STR_CONTAINS(out, why[i]);
    free(out);
  }
}

TEST(api_refuses_adaspa_online_rather_than_running_its_stand_in) {
  // the API's shapes run given patterns; a searched one would silently be its synthetic stand-in
  sr_attn *a = NULL;
  char *err = NULL;
  CHECK_EQ_INT(sr_attn_new("adaspa-online:0.8:64", 512, H, HKV, D, 0, 0, &a, &err), 2);
  CHECK_STR_CONTAINS(err, "adaspa-online:0.8:64");
  CHECK(a == NULL);
  sr_api_free(err);
  sr_attn_free(a);
}

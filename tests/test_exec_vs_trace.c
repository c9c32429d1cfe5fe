// test_exec_vs_trace.c — `sparsering-exec attn --pattern vs-online:P --trace-out T` on the CPU backend
// (mpirun, oversubscribed): the ranks estimate the vertical-slash pattern from their own Q and K in every
// forward, the trace holds exactly what one process's reference estimator selects on the same generated
// inputs (and what --check compared against), and the printed prediction is the simulator run on that
// pattern plus the estimation cost, not on the synthetic vs-topp stand-in.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/attn_data.h"
#include "plan/pattern_estimate.h"
#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "traces/trace.h"

#define DATA_SEED 5
#define TOP_P 0.95
enum { H = 4, HKV = 2, D = 16, NQ_EST = 64 };  // tiny-test attention; the estimate reads the last 64 queries

// One process, whole sequence: Q and K of `layer` as every rank generates them, MTraining's estimate with the
// executor's settings (last 64 queries, top-p, cap 4096, no forced sinks or window) into layer 0 of out.
static int reference_estimate(int64_t N, int layer, pattern *out) {
  sr_error e = {0};
  float *q = malloc(sizeof(float) * (size_t)(N * H * D)), *k = malloc(sizeof(float) * (size_t)(N * HKV * D));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  double row_max[H * NQ_EST];
  vs_acc *row_sum = calloc(H * NQ_EST, sizeof(vs_acc)), *sc = calloc((size_t)(2 * H * N), sizeof(vs_acc));
  int rc = -1;
  if (!q || !k || !pos || !row_sum || !sc) goto done;
  for (int64_t t = 0; t < N; t++) pos[t] = t;
  if (attn_inputs_fill(ATTN_INPUTS_VS, DATA_SEED, layer, ATTN_Q, pos, N, N, H, HKV, D, q, &e) ||
      attn_inputs_fill(ATTN_INPUTS_VS, DATA_SEED, layer, ATTN_K, pos, N, N, H, HKV, D, k, &e))
    goto done;
  vs_est_query qs = {.heads = H, .kv_heads = HKV, .head_dim = D, .n_q = NQ_EST, .n_tokens = N,
                     .scale = 1.0f / sqrtf((float)D), .q = q + (N - NQ_EST) * H * D, .qpos = pos + N - NQ_EST};
  for (int i = 0; i < H * NQ_EST; i++) row_max[i] = -INFINITY;
  vs_est_rowmax(&qs, k, pos, N, row_max);
  vs_est_rowsum(&qs, k, pos, N, row_max, row_sum);
  vs_est_scores(&qs, k, pos, N, row_max, row_sum, sc, sc + H * N);
  vs_est_opts o = vs_est_defaults();
  o.p = TOP_P;
  if (pattern_alloc(out, N, 1, H, &e) || vs_est_select(sc, sc + H * N, &qs, &o, out, 0, &e)) goto done;
  rc = 0;
done:
  free(q), free(k), free(pos), free(row_sum), free(sc);
  return rc;
}

// Kept causal pairs of a head by brute force over the grid.
static double brute_kept(const head_pattern *h, int64_t n) {
  double kept = 0;
  for (int64_t q = 0; q < n; q++)
    for (int64_t k = 0; k <= q; k++) kept += pattern_keeps(h, q, k);
  return kept;
}

static int same_indices(const int32_t *a, const int32_t *b, int32_t n) {
  return n == 0 || memcmp(a, b, sizeof(int32_t) * (size_t)n) == 0;
}

// `sparsering-exec attn ARGS` on 2 CPU ranks of one node (tiny-test's attention unless ARGS say otherwise)
static int attn_2ranks(const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec attn --cluster %s %s",
           test_bin_dir(), mpi_cpu_cluster(1, 2), args);
  return test_run(cmd, out);
}

TEST(exec_vs_online_fixed_budget_runs_exactly_its_budget_and_passes_the_check) {
  // vs-online:topk:V:S on the CPU backend: every head of every layer keeps exactly V columns and S diagonals
  // of the estimate (N well above both), and the ring matches dense attention under that pattern
  const int64_t N = 999;
  char trace[600], args[1200], *out = NULL;
  snprintf(trace, sizeof trace, "%s/vs-online-topk.safetensors", test_tmpdir());
  snprintf(args, sizeof args,
           "--model tiny-test --seq %lld --layout striped:16 --schedule ring --pattern vs-online:topk:24:40 --inputs vs "
           "--data-seed %d --layers 2 --check --trace-out %s",
           (long long)N, DATA_SEED, trace);
  CHECK_EQ_INT(attn_2ranks(args, &out), 0);
  CHECK_EQ_INT(count_lines(out, "  check layer ", " ok"), 2);
  free(out);
  trace_file t;
  sr_error e = {0};
  CHECK_EQ_INT(trace_open(trace, &t, &e), 0);
  pattern got = {0};
  CHECK_EQ_INT(trace_read_step(&t, 0, &got, &e), 0);
  trace_close(&t);
  for (int layer = 0; layer < 2 && got.h; layer++)
    for (int h = 0; h < H; h++) {
      const head_pattern *g = pattern_head(&got, layer, h);
      CHECK_EQ_INT(g->n_vertical, 24);
      CHECK_EQ_INT(g->n_slash, 40);
    }
  pattern_free(&got);
}

// "fwd X ms bwd Y ms" of the first "layer L: predicted" line of out, or "" when there is none
static void predicted_times(const char *out, int layer, char *dst, size_t size) {
  char key[64];
  snprintf(key, sizeof key, "layer %d: predicted", layer);
  const char *l = out ? strstr(out, key) : NULL, *f = l ? strstr(l, "fwd ") : NULL, *end = f ? strstr(f, " ms bwd ") : NULL;
  end = end ? strstr(end + 8, " ms") : NULL;
  dst[0] = 0;
  if (f && end && (size_t)(end - f) < size) memcpy(dst, f, (size_t)(end - f)), dst[end - f] = 0;
}

TEST(exec_predict_of_a_written_trace_equals_the_prediction_of_the_run_that_wrote_it) {
  // attn --predict predicts vs-online from the pattern it estimated; `predict --trace` from that pattern as
  // written must print the same times for every layer
  char trace[600], cmd[2048], *out = NULL, *p0 = NULL, *p1 = NULL;
  snprintf(trace, sizeof trace, "%s/pred.safetensors", test_tmpdir());
  const char *plan_flags = "--model tiny-test --seq 999 --layout striped:16 --schedule ring --pattern vs-online:0.95";
  snprintf(cmd, sizeof cmd, "%s --inputs vs --data-seed %d --layers 2 --predict --trace-out %s", plan_flags, DATA_SEED,
           trace);
  CHECK_EQ_INT(attn_2ranks(cmd, &out), 0);
  for (int layer = 0; layer < 2; layer++) {
    char want[128], got[128];
    predicted_times(out, layer, want, sizeof want);
    CHECK(want[0] != 0);
    snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict %s --cluster %s --trace %s --layer %d 2>&1", test_bin_dir(),
             plan_flags, mpi_cpu_cluster(1, 2), trace, layer);
    char *o = NULL;
    CHECK_EQ_INT(test_run(cmd, &o), 0);
    predicted_times(o, layer, got, sizeof got);
    CHECK_STR_CONTAINS(got, want);
    CHECK(strlen(got) == strlen(want));
    free(o);
  }
  // a trace of another length, a layer past the model's, no trace: input errors naming the field
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model tiny-test --seq 1000 --layout striped:16 --schedule ring "
           "--pattern vs-online:0.95 --cluster %s --trace %s 2>&1", test_bin_dir(), mpi_cpu_cluster(1, 2), trace);
  CHECK_EQ_INT(test_run(cmd, &p0), 2);
  CHECK_STR_CONTAINS(p0, "shape");
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict %s --cluster %s --trace %s --layer 2 2>&1", test_bin_dir(),
           plan_flags, mpi_cpu_cluster(1, 2), trace);
  CHECK_EQ_INT(test_run(cmd, &p1), 2);
  CHECK_STR_CONTAINS(p1, "--layer");
  free(p0), free(p1), p1 = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict %s --cluster %s 2>&1", test_bin_dir(), plan_flags,
           mpi_cpu_cluster(1, 2));
  CHECK_EQ_INT(test_run(cmd, &p1), 2);
  CHECK_STR_CONTAINS(p1, "--trace");
  free(p1);
  free(out);
}

TEST(exec_predict_without_a_trace_equals_the_prediction_of_attn_on_the_plans_own_pattern) {
  // a synthetic pattern is the plan's own: `predict` needs no trace and prints what `attn --predict` printed
  // for the run on that plan (scripts/gpu/exec_nodes_run.sh re-predicts its scaling runs this way)
  const char *plan_flags = "--model tiny-test --seq 999 --layout striped:16 --schedule ring --pattern vs-topp:0.9";
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s --layers 2 --predict", plan_flags);
  CHECK_EQ_INT(attn_2ranks(cmd, &out), 0);
  for (int layer = 0; layer < 2; layer++) {
    char want[128], got[128], *o = NULL;
    predicted_times(out, layer, want, sizeof want);
    CHECK(want[0] != 0);
    snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict %s --cluster %s --layer %d 2>&1", test_bin_dir(), plan_flags,
             mpi_cpu_cluster(1, 2), layer);
    CHECK_EQ_INT(test_run(cmd, &o), 0);
    CHECK_STR_CONTAINS(o, "pattern vs-topp:0.9");
    predicted_times(o, layer, got, sizeof got);
    CHECK_STR_CONTAINS(got, want);
    CHECK(strlen(got) == strlen(want));
    free(o);
  }
  free(out);
}

TEST(exec_vs_online_trace_holds_the_reference_estimate_the_check_compared_against) {
  const int64_t N = 999;  // uneven shards under striped:16 on 2 ranks
  char trace[600], args[1200], cmd[2048], *out = NULL;
  snprintf(trace, sizeof trace, "%s/vs-online.safetensors", test_tmpdir());
  snprintf(args, sizeof args,
           "--model tiny-test --seq %lld --layout striped:16 --schedule ring --pattern vs-online:%.2f --inputs vs "
           "--data-seed %d --layers 2 --check --trace-out %s",
           (long long)N, TOP_P, DATA_SEED, trace);
  CHECK_EQ_INT(attn_2ranks(args, &out), 0);
  // --check compared each layer against dense attention masked by the estimated pattern (tol 1e-4 in fp32)
  CHECK_EQ_INT(count_lines(out, "  check layer ", " ok"), 2);
  CHECK_STR_CONTAINS(out, "trace of the estimated pattern written to");
  free(out);

  trace_file t;
  sr_error e = {0};
  CHECK_EQ_INT(trace_open(trace, &t, &e), 0);
  CHECK_EQ_INT(t.info.layers, 2);
  CHECK_EQ_INT(t.info.heads, H);
  CHECK(t.info.seq_len == N);
  CHECK(strcmp(t.info.source, "executor") == 0);
  pattern got = {0};
  CHECK_EQ_INT(trace_read_step(&t, 0, &got, &e), 0);
  trace_close(&t);
  for (int layer = 0; layer < 2 && got.h; layer++) {
    pattern ref = {0};
    CHECK_EQ_INT(reference_estimate(N, layer, &ref), 0);
    for (int h = 0; h < H && ref.h; h++) {
      const head_pattern *g = pattern_head(&got, layer, h), *r = pattern_head(&ref, 0, h);
      CHECK_EQ_INT(g->kind, PATTERN_VS);
      CHECK_EQ_INT(g->n_vertical, r->n_vertical);
      CHECK_EQ_INT(g->n_slash, r->n_slash);
      if (g->n_vertical == r->n_vertical) CHECK(same_indices(g->vertical, r->vertical, r->n_vertical));
      if (g->n_slash == r->n_slash) CHECK(same_indices(g->slash, r->slash, r->n_slash));
      double want = brute_kept(r, N);
      CHECK(want > 0 && want < (double)N * (double)(N + 1) / 2);  // sparse, not empty
      CHECK(trace_head_kept_pairs(g, N) == want);
    }
    pattern_free(&ref);
  }
  pattern_free(&got);

  // the planner's trace source reads it: the simulator replays it as any recorded pattern
  snprintf(cmd, sizeof cmd,
           "%s/sparsering sim --model tiny-test --cluster %s --seq %lld --layout striped:16 --schedule ring "
           "--pattern trace:%s",
           test_bin_dir(), mpi_cpu_cluster(1, 2), (long long)N, trace);
  int rc = test_run(cmd, &out);
  CHECK_EQ_INT(rc, 0);
  if (rc) fprintf(stderr, "%s\n%.2000s\n", cmd, out ? out : "");
  free(out);
}

// Attention compute events of layer 0 in a timeline CSV: "rank,step,phase" -> duration text.
typedef struct {
  int n;
  char key[256][48], dur[256][32];
} attn_events;

static void read_attn_events(const char *path, attn_events *ev) {
  memset(ev, 0, sizeof *ev);
  FILE *f = fopen(path, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    int layer, rank, step;
    char phase[32], dur[32];
    if (sscanf(line, "%*[^,],%d,%d,%d,%31[^,],%*[^,],%*[^,],%31[^\n]", &layer, &rank, &step, phase, dur) != 5) continue;
    if (layer != 0 || (strcmp(phase, "attn") != 0 && strcmp(phase, "attn_bwd") != 0) || ev->n == 256) continue;
    char key[48];
    snprintf(key, sizeof key, "%d,%d,%s", rank, step, phase);
    int seen = 0;  // the simulator's recomputed forward repeats the same events: keep the first
    for (int i = 0; i < ev->n; i++) seen |= strcmp(ev->key[i], key) == 0;
    if (seen) continue;
    snprintf(ev->key[ev->n], sizeof ev->key[0], "%s", key);
    snprintf(ev->dur[ev->n++], sizeof ev->dur[0], "%s", dur);
  }
  if (f) fclose(f);
}

static const char *find_dur(const attn_events *ev, const char *key) {
  for (int i = 0; i < ev->n; i++)
    if (strcmp(ev->key[i], key) == 0) return ev->dur[i];
  return NULL;
}

static int file_has(const char *path, const char *needle) {
  char *s = NULL, cmd[700];
  snprintf(cmd, sizeof cmd, "cat %s", path);
  test_run(cmd, &s);
  int has = s && strstr(s, needle);
  free(s);
  return has;
}

TEST(exec_vs_online_prediction_is_the_simulation_of_its_trace_plus_the_estimation) {
  // 4096 tokens on a contiguous ring: enough tiles that the estimated pattern's work differs from vs-topp's
  const char *dir = test_tmpdir();
  char cmd[2048], *on = NULL, *tp = NULL, *sim = NULL;
  const char *base = "--model tiny-test --seq 4096 --layout contiguous --schedule ring --inputs vs --layers 1";
  snprintf(cmd, sizeof cmd, "%s --pattern vs-online:0.95 --predict-csv %s/on.csv --trace-out %s/on.safetensors", base,
           dir, dir);
  CHECK_EQ_INT(attn_2ranks(cmd, &on), 0);
  CHECK_STR_CONTAINS(on, "layer 0: predicted (sim, estimated pattern, cluster ");
  snprintf(cmd, sizeof cmd, "%s --pattern vs-topp:0.95 --predict-csv %s/tp.csv", base, dir);
  CHECK_EQ_INT(attn_2ranks(cmd, &tp), 0);
  CHECK(tp && strstr(tp, "layer 0: predicted (sim, cluster ") != NULL);  // other patterns: unchanged line
  CHECK(tp && strstr(tp, "estimated pattern") == NULL);
  // a direct simulation of the trace, by the simulator's own command (the whole model, one step)
  snprintf(cmd, sizeof cmd,
           "%s/sparsering sim --model tiny-test --seq 4096 --layout contiguous --schedule ring --cluster %s "
           "--pattern trace:%s/on.safetensors --csv %s/sim.csv",
           test_bin_dir(), mpi_cpu_cluster(1, 2), dir, dir);
  CHECK_EQ_INT(test_run(cmd, &sim), 0);
  free(on), free(tp), free(sim);

  char path[700];
  attn_events a, s, v;
  snprintf(path, sizeof path, "%s/on.csv", dir);
  read_attn_events(path, &a);
  CHECK(file_has(path, ",estimate,"));  // the estimation's cost is part of the predicted forward
  snprintf(path, sizeof path, "%s/sim.csv", dir);
  read_attn_events(path, &s);
  snprintf(path, sizeof path, "%s/tp.csv", dir);
  read_attn_events(path, &v);
  CHECK(!file_has(path, ",estimate,"));  // vs-topp runs a given pattern: no estimate in its forward
  // 2 ranks x 2 ring steps, forward and backward (contiguous: rank 0 has nothing to do at step 1)
  CHECK(a.n >= 4);
  CHECK_EQ_INT(a.n, s.n);
  int differ = 0;
  for (int i = 0; i < a.n; i++) {
    const char *d = find_dur(&s, a.key[i]), *w = find_dur(&v, a.key[i]);
    CHECK(d && strcmp(d, a.dur[i]) == 0);
    if (!d || strcmp(d, a.dur[i]) != 0) fprintf(stderr, "%s: predicted %s, trace's sim %s\n", a.key[i], a.dur[i], d ? d : "-");
    differ += !w || strcmp(w, a.dur[i]) != 0;
  }
  CHECK(differ > 0);  // not the vs-topp stand-in's work
}

TEST(exec_trace_out_unwritable_path_exits_2_naming_the_flag) {
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 1 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 300 "
                   "--pattern vs-online:0.95 --trace-out %s/no-such-folder/t.safetensors",
           test_bin_dir(), mpi_cpu_cluster(1, 1), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--trace-out");
  free(out);
}

TEST(exec_predict_keeps_every_forward_step_when_ranks_start_their_backward_apart) {
  // the contiguous dense ring at 1M on 8 GPUs: rank 0 has one forward step and starts its backward while
  // rank 7 still runs its 8; the prediction must count rank r's r + 1 forward steps (it lost the last rank's
  // last step when it split forward from backward at the first backward kernel of any rank)
  char csv[600], cmd[2048], *out = NULL, *text = NULL;
  snprintf(csv, sizeof csv, "%s/imbalanced.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec predict --model qwen2.5-3b --cluster models/clusters/h100-1x8.json "
           "--seq 1M --strategy dense-ring --csv %s 2>&1", test_bin_dir(), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  int steps[8] = {0};
  double last_rank_attn_us = 0;
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    int layer, rank, step;
    char phase[32], stream[32];
    double start, dur;
    if (sscanf(l, "sim,%d,%d,%d,%31[^,],%31[^,],%lf,%lf", &layer, &rank, &step, phase, stream, &start, &dur) == 7 &&
        strcmp(phase, "attn") == 0 && step >= 0 && rank >= 0 && rank < 8) {  // ring steps (the call's passes: -1)
      steps[rank]++;
      if (rank == 7) last_rank_attn_us += dur;
    }
  }
  for (int r = 0; r < 8; r++) CHECK_EQ_INT(steps[r], r + 1);
  // the forward lasts at least as long as the last rank's kernels
  const char *f = out ? strstr(out, "fwd ") : NULL;
  double fwd_ms = f ? atof(f + 4) : 0;
  CHECK(fwd_ms >= last_rank_attn_us * 1e-3 - 0.001);  // printed to 3 decimals
  free(out), free(text);
}

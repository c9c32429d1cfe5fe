// test_gating_exec.c — gated patterns (moba, token-topk; plan/gating.h) in the executor and the trainer on
// the CPU backend: the selection made from the data on 1, 2 and 3 ranks runs as tiles and bars whose
// result equals single-process dense attention masked by that selection (exec/dense_ref.c, float64), the
// ranks select what one process selects, and a tiny model trains with them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// `attn --check` over layouts x patterns on `ranks` ranks of one node; each run must print its "ok" line.
static void check_matrix(int ranks, const char *seq, const char *layouts, const char *patterns, int runs) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s --seq %s "
                   "--layout %s --schedule ring --pattern %s --check 2>&1",
           ranks, test_bin_dir(), mpi_cpu_cluster(1, ranks), seq, layouts, patterns);
  int rc = test_run(cmd, &out);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(count_lines(out, "attn ", " ok"), runs);
  if (rc != 0 || count_lines(out, "attn ", " ok") != runs) fprintf(stderr, "%s\n%.3000s\n", cmd, out ? out : "");
  free(out);
}

#define GATED "moba:128:2,moba:256:3,token-topk:60:4:16"

TEST(gated_patterns_on_one_rank_equal_dense_attention_masked_by_the_selection) {
  check_matrix(1, "701", "contiguous", GATED, 3);
}

TEST(gated_patterns_on_two_ranks_equal_dense_attention_masked_by_the_selection) {
  check_matrix(2, "701", "contiguous,zigzag,striped:1,striped:128", GATED, 4 * 3);
}

TEST(gated_patterns_on_three_uneven_ranks_equal_dense_attention_masked_by_the_selection) {
  check_matrix(3, "650", "zigzag,striped:16", GATED, 2 * 3);
}

// The selection the ranks make together (block sums all-reduced, groups' choices OR-ed: striped:1 puts
// every group's rows on all three ranks) is the one a single process makes, bit for bit: both traces.
TEST(moba_selection_on_three_ranks_equals_the_single_process_selection) {
  const char *dir = test_tmpdir();
  char cmd[4096];
  for (int np = 1; np <= 3; np += 2) {
    snprintf(cmd, sizeof cmd,
             MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s --seq 900 "
                     "--layout %s --schedule ring --pattern moba:128:3 --layers 2 --trace-out %s/m%d.safetensors 2>&1",
             np, test_bin_dir(), mpi_cpu_cluster(1, np), np == 1 ? "contiguous" : "striped:1", dir, np);
    char *out = NULL;
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    free(out);
  }
  // the traces differ only in their origin line (the command); their block masks must be equal
  snprintf(cmd, sizeof cmd, "python3 -c \"from safetensors.numpy import load_file as L; import numpy as np; "
           "a = L('%s/m1.safetensors'); b = L('%s/m3.safetensors'); "
           "ks = [k for k in a if 'block_mask' in k]; assert ks and all(np.array_equal(a[k], b[k]) for k in ks)\"",
           dir, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
}

TEST(attn_trace_out_refuses_token_topk_before_the_run) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec attn --model tiny-test --cluster %s --seq 300 --layout contiguous "
           "--schedule ring --pattern token-topk:40 --trace-out %s/t.safetensors 2>&1",
           test_bin_dir(), mpi_cpu_cluster(1, 1), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "no trace kind");
  free(out);
}

// Loss of the first and the last line of a train CSV (run,step,loss,...).
static void first_last_loss(const char *csv, double *first, double *last) {
  FILE *f = fopen(csv, "r");
  char line[1024];
  *first = *last = NAN;
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (n++ > 0) {
      const char *c = strchr(strchr(line, ',') + 1, ',') + 1;
      *last = atof(c);
      if (n == 2) *first = *last;
    }
  if (f) fclose(f);
}

TEST(moba_trains_a_tiny_model_end_to_end_on_the_cpu_backend) {
  char cmd[4096], csv[700], *out = NULL;
  snprintf(csv, sizeof csv, "%s/moba.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --layout contiguous "
           "--schedule ring --pattern moba:128:2 --seq 768 --steps 15 --loss all --csv %s 2>&1",
           test_bin_dir(), mpi_h200_cluster(1), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "gated selections (moba / token-topk): 30");  // 2 layers x 15 steps
  double first, last;
  first_last_loss(csv, &first, &last);
  CHECK(last < first - 0.3);  // random init at 5.5 nats (vocabulary 256): it learns
  free(out);
}

TEST(token_topk_trains_a_tiny_model_on_the_cpu_backend) {
  char cmd[4096], csv[700], *out = NULL;
  snprintf(csv, sizeof csv, "%s/tok.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --layout contiguous "
           "--schedule ring --pattern token-topk:64:4:16 --seq 512 --steps 6 --loss all --csv %s 2>&1",
           test_bin_dir(), mpi_h200_cluster(1), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  double first, last;
  first_last_loss(csv, &first, &last);
  CHECK(last < first);
  free(out);
}

// `attn` or `train` of a tiny moba run with extra flags: its exit status and output.
static int run_moba(const char *cmd_name, const char *extra, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec %s --model tiny-test --cluster %s --layout contiguous "
           "--schedule ring --pattern moba:128:2 --seq 384 %s %s 2>&1",
           test_bin_dir(), cmd_name, strcmp(cmd_name, "train") == 0 ? mpi_h200_cluster(1) : mpi_cpu_cluster(1, 1),
           strcmp(cmd_name, "train") == 0 ? "--steps 1" : "", extra);
  return test_run(cmd, out);
}

TEST(moba_gate_gpu_is_refused_on_the_cpu_backend_by_attn_and_train) {
  const char *cmds[] = {"attn", "train"};
  for (int i = 0; i < 2; i++) {
    char *out = NULL;
    CHECK_EQ_INT(run_moba(cmds[i], "--moba-gate gpu", &out), 2);
    CHECK_STR_CONTAINS(out, "--moba-gate: gpu: the CPU backend gates on the host; use --backend cuda");
    free(out);
  }
}

TEST(moba_gate_takes_only_auto_host_or_gpu) {
  char *out = NULL;
  CHECK_EQ_INT(run_moba("attn", "--moba-gate device", &out), 2);
  CHECK_STR_CONTAINS(out, "--moba-gate: 'device' is not one of auto, host, gpu");
  free(out);
}

TEST(moba_gate_host_runs_on_the_cpu_backend) {
  char *out = NULL;
  CHECK_EQ_INT(run_moba("attn", "--moba-gate host --check", &out), 0);
  CHECK_EQ_INT(count_lines(out, "attn ", " ok"), 1);
  free(out);
}

TEST(moba_gate_auto_is_the_default_and_gates_on_the_host_on_the_cpu_backend) {
  const char *extra[] = {"--check", "--moba-gate auto --check"};
  for (int i = 0; i < 2; i++) {
    char *out = NULL;
    CHECK_EQ_INT(run_moba("attn", extra[i], &out), 0);
    CHECK_EQ_INT(count_lines(out, "attn ", " ok"), 1);
    free(out);
  }
}

TEST(moba_gate_help_names_auto_as_the_default_and_the_gpu_gate_s_reach) {
  const char *cmds[] = {"attn", "train"};
  for (int i = 0; i < 2; i++) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/sparsering-exec %s --help 2>&1", test_bin_dir(), cmds[i]);
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    CHECK_STR_CONTAINS(out, "--moba-gate");
    CHECK_STR_CONTAINS(out, "auto: the gpu where it applies, else the host");
    CHECK_STR_CONTAINS(out, "ring and double-ring schedules on any number of ranks");
    free(out);
  }
}

// attn's "work" line: the kept pairs and the computed ones (whole tiles and bars) as shares of the causal pairs.
// Dense keeps every causal pair; moba on vertical-slash inputs keeps a part of them (on random inputs the union
// of a 128-row tile's choices is every block) and computes at least what it keeps.
static void work_shares(const char *extra, double *kept, double *computed) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec attn --model tiny-test --cluster %s --layout contiguous "
           "--schedule ring --seq 2K %s 2>&1", test_bin_dir(), mpi_cpu_cluster(1, 1), extra);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  const char *w = out ? strstr(out, "layer 0: work: kept pairs ") : NULL;
  CHECK(w != NULL);
  *kept = *computed = -1;
  if (w) CHECK_EQ_INT(sscanf(w, "layer 0: work: kept pairs %lf%% of causal, computed %lf%%", kept, computed), 2);
  free(out);
}

TEST(attn_prints_the_kept_and_computed_shares_of_the_causal_pairs) {
  double kept, computed;
  work_shares("--pattern dense", &kept, &computed);
  CHECK(fabs(kept - 100) < 1e-3);
  CHECK(computed >= kept && computed < 110);  // the diagonal tiles compute their masked halves
  work_shares("--pattern moba:256:2 --inputs vs", &kept, &computed);
  CHECK(kept > 10 && kept < 90);
  CHECK(computed >= kept);
}

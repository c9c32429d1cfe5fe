// test_train_phases.c — `sparsering-exec train --phase-times` (train/phases.h): after each step line a line of the
// step's seconds by class of work ("phases N | embed S | rmsnorm-fwd S ... | unaccounted S | step S"), with --csv a
// column a class; without the flag the output and the CSV are what they were. CPU backend (wall clock), tiny-test.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// The classes as docs/train.md names them, in the order the line prints them.
static const char *const classes[] = {
    "embed",       "rmsnorm-fwd",   "rmsnorm-bwd",   "qkv-fwd",    "qkv-dgrad",  "qkv-wgrad",     "rope-fwd",
    "rope-bwd",    "attn-fwd",      "attn-recompute", "attn-bwd",  "o-fwd",      "o-dgrad",       "o-wgrad",
    "gate-up-fwd", "gate-up-dgrad", "gate-up-wgrad", "swiglu-fwd", "swiglu-bwd", "down-fwd",      "down-dgrad",
    "down-wgrad",  "recompute",     "lm-head",       "cross-entropy", "grad-norm", "adamw",       "casts",
    "copies",      "offload-wait",  "comm"};
#define N_CLASSES ((int)(sizeof classes / sizeof *classes))

// `steps` steps of tiny-test at 256 tokens on `world` ranks with `flags`, the CSV to dir/NAME.csv; output to *out.
static int run_train(int world, int steps, const char *flags, const char *name, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec train --model tiny-test "
           "--cluster %s --strategy dense-ring --seq 256 --steps %d %s --csv %s/%s.csv 2>&1", world, test_bin_dir(),
           mpi_cpu_cluster(1, world), steps, flags, test_tmpdir(), name);
  int rc = test_run(cmd, out);
  if (rc != 0) test_fail(__FILE__, __LINE__, "exit %d: %.2000s", rc, *out ? *out : "");
  return rc;
}

// The value after " NAME " on line (a "phases" or "step" line, up to its end); NAN when absent.
static double value_of(const char *line, const char *name) {
  char key[64];
  snprintf(key, sizeof key, " %s ", name);
  const char *end = strchr(line, '\n'), *p = strstr(line, key);
  if (!p || (end && p > end)) return NAN;
  return strtod(p + strlen(key), NULL);
}

// The n-th (0-based) line starting with prefix, or NULL.
static const char *nth_line(const char *out, const char *prefix, int n) {
  for (const char *p = out; p && *p;) {
    if (strncmp(p, prefix, strlen(prefix)) == 0 && n-- == 0) return p;
    p = strchr(p, '\n');
    p = p ? p + 1 : NULL;
  }
  return NULL;
}

// The columns of the CSV's header line and of row `row` (1-based), each split at its commas into cells[].
static int csv_cells(const char *name, int row, char *text, size_t size, char **cells, int max) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s.csv", test_tmpdir(), name);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  for (int r = 0; r <= row && fgets(text, (int)size, f); r++) continue;
  fclose(f);
  text[strcspn(text, "\n")] = 0;
  int n = 0;
  for (char *c = text; c && n < max; n++) {
    cells[n] = c;
    c = strchr(c, ',');
    if (c) *c++ = 0;
  }
  return n;
}

// Row `row`'s value in column `col` of dir/NAME.csv (NAN when absent).
static double csv_value(const char *name, int row, const char *col) {
  static char head[8192], body[8192];
  char *h[128], *b[128];
  int nh = csv_cells(name, 0, head, sizeof head, h, 128), nb = csv_cells(name, row, body, sizeof body, b, 128);
  for (int i = 0; i < nh && i < nb; i++)
    if (strcmp(h[i], col) == 0) return strtod(b[i], NULL);
  return NAN;
}

TEST(train_phase_times_prints_every_class_on_a_phase_line_after_each_step_line) {
  char *out = NULL;
  CHECK_EQ_INT(run_train(1, 2, "--phase-times", "names", &out), 0);
  CHECK_EQ_INT(count_lines(out, "phases ", ""), 2);
  for (int s = 0; s < 2; s++) {
    const char *step = nth_line(out, "step ", s), *line = nth_line(out, "phases ", s);
    CHECK(step && line && strchr(step, '\n') + 1 == line);  // right below its step line
    for (int c = 0; line && c < N_CLASSES; c++) {
      CHECK(value_of(line, classes[c]) >= 0);
      if (!(value_of(line, classes[c]) >= 0)) test_fail(__FILE__, __LINE__, "no class %s on: %.400s", classes[c], line);
    }
    CHECK(line && value_of(line, "unaccounted") == value_of(line, "unaccounted"));
    CHECK(line && value_of(line, "step") > 0);
  }
  free(out);
}

TEST(train_phase_times_classes_and_unaccounted_add_up_to_the_step_time) {
  // On the line (4 decimals) within the rounding of its N_CLASSES + 2 numbers; in the CSV (6 decimals) likewise,
  // and the CSV's step_s is the line's step. No class is negative, and the unaccounted rest is not: the classes
  // are disjoint stretches of the step.
  char *out = NULL;
  CHECK_EQ_INT(run_train(1, 3, "--phase-times", "sums", &out), 0);
  for (int s = 0; s < 3; s++) {
    const char *line = nth_line(out, "phases ", s);
    CHECK(line != NULL);
    if (!line) break;
    double sum = 0, v;
    for (int c = 0; c < N_CLASSES; c++) {
      sum += v = value_of(line, classes[c]);
      CHECK(v >= 0);
    }
    double rest = value_of(line, "unaccounted"), step = value_of(line, "step");
    CHECK(rest >= -0.00005 * (N_CLASSES + 1));
    CHECK_NEAR(sum + rest, step, 0.00005 * (N_CLASSES + 2));
    double csum = 0;
    for (int c = 0; c < N_CLASSES; c++) {
      char col[64];
      snprintf(col, sizeof col, "phase_%s_s", classes[c]);
      for (char *p = col; *p; p++) *p = *p == '-' ? '_' : *p;
      csum += csv_value("sums", s + 1, col);
    }
    double cstep = csv_value("sums", s + 1, "step_s");
    CHECK_NEAR(csum + csv_value("sums", s + 1, "unaccounted_s"), cstep, 0.0000005 * (N_CLASSES + 2));
    CHECK_NEAR(cstep, step, 0.00005 + 0.0000005);
  }
  free(out);
}

TEST(train_phase_times_attention_classes_add_up_to_the_step_lines_attn) {
  // attn-fwd + attn-recompute + attn-bwd time the same calls as the step line's attn (3 decimals there).
  char *out = NULL;
  CHECK_EQ_INT(run_train(1, 2, "--phase-times", "attn", &out), 0);
  for (int s = 0; s < 2; s++) {
    const char *line = nth_line(out, "phases ", s), *step = nth_line(out, "step ", s);
    CHECK(line && step);
    if (!line || !step) break;
    double attn = value_of(line, "attn-fwd") + value_of(line, "attn-recompute") + value_of(line, "attn-bwd");
    CHECK_NEAR(attn, strtod(strstr(step, "| attn ") + 7, NULL), 0.0005 + 3 * 0.00005);
  }
  free(out);
}

TEST(train_phase_times_rerun_attention_is_attn_recompute_only_where_a_layer_keeps_no_output) {
  // Selective recomputation (the CPU's default: every layer keeps its attention output) reruns no attention;
  // --recompute-attn reruns it in every layer's backward. Either way the rest of the rerun is "recompute".
  char *out = NULL;
  CHECK_EQ_INT(run_train(1, 1, "--phase-times", "selective", &out), 0);
  free(out);
  out = NULL;
  CHECK_EQ_INT(run_train(1, 1, "--phase-times --recompute-attn", "full", &out), 0);
  free(out);
  CHECK(csv_value("selective", 1, "phase_attn_recompute_s") == 0);
  CHECK(csv_value("selective", 1, "phase_recompute_s") > 0);
  CHECK(csv_value("full", 1, "phase_attn_recompute_s") > 0);
  CHECK(csv_value("full", 1, "phase_recompute_s") > 0);
  CHECK(csv_value("full", 1, "phase_attn_fwd_s") > 0);
}

TEST(train_phase_times_on_two_ranks_time_the_collectives_as_comm) {
  char *out = NULL;
  CHECK_EQ_INT(run_train(2, 2, "--phase-times", "two", &out), 0);
  CHECK_EQ_INT(count_lines(out, "phases ", ""), 2);  // rank 0's
  for (int s = 1; s <= 2; s++) {
    CHECK(csv_value("two", s, "phase_comm_s") > 0);
    CHECK(csv_value("two", s, "unaccounted_s") >= -0.0000005 * (N_CLASSES + 1));
  }
  free(out);
}

TEST(train_without_phase_times_prints_no_phase_line_and_writes_the_same_csv_columns) {
  char *out = NULL;
  CHECK_EQ_INT(run_train(1, 2, "", "plain", &out), 0);
  CHECK_EQ_INT(count_lines(out, "step ", ""), 2);
  CHECK_EQ_INT(count_lines(out, "phases", ""), 0);
  CHECK(!strstr(out ? out : "", "unaccounted"));
  char head[8192], *cells[128];
  int n = csv_cells("plain", 0, head, sizeof head, cells, 128);
  const char *want[] = {"run", "step", "loss", "grad_norm", "lr", "tokens_per_s", "mfu", "density", "attn_s", "gemm_s",
                        "comm_s", "step_s", "plan_wait_s"};
  CHECK_EQ_INT(n, 13);
  for (int i = 0; i < n && i < 13; i++) CHECK(strcmp(cells[i], want[i]) == 0);
  free(out);
}

TEST(train_help_lists_phase_times) {
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --help 2>&1", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "--phase-times");
  free(out);
}

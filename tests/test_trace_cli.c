// test_trace_cli.c — the trace commands end to end (gen, stats, import-minference) and the exit
// status 2 with a clear message for malformed trace files.
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "tests/test.h"
#include "traces/trace.h"

// Stop the test when a step it depends on fails (what follows would dereference its output).
#define REQUIRE_OK(x)                                                                      \
  do {                                                                                     \
    if ((x) != SR_OK) {                                                                    \
      test_fail(__FILE__, __LINE__, "%s: %s", #x, e.msg);                                  \
      return;                                                                              \
    }                                                                                      \
  } while (0)

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...) {
  char cmd[4096];
  int n = snprintf(cmd, sizeof cmd, "%s/sparsering ", test_bin_dir());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  return test_run(cmd, out);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; s && *s; s++) n += *s == '\n';
  return n;
}

TEST(trace_cli_gen_then_stats_reports_every_head_and_step) {
  const char *d = test_tmpdir();
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace gen --model tiny-test --seq 700 --steps 3 --pattern dense --seed 5 -o %s/t.safetensors", d), 0);
  free(out);
  CHECK_EQ_INT(run(&out, "trace stats %s/t.safetensors --csv %s/t.csv", d, d), 0);
  CHECK_STR_CONTAINS(out, "3 steps x 2 layers x 4 heads");
  CHECK_STR_CONTAINS(out, "density 100.000%");
  free(out);
  char path[600], *csv = NULL;
  snprintf(path, sizeof path, "%s/t.csv", d);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &csv, NULL, &e), SR_OK);
  CHECK_EQ_INT(count_lines(csv), 1 + 3 * 2 * 4);  // header + steps x layers x heads (tiny-test: 2 x 4)
  // Dense causal over 700 tokens keeps 700 * 701 / 2 = 245350 pairs; consecutive dense steps overlap fully.
  CHECK_STR_CONTAINS(csv, "1,1,3,dense,245350,1,0,0,0,1\n");
  free(csv);
}

TEST(trace_cli_import_minference_keeps_the_budgets_exactly) {
  const char *d = test_tmpdir();
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace import-minference traces/samples/minference-tiny-test.json --model tiny-test "
                   "--seq 5000 --steps 2 --seed 9 -o %s/m.safetensors", d), 0);
  free(out);
  char path[600];
  snprintf(path, sizeof path, "%s/m.safetensors", d);
  sr_error e;
  trace_file t;
  REQUIRE_OK(trace_open(path, &t, &e));
  CHECK(strcmp(t.info.source, "import") == 0);
  CHECK_EQ_INT(t.info.steps, 2);
  // (vertical, slash) budgets of the sample config, capped at the 5000-token sequence.
  const int64_t nv[2][4] = {{30, 1000, -1, 3500}, {100, 500, 30, -1}};
  const int64_t ns[2][4] = {{800, 5000, -1, 100}, {750, 700, 800, -1}};
  const float score[8] = {0.98f, 0.71f, 0.5f, 0.875f, 1.0f, 0.93f, 0.95f, 0.25f};
  for (int s = 0; s < 2; s++) {
    pattern p;
    REQUIRE_OK(trace_read_step(&t, s, &p, &e));
    for (int l = 0; l < 2; l++)
      for (int h = 0; h < 4; h++) {
        const head_pattern *hp = pattern_head(&p, l, h);
        if (nv[l][h] < 0) {
          CHECK_EQ_INT(hp->kind, PATTERN_WINDOW);
          continue;
        }
        CHECK_EQ_INT(hp->kind, PATTERN_VS);
        CHECK_EQ_INT(hp->n_vertical, nv[l][h]);
        CHECK_EQ_INT(hp->n_slash, ns[l][h]);
      }
    pattern_free(&p);
    float got[8];
    int present = 0;
    CHECK_EQ_INT(trace_read_scores(&t, s, got, &present, &e), SR_OK);
    CHECK_EQ_INT(present, 1);
    for (int i = 0; i < 8; i++) CHECK(got[i] == score[i]);
  }
  pattern w;
  REQUIRE_OK(trace_read_step(&t, 0, &w, &e));
  CHECK_EQ_INT(pattern_head(&w, 0, 2)->sinks, 64);
  CHECK_EQ_INT(pattern_head(&w, 0, 2)->window, 1024);
  pattern_free(&w);
  trace_close(&t);
}

TEST(trace_cli_import_rejects_a_config_that_does_not_fit_the_model) {
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace import-minference traces/samples/minference-tiny-test.json --model qwen2.5-3b "
                   "--seq 1000 -o %s/x.safetensors", test_tmpdir()), 2);
  CHECK_STR_CONTAINS(out, "minference-tiny-test.json");
  CHECK_STR_CONTAINS(out, "2 layers x 4 heads");
  free(out);
}

TEST(trace_cli_stats_of_a_truncated_trace_exits_2_naming_the_file) {
  const char *d = test_tmpdir();
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace gen --model tiny-test --seq 300 --steps 1 --pattern dense -o %s/t.safetensors", d), 0);
  free(out);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "head -c 200 %s/t.safetensors > %s/cut.safetensors", d, d);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  CHECK_EQ_INT(run(&out, "trace stats %s/cut.safetensors", d), 2);
  CHECK_STR_CONTAINS(out, "cut.safetensors: header length");
  free(out);
  CHECK_EQ_INT(run(&out, "trace stats %s/missing.safetensors", d), 2);
  CHECK_STR_CONTAINS(out, "missing.safetensors");
  free(out);
}

TEST(trace_cli_stats_of_a_plain_safetensors_file_says_it_is_not_a_trace) {
  if (test_run("python3 -c 'import numpy, safetensors'", NULL) != 0) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  char *out = NULL;
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "python3 tests/py/st_interop.py write %s/p.safetensors", test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  CHECK_EQ_INT(run(&out, "trace stats %s/p.safetensors", test_tmpdir()), 2);
  CHECK_STR_CONTAINS(out, "not a sparsering trace");
  free(out);
}

TEST(trace_written_by_python_from_the_docs_reads_here) {
  if (test_run("python3 -c 'import numpy, safetensors'", NULL) != 0) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/py.safetensors", test_tmpdir());
  snprintf(cmd, sizeof cmd, "python3 tests/py/trace_interop.py write %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  sr_error e;
  trace_file t;
  REQUIRE_OK(trace_open(path, &t, &e));
  CHECK(strcmp(t.info.source, "executor") == 0);
  for (int s = 0; s < 2; s++) {
    pattern p;
    REQUIRE_OK(trace_read_step(&t, s, &p, &e));
    CHECK_EQ_INT(pattern_head(&p, 0, 0)->kind, PATTERN_DENSE);
    CHECK_EQ_INT(pattern_head(&p, 0, 1)->kind, PATTERN_WINDOW);
    CHECK_EQ_INT(pattern_head(&p, 0, 1)->window, 512 + s);
    const head_pattern *vs = pattern_head(&p, 0, 2);
    CHECK_EQ_INT(vs->kind, PATTERN_VS);
    CHECK_EQ_INT(vs->n_vertical, 3);
    if (vs->n_vertical == 3) CHECK(vs->vertical[0] == 0 && vs->vertical[1] == 17 + s && vs->vertical[2] == 4095);
    CHECK_EQ_INT(vs->n_slash, 2);
    if (vs->n_slash == 2) CHECK(vs->slash[0] == 0 && vs->slash[1] == 128);
    pattern_free(&p);
  }
  trace_close(&t);
}

TEST(trace_written_here_reads_in_python_following_the_docs) {
  if (test_run("python3 -c 'import numpy, safetensors'", NULL) != 0) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  const char *d = test_tmpdir();
  char *out = NULL;
  CHECK_EQ_INT(run(&out, "trace import-minference traces/samples/minference-tiny-test.json --seq 2000 --seed 1 "
                   "-o %s/m.safetensors", d), 0);
  free(out);
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/m.safetensors", d);
  snprintf(cmd, sizeof cmd, "python3 tests/py/trace_interop.py read %s", path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  // What Python sees must be what the C reader sees: compare each VS head's counts and index sums.
  sr_error e;
  trace_file t;
  REQUIRE_OK(trace_open(path, &t, &e));
  pattern p;
  REQUIRE_OK(trace_read_step(&t, 0, &p, &e));
  for (int l = 0; l < 2; l++)
    for (int h = 0; h < 4; h++) {
      const head_pattern *hp = pattern_head(&p, l, h);
      char line[200];
      if (hp->kind == PATTERN_VS) {
        long long vsum = 0, ssum = 0;
        for (int i = 0; i < hp->n_vertical; i++) vsum += hp->vertical[i];
        for (int i = 0; i < hp->n_slash; i++) ssum += hp->slash[i];
        snprintf(line, sizeof line, "s0 l%d h%d kind 2 nv %d ns %d vsum %lld ssum %lld\n", l, h, hp->n_vertical,
                 hp->n_slash, vsum, ssum);
      } else {
        snprintf(line, sizeof line, "s0 l%d h%d kind 1\n", l, h);
      }
      CHECK_STR_CONTAINS(out, line);
    }
  pattern_free(&p);
  trace_close(&t);
  free(out);
}

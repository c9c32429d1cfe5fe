// cmd_bench_pattern.c — `sparsering bench-pattern`: how long the exact work accounting takes for
// Qwen2.5-3B (36 layers x 16 heads) with the published VS budgets on striped G = 128 layouts, at
// 512K tokens over 32 ranks and 4M tokens over 1024 ranks (median of a few runs, wall and CPU time).
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cli/cli.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Time `runs` full-model accountings; prints medians. Returns 0 or an error code.
static int bench_case(const model_config *m, int64_t n, int W, int runs, sr_error *e) {
  pattern p;
  layout l;
  double g0 = sr_now();
  int rc = pattern_from_spec("vs-preset:qwen2.5-3b", m, n, 1, 0, &p, e);
  double gen = sr_now() - g0;
  if (rc) return rc;
  rc = layout_build(LAYOUT_STRIPED, n, W, 128, NULL, &l, e);
  if (rc) {
    pattern_free(&p);
    return rc;
  }
  work_count *counts = malloc((size_t)p.heads * W * W * sizeof *counts);
  double wall[16], cpu[16], pairs = 0;
  if (!counts) rc = sr_internal_error(e, 0, "out of memory for the counts");
  for (int r = 0; r < runs && !rc; r++) {
    double w0 = sr_now(), c0 = cpu_now();
    pairs = 0;
    for (int layer = 0; layer < p.layers && !rc; layer++) {
      rc = tiles_account_layer(&p, layer, &l, counts, e);
      for (int64_t x = 0; !rc && x < (int64_t)p.heads * W * W; x++) pairs += counts[x].pairs;
    }
    wall[r] = sr_now() - w0;
    cpu[r] = cpu_now() - c0;
  }
  if (!rc) {
    qsort(wall, (size_t)runs, sizeof *wall, cmp_double);
    qsort(cpu, (size_t)runs, sizeof *cpu, cmp_double);
    char nbuf[32];
    double causal = (double)p.layers * p.heads * (double)n * (double)(n + 1) / 2;
    printf("  qwen2.5-3b %5s tokens, W = %4d, striped G = 128: accounting %7.3f s wall, %7.3f s CPU (median of %d)"
           "  [density %.4f%%, pattern built in %.2f s]\n",
           sr_format_tokens(n, nbuf, sizeof nbuf), W, wall[runs / 2], cpu[runs / 2], runs, 100 * pairs / causal, gen);
    fflush(stdout);
  }
  free(counts);
  layout_free(&l);
  pattern_free(&p);
  return rc;
}

static const cli_flag bench_pattern_flags[] = {
    {"runs", "N", "3", "runs a case (the median is reported; the 512K case takes at least 5), 1 to 15"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_pattern_usage = {NULL, "sparsering bench-pattern --runs 5", {bench_pattern_flags, NULL}};

static int cmd_bench_pattern(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  int64_t runs = 3;
  model_config m;
  if (cli_parse(argc, argv, &bench_pattern_usage, &a, &e) || cli_get_int(&a, "runs", 3, 1, 15, &runs, &e) ||
      model_load("qwen2.5-3b", &m, &e))
    return sr_error_report(&e, "sparsering bench-pattern");
  printf("bench-pattern: exact tile accounting (full, partial, bars, kept pairs per head x rank x source), vs-preset\n");
  if (bench_case(&m, 512 * 1024, 32, (int)(runs < 5 ? 5 : runs), &e) || bench_case(&m, 4 * 1024 * 1024, 1024, (int)runs, &e))
    return sr_error_report(&e, "sparsering bench-pattern");
  return 0;
}

CLI_COMMAND("bench-pattern", cmd_bench_pattern,
            "time exact pattern accounting: Qwen2.5-3B 512K/W=32 and 4M/W=1024, striped G=128",
            &bench_pattern_usage)

// cmd_bench_bar_cols.c — `sparsering bench-bar-cols`: how long the host takes to find the compact bars' columns of
// one rank's index and of its forward form (what the CUDA set-up's dist_bar_cols runs, exec/dist_plan_bytes.c:
// tiles_bar_cols_find; before, tiles_bar_cols_build and tiles_bars_compact_exact, also timed), on the index the
// executor builds for that rank.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Medians over runs (wall seconds; CPU: of the process, so the load of others shows as wall > CPU) and what the
// calls found.
typedef struct {
  double build, check, find, build_cpu, check_cpu, find_cpu;
  int64_t cols;
  int exact, find_same;  // find_same: tiles_bar_cols_find gave the same columns and verdict as the two calls
} cols_times;

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

// The columns of t `runs` times: tiles_bar_cols_build then tiles_bars_compact_exact (the two calls), and
// tiles_bar_cols_find on `threads` threads (what dist_bar_cols runs).
static int time_cols(const tile_index *t, int runs, int threads, cols_times *o, sr_error *e) {
  double b[16], c[16], f[16], bc_[16], cc[16], fc[16];
  o->find_same = 1;
  for (int r = 0; r < runs; r++) {
    tile_bar_cols bc, fcols;
    double t0 = sr_now(), c0 = cpu_now();
    if (tiles_bar_cols_build(t, &bc, e)) return e->code;
    double t1 = sr_now(), c1 = cpu_now();
    o->exact = tiles_bars_compact_exact(t, &bc);
    double t2 = sr_now(), c2 = cpu_now();
    int exact = 0, rc = tiles_bar_cols_find(t, threads, &fcols, &exact, e);
    f[r] = sr_now() - t2, fc[r] = cpu_now() - c2, b[r] = t1 - t0, c[r] = t2 - t1, o->cols = bc.n_cols;
    bc_[r] = c1 - c0, cc[r] = c2 - c1;
    if (!rc)
      o->find_same &= exact == o->exact && fcols.n_cols == bc.n_cols &&
                      !memcmp(fcols.col_cnt, bc.col_cnt, ((size_t)t->heads * t->world + 1) * sizeof *bc.col_cnt) &&
                      (bc.n_cols == 0 || !memcmp(fcols.col_key, bc.col_key, (size_t)bc.n_cols * sizeof *bc.col_key));
    tiles_bar_cols_free(&bc), tiles_bar_cols_free(&fcols);
    if (rc) return rc;
  }
  o->build = median(b, runs), o->check = median(c, runs), o->find = median(f, runs);
  o->build_cpu = median(bc_, runs), o->check_cpu = median(cc, runs), o->find_cpu = median(fc, runs);
  return SR_OK;
}

static void report(const char *form, const tile_index *t, double built, int runs, int threads, const cols_times *o) {
  printf("  %-10s %lld tile entries, %lld runs, %lld bars (built in %.3f s): %lld columns, compact %s\n", form,
         (long long)t->n_tiles, (long long)t->n_runs, (long long)t->n_bars, built, (long long)o->cols,
         o->exact ? "exact" : "not exact (lists kept)");
  printf("  %-10s tiles_bar_cols_build %.3f s (%.3f s CPU) + tiles_bars_compact_exact %.3f s (%.3f s CPU)\n", "",
         o->build, o->build_cpu, o->check, o->check_cpu);
  printf("  %-10s tiles_bar_cols_find, %d thread(s): %.3f s (%.3f s CPU)%s; medians of %d\n", "", threads, o->find,
         o->find_cpu, o->find_same ? "" : ", NOT the same columns or verdict", runs);
}

static int bench_bar_cols(const cli_args *a, sr_error *e) {
  model_config m;
  int64_t n, world, rank, layer, runs, threads, g = 128;
  layout_kind kind;
  const char *lay = cli_get(a, "layout", "striped:128"), *spec = cli_get(a, "pattern", "vs-topp:0.95");
  int rc = model_load(cli_get(a, "model", "qwen2.5-3b"), &m, e);
  if (!rc) rc = sr_parse_tokens(cli_get(a, "seq", "128K"), "--seq", &n, e);
  if (!rc) rc = cli_get_int(a, "world", 1, 1, 1 << 16, &world, e);
  if (!rc) rc = cli_get_int(a, "rank", 0, 0, world - 1, &rank, e);
  if (!rc) rc = cli_get_int(a, "layer", 0, 0, m.num_layers - 1, &layer, e);
  if (!rc) rc = cli_get_int(a, "runs", 3, 1, 15, &runs, e);
  if (!rc) rc = cli_get_int(a, "threads", 4, 1, 256, &threads, e);
  if (!rc) rc = layout_parse_kind(lay, &kind, &g, e);
  if (!rc && kind == LAYOUT_STRIPED && strcmp(lay, "striped") == 0) g = 128;
  if (!rc && kind == LAYOUT_PERMUTATION) rc = sr_input_error(e, NULL, "--layout", "bench-bar-cols takes contiguous, zigzag or striped:G");
  if (rc) return rc;
  pattern p;
  layout l;
  if ((rc = pattern_from_spec(spec, &m, n, 0, 0, &p, e))) return rc;
  if ((rc = layout_build(kind, n, (int)world, g, NULL, &l, e))) {
    pattern_free(&p);
    return rc;
  }
  // the executor's index (dist_index_host_build): one head's when every head keeps the same elements
  pattern one = p;
  int uniform = pattern_layer_heads_uniform(&p, (int)layer);
  if (uniform) one.heads = 1, one.layers = 1, one.h = pattern_head(&p, (int)layer, 0);
  tile_index ti = {0}, tf = {0};
  head_mask *masks = NULL;
  double t0 = sr_now(), built = 0, built_fwd = 0;
  cols_times o;
  rc = tiles_build(uniform ? &one : &p, uniform ? 0 : (int)layer, &l, (int)rank, &ti, e);
  built = sr_now() - t0;
  char nb[32];
  if (!rc)
    printf("bench-bar-cols: %s, %s tokens, %s over %lld ranks, pattern %s, layer %lld, rank %lld: %d head(s) x %d "
           "query tiles\n", m.name, sr_format_tokens(n, nb, sizeof nb), lay, (long long)world, spec, (long long)layer,
           (long long)rank, ti.heads, ti.n_qtiles);
  if (!rc && !(rc = time_cols(&ti, (int)runs, (int)threads, &o, e))) report("tile form", &ti, built, (int)runs, (int)threads, &o);
  if (!rc && cli_has(a, "fwd-runs")) {
    t0 = sr_now();
    rc = tiles_masks_build(&p, (int)layer, &masks, e);
    if (!rc) rc = tiles_runs_build(&ti, masks, &l, &tf, e);
    built_fwd = sr_now() - t0;
    if (!rc && !(rc = time_cols(&tf, (int)runs, (int)threads, &o, e))) report("runs form", &tf, built_fwd, (int)runs, (int)threads, &o);
  }
  tiles_masks_free(masks, p.heads);
  tiles_free(&tf);
  tiles_free(&ti);
  layout_free(&l);
  pattern_free(&p);
  return rc;
}

static const cli_flag bench_bar_cols_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model"},
    {"seq", "N", "128K", "tokens in the sequence"},
    {"layout", "L", "striped:128", "contiguous, zigzag, striped or striped:G"},
    {"pattern", "P", "vs-topp:0.95", "attention pattern (docs/patterns.md)"},
    {"world", "W", "1", "ranks the sequence is spread over"},
    {"rank", "R", "0", "the rank whose index is timed"},
    {"layer", "L", "0", "the layer whose pattern is used"},
    {"fwd-runs", NULL, NULL, "also the forward form's columns (tiles_runs_build's index)"},
    {"runs", "N", "3", "runs of each timing (the median is reported), 1 to 15"},
    {"threads", "T", "4", "threads of tiles_bar_cols_find (the executor's dist_bar_cols uses up to 4)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_bar_cols_usage = {NULL, "sparsering bench-bar-cols --seq 128K --world 4 --rank 3 --fwd-runs",
                                               {bench_bar_cols_flags, NULL}};

static int cmd_bench_bar_cols(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  if (cli_parse(argc, argv, &bench_bar_cols_usage, &a, &e) || bench_bar_cols(&a, &e))
    return sr_error_report(&e, "sparsering bench-bar-cols");
  return 0;
}

CLI_COMMAND("bench-bar-cols", cmd_bench_bar_cols, "time the host's compact bars' columns of one rank's index",
            &bench_bar_cols_usage)

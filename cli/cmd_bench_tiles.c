// cmd_bench_tiles.c — `sparsering bench-tiles`: how long the executor's CPU-side preparation of one
// layer takes for one rank (what exec/dist_attn.c runs before its kernels): the pattern's synthesis,
// tiles_build for the rank (one head's index when every head keeps the same elements, as the executor
// does), tiles_transpose against every source rank, tiles_masks_build, and the skip map's accounting.
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

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// A phase's wall and CPU seconds (CPU: this process only, so other load on the machine shows as wall - CPU).
typedef struct {
  double w0, c0, wall, cpu;
} phase_clock;

static void phase_start(phase_clock *p) { p->w0 = sr_now(), p->c0 = cpu_now(); }
static void phase_stop(phase_clock *p) { p->wall += sr_now() - p->w0, p->cpu += cpu_now() - p->c0; }

static int bench_tiles(const cli_args *a, sr_error *e) {
  model_config m;
  int64_t n, world, rank, layer, g = 128;
  layout_kind kind;
  const char *lay = cli_get(a, "layout", "striped:128"), *spec = cli_get(a, "pattern", "vs-topp:0.95");
  int rc = model_load(cli_get(a, "model", "qwen2.5-3b"), &m, e);
  if (!rc) rc = sr_parse_tokens(cli_get(a, "seq", "512K"), "--seq", &n, e);
  if (!rc) rc = cli_get_int(a, "world", 2, 1, 1 << 16, &world, e);
  if (!rc) rc = cli_get_int(a, "rank", 0, 0, world - 1, &rank, e);
  if (!rc) rc = cli_get_int(a, "layer", 0, 0, m.num_layers - 1, &layer, e);
  if (!rc) rc = layout_parse_kind(lay, &kind, &g, e);
  if (!rc && kind == LAYOUT_STRIPED && strcmp(lay, "striped") == 0) g = 128;
  if (!rc && kind == LAYOUT_PERMUTATION) rc = sr_input_error(e, NULL, "--layout", "bench-tiles takes contiguous, zigzag or striped:G");
  if (rc) return rc;

  pattern p;
  layout l;
  phase_clock t_synth = {0}, t_build = {0}, t_transpose = {0}, t_masks = {0}, t_account = {0};
  phase_start(&t_synth);
  rc = pattern_from_spec(spec, &m, n, 0, 0, &p, e);
  phase_stop(&t_synth);
  if (rc) return rc;
  rc = layout_build(kind, n, (int)world, g, NULL, &l, e);
  if (rc) {
    pattern_free(&p);
    return rc;
  }
  tile_index ti = {0};
  head_mask *masks = NULL;
  work_count *wc = malloc(sizeof *wc * (size_t)p.heads * (size_t)world * (size_t)world);
  int64_t bar_keys = 0;
  if (!wc) rc = sr_internal_error(e, 0, "out of memory");
  if (!rc) {
    pattern one = p;
    int uniform = pattern_layer_heads_uniform(&p, (int)layer);
    if (uniform) one.heads = 1, one.layers = 1, one.h = pattern_head(&p, (int)layer, 0);
    phase_start(&t_build);
    rc = tiles_build(uniform ? &one : &p, uniform ? 0 : (int)layer, &l, (int)rank, &ti, e);
    phase_stop(&t_build);
  }
  for (int src = 0; !rc && src < world; src++) {
    tile_index_t tt;
    phase_start(&t_transpose);
    rc = tiles_transpose(&ti, src, l.rank_count[src], &tt, e);
    phase_stop(&t_transpose);
    if (!rc) bar_keys += tt.n_bar_keys;
    tiles_transpose_free(&tt);
  }
  if (!rc) {
    phase_start(&t_masks);
    rc = tiles_masks_build(&p, (int)layer, &masks, e);
    phase_stop(&t_masks);
  }
  if (!rc) {
    phase_start(&t_account);
    rc = tiles_account_layer(&p, (int)layer, &l, wc, e);
    phase_stop(&t_account);
  }
  if (!rc) {
    char nb[32];
    printf("bench-tiles: %s, %s tokens, %s over %lld ranks, pattern %s, layer %lld, rank %lld\n", m.name,
           sr_format_tokens(n, nb, sizeof nb), lay, (long long)world, spec, (long long)layer, (long long)rank);
    printf("  index: %d head(s) x %d query tiles, %lld tile entries, %lld bars, %lld bar keys\n", ti.heads, ti.n_qtiles,
           (long long)ti.n_tiles, (long long)ti.n_bars, (long long)bar_keys);
    double L = (double)p.layers;
    printf("  %-34s %9s %9s\n", "phase", "wall s", "CPU s");
    printf("  %-34s %9.3f %9.3f\n", "pattern synthesis, a layer's share", t_synth.wall / L, t_synth.cpu / L);
    printf("  %-34s %9.3f %9.3f\n", "tiles_build", t_build.wall, t_build.cpu);
    printf("  %-34s %9.3f %9.3f\n", "tiles_transpose, every source", t_transpose.wall, t_transpose.cpu);
    printf("  %-34s %9.3f %9.3f\n", "tiles_masks_build", t_masks.wall, t_masks.cpu);
    printf("  %-34s %9.3f %9.3f\n", "tiles_account_layer (skip map)", t_account.wall, t_account.cpu);
    printf("  %-34s %9.3f %9.3f\n", "one layer's preparation", t_synth.wall / L + t_build.wall + t_transpose.wall +
           t_masks.wall + t_account.wall, t_synth.cpu / L + t_build.cpu + t_transpose.cpu + t_masks.cpu + t_account.cpu);
    printf("  (pattern synthesis of all %d layers: %.3f s wall, %.3f s CPU)\n", p.layers, t_synth.wall, t_synth.cpu);
  }
  tiles_masks_free(masks, p.heads);
  tiles_free(&ti);
  free(wc);
  layout_free(&l);
  pattern_free(&p);
  return rc;
}

static const cli_flag bench_tiles_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model"},
    {"seq", "N", "512K", "tokens in the sequence"},
    {"layout", "L", "striped:128", "contiguous, zigzag, striped or striped:G"},
    {"pattern", "P", "vs-topp:0.95", "attention pattern (docs/patterns.md)"},
    {"world", "W", "2", "ranks the sequence is spread over"},
    {"rank", "R", "0", "the rank whose preparation is timed"},
    {"layer", "L", "0", "the layer whose pattern is used"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_tiles_usage = {NULL, "sparsering bench-tiles --seq 512K --world 8 --rank 3",
                                            {bench_tiles_flags, NULL}};

static int cmd_bench_tiles(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  if (cli_parse(argc, argv, &bench_tiles_usage, &a, &e) || bench_tiles(&a, &e)) return sr_error_report(&e, "sparsering bench-tiles");
  return 0;
}

CLI_COMMAND("bench-tiles", cmd_bench_tiles,
            "time one layer's executor preparation for one rank",
            &bench_tiles_usage)

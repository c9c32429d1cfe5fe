// cmd_pattern.c — `sparsering pattern`: a sparse attention pattern on a layout, per layer: density and
// worker/step imbalance from the exact tile accounting (docs/patterns.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"

// Build the layout of a --layout string (with --granularity) for n tokens over W ranks.
static int layout_from_text(const char *text, int64_t g_flag, int64_t n, int W, layout *l, sr_error *e) {
  layout_kind kind;
  int64_t g = g_flag;
  int rc = layout_parse_kind(text, &kind, &g, e);
  if (rc) return rc;
  if (kind == LAYOUT_PERMUTATION) return layout_load_permutation(layout_permutation_path(text), n, W, l, e);
  return layout_build(kind, n, W, kind == LAYOUT_STRIPED ? g : 1, NULL, l, e);
}

static const cli_flag pattern_flags[] = {
    {"model", "NAME|PATH", "required", "the model: a shipped name (models/NAME.json) or a config file"},
    {"seq", "N", "required", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"pattern", "P", "dense", "attention pattern (docs/patterns.md)"},
    {"layout", "L", "striped", "contiguous, zigzag, striped, striped:G, permutation:PATH"},
    {"ranks", "W", "1", "ranks the sequence is spread over"},
    {"granularity", "G", "128", "tokens a block of the striped layout (when --layout gives no G)"},
    {"seed", "X", "1", "seed of synthetic patterns"},
    {"step", "S", "0", "training step of a drifting synthetic pattern"},
    {"csv", cli_out_file, NULL, "write the per-layer table as CSV"},
    {"fwd-runs", NULL, NULL, "also count the forward form's 64-key runs (the executor's --fwd-runs)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage pattern_usage = {
    NULL, "sparsering pattern --model qwen2.5-3b --seq 512K --pattern vs-preset:qwen2.5-3b --layout striped --ranks 32",
    {pattern_flags, NULL}};

static int cmd_pattern(int argc, char **argv) {
  const char *prog = "sparsering pattern";
  cli_args a;
  sr_error e = {0};
  const char *model_name = NULL, *seq_text = NULL, *spec = NULL, *layout_text = NULL;
  int64_t seq = 0, ranks = 0, g = 0, seed = 0, step = 0;
  if (cli_parse(argc, argv, &pattern_usage, &a, &e) || cli_require(&a, "model", &model_name, &e) ||
      cli_require(&a, "seq", &seq_text, &e) || sr_parse_tokens(seq_text, "--seq", &seq, &e) ||
      cli_get_int(&a, "ranks", 1, 1, 1 << 20, &ranks, &e) || cli_get_int(&a, "granularity", 128, 1, INT32_MAX, &g, &e) ||
      cli_get_int(&a, "seed", 1, 0, INT64_MAX, &seed, &e) || cli_get_int(&a, "step", 0, 0, INT32_MAX, &step, &e))
    return sr_error_report(&e, prog);
  spec = cli_get(&a, "pattern", "dense");
  layout_text = cli_get(&a, "layout", "striped");
  model_config m;
  layout l;
  pattern p;
  if (model_load(model_name, &m, &e)) return sr_error_report(&e, prog);
  if (layout_from_text(layout_text, g, seq, (int)ranks, &l, &e)) return sr_error_report(&e, prog);
  double t0 = sr_now();
  if (pattern_from_spec(spec, &m, seq, (uint64_t)seed, (int)step, &p, &e)) {
    layout_free(&l);
    return sr_error_report(&e, prog);
  }
  double t1 = sr_now();
  int W = (int)ranks;
  work_count *counts = malloc((size_t)p.heads * W * W * sizeof *counts);
  layer_summary *sum = calloc((size_t)p.layers, sizeof *sum);
  int fwd_runs = cli_has(&a, "fwd-runs");
  runs_count *rsum = calloc((size_t)p.layers, sizeof *rsum);
  if (!counts || !sum || !rsum) {
    sr_internal_error(&e, 0, "out of memory for %d x %d x %d work counts", p.heads, W, W);
    free(counts);
    free(sum);
    free(rsum);
    pattern_free(&p);
    layout_free(&l);
    return sr_error_report(&e, prog);
  }
  int rc = 0;
  for (int layer = 0; layer < p.layers && !rc; layer++) {
    rc = tiles_account_layer(&p, layer, &l, counts, &e);
    if (!rc) tiles_layer_summary(&p, &l, counts, &sum[layer]);
  }
  double t2 = sr_now();
  for (int layer = 0; layer < p.layers && !rc && fwd_runs; layer++) rc = tiles_runs_count_layer(&p, layer, &l, &rsum[layer], &e);
  double t3 = sr_now();
  if (!rc) {
    char nbuf[32];
    printf("pattern %s on %s, %s tokens, layout %s (G %lld) over %d ranks, seed %lld, step %lld\n", spec, m.name,
           sr_format_tokens(seq, nbuf, sizeof nbuf), layout_kind_name(l.kind), (long long)l.granularity, W,
           (long long)seed, (long long)step);
    printf("work = %d^2 x (full + partial tiles) + %d x bars; imbalance = max/mean (1 = balanced); step t of the\n"
           "flat ring: rank r computes source (r - t) mod W\n", TILE, TILE);
    if (fwd_runs)
      printf("fwd runs = the forward form's work (tiles_runs_build: scattered slashes as 64-key runs) / work\n");
    printf("%5s %9s %9s %12s %12s %10s %10s%s\n", "layer", "density", "sparsity", "kept pairs", "work", "worker", "step",
           fwd_runs ? "   fwd runs" : "");
    printf("%5s %9s %9s %12s %12s %10s %10s\n", "", "", "", "", "", "max/mean", "mean/worst");
    layer_summary all = {0};
    sr_buf csv = {0};
    sr_buf_printf(&csv, "layer,density,kept_pairs,work,worker_imbalance,step_imbalance_mean,step_imbalance_worst,"
                        "full_tiles,partial_tiles,bars%s\n",
                  fwd_runs ? ",runs_full_tiles,runs_partial_tiles,runs,runs_bars,runs_work" : "");
    double rwork = 0;
    for (int layer = 0; layer < p.layers; layer++) {
      const layer_summary *s = &sum[layer];
      const runs_count *rs = &rsum[layer];
      printf("%5d %8.4f%% %8.3f%% %12.4g %12.4g %10.3f %5.3f/%.3f", layer, 100 * s->density, 100 * (1 - s->density),
             s->pairs, s->work, s->worker_imbalance, s->step_mean, s->step_worst);
      if (fwd_runs) printf("   %8.1f%%", s->work > 0 ? 100 * rs->work / s->work : 100.0);
      printf("\n");
      sr_buf_printf(&csv, "%d,%.9g,%.17g,%.17g,%.9g,%.9g,%.9g,%.0f,%.0f,%.0f", layer, s->density, s->pairs, s->work,
                    s->worker_imbalance, s->step_mean, s->step_worst, s->full, s->partial, s->bars);
      if (fwd_runs)
        sr_buf_printf(&csv, ",%.0f,%.0f,%.0f,%.0f,%.17g", rs->full, rs->partial, rs->runs, rs->bars, rs->work);
      sr_buf_printf(&csv, "\n");
      rwork += rs->work;
      all.pairs += s->pairs;
      all.causal_pairs += s->causal_pairs;
      all.work += s->work;
      all.worker_imbalance += s->worker_imbalance / p.layers;
      all.step_mean += s->step_mean / p.layers;
      if (s->step_worst > all.step_worst) all.step_worst = s->step_worst;
    }
    all.density = all.pairs / all.causal_pairs;
    printf("%5s %8.4f%% %8.3f%% %12.4g %12.4g %10.3f %5.3f/%.3f", "all", 100 * all.density, 100 * (1 - all.density),
           all.pairs, all.work, all.worker_imbalance, all.step_mean, all.step_worst);
    if (fwd_runs) printf("   %8.1f%%", all.work > 0 ? 100 * rwork / all.work : 100.0);
    printf("   (imbalances: mean over layers; worst step)\n");
    printf("pattern built in %.3f s, exact accounting of %d layers in %.3f s", t1 - t0, p.layers, t2 - t1);
    if (fwd_runs) printf(", forward forms built in %.3f s", t3 - t2);
    printf("\n");
    const char *csv_path = cli_get(&a, "csv", NULL);
    if (csv_path) {
      if (!csv.data) rc = sr_internal_error(&e, 0, "out of memory for the CSV");
      else rc = sr_write_atomic(csv_path, csv.data, csv.len, &e);
    }
    sr_buf_free(&csv);
  }
  free(counts);
  free(sum);
  free(rsum);
  pattern_free(&p);
  layout_free(&l);
  return rc ? sr_error_report(&e, prog) : 0;
}

CLI_COMMAND("pattern", cmd_pattern,
            "a pattern's per-layer density and imbalance on a layout",
            &pattern_usage)

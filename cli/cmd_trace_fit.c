// cmd_trace_fit.c — `sparsering trace fit t.safetensors`: fit the generator to a trace ("vs-fit:PATH",
// traces/fit.c) and print the recorded and the fitted pattern's statistics side by side: density, where the
// work sits, and the worker and step imbalance of each layout at each rank count (plan/balance.h).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/balance.h"
#include "plan/model.h"
#include "plan/util.h"
#include "traces/trace.h"

static const char *const fit_layouts[] = {"contiguous", "zigzag", "striped:128", "balanced"};
#define N_FIT_LAYOUTS 4
#define FIT_TOLERANCE 0.10  // the goal: each imbalance figure of the fit within 10% of the recording's

typedef struct {
  sr_buf csv;
  int n_figures, n_within;
  double worst;  // largest relative difference of an imbalance figure
} fit_report;

static double rel(double rec, double fit) { return rec != 0 ? (fit - rec) / rec : (fit == 0 ? 0 : INFINITY); }

// A statistic that is shown for comparison, not judged against the goal; `suffix` follows its name (" (all
// steps)" for the statistics pooled over every recorded step).
static void row(fit_report *r, const char *figure, const char *suffix, double rec, double fit, const char *fmt) {
  char x[32], y[32], name[64];
  snprintf(x, sizeof x, fmt, rec);
  snprintf(y, sizeof y, fmt, fit);
  snprintf(name, sizeof name, "%s%s", figure, suffix);
  printf("  %-35s %6s %12s %12s %+8.1f%%\n", name, "", x, y, 100 * rel(rec, fit));
  sr_buf_printf(&r->csv, "%s,,0,%.9g,%.9g,%.9g\n", name, rec, fit, rel(rec, fit));
}

static void imbalance_row(fit_report *r, const char *figure, const char *layout, int ranks, double rec, double fit) {
  double d = rel(rec, fit);
  printf("  %-22s %-12s %6d %12.4f %12.4f %+8.1f%%%s\n", figure, layout, ranks, rec, fit, 100 * d,
         fabs(d) > FIT_TOLERANCE ? "   > 10%" : "");
  sr_buf_printf(&r->csv, "%s,%s,%d,%.9g,%.9g,%.9g\n", figure, layout, ranks, rec, fit, d);
  r->n_figures++;
  r->n_within += fabs(d) <= FIT_TOLERANCE;
  if (fabs(d) > r->worst) r->worst = fabs(d);
}

// A lower bound over every layout of whole tiles: shown and written, not counted against the goal.
static void bound_row(fit_report *r, const char *figure, int ranks, double rec, double fit) {
  printf("  %-22s %-12s %6d %12.4f %12.4f %+8.1f%%\n", figure, "tile-bound", ranks, rec, fit, 100 * rel(rec, fit));
  sr_buf_printf(&r->csv, "%s,tile-bound,%d,%.9g,%.9g,%.9g\n", figure, ranks, rec, fit, rel(rec, fit));
}

static double pattern_density(const pattern *p) {
  double kept = 0;
  for (int64_t x = 0; x < (int64_t)p->layers * p->heads; x++) kept += trace_head_kept_pairs(&p->h[x], p->n_tokens);
  return kept / ((double)p->layers * p->heads * (double)p->n_tokens * (double)(p->n_tokens + 1) / 2);
}

// Density and where the work sits, recorded beside fitted, over n steps of each (their mean density, their
// heads pooled).
static int compare_positions(const pattern *rec, const pattern *fit, int n, const char *suffix, fit_report *r,
                             sr_error *e) {
  trace_position_stats a, b;
  if (trace_positions_steps(rec, n, -1, &a, e) || trace_positions_steps(fit, n, -1, &b, e)) return e->code;
  double da = 0, db = 0;
  for (int s = 0; s < n; s++) da += pattern_density(&rec[s]) / n, db += pattern_density(&fit[s]) / n;
  row(r, "density", suffix, 100 * da, 100 * db, "%.4f%%");
  if (!a.heads) return SR_OK;
  const double sa = a.vertical_pairs + a.slash_pairs, sb = b.vertical_pairs + b.slash_pairs;
  row(r, "vertical share", suffix, sa > 0 ? a.vertical_pairs / sa : 0, sb > 0 ? b.vertical_pairs / sb : 0, "%.4f");
  row(r, "vertical v < 1% of N", suffix, a.vertical_first[0], b.vertical_first[0], "%.4f");
  row(r, "vertical v < 10% of N", suffix, a.vertical_first[1], b.vertical_first[1], "%.4f");
  row(r, "slash d < 128", suffix, a.slash_local, b.slash_local, "%.4f");
  row(r, "slash p50 (tokens)", suffix, a.slash_q[0], b.slash_q[0], "%.0f");
  row(r, "slash p90 (tokens)", suffix, a.slash_q[1], b.slash_q[1], "%.0f");
  row(r, "slash p99 (tokens)", suffix, a.slash_q[2], b.slash_q[2], "%.0f");
  return SR_OK;
}

// The same over every recorded step against the fit drawn at each of them (it drifts as the generators do):
// the fit's own target, since it is fitted to all the steps. Recordings whose steps differ (the trained
// model's two steps: vertical share 0.153 and 0.201) differ from any one fitted step by that much alone.
static int compare_positions_all_steps(const char *path, const trace_file *t, const model_config *m, uint64_t seed,
                                       fit_report *r, sr_error *e) {
  const int n = t->info.steps;
  pattern *rec = calloc((size_t)n, sizeof *rec), *fit = calloc((size_t)n, sizeof *fit);
  int rc = !rec || !fit ? sr_internal_error(e, ENOMEM, "trace fit: %d steps", n) : SR_OK;
  for (int s = 0; s < n && !rc; s++)
    if (!(rc = trace_read_step(t, s, &rec[s], e))) rc = trace_fit_pattern(path, m, t->info.seq_len, seed, s, &fit[s], e);
  if (!rc) {
    printf("  over all %d recorded steps, the fit drawn at each:\n", n);
    rc = compare_positions(rec, fit, n, " (all steps)", r, e);
  }
  for (int s = 0; s < n && rec && fit; s++) {
    if (rec[s].h) pattern_free(&rec[s]);
    if (fit[s].h) pattern_free(&fit[s]);
  }
  free(rec), free(fit);
  return rc;
}

static int balance_named(const pattern *p, const char *name, int W, balance_figures *f, sr_error *e) {
  layout l;
  int rc = balance_layout_named(p, name, W, &l, e);
  if (rc) return rc;
  rc = balance_of(p, &l, f, e);
  layout_free(&l);
  return rc;
}

static int compare_balance(const pattern *rec, const pattern *fit, const int *ranks, int n_ranks, fit_report *r,
                           sr_error *e) {
  for (int k = 0; k < N_FIT_LAYOUTS; k++)
    for (int i = 0; i < n_ranks; i++) {
      balance_figures a, b;
      if (balance_named(rec, fit_layouts[k], ranks[i], &a, e) || balance_named(fit, fit_layouts[k], ranks[i], &b, e))
        return e->code;
      imbalance_row(r, "worker imbalance", fit_layouts[k], ranks[i], a.worker, b.worker);
      imbalance_row(r, "step imbalance", fit_layouts[k], ranks[i], a.step, b.step);
    }
  // What whole tiles allow at best (balance_tile_bound), shown beside the layouts, not judged.
  for (int i = 0; i < n_ranks; i++) {
    balance_figures a, b;
    if (balance_tile_bound(rec, ranks[i], &a, e) || balance_tile_bound(fit, ranks[i], &b, e)) return e->code;
    bound_row(r, "worker imbalance", ranks[i], a.worker, b.worker);
    bound_row(r, "step imbalance", ranks[i], a.step, b.step);
  }
  return SR_OK;
}

// Parse "8,32,64" into ranks (up to cap).
static int parse_rank_list(const char *text, int *ranks, int cap, int *n, sr_error *e) {
  *n = 0;
  for (const char *p = text; *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > (1 << 20) || (*end && *end != ',') || *n == cap)
      return sr_input_error(e, NULL, "--ranks", "'%s': expected up to %d rank counts >= 1, comma-separated", text, cap);
    ranks[(*n)++] = (int)v;
    p = *end ? end + 1 : end;
  }
  return *n ? SR_OK : sr_input_error(e, NULL, "--ranks", "'%s': no rank count", text);
}

static const cli_flag fit_flags[] = {
    {"ranks", "LIST", "8,32,64", "rank counts of the imbalance comparison (comma-separated)"},
    {"step", "S", "0", "the recorded step compared (the fit uses every step)"},
    {"seed", "X", "1", "seed of the fitted generator's draw"},
    {"csv", cli_out_file, NULL, "write figure,layout,ranks,recorded,fitted,rel_diff rows"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage fit_usage = {"t.safetensors", "sparsering trace fit traces/samples/tiny25m-vs-topp-32k.safetensors --ranks 8,32,64",
                                    {fit_flags, NULL}};

static int trace_fit_cmd(int argc, char **argv) {
  const char *prog = "sparsering trace fit";
  cli_args a;
  sr_error e = {0};
  int64_t step = 0, seed = 0;
  int ranks[16], n_ranks = 0;
  if (cli_parse(argc, argv, &fit_usage, &a, &e) || cli_get_int(&a, "seed", 1, 0, INT64_MAX, &seed, &e) ||
      parse_rank_list(cli_get(&a, "ranks", "8,32,64"), ranks, 16, &n_ranks, &e))
    return sr_error_report(&e, prog);
  if (a.n_pos != 1) {
    sr_input_error(&e, NULL, "trace fit", "expected one trace file (sparsering trace fit t.safetensors)");
    return sr_error_report(&e, prog);
  }
  trace_file t;
  if (trace_open(a.pos[0], &t, &e)) return sr_error_report(&e, prog);
  const trace_info *in = &t.info;
  model_config m;
  memset(&m, 0, sizeof m);  // the fit only needs the shape: the trace's layers and heads
  m.num_layers = in->layers, m.num_heads = in->heads;
  snprintf(m.name, sizeof m.name, "%s", in->model);
  pattern rec = {0}, fit = {0};
  int rc = cli_get_int(&a, "step", 0, 0, in->steps - 1, &step, &e);
  if (!rc) rc = trace_read_step(&t, (int)step, &rec, &e);
  if (!rc) rc = trace_fit_pattern(a.pos[0], &m, in->seq_len, (uint64_t)seed, (int)step, &fit, &e);
  fit_report r = {0};
  sr_buf_printf(&r.csv, "figure,layout,ranks,recorded,fitted,rel_diff\n");
  if (!rc) {
    char buf[32];
    printf("fit of %s: %s, %s tokens, %d steps x %d layers x %d heads, source %s: %s\n"
           "recorded step %lld against vs-fit:%s drawn at the same length and shape (seed %lld, step %lld)\n\n"
           "  %-22s %-12s %6s %12s %12s %9s\n", a.pos[0], in->model[0] ? in->model : "(no model)",
           sr_format_tokens(in->seq_len, buf, sizeof buf), in->steps, in->layers, in->heads, in->source, in->origin,
           (long long)step, a.pos[0], (long long)seed, (long long)step, "figure", "layout", "ranks", "recorded",
           "fitted", "fit/rec");
    rc = compare_positions(&rec, &fit, 1, "", &r, &e);
    if (!rc && in->steps > 1) rc = compare_positions_all_steps(a.pos[0], &t, &m, (uint64_t)seed, &r, &e);
  }
  if (!rc) rc = compare_balance(&rec, &fit, ranks, n_ranks, &r, &e);
  if (!rc)
    printf("\n%d of %d imbalance figures within %.0f%% of the recording (largest difference %.1f%%)\n", r.n_within,
           r.n_figures, 100 * FIT_TOLERANCE, 100 * r.worst);
  const char *csv = cli_get(&a, "csv", NULL);
  if (!rc && csv) rc = sr_write_atomic(csv, r.csv.data, r.csv.len, &e);
  sr_buf_free(&r.csv);
  if (rec.h) pattern_free(&rec);
  if (fit.h) pattern_free(&fit);
  trace_close(&t);
  return rc ? sr_error_report(&e, prog) : 0;
}

CLI_COMMAND("trace fit", trace_fit_cmd,
            "fit the generator to a trace (vs-fit:PATH) and compare fitted with recorded statistics", &fit_usage)

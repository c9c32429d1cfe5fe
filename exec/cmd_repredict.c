// cmd_repredict.c — `sparsering-exec repredict`: every GPU run kept under results/ predicted again by the
// simulator as it is now, from the run's own log and the calibrated cluster of its call, and the error
// table (per run and pass, mean and max): the README's sim-vs-real table is this command's output.
//
// A result folder lists its runs in `repredict.tsv`, one line a group of logs (tab-separated, '#' starts a
// comment): GLOB (logs, relative to the folder), CLUSTER (the calibrated cluster file of their call,
// relative to the folder), and the run's flags the log does not show (--skip-empty-sends, --fwd-runs,
// --granularity G, --inner K, --ulysses U, --seed X, --trace FILE for vs-online, --bars-walk whole|split|ws|pair for
// the backward's bar kernel of the run's binary (exec/repredict.h, repredict_bars_walk), --full-from FILE for the FULL
// tiles' figures of a later layer-shaped calibration of the same GPU and dense kernels (repredict_full_from), --bars-from
// FILE for the bars' backward figures of a calibration of the same GPU that timed the run's bar kernel
// (repredict_bars_from); for moba --inputs KIND and
// --data-seed X of the run, whose selection is then recomputed from those inputs, and --moba-gate host for a run
// whose gate ran on the host, which the simulator does not model). Each log's summary line
//   attn LAYOUT | SCHEDULE | PATTERN: W ranks, MODEL, seq N, L layer(s): fwd X ms bwd Y ms per layer
// gives the plan and the measured times; the cluster is the calibrated one for W ranks (the calibration of
// one host of W GPUs seen as up to 2 nodes, as scripts/cluster_nodes.py does); the prediction is
// `sparsering-exec predict`'s (sim/predict.h: forward and backward spans), the mean over the run's L layers. A log of
// `sparsering-exec train --predict` instead is a training step, simulated as train --predict simulates it
// (exec/repredict.h), in a table of its own: the step and its split (attention, the rest, exposed comm). With
// --memory, the memory of the layer runs instead (exec/repredict_memory.c). --layers FILE writes each layer of the runs
// of several layers beside its own measured times (where a run's error is a mean, which layers make it).
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/attn_data.h"
#include "exec/exec.h"
#include "exec/repredict.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/predict.h"
#include "traces/trace.h"

#define MAX_MANIFESTS 256

typedef struct {
  char path[1024];                   // the log, relative to the root
  attn_line a;                       // its summary line: the plan, the measured times per layer
  double pfwd_ms, pbwd_ms;           // predicted
  // A run of several layers: each layer's prediction, and its measured times where the log has its line ("layer N:
  // fwd X ms, bwd Y ms"; NAN where it has none), for --layers.
  int n_lay;
  double *lay;  // [n_lay][4]: measured fwd, bwd, predicted fwd, bwd (ms)
  char skipped[256];                 // why it was not predicted ("" when it was)
  int is_train;                      // a training step (t), not a layer
  train_rerun t;
} rerun;

// ---------------------------------------------------------------------------------------------
// finding the manifests

static char found[MAX_MANIFESTS][1024];
static int n_found;

static int on_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st;
  if (type == FTW_F && !strcmp(path + ftw->base, "repredict.tsv") && n_found < MAX_MANIFESTS)
    snprintf(found[n_found++], sizeof found[0], "%s", path);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

// ---------------------------------------------------------------------------------------------
// one log

int repredict_parse_attn_line(const char *line, attn_line *r) {
  if (strncmp(line, "attn ", 5) != 0) return -1;
  const char *bar1 = strstr(line, " | "), *bar2 = bar1 ? strstr(bar1 + 3, " | ") : NULL;
  const char *ranks = bar2 ? strstr(bar2, " ranks, ") : NULL;
  if (!ranks) return -1;
  const char *colon = ranks;
  while (colon > bar2 && *colon != ':') colon--;
  if (*colon != ':') return -1;
  snprintf(r->layout, sizeof r->layout, "%.*s", (int)(bar1 - line - 5), line + 5);
  snprintf(r->schedule, sizeof r->schedule, "%.*s", (int)(bar2 - bar1 - 3), bar1 + 3);
  snprintf(r->pattern, sizeof r->pattern, "%.*s", (int)(colon - bar2 - 3), bar2 + 3);
  long long seq = 0;
  char model[128];
  if (sscanf(colon + 1, " %d ranks, %127[^,], seq %lld, %d layer", &r->world, model, &seq, &r->layers) != 4) return -1;
  snprintf(r->model, sizeof r->model, "%s", model);
  r->seq = seq;
  const char *f = strstr(colon, ": fwd ");
  return f && sscanf(f, ": fwd %lf ms bwd %lf ms", &r->fwd_ms, &r->bwd_ms) == 2 ? 0 : -1;
}

// The first summary line of a log: "attn LAYOUT | SCHEDULE | PATTERN: W ranks, MODEL, seq N, ...: fwd X ms bwd Y ms".
static int parse_log(const char *file, rerun *r) {
  char *text = NULL;
  sr_error e;
  if (sr_read_file(file, &text, NULL, &e)) return -1;
  int ok = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line && !ok; line = strtok_r(NULL, "\n", &save))
    ok = repredict_parse_attn_line(line, &r->a) == 0;
  free(text);
  return ok ? 0 : -1;
}

// The calibrated cluster for W ranks of one host: itself when it has W GPUs, else W GPUs as 2 nodes of
// W / 2 (one node for W <= 2) with its GPU, efficiencies and links; the inter-node level takes its
// inter_node figures, else its intra_node ones (on one host those transfers use the same NVLink).
// A manifest's --full-from FILE takes the FULL tiles' figures of a layer-shaped calibration (repredict_full_from),
// --bars-from FILE the bars' backward figures of a calibration of the run's bar kernel (repredict_bars_from).
static int cluster_for(const char *dir, const char *cal, const char *flags, int W, char *out_path, size_t size,
                       sr_error *e) {
  cluster_desc c;
  int rc = cluster_load(cal, &c, e);
  if (!rc) rc = repredict_full_from(dir, flags, &c, e);
  if (!rc) rc = repredict_bars_from(dir, flags, &c, e);
  if (rc) return rc;
  if (cluster_world(&c) != W) {
    if (W > 2 && W % 2) return sr_input_error(e, cal, "ranks", "%d ranks: needs 1, 2 or an even count", W);
    if (c.nics_per_node == 0) c.nic = c.intra;
    c.nodes = W > 2 ? 2 : 1;
    c.gpus_per_node = W / c.nodes;
    c.nics_per_node = c.gpus_per_node;
  }
  char *json = cluster_to_json(&c);
  snprintf(out_path, size, "/tmp/sr-repredict-XXXXXX.json");
  int fd = json ? mkstemps(out_path, 5) : -1;
  if (fd < 0) {
    free(json);
    return sr_internal_error(e, 0, "repredict: cannot write a temporary cluster");
  }
  FILE *f = fdopen(fd, "w");
  fputs(json, f);
  fclose(f);
  free(json);
  return SR_OK;
}

// The run's inputs (moba: its selection is recomputed from them).
typedef struct {
  int inputs;
  uint64_t seed;
} run_inputs;

// The run's pattern: the plan's own; moba's selection recomputed from the run's inputs (bf16, as the GPU run held
// them); or (vs-online, adaspa-online: chosen at run time) step 0 of the trace the run wrote.
static int run_pattern(const plan *p, const char *trace_path, const run_inputs *in, pattern *out, sr_error *e) {
  if (!pattern_spec_at_run_time(p->spec.pattern))
    return pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, out, e);
  gating_opts g;
  if (!trace_path && pattern_spec_estimation(p->spec.pattern) == PATTERN_GATED &&
      pattern_spec_gating_opts(p->spec.pattern, &g, e) == SR_OK && g.kind == PATTERN_MOBA) {
    int rc = pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, out, e);
    return rc ? rc : attn_gated_selection(p, 0, in->inputs, in->seed, 1, out, e);
  }
  if (!trace_path)
    return sr_input_error(e, NULL, "trace", "%s", pattern_spec_estimation(p->spec.pattern) == PATTERN_SEARCHED
                                                         ? "adaspa-online: no trace of the searched mask kept"
                                                         : "vs-online: no trace of the estimated pattern kept");
  trace_file t;
  int rc = trace_open(trace_path, &t, e);
  if (rc) return rc;
  rc = trace_read_step(&t, 0, out, e);
  trace_close(&t);
  return rc;
}

// e's message as the reason of an input error of `field` (the old message moved aside first: it is rewritten).
static int refile(sr_error *e, const char *field) {
  char why[sizeof e->msg];
  snprintf(why, sizeof why, "%s", e->msg);
  return sr_input_error(e, NULL, field, "%s", why);
}

int repredict_attn_plan(const char *dir, const char *cal, const char *flags, const attn_line *r, plan *p,
                        pattern *pat, sr_error *e) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.strategy, sizeof s.strategy, "custom");
  snprintf(s.model, sizeof s.model, "%s", r->model);
  s.seq = r->seq;
  snprintf(s.schedule, sizeof s.schedule, "%s", r->schedule);
  snprintf(s.pattern, sizeof s.pattern, "%s", r->pattern);
  if (!strncmp(r->schedule, "fpdt:", 5)) {  // attn's line for FPDT: "fpdt:CHUNK[+offload]", Ulysses inside each chunk
    char chunk[32];
    snprintf(chunk, sizeof chunk, "%.*s", (int)strcspn(r->schedule + 5, "+"), r->schedule + 5);
    if (sr_parse_tokens(chunk, "fpdt chunk", &s.fpdt_chunk, e)) return refile(e, "schedule");
    s.fpdt_offload = strstr(r->schedule, "+offload") != NULL;
    snprintf(s.schedule, sizeof s.schedule, "ulysses");
  }
  layout_kind k;
  int64_t g = 0;
  if (layout_parse_kind(r->layout, &k, &g, e)) return refile(e, "layout");
  snprintf(s.layout, sizeof s.layout, "%s", layout_kind_name(k));
  s.granularity = k == LAYOUT_STRIPED ? (g > 0 ? g : 128) : 1;
  char trace[1100] = "", buf[1024], *tok[64], *save = NULL;
  int nt = 0;
  run_inputs in = {ATTN_INPUTS_RANDOM, 1};
  snprintf(buf, sizeof buf, "%s", flags);
  for (char *t = strtok_r(buf, " ", &save); t && nt < 64; t = strtok_r(NULL, " ", &save)) tok[nt++] = t;
  for (int i = 0; i < nt; i++) {
    const char *val = i + 1 < nt ? tok[i + 1] : NULL;
    if (!strcmp(tok[i], "--skip-empty-sends")) s.skip_empty_sends = 1;
    else if (!strcmp(tok[i], "--fwd-runs")) s.fwd_runs = 1;
    else if (!val) break;
    else if (!strcmp(tok[i], "--granularity")) s.granularity = atoll(val), i++;
    else if (!strcmp(tok[i], "--inner")) s.inner = atoi(val), i++;
    else if (!strcmp(tok[i], "--ulysses")) s.ulysses = atoi(val), i++;
    else if (!strcmp(tok[i], "--seed")) s.seed = (uint64_t)atoll(val), i++;
    else if (!strcmp(tok[i], "--search-every")) s.search_every = atoll(val), i++;
    else if (!strcmp(tok[i], "--trace")) snprintf(trace, sizeof trace, "%s/%s", dir, val), i++;
    else if (!strcmp(tok[i], "--data-seed")) in.seed = (uint64_t)atoll(val), i++;
    else if (!strcmp(tok[i], "--inputs")) in.inputs = strcmp(val, "vs") ? ATTN_INPUTS_RANDOM : ATTN_INPUTS_VS, i++;
  }
  char cpath[600];
  if (cluster_for(dir, cal, flags, r->world, cpath, sizeof cpath, e)) return refile(e, "cluster");
  snprintf(s.cluster, sizeof s.cluster, "%s", cpath);
  memset(pat, 0, sizeof *pat);
  int rc = plan_build(&s, p, e);
  unlink(cpath);  // the plan holds its copy
  if (!rc && (rc = repredict_bars_walk(flags, &p->cluster, e))) plan_free(p);
  if (!rc && (rc = run_pattern(p, trace[0] ? trace : NULL, &in, pat, e))) plan_free(p);
  return rc;
}

static void predict_run(const char *dir, const char *cal, const char *flags, rerun *r) {
  if (strstr(flags, "--moba-gate host")) {  // its forward is the host's selection and uploads (online_gate_cuda.c)
    snprintf(r->skipped, sizeof r->skipped, "moba with --moba-gate host: the simulator models the GPU gate");
    return;
  }
  sr_error e;
  sr_error_clear(&e);
  plan p;
  pattern pat;
  double f = 0, b = 0;
  int rc = repredict_attn_plan(dir, cal, flags, &r->a, &p, &pat, &e);
  if (!rc) {
    // A run of L layers (attn --layers L) measured the mean layer over layers 0..L-1, whose patterns differ (each layer
    // of a synthetic pattern is its own draw): predict each of them and take the mean, as the run did. A kept pattern
    // (--trace) with fewer layers bounds it.
    int nl = r->a.layers > 0 ? r->a.layers : 1;
    if (nl > pat.layers) nl = pat.layers;
    if (nl > 1 && !(r->lay = malloc(sizeof(double) * 4 * (size_t)nl))) rc = sr_internal_error(&e, 0, "out of memory");
    for (int l = 0; !rc && l < nl; l++) {
      double fl = 0, bl = 0;
      rc = predict_attention(&p, &pat, l, NULL, &fl, &bl, &e);
      f += fl / nl, b += bl / nl;
      if (r->lay) r->lay[4 * l] = r->lay[4 * l + 1] = NAN, r->lay[4 * l + 2] = 1e3 * fl, r->lay[4 * l + 3] = 1e3 * bl;
    }
    if (r->lay) r->n_lay = nl;
    pattern_free(&pat);
    plan_free(&p);
  }
  if (rc) {
    snprintf(r->skipped, sizeof r->skipped, "%s", e.msg);
    return;
  }
  r->pfwd_ms = 1e3 * f, r->pbwd_ms = 1e3 * b;
}

// The measured times of each layer of a run of several layers, from the log's lines "layer N: fwd X ms, bwd Y ms"
// (attn prints one a layer before its summary line).
static void read_layer_times(const char *file, rerun *r) {
  char *text = NULL;
  sr_error e;
  if (!r->n_lay || sr_read_file(file, &text, NULL, &e)) return;
  for (const char *at = text; (at = strstr(at, "layer ")) != NULL; at++) {
    int l;
    double f, b;
    if ((at == text || at[-1] == ' ') && sscanf(at, "layer %d: fwd %lf ms, bwd %lf ms", &l, &f, &b) == 3 && l >= 0 &&
        l < r->n_lay)
      r->lay[4 * l] = f, r->lay[4 * l + 1] = b;
  }
  free(text);
}

// A training step's log (exec/repredict.h).
static int parse_train(const char *file, rerun *r) {
  char *text = NULL;
  sr_error e;
  if (sr_read_file(file, &text, NULL, &e)) return -1;
  int rc = repredict_parse_train_log(text, &r->t);
  free(text);
  if (rc == 0) r->is_train = 1, r->a.world = r->t.world, r->a.seq = r->t.seq;
  return rc;
}

static void predict_train(const char *dir, const char *cal, const char *flags, rerun *r) {
  sr_error e;
  sr_error_clear(&e);
  char cpath[600];
  if (cluster_for(dir, cal, flags, r->t.world, cpath, sizeof cpath, &e)) {
    snprintf(r->skipped, sizeof r->skipped, "cluster: %s", e.msg);
    return;
  }
  if (repredict_model_from(dir, flags, &r->t, &e) || repredict_train_run(cpath, flags, &r->t, &e))
    snprintf(r->skipped, sizeof r->skipped, "%s", e.msg);
  unlink(cpath);
}

// ---------------------------------------------------------------------------------------------
// manifests and the table

static int read_manifest(const char *root, const char *manifest, rerun **runs, int *n, int *cap) {
  char dir[1024], *text = NULL;
  snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(manifest, '/') - manifest), manifest);
  sr_error e;
  if (sr_read_file(manifest, &text, NULL, &e)) return -1;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!*line || line[0] == '#') continue;
    char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
    if (!tab1) continue;
    *tab1 = 0;
    if (tab2) *tab2 = 0;
    char pat[2100], cal[2100];
    snprintf(pat, sizeof pat, "%s/%s", dir, line);
    snprintf(cal, sizeof cal, "%s/%s", dir, tab1 + 1);
    const char *flags = tab2 ? tab2 + 1 : "";
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) continue;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        rerun *grown = realloc(*runs, (size_t)*cap * sizeof *grown);
        if (!grown) break;
        *runs = grown;
      }
      rerun *r = &(*runs)[*n];
      memset(r, 0, sizeof *r);
      size_t lr = strlen(root);
      snprintf(r->path, sizeof r->path, "%s", strncmp(g.gl_pathv[i], root, lr) ? g.gl_pathv[i] : g.gl_pathv[i] + lr + 1);
      if (!parse_log(g.gl_pathv[i], r)) predict_run(dir, cal, flags, r), read_layer_times(g.gl_pathv[i], r);
      else if (!parse_train(g.gl_pathv[i], r)) predict_train(dir, cal, flags, r);
      else snprintf(r->skipped, sizeof r->skipped, "no attn summary line (nor a train --predict step) in the log");
      (*n)++;
    }
    globfree(&g);
  }
  free(text);
  return 0;
}

static double err(double pred, double meas) { return meas > 0 ? (pred - meas) / meas : 0; }

// The training steps: measured and simulated step and split (attention calls, the rest, exposed comm).
static void print_train(const rerun *runs, int n) {
  int n_ok = 0;
  double sum = 0, worst = 0;
  for (int i = 0; i < n; i++) {
    const rerun *r = &runs[i];
    if (!r->is_train || r->skipped[0]) continue;
    const train_rerun *t = &r->t;
    if (n_ok++ == 0)
      printf("training steps (train --predict logs), seconds a step: measured | simulated (attention calls, the rest, "
             "exposed comm)\n%-60s %3s %5s %-12s %7s %6s %6s %5s | %7s %6s %6s %5s %8s %8s\n", "run", "W", "seq", "pattern",
             "step", "attn", "rest", "comm", "step", "attn", "rest", "comm", "err_step", "err_attn");
    double es = err(t->pstep_s, t->step_s), ea = err(t->pattn_s, t->attn_s);
    char tok[32];
    size_t len = strlen(r->path);  // the path's end names the run
    const char *name = len > 60 ? r->path + len - 60 : r->path;
    printf("%-60.60s %3d %5s %-12.12s %7.3f %6.3f %6.3f %5.3f | %7.3f %6.3f %6.3f %5.3f %+7.1f%% %+7.1f%%\n", name, t->world,
           sr_format_tokens(t->seq, tok, sizeof tok), t->pattern, t->step_s, t->attn_s, t->rest_s, t->comm_s, t->pstep_s,
           t->pattn_s, t->prest_s, t->pcomm_s, 100 * es, 100 * ea);
    sum += fabs(es), worst = fmax(worst, fabs(es));
  }
  if (n_ok) printf("error over %d training steps: mean %.1f%% max %.1f%%\n", n_ok, 100 * sum / n_ok, 100 * worst);
}

static const cli_flag repredict_flags[] = {
    {"root", "DIR", "results", "the folder whose repredict.tsv manifests list the runs"},
    {"csv", "FILE", NULL, "also write the layers' table as CSV"},
    {"layers", "FILE", NULL, "also write every layer of the runs of several layers as CSV: its measured times where the "
     "log has its line, and its prediction"},
    {"memory", NULL, NULL, "instead: the memory of every layer run whose log holds attn --predict's two memory lines "
     "(measured, and predicted when it ran), predicted again by this build"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage repredict_usage = {NULL, "sparsering-exec repredict --root results", {repredict_flags, NULL}};

static int cmd_repredict(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  const char *prog = "sparsering-exec repredict";
  if (cli_parse(argc, argv, &repredict_usage, &a, &e)) return sr_error_report(&e, prog);
  const char *root = cli_get(&a, "root", "results");
  if (cli_has(&a, "memory"))
    return repredict_memory_table(root, cli_get(&a, "csv", NULL), &e) ? sr_error_report(&e, prog) : 0;
  n_found = 0;
  if (nftw(root, on_file, 16, FTW_PHYS) != 0) {
    sr_input_error(&e, root, NULL, "cannot walk the folder");
    return sr_error_report(&e, prog);
  }
  qsort(found, (size_t)n_found, sizeof found[0], cmp_str);
  rerun *runs = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < n_found; i++) read_manifest(root, found[i], &runs, &n, &cap);
  sr_buf csv = {0};
  sr_buf_printf(&csv, "run,world,seq,layout,schedule,pattern,fwd_ms,bwd_ms,pred_fwd_ms,pred_bwd_ms,err_fwd,err_bwd,err_layer\n");
  printf("repredict: the runs listed under %s (%d manifest%s) predicted again on their calibrated clusters;\n"
         "error = (predicted - measured) / measured\n", root, n_found, n_found == 1 ? "" : "s");
  printf("%-66s %3s %6s %-26s %9s %9s %9s %9s %8s %8s %8s\n", "run", "W", "seq", "pattern", "fwd_ms", "bwd_ms", "pfwd_ms",
         "pbwd_ms", "err_fwd", "err_bwd", "err_tot");
  double sum_pass = 0, max_pass = 0, sum_layer = 0, max_layer = 0;
  int n_ok = 0, n_skip = 0;
  for (int i = 0; i < n; i++) {
    rerun *r = &runs[i];
    if (r->skipped[0]) {
      n_skip++;
      continue;
    }
    if (r->is_train) continue;
    const attn_line *a = &r->a;
    double ef = err(r->pfwd_ms, a->fwd_ms), eb = err(r->pbwd_ms, a->bwd_ms);
    double et = err(r->pfwd_ms + r->pbwd_ms, a->fwd_ms + a->bwd_ms);
    char tok[32];
    printf("%-66.66s %3d %6s %-26.26s %9.1f %9.1f %9.1f %9.1f %+7.1f%% %+7.1f%% %+7.1f%%\n", r->path, a->world,
           sr_format_tokens(a->seq, tok, sizeof tok), a->pattern, a->fwd_ms, a->bwd_ms, r->pfwd_ms, r->pbwd_ms, 100 * ef,
           100 * eb, 100 * et);
    sr_buf_printf(&csv, "%s,%d,%lld,%s,%s,%s,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f\n", r->path, a->world, (long long)a->seq,
                  a->layout, a->schedule, a->pattern, a->fwd_ms, a->bwd_ms, r->pfwd_ms, r->pbwd_ms, ef, eb, et);
    sum_pass += fabs(ef) + fabs(eb);
    max_pass = fmax(max_pass, fmax(fabs(ef), fabs(eb)));
    sum_layer += fabs(et);
    max_layer = fmax(max_layer, fabs(et));
    n_ok++;
  }
  if (n_ok)
    printf("error over %d runs: per pass (fwd, bwd) mean %.1f%% max %.1f%%; per layer (fwd+bwd) mean %.1f%% max %.1f%%\n",
           n_ok, 100 * sum_pass / (2 * n_ok), 100 * max_pass, 100 * sum_layer / n_ok, 100 * max_layer);
  print_train(runs, n);
  if (n_skip) {
    printf("not predicted (%d):\n", n_skip);
    for (int i = 0; i < n; i++)
      if (runs[i].skipped[0]) printf("  %s: %s\n", runs[i].path, runs[i].skipped);
  }
  int rc = 0;
  const char *csv_path = cli_get(&a, "csv", NULL);
  if (csv_path && sr_write_atomic(csv_path, csv.data, csv.len, &e)) rc = sr_error_report(&e, prog);
  sr_buf_free(&csv);
  const char *layers_path = cli_get(&a, "layers", NULL);
  if (!rc && layers_path) {
    sr_buf lay = {0};
    sr_buf_printf(&lay, "run,layer,fwd_ms,bwd_ms,pred_fwd_ms,pred_bwd_ms,err_fwd,err_bwd\n");
    for (int i = 0; i < n; i++)
      for (int l = 0; !runs[i].skipped[0] && l < runs[i].n_lay; l++) {
        const double *x = runs[i].lay + 4 * l;
        sr_buf_printf(&lay, "%s,%d,", runs[i].path, l);
        if (isnan(x[0])) sr_buf_printf(&lay, ",,%.3f,%.3f,,\n", x[2], x[3]);
        else sr_buf_printf(&lay, "%.3f,%.3f,%.3f,%.3f,%.4f,%.4f\n", x[0], x[1], x[2], x[3], err(x[2], x[0]), err(x[3], x[1]));
      }
    if (sr_write_atomic(layers_path, lay.data, lay.len, &e)) rc = sr_error_report(&e, prog);
    sr_buf_free(&lay);
  }
  for (int i = 0; i < n; i++) free(runs[i].lay);
  free(runs);
  return rc;
}

EXEC_COMMAND("repredict", cmd_repredict,
             "predict every GPU run kept under results/ again from its log and calibrated cluster; print the error table",
             &repredict_usage)

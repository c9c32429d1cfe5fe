// repredict_memory.c — `sparsering-exec repredict --memory` (repredict.h): the memory every kept layer run measured
// on its GPUs against the simulator's prediction of it, the one its log printed and this build's.
//
// A run is a block of a log that ends with its summary line ("attn LAYOUT | SCHEDULE | PATTERN: ..."); its memory
// lines are the last of each kind in the block. The measured line names what the GPU had in use after a layer and
// the items the executor knows (the rank's tensors, the attention plan, the shared workspace); the prediction claims
// the items, so its error is given against both.
#include <fnmatch.h>
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/repredict.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"
#include "sim/predict.h"

#define MEASURED "memory per GPU (largest rank): "
#define PREDICTED "memory predicted (sim"
#define MAX_LOGS 4096

typedef struct {
  char path[1100];                    // the log (relative to the root), "#k" for its k-th run when it holds several
  attn_line a;
  double used, tensors, plan, shared;  // measured
  double before;                      // the logged prediction's total
  sim_attn_memory after;              // this build's
  char skipped[300];                  // why it was not predicted ("" when it was)
  int old_form;                       // its executor predates the compact bars (no expanded bars in the workspace)
  double standin;                     // a pattern made on the device whose executor still uploaded the stand-in's
                                      // index, forward form and masks (never read): their bytes, else 0
} mem_run;

// ---------------------------------------------------------------------------------------------
// reading the lines

// Bytes of "12.34 GiB", "56.7 MiB" or "8.0 KiB" at s; -1 when s holds none.
static double size_at(const char *s) {
  double v;
  char unit[8];
  if (!s || sscanf(s, "%lf %7s", &v, unit) != 2) return -1;
  double m = !strncmp(unit, "GiB", 3) ? 1073741824.0 : !strncmp(unit, "MiB", 3) ? 1048576.0 : !strncmp(unit, "KiB", 3) ? 1024.0 : -1;
  return m > 0 ? v * m : -1;
}

// The size after `key` in line (-1: none).
static double size_after(const char *line, const char *key) {
  const char *k = strstr(line, key);
  return k ? size_at(k + strlen(key)) : -1;
}

static int parse_measured(const char *line, mem_run *r) {
  r->used = size_after(line, MEASURED), r->tensors = size_after(line, "the rank's tensors ");
  r->plan = size_after(line, "the attention plan "), r->shared = size_after(line, "the shared workspace ");
  return r->used >= 0 && r->tensors >= 0 && r->plan >= 0 && r->shared >= 0 ? 0 : -1;
}

// The stand-in's copies a plan line names (index + forward form + masks, the largest rank's), or 0.
static double standin_bytes(const char *line) {
  const char *k = line ? strstr(line, "plan device bytes (largest rank): ") : NULL;
  long long ix, fwd, tr, bc, masks;
  if (!k || sscanf(k, "plan device bytes (largest rank): index %lld, forward form %lld, transposed %lld, bar chunks "
                      "%lld, masks %lld", &ix, &fwd, &tr, &bc, &masks) != 5)
    return 0;
  return (double)(ix + fwd + masks);
}

// ---------------------------------------------------------------------------------------------
// finding the logs and their manifests

static char (*logs)[1024];
static int n_logs;

static int has_both(const char *path) {
  char *text = NULL;
  sr_error e;
  if (sr_read_file(path, &text, NULL, &e)) return 0;
  int both = strstr(text, MEASURED) && strstr(text, PREDICTED);
  free(text);
  return both;
}

static int on_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)ftw;
  if (type == FTW_F && n_logs < MAX_LOGS && has_both(path)) snprintf(logs[n_logs++], sizeof logs[0], "%s", path);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

// The manifest line listing `log`, from the repredict.tsv of its folder or a folder above it under root: its folder
// into dir, its cluster into cal, its flags into flags; 0, or -1 when none lists it.
static int manifest_of(const char *root, const char *log, char *dir, char *cal, char *flags, size_t size) {
  char d[1024];
  snprintf(d, sizeof d, "%s", log);
  for (char *slash = strrchr(d, '/'); slash && strlen(d) >= strlen(root); slash = strrchr(d, '/')) {
    *slash = 0;
    char path[1100], *text = NULL, *save = NULL;
    sr_error e;
    snprintf(path, sizeof path, "%s/repredict.tsv", d);
    if (sr_read_file(path, &text, NULL, &e)) continue;
    int found = 0;
    for (char *line = strtok_r(text, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
      char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL, glob_[2100];
      if (line[0] == '#' || !tab1) continue;
      *tab1 = 0;
      if (tab2) *tab2 = 0;
      snprintf(glob_, sizeof glob_, "%s/%s", d, line);
      if (fnmatch(glob_, log, FNM_PATHNAME) != 0) continue;
      snprintf(dir, size, "%s", d), snprintf(cal, size, "%s/%s", d, tab1 + 1);
      snprintf(flags, size, "%s", tab2 ? tab2 + 1 : "");
      found = 1;
    }
    free(text);
    if (found) return 0;
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// predicting

// Every layer the run ran, each item the largest over them (as attn reports them).
static void predict_run(const char *root, const char *log, mem_run *r) {
  char dir[1024], cal[1024], flags[1024];
  if (manifest_of(root, log, dir, cal, flags, sizeof dir)) {  // a log no manifest lists: one host of W GPUs
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(log, '/') - log), log);
    snprintf(cal, sizeof cal, "h200-1x2"), flags[0] = 0;
  }
  sr_error e;
  sr_error_clear(&e);
  plan p;
  pattern pat;
  int rc = repredict_attn_plan(dir, cal, flags, &r->a, &p, &pat, &e);
  if (rc) {
    snprintf(r->skipped, sizeof r->skipped, "%s", e.msg);
    return;
  }
  for (int l = 0; !rc && l < (r->a.layers > 0 ? r->a.layers : 1) && l < pat.layers; l++) {
    sim_attn_memory m;
    rc = predict_attention_memory(&p, &pat, l, &m, &e);
    double *to = &r->after.tensors, *from = &m.tensors;
    for (int i = 0; !rc && i < 5; i++) to[i] = fmax(to[i], from[i]);
  }
  r->after.total = r->after.tensors + r->after.plan + r->after.workspace;
  if (rc) snprintf(r->skipped, sizeof r->skipped, "%s", e.msg);
  pattern_free(&pat);
  plan_free(&p);
}

// The runs of one log, appended to *runs.
static void read_log(const char *root, const char *log, mem_run **runs, int *n, int *cap) {
  char *text = NULL, *save = NULL;
  sr_error e;
  if (sr_read_file(log, &text, NULL, &e)) return;
  const char *measured = NULL, *predicted = NULL, *plan_line = NULL;
  int first = *n, k = 0, compact = 0;  // compact: the block's plan line names the workspace's expanded bars
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    const char *t = line + strspn(line, " ");
    if (!strncmp(t, MEASURED, strlen(MEASURED))) measured = t;
    if (!strncmp(t, PREDICTED, strlen(PREDICTED))) predicted = t;
    if (strstr(t, "plan device bytes") && strstr(t, "expanded bars")) compact = 1;
    if (strstr(t, "plan device bytes")) plan_line = t;
    attn_line a;
    if (repredict_parse_attn_line(line, &a)) continue;
    if (measured && predicted && *n < 100000) {
      if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        mem_run *grown = realloc(*runs, (size_t)*cap * sizeof *grown);
        if (!grown) break;
        *runs = grown;
      }
      mem_run *r = &(*runs)[(*n)++];
      memset(r, 0, sizeof *r);
      size_t lr = strlen(root);
      snprintf(r->path, sizeof r->path, "%s#%d", strncmp(log, root, lr) ? log : log + lr + 1, ++k);
      r->a = a, r->old_form = !compact;
      // a pattern made on the device: this executor keeps no copies of its stand-in (pattern_spec_device_made)
      if (pattern_spec_device_made(a.pattern)) r->standin = standin_bytes(plan_line);
      const char *colon = strstr(predicted, "): ");
      r->before = colon ? size_at(colon + 3) : -1;
      if (parse_measured(measured, r) || r->before < 0) snprintf(r->skipped, sizeof r->skipped, "memory lines unread");
      else predict_run(root, log, r);
    }
    measured = predicted = plan_line = NULL, compact = 0;
  }
  for (int i = first; k == 1 && i < *n; i++) (*runs)[i].path[strlen((*runs)[i].path) - 2] = 0;  // one run: no "#1"
  free(text);
}

// ---------------------------------------------------------------------------------------------
// the table

static double err(double pred, double meas) { return meas > 0 ? (pred - meas) / meas : 0; }

int repredict_memory_table(const char *root, const char *csv_path, sr_error *e) {
  logs = malloc(sizeof *logs * MAX_LOGS);
  if (!logs) return sr_internal_error(e, 0, "out of memory");
  n_logs = 0;
  if (nftw(root, on_file, 16, FTW_PHYS) != 0) {
    free(logs);
    return sr_input_error(e, root, NULL, "cannot walk the folder");
  }
  qsort(logs, (size_t)n_logs, sizeof logs[0], cmp_str);
  mem_run *runs = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < n_logs; i++) read_log(root, logs[i], &runs, &n, &cap);
  free(logs);
  const double G = 1073741824.0;
  printf("repredict --memory: the layer runs under %s whose logs hold both memory lines (%d); GiB a GPU, the largest "
         "rank;\nmeasured: in use after a layer, and its items (the rank's tensors + the attention plan + the shared "
         "workspace);\nbefore: the prediction the run's log printed; after: this build's (the same items); error = "
         "(predicted - measured) / measured\n", root, n);
  printf("%-62s %2s %5s %-17s %-14s %7s %7s %7s %7s | %7s %7s %7s %7s | %6s %6s %6s %6s\n", "run", "W", "seq", "schedule",
         "pattern", "in_use", "items", "before", "after", "ws", "ws_pred", "plan", "pl_pred", "b_use", "a_use", "b_item",
         "a_item");
  sr_buf csv = {0};
  sr_buf_printf(&csv, "run,world,seq,layout,schedule,pattern,used,tensors,plan,shared,before,after,after_tensors,"
                      "after_plan,after_shared,err_before_used,err_after_used,err_before_items,err_after_items,compact_era\n");
  double sum[2][4] = {{0}}, worst[2][4] = {{0}};  // [0] every run, [1] the runs of the current executor
  int n_ok[2] = {0}, n_skip = 0;
  for (int i = 0; i < n; i++) {
    const mem_run *r = &runs[i];
    if (r->skipped[0]) {
      n_skip++;
      continue;
    }
    double items = r->tensors + r->plan + r->shared;
    double er[4] = {err(r->before, r->used), err(r->after.total, r->used), err(r->before, items),
                    err(r->after.total, items)};
    char tok[32];
    size_t len = strlen(r->path);
    printf("%-61.61s%c %2d %5s %-17.17s %-14.14s %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f %7.3f %7.3f | %+5.0f%% %+5.0f%% "
           "%+5.0f%% %+5.1f%%\n", len > 61 ? r->path + len - 61 : r->path, r->old_form ? '*' : r->standin > 0 ? '+' : ' ', r->a.world,
           sr_format_tokens(r->a.seq, tok, sizeof tok), r->a.schedule, r->a.pattern, r->used / G, items / G,
           r->before / G, r->after.total / G, r->shared / G, r->after.workspace / G, r->plan / G, r->after.plan / G,
           100 * er[0], 100 * er[1], 100 * er[2], 100 * er[3]);
    sr_buf_printf(&csv, "%s,%d,%lld,%s,%s,%s,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.4f,%.4f,%.4f,%.4f,%d\n", r->path,
                  r->a.world, (long long)r->a.seq, r->a.layout, r->a.schedule, r->a.pattern, r->used, r->tensors, r->plan,
                  r->shared, r->before, r->after.total, r->after.tensors, r->after.plan, r->after.workspace, er[0], er[1],
                  er[2], er[3], !r->old_form);
    for (int g = 0; g < 2; g++) {
      if (g == 1 && (r->old_form || r->standin > 0)) continue;
      for (int k = 0; k < 4; k++) sum[g][k] += fabs(er[k]), worst[g][k] = fmax(worst[g][k], fabs(er[k]));
      n_ok[g]++;
    }
  }
  const char *what[2] = {"every run", "the runs of the current executor (no * or +)"};
  for (int g = 0; g < 2; g++)
    if (n_ok[g])
      printf("error over %s (%d), mean |err| (max): against the memory in use: before %.1f%% (%.1f%%), after %.1f%% "
             "(%.1f%%);\n  against the items: before %.1f%% (%.1f%%), after %.1f%% (%.1f%%)\n", what[g], n_ok[g],
             100 * sum[g][0] / n_ok[g], 100 * worst[g][0], 100 * sum[g][1] / n_ok[g], 100 * worst[g][1],
             100 * sum[g][2] / n_ok[g], 100 * worst[g][2], 100 * sum[g][3] / n_ok[g], 100 * worst[g][3]);
  printf("*: the log's executor predates the compact bar form (its plan kept the bar lists, its workspace had none "
         "expanded); this build predicts the current executor\n");
  for (int i = 0; i < n; i++) {  // +: what the current executor would have held, by the log's own items
    const mem_run *r = &runs[i];
    if (r->skipped[0] || r->standin <= 0) continue;
    double items = r->tensors + r->plan + r->shared - r->standin;
    printf("+ %s: its executor uploaded the stand-in's index and masks of a pattern made on the device (%.1f MiB, "
           "never read), which the current one does not; without them: in use %.2f GiB, items %.2f GiB, plan %.1f MiB; "
           "this build's prediction %+.1f%% of the memory in use, %+.1f%% of the items\n", r->path,
           r->standin / 1048576.0, (r->used - r->standin) / G, items / G, (r->plan - r->standin) / 1048576.0,
           100 * err(r->after.total, r->used - r->standin), 100 * err(r->after.total, items));
  }
  if (n_skip) {
    printf("not predicted (%d):\n", n_skip);
    for (int i = 0; i < n; i++)
      if (runs[i].skipped[0]) printf("  %s: %s\n", runs[i].path, runs[i].skipped);
  }
  int rc = csv_path ? sr_write_atomic(csv_path, csv.data, csv.len, e) : SR_OK;
  sr_buf_free(&csv);
  free(runs);
  return rc;
}

// timeline_compare.c — predicted vs measured timelines per phase and per step (timeline_compare.h).
#include "sim/timeline_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/timeline.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// reading

// The columns are plan/timeline.h's: 0 run, 1 layer, 2 rank, 3 step, 4 phase, 5 stream, 6 start_us, 7 dur_us.

int tlc_read_csv(const char *path, tlc_timeline *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  char *text;
  if (sr_read_file(path, &text, NULL, e)) return e->code;
  int col_of[TIMELINE_COLUMNS];  // position of each known column in the file
  for (int i = 0; i < TIMELINE_COLUMNS; i++) col_of[i] = -1;
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  if (!line) {
    free(text);
    return sr_input_error(e, path, "header", "empty file; expected run,layer,rank,step,phase,stream,start_us,dur_us");
  }
  int ncol = 0;
  for (char *p = line, *f; (f = strsep(&p, ",")) != NULL; ncol++) {
    f[strcspn(f, "\r")] = '\0';
    for (int i = 0; i < TIMELINE_COLUMNS; i++)
      if (strcmp(f, timeline_columns[i]) == 0) col_of[i] = ncol;
  }
  for (int i = 0; i < TIMELINE_COLUMNS; i++)
    if (col_of[i] < 0) {
      free(text);
      return sr_input_error(e, path, timeline_columns[i], "missing column in the header");
    }
  int64_t cap = 0, lineno = 1;
  while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
    lineno++;
    if (line[0] == '\0' || line[0] == '\r') continue;
    if (t->n == cap) {
      cap = cap ? 2 * cap : 1024;
      tlc_event *ev = realloc(t->ev, sizeof(tlc_event) * (size_t)cap);
      if (!ev) {
        free(text), tlc_free(t);
        return sr_internal_error(e, 0, "out of memory");
      }
      t->ev = ev;
    }
    tlc_event *x = &t->ev[t->n];
    memset(x, 0, sizeof *x);
    int k = 0, got = 0;
    for (char *p = line, *f; (f = strsep(&p, ",")) != NULL; k++) {
      f[strcspn(f, "\r")] = '\0';
      char *end = NULL;
      for (int i = 0; i < TIMELINE_COLUMNS; i++) {
        if (col_of[i] != k) continue;
        got++;
        if (i == 0) snprintf(x->run, sizeof x->run, "%s", f);
        else if (i == 4) snprintf(x->phase, sizeof x->phase, "%s", f);
        else if (i == 5) snprintf(x->stream, sizeof x->stream, "%s", f);
        else {
          double v = strtod(f, &end);
          if (end == f || *end) {
            char field[64];
            snprintf(field, sizeof field, "line %lld: %s", (long long)lineno, timeline_columns[i]);
            sr_input_error(e, path, field, "'%s' is not a number", f);  // f points into text: report first
            free(text), tlc_free(t);
            return SR_EINPUT;
          }
          if (i == 1) x->layer = (int32_t)v;
          else if (i == 2) x->rank = (int32_t)v;
          else if (i == 3) x->step = (int32_t)v;
          else if (i == 6) x->start_us = v;
          else x->dur_us = v;
        }
      }
    }
    if (got != TIMELINE_COLUMNS) {
      char field[64];
      snprintf(field, sizeof field, "line %lld", (long long)lineno);
      free(text), tlc_free(t);
      return sr_input_error(e, path, field, "expected %d columns", ncol);
    }
    t->n++;
  }
  free(text);
  return SR_OK;
}

void tlc_free(tlc_timeline *t) {
  free(t->ev);
  memset(t, 0, sizeof *t);
}

void tlc_report_free(tlc_report *r) {
  free(r->phases), free(r->steps);
  memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------------------------------------
// aggregation

typedef struct {
  int32_t layer, step, rank;
  char phase[32];
  double sum_us, first_us, last_us;
} cell;

static int cell_cmp(const void *x, const void *y) {
  const cell *a = x, *b = y;
  if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  int c = strcmp(a->phase, b->phase);
  if (c) return c;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

// Cells per (layer, step, phase, rank) with phase "" holding the step's span; sorted.
static cell *cells_of(const tlc_timeline *t, const char *run, int64_t *n_out) {
  cell *c = malloc(sizeof(cell) * (size_t)(2 * t->n + 1));
  int64_t n = 0;
  if (!c) return NULL;
  for (int64_t i = 0; i < t->n; i++) {
    const tlc_event *x = &t->ev[i];
    if (run && strcmp(x->run, run) != 0) continue;
    for (int span = 0; span < 2; span++) {
      cell k = {x->layer, x->step, x->rank, "", x->dur_us, x->start_us, x->start_us + x->dur_us};
      if (!span) snprintf(k.phase, sizeof k.phase, "%s", x->phase);
      c[n++] = k;
    }
  }
  qsort(c, (size_t)n, sizeof(cell), cell_cmp);
  int64_t m = 0;  // merge equal keys
  for (int64_t i = 0; i < n; i++) {
    if (m > 0 && cell_cmp(&c[m - 1], &c[i]) == 0) {
      c[m - 1].sum_us += c[i].sum_us;
      c[m - 1].first_us = fmin(c[m - 1].first_us, c[i].first_us);
      c[m - 1].last_us = fmax(c[m - 1].last_us, c[i].last_us);
    } else {
      c[m++] = c[i];
    }
  }
  *n_out = m;
  return c;
}

typedef struct {
  char name[40];
  double us;
} named;

static int add_named(named **v, int *n, int *cap, const char *name, double us) {
  for (int i = 0; i < *n; i++)
    if (strcmp((*v)[i].name, name) == 0) {
      (*v)[i].us += us;
      return 0;
    }
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    named *w = realloc(*v, sizeof(named) * (size_t)*cap);
    if (!w) return -1;
    *v = w;
  }
  snprintf((*v)[*n].name, sizeof(*v)[*n].name, "%s", name);
  (*v)[(*n)++].us = us;
  return 0;
}

// Per phase (sum over steps of the max over ranks) and per step (max over ranks of the span).
static int aggregate(const tlc_timeline *t, const char *run, named **phases, int *np, named **steps, int *ns, double *total) {
  int64_t n;
  cell *c = cells_of(t, run, &n);
  if (!c) return -1;
  int cp = 0, cs = 0;
  *phases = NULL, *steps = NULL, *np = 0, *ns = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    double mx = 0;
    while (j < n && c[j].layer == c[i].layer && c[j].step == c[i].step && strcmp(c[j].phase, c[i].phase) == 0) {
      double v = c[i].phase[0] ? c[j].sum_us : c[j].last_us - c[j].first_us;
      mx = fmax(mx, v);
      lo = fmin(lo, c[j].first_us), hi = fmax(hi, c[j].last_us);
      j++;
    }
    char name[40];
    int rc;
    if (c[i].phase[0]) {
      rc = add_named(phases, np, &cp, c[i].phase, mx);
    } else {
      snprintf(name, sizeof name, "layer %d step %d", c[i].layer, c[i].step);
      rc = add_named(steps, ns, &cs, name, mx);
    }
    if (rc) {
      free(c);
      return -1;
    }
    i = j;
  }
  *total = n ? hi - lo : 0;
  free(c);
  return 0;
}

static void fill_row(tlc_row *r, const char *name, double p, double m) {
  snprintf(r->name, sizeof r->name, "%s", name);
  r->predicted_us = p, r->measured_us = m;
  r->rel_err = m > 0 ? (p - m) / m : NAN;
}

static void list_missing(const named *a, int na, const named *b, int nb, char *out, size_t size) {
  out[0] = '\0';
  for (int i = 0; i < na; i++) {
    int found = 0;
    for (int j = 0; j < nb && !found; j++) found = strcmp(a[i].name, b[j].name) == 0;
    if (!found && strlen(out) + strlen(a[i].name) + 2 < size) {
      if (out[0]) strcat(out, ",");
      strcat(out, a[i].name);
    }
  }
}

static void match(const named *p, int np, const named *m, int nm, tlc_row *rows, int *n, double *mean, double *mx) {
  *n = 0, *mean = 0, *mx = 0;
  int cnt = 0;
  for (int i = 0; i < np; i++)
    for (int j = 0; j < nm; j++)
      if (strcmp(p[i].name, m[j].name) == 0) {
        fill_row(&rows[*n], p[i].name, p[i].us, m[j].us);
        double a = fabs(rows[*n].rel_err);
        if (isfinite(a)) *mean += a, *mx = fmax(*mx, a), cnt++;
        (*n)++;
      }
  *mean = cnt ? *mean / cnt : NAN;
  if (!cnt) *mx = NAN;
}

// Input error unless some event of t belongs to run (NULL: every run does), naming the runs t holds.
static int check_run(const tlc_timeline *t, const char *run, const char *flag, sr_error *e) {
  if (!run) return SR_OK;
  char runs[256] = "";
  for (int64_t i = 0; i < t->n; i++) {
    if (strcmp(t->ev[i].run, run) == 0) return SR_OK;
    char quoted[80];
    snprintf(quoted, sizeof quoted, "'%s'", t->ev[i].run);
    if (!strstr(runs, quoted) && strlen(runs) + strlen(quoted) + 3 < sizeof runs)
      snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%s", runs[0] ? ", " : "", quoted);
  }
  return sr_input_error(e, NULL, flag, "no row has run '%s' (the file's runs: %s)", run, runs[0] ? runs : "none");
}

int tlc_compare(const tlc_timeline *pred, const tlc_timeline *meas, const char *run_pred, const char *run_meas,
                tlc_report *r, sr_error *e) {
  memset(r, 0, sizeof *r);
  if (check_run(pred, run_pred, "--run-sim", e) || check_run(meas, run_meas, "--run-exec", e)) return e->code;
  named *pp, *ps, *mp, *ms;
  int npp, nps, nmp, nms;
  double tp, tm;
  if (aggregate(pred, run_pred, &pp, &npp, &ps, &nps, &tp)) return sr_internal_error(e, 0, "out of memory");
  if (aggregate(meas, run_meas, &mp, &nmp, &ms, &nms, &tm)) {
    free(pp), free(ps);
    return sr_internal_error(e, 0, "out of memory");
  }
  r->phases = calloc((size_t)(npp + 1), sizeof(tlc_row));
  r->steps = calloc((size_t)(nps + 1), sizeof(tlc_row));
  int rc = SR_OK;
  if (!r->phases || !r->steps) {
    rc = sr_internal_error(e, 0, "out of memory");
  } else {
    match(pp, npp, mp, nmp, r->phases, &r->n_phases, &r->phase_mean_abs, &r->phase_max_abs);
    match(ps, nps, ms, nms, r->steps, &r->n_steps, &r->step_mean_abs, &r->step_max_abs);
    fill_row(&r->total, "total", tp, tm);
    list_missing(pp, npp, mp, nmp, r->only_predicted, sizeof r->only_predicted);
    list_missing(mp, nmp, pp, npp, r->only_measured, sizeof r->only_measured);
  }
  free(pp), free(ps), free(mp), free(ms);
  if (rc == SR_OK && r->n_phases == 0 && r->n_steps == 0)  // no error to report: "nan% over 0 phases" says nothing
    rc = sr_input_error(e, NULL, NULL, "the two timelines share no phase and no step (only predicted: %s; only measured: %s)",
                        r->only_predicted[0] ? r->only_predicted : "none", r->only_measured[0] ? r->only_measured : "none");
  if (rc) tlc_report_free(r);
  return rc;
}

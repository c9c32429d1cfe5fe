// svg.c — the SVG Gantt writer (see svg.h). Plain SVG 1.1 with no script and no stylesheet beyond
// an inline <style>, so the file opens the same in a browser, an image viewer or a notebook. Bars
// carry <title> children, which SVG viewers show as hover tooltips (SVG 1.1, section 5.4).
#include "sim/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/engine.h"

// ---- geometry and colours --------------------------------------------------------------------

enum {
  MARGIN_LEFT = 110,  // rank and lane labels
  MARGIN_RIGHT = 24,
  PLOT_W = 1200,
  HEADER_H = 64,      // title and time axis
  LANE_H = 12,
  LANE_GAP = 2,
  ROW_GAP = 10,
  LEGEND_COLS = 6,
  LEGEND_ROW_H = 18,
};

// One colour a phase (Tableau 20-like), so forward, backward and communication read apart at a glance.
static const char *const phase_colour[PHASE_COUNT] = {
    "#4e79a7", "#edc948", "#b07aa1", "#e15759", "#59a14f", "#76b7b2", "#9c755f", "#86bcb6", "#ff9d9a",
    "#8cd17d", "#a0cbe8", "#bab0ac", "#f28e2b", "#d4a6c8", "#499894", "#79706e", "#fabfd2", "#d37295"};
_Static_assert(sizeof phase_colour / sizeof phase_colour[0] == PHASE_COUNT, "one colour per phase");

static const char *colour_of(int phase) { return phase >= 0 && phase < PHASE_COUNT ? phase_colour[phase] : "#999999"; }

sim_svg_options sim_svg_defaults(void) { return (sim_svg_options){NULL, 0, -1}; }

// ---- helpers ---------------------------------------------------------------------------------

static int keep(const timeline_event *v, const sim_svg_options *o) { return v->rank >= 0 && (o->layer < 0 || v->layer == o->layer); }

// Append s with the five XML special characters escaped.
static int put_escaped(sr_buf *b, const char *s) {
  int rc = 0;
  for (; *s && !rc; s++) {
    switch (*s) {
      case '&': rc = sr_buf_printf(b, "&amp;"); break;
      case '<': rc = sr_buf_printf(b, "&lt;"); break;
      case '>': rc = sr_buf_printf(b, "&gt;"); break;
      case '"': rc = sr_buf_printf(b, "&quot;"); break;
      case '\'': rc = sr_buf_printf(b, "&apos;"); break;
      default: rc = sr_buf_append(b, s, 1);
    }
  }
  return rc;
}

// A tick step of 1, 2 or 5 x 10^k giving about eight ticks over span (the usual "nice numbers").
static double tick_step(double span) {
  double raw = span / 8, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return mag * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

// ---- the writer ------------------------------------------------------------------------------

int sim_svg_write(const sim_timeline *t, const sim_svg_options *opt, const char *path, sr_error *e) {
  sim_svg_options o = opt ? *opt : sim_svg_defaults();
  int world = o.world > 0 ? o.world : 0, used_stream[STREAM_COUNT] = {0}, used_phase[PHASE_COUNT] = {0};
  double t0 = INFINITY, t1 = -INFINITY;
  int64_t n_kept = 0;
  for (int64_t i = 0; i < t->n; i++) {
    const timeline_event *v = &t->ev[i];
    if (!keep(v, &o)) continue;
    if (v->rank + 1 > world) world = v->rank + 1;
    if (v->stream < STREAM_COUNT) used_stream[v->stream] = 1;
    if (v->phase < PHASE_COUNT) used_phase[v->phase] = 1;
    if (v->start < t0) t0 = v->start;
    if (v->start + v->dur > t1) t1 = v->start + v->dur;
    n_kept++;
  }
  if (n_kept == 0) t0 = 0, t1 = 1e-3, used_stream[STREAM_COMPUTE] = 1;
  // Lanes: the streams any kept task uses, in stream order, the same in every row.
  int lane_of[STREAM_COUNT], n_lanes = 0;
  for (int s = 0; s < STREAM_COUNT; s++) lane_of[s] = used_stream[s] ? n_lanes++ : -1;
  double span = t1 > t0 ? t1 - t0 : 1e-6;
  // Time unit: the largest of s, ms, us that keeps the axis labels above 1.
  double unit = span >= 1 ? 1 : span >= 1e-3 ? 1e-3 : 1e-6;
  const char *unit_name = unit == 1 ? "s" : unit == 1e-3 ? "ms" : "us";
  int row_h = n_lanes * (LANE_H + LANE_GAP) + ROW_GAP;
  int n_legend = 0;
  for (int p = 0; p < PHASE_COUNT; p++) n_legend += used_phase[p];
  int legend_h = ((n_legend + LEGEND_COLS - 1) / LEGEND_COLS) * LEGEND_ROW_H + 16;
  int width = MARGIN_LEFT + PLOT_W + MARGIN_RIGHT, height = HEADER_H + world * row_h + legend_h;
  double xscale = PLOT_W / span;

  sr_buf b = {0};
  int rc = sr_buf_printf(&b,
                         "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
                         "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
                         "<style>rect.bar:hover{stroke:#000;stroke-width:1}</style>\n"
                         "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
                         width, height, width, height);
  if (o.title) {
    rc |= sr_buf_printf(&b, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", MARGIN_LEFT);
    rc |= put_escaped(&b, o.title);
    rc |= sr_buf_printf(&b, "</text>\n");
  }
  // Time axis: ticks and labels above the rows, faint grid lines through them.
  double step = tick_step(span);
  rc |= sr_buf_printf(&b, "<g class=\"axis\" stroke=\"#dddddd\">\n");
  for (double x = 0; x <= span * (1 + 1e-9); x += step) {
    double px = MARGIN_LEFT + x * xscale;
    rc |= sr_buf_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", px, HEADER_H - 6, px,
                        HEADER_H + world * row_h);
    rc |= sr_buf_printf(&b, "<text x=\"%.1f\" y=\"%d\" stroke=\"none\" fill=\"#333333\" text-anchor=\"middle\">%.4g</text>\n",
                        px, HEADER_H - 10, (t0 + x) / unit);
  }
  rc |= sr_buf_printf(&b, "<text x=\"%d\" y=\"%d\" stroke=\"none\" fill=\"#333333\" text-anchor=\"end\">time (%s)</text>\n</g>\n",
                      MARGIN_LEFT - 8, HEADER_H - 10, unit_name);
  // Rows: one group per rank with its lanes. A counting sort by rank (stable: timeline order within a
  // rank) lets each row be written as one <g> in one pass.
  int64_t *first = calloc((size_t)world + 1, sizeof *first), *order = malloc(((size_t)n_kept + 1) * sizeof *order);
  if (!first || !order) {
    free(first);
    free(order);
    sr_buf_free(&b);
    return sr_internal_error(e, 0, "svg: out of memory for %lld tasks", (long long)t->n);
  }
  for (int64_t i = 0; i < t->n; i++)
    if (keep(&t->ev[i], &o)) first[t->ev[i].rank + 1]++;
  for (int r = 0; r < world; r++) first[r + 1] += first[r];
  for (int64_t i = 0; i < t->n; i++)
    if (keep(&t->ev[i], &o)) order[first[t->ev[i].rank]++] = i;
  // Placing advanced each rank's start to its end, which is the next rank's start: shift back.
  for (int r = world; r > 0; r--) first[r] = first[r - 1];
  first[0] = 0;
  for (int r = 0; r < world && !rc; r++) {
    int y = HEADER_H + r * row_h;
    rc |= sr_buf_printf(&b, "<g class=\"rank\" id=\"rank-%d\">\n", r);
    rc |= sr_buf_printf(&b, "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", y - ROW_GAP / 2, width,
                        row_h, r % 2 ? "#f7f7f7" : "#ffffff");
    rc |= sr_buf_printf(&b, "<text x=\"6\" y=\"%d\" font-weight=\"bold\">rank %d</text>\n", y + LANE_H - 2, r);
    for (int s = 0; s < STREAM_COUNT; s++)
      if (lane_of[s] >= 0)
        rc |= sr_buf_printf(&b, "<text x=\"%d\" y=\"%d\" fill=\"#666666\" text-anchor=\"end\" font-size=\"9\">%s</text>\n",
                            MARGIN_LEFT - 6, y + lane_of[s] * (LANE_H + LANE_GAP) + LANE_H - 2, timeline_stream_name(s));
    for (int64_t j = first[r]; j < first[r + 1] && !rc; j++) {
      const timeline_event *v = &t->ev[order[j]];
      if (v->stream >= STREAM_COUNT) continue;
      double x = MARGIN_LEFT + (v->start - t0) * xscale, w = v->dur * xscale;
      rc |= sr_buf_printf(&b,
                          "<rect class=\"bar\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>rank %d %s: "
                          "%s, layer %d, step %d, start %.6g %s, %.6g %s</title></rect>\n",
                          x, y + lane_of[v->stream] * (LANE_H + LANE_GAP), w > 0.2 ? w : 0.2, LANE_H, colour_of(v->phase),
                          r, timeline_stream_name(v->stream), timeline_phase_name(v->phase), v->layer, v->step,
                          (v->start - t0) / unit, unit_name, v->dur / unit, unit_name);
    }
    rc |= sr_buf_printf(&b, "</g>\n");
  }
  free(first);
  free(order);
  // Legend: the phases that appear.
  int k = 0, ly = HEADER_H + world * row_h + 8;
  rc |= sr_buf_printf(&b, "<g class=\"legend\">\n");
  for (int p = 0; p < PHASE_COUNT; p++) {
    if (!used_phase[p]) continue;
    int lx = MARGIN_LEFT + (k % LEGEND_COLS) * (PLOT_W / LEGEND_COLS), yy = ly + (k / LEGEND_COLS) * LEGEND_ROW_H;
    rc |= sr_buf_printf(&b, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                        lx, yy, colour_of(p), lx + 16, yy + 10, timeline_phase_name(p));
    k++;
  }
  rc |= sr_buf_printf(&b, "</g>\n</svg>\n");
  if (rc) {
    sr_buf_free(&b);
    return sr_internal_error(e, 0, "svg: out of memory for %lld tasks", (long long)t->n);
  }
  rc = sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}

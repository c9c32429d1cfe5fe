// svg.h — a simulated step as a dependency-free SVG Gantt chart, for people without Perfetto at hand:
// one row per rank, one lane per stream (compute, intra-node link, inter-node link, copy, collectives)
// that carries any task, a bar per task coloured by phase, and a hover <title> on every bar naming its
// rank, stream, phase, layer, ring step, start and duration. Opens in any browser.
#ifndef SR_SVG_H
#define SR_SVG_H

#include "plan/error.h"
#include "sim/sim.h"

typedef struct {
  const char *title;  // heading above the chart (NULL: none); escaped for XML
  int world;          // rows to draw (ranks 0..world-1); 0: one more than the largest rank of the timeline
  int layer;          // draw only this layer's tasks; -1: every task
} sim_svg_options;

// Default options: no title, every rank of the timeline, every layer.
sim_svg_options sim_svg_defaults(void);
// Write timeline t as an SVG Gantt chart to path (atomically; "-" writes stdout). o may be NULL.
int sim_svg_write(const sim_timeline *t, const sim_svg_options *o, const char *path, sr_error *e);

#endif

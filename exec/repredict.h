// repredict.h — logged runs predicted again (`sparsering-exec repredict`, exec/cmd_repredict.c): a layer run's plan
// rebuilt from its summary line; a training step's plan and options `train --predict` used, rebuilt from the
// trainer's log, simulated on the calibrated cluster of the run's call, with the step split as the trainer splits
// it; and the memory a layer run measured against the simulator's (exec/repredict_memory.c).
#ifndef SR_REPREDICT_H
#define SR_REPREDICT_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"

// A layer run's summary line "attn LAYOUT | SCHEDULE | PATTERN: W ranks, MODEL, seq N, ...: fwd X ms bwd Y ms" (FPDT:
// SCHEDULE "fpdt:CHUNK[+offload]").
typedef struct {
  char layout[64], schedule[32], pattern[512], model[128];
  int world, layers;
  int64_t seq;
  double fwd_ms, bwd_ms;  // measured, per layer
} attn_line;

// Read a summary line; 0, or -1 when line is none.
int repredict_parse_attn_line(const char *line, attn_line *out);
// The run's plan and pattern: the line's plan with the manifest's flags (--skip-empty-sends, --fwd-runs,
// --granularity, --inner, --ulysses, --seed, --search-every; --trace FILE relative to dir; moba's --inputs and
// --data-seed, whose selection is recomputed) on the cluster file cal (or a shipped name) as W GPUs of one host.
// Release both on success.
int repredict_attn_plan(const char *dir, const char *cal, const char *flags, const attn_line *a, plan *p, pattern *pat,
                        sr_error *e);

typedef struct {
  char model[512], layout[64], schedule[32], pattern[512];  // model: a shipped name, or a manifest's --model FILE
  int world;
  int64_t seq;
  int keep_attn;    // the run's recomputation kept attention's output and LSE ("recompute selective")
  int keep_layers;  // in its first keep_layers layers ("recompute selective in K of L layers"); 0: every layer
  int keep_all;     // of those, the layers it kept whole ("kept whole in K of L layers"); 0: none
  int index_ready;  // every layer's attention plan was kept on the GPU (no index built in the step)
  int kept;         // the attention plans the run kept on the GPU ("K kept of L layers"; 0: not logged)
  int offload;      // the layer inputs in pinned host memory ("activation offload on")
  // measured: the best step after the first; the mean split after it (of a one-step run, its only step's)
  double step_s, attn_s, rest_s, comm_s;
  double pstep_s, pattn_s, prest_s, pcomm_s;  // simulated; attention and the rest on the busiest rank, comm the remainder
} train_rerun;

// Fill r's plan, options and measurements from a `sparsering-exec train --predict` log's text; -1 when the
// text holds no trainer header or no measured step (the split stays 0 without step lines: --quiet).
int repredict_parse_train_log(const char *text, train_rerun *r);
// Simulate r's step on the cluster file (calibrated, r->world GPUs) with the manifest's flags
// (--skip-empty-sends, --fwd-runs), as train --predict does; fills the predicted fields.
int repredict_train_run(const char *cluster_path, const char *flags, train_rerun *r, sr_error *e);
// A manifest's --model FILE (relative to dir): the model config the run trained, for a model that is not a shipped
// name (e.g. a shipped shape cut to fewer layers, whose log names the file's base name); r->model becomes its path.
// An unreadable or invalid file is an input error naming it (exit status 2). Nothing without the flag.
int repredict_model_from(const char *dir, const char *flags, train_rerun *r, sr_error *e);
// A manifest's --bars-walk whole|split|ws|pair (the backward's bar kernel of the run's binary: one CTA a chunk's whole
// walk before 34159d3, the walk split into parts since, on the warp-specialized kernel with its own dQ since variant 4
// became the default, in pairs of compute chunks a CTA with variant 5; gpu.bar_walk_parts, gpu.bar_walk_ws and
// gpu.bar_walk_pairs, sim/cost.h cost_bar_walk) onto the plan's cluster: 1 or 16 parts, ws or not, pairs or not;
// nothing without the flag (the file's own, else the floor as before). An unknown value: an input error naming the
// flag (exit status 2).
int repredict_bars_walk(const char *flags, cluster_desc *c, sr_error *e);
// A manifest's --full-from FILE (relative to dir): the FULL tiles' figures of a layer-shaped calibration of another
// call on the same GPU (calibrate --layer-lengths: gpu.attn_walk given) onto c, a calibration of the run's own call
// made before calibrate timed calls shaped like a layer's (no gpu.attn_walk): the FULL efficiencies of both phases,
// gpu.attn_walk, gpu.l2_mb and gpu.attn_l2, and the ring step's costs (gpu.ring_step, fitted against that kernel
// model); the partial tiles, bars, GEMMs, links and the rest stay c's. For runs whose binary's dense kernels are the
// later calibration's (docs/sim.md, "Layer-shaped FULL figures for older calibrations"). Nothing without the flag.
// Input errors (exit status 2) name the file and field: FILE unreadable or not layer-shaped, another GPU, or c
// already layer-shaped.
int repredict_full_from(const char *dir, const char *flags, cluster_desc *c, sr_error *e);

// A manifest's --bars-from FILE (relative to dir): the bars' backward figures of a calibration of another call on the
// same GPU that timed the bar kernel the run's binary ran (--bars-walk ws: gpu.bar_walk_ws 1, variant 4; pair: with
// gpu.bar_walk_pairs 1, variant 5) onto c, a calibration of the run's own call that timed another bar kernel:
// gpu.efficiency.attn_bwd_bar, gpu.bar_walk_us, gpu.bar_walk_ws and gpu.bar_walk_pairs (the forward's bars, the tiles,
// GEMMs, links and the rest stay c's). For runs whose binary's backward is newer than their call's calibration's
// (docs/sim.md, "The bars' figures of a later calibration"). Nothing without the flag. Input errors (exit status 2)
// name the file and field: no --bars-walk ws or pair, FILE unreadable, without the bars' walk, of another bar kernel
// or GPU, or c of that kernel already.
int repredict_bars_from(const char *dir, const char *flags, cluster_desc *c, sr_error *e);

// `repredict --memory`: every log under root with both memory lines of `attn --predict` (the measured "memory per
// GPU (largest rank)" and the simulator's "memory predicted"), each run of it predicted again by this build
// (predict_attention_memory, sim/predict.h) on the plan its summary line and its manifest give (a log no manifest
// lists: its line alone, on one host of W GPUs); prints the table (run, measured, the logged prediction, this one,
// their errors; mean and max) and writes it as CSV to csv_path (NULL: none).
int repredict_memory_table(const char *root, const char *csv_path, sr_error *e);

#endif

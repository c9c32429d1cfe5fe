// timeline_compare.h — predicted (simulator) vs measured (executor) timelines: both are CSVs with
// columns run,layer,rank,step,phase,stream,start_us,dur_us. Used by `sparsering compare`.
//
// Aggregation (a step is as slow as its slowest rank, docs/design.md, "Balance: worker and step imbalance"):
//   phase time  = sum over (layer, step) of the max over ranks of that phase's summed duration;
//   step time   = per (layer, step), the max over ranks of (last end - first start) of its events;
//   total       = last end - first start over all events.
// Errors are relative to the measurement: (predicted - measured) / measured.
#ifndef SR_TIMELINE_COMPARE_H
#define SR_TIMELINE_COMPARE_H

#include <stdint.h>

#include "plan/error.h"

typedef struct {
  char run[64];             // the simulator writes a run name, the executor a run number: kept as text
  int32_t layer, rank, step;
  char phase[32], stream[16];
  double start_us, dur_us;
} tlc_event;

typedef struct {
  int64_t n;
  tlc_event *ev;
} tlc_timeline;

// Read a timeline CSV (header required; errors name the file, line and column).
int tlc_read_csv(const char *path, tlc_timeline *t, sr_error *e);
// Release a timeline read by tlc_read_csv.
void tlc_free(tlc_timeline *t);

typedef struct {
  char name[40];            // phase name, or "layer L step S"
  double predicted_us, measured_us;
  double rel_err;           // (predicted - measured) / measured; NAN when measured is 0
} tlc_row;

typedef struct {
  int n_phases, n_steps;
  tlc_row *phases;          // phases present in both timelines
  tlc_row *steps;           // (layer, step) pairs present in both
  tlc_row total;
  double phase_mean_abs, phase_max_abs;  // over phases of |rel_err|
  double step_mean_abs, step_max_abs;    // over steps of |rel_err|
  char only_predicted[256], only_measured[256];  // phase names present on one side only (comma-separated)
} tlc_report;

// Compare predicted vs measured, restricted to one run of each (NULL: all rows).
int tlc_compare(const tlc_timeline *pred, const tlc_timeline *meas, const char *run_pred, const char *run_meas,
                tlc_report *r, sr_error *e);
// Release a report's arrays.
void tlc_report_free(tlc_report *r);

#endif

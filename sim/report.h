// report.h — the simulator's outputs for people and for notebooks: a summary table of strategies
// side by side (with the fastest marked) and CSV rows with the same figures.
#ifndef SR_REPORT_H
#define SR_REPORT_H

#include "plan/util.h"
#include "sim/sim.h"

// Append the summary table of n results (one line each, the fastest feasible one marked) to b.
int report_table(sr_buf *b, const sim_result *r, int n);
// Append the CSV header line (columns of report_csv_row, after the caller's leading columns `lead`).
int report_csv_header(sr_buf *b, const char *lead);
// Append one CSV row: the caller's leading fields `lead` (already comma-separated, may be "") then r.
int report_csv_row(sr_buf *b, const char *lead, const sim_result *r);
// The exec trainer's plans in one line ("plans: K of L kept, R rebuilt a step, X s exposed", and how a dropped
// plan comes back) into out; 0 (out empty) when r does not model them.
int sim_plans_text(const sim_result *r, char *out, size_t size);
// Index of the fastest feasible result that fits in memory (-1 when none).
int report_fastest(const sim_result *r, int n);

#endif

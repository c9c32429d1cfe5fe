// repredict.h — logged training steps predicted again (`sparsering-exec repredict`, exec/cmd_repredict.c):
// the plan and options `train --predict` used, rebuilt from the trainer's log, simulated on the calibrated
// cluster of the run's call, with the step split as the trainer splits it.
#ifndef SR_REPREDICT_H
#define SR_REPREDICT_H

#include <stdint.h>

#include "plan/error.h"

typedef struct {
  char model[128], layout[64], schedule[32], pattern[512];
  int world;
  int64_t seq;
  int keep_attn;    // the run's recomputation kept attention's output and LSE ("recompute selective")
  int index_ready;  // every layer's attention plan was kept on the GPU (no index built in the step)
  double step_s, attn_s, rest_s, comm_s;      // measured: the best step after the first; the mean split after it
  double pstep_s, pattn_s, prest_s, pcomm_s;  // simulated; attention and the rest on the busiest rank, comm the remainder
} train_rerun;

// Fill r's plan, options and measurements from a `sparsering-exec train --predict` log's text; -1 when the
// text holds no trainer header or no measured step (the split stays 0 without step lines: --quiet).
int repredict_parse_train_log(const char *text, train_rerun *r);
// Simulate r's step on the cluster file (calibrated, r->world GPUs) with the manifest's flags
// (--skip-empty-sends, --fwd-runs), as train --predict does; fills the predicted fields.
int repredict_train_run(const char *cluster_path, const char *flags, train_rerun *r, sr_error *e);

#endif

// exec_plan.h — the plan an executor command runs: read from --plan FILE, or built from the plan flags
// (plan/plan_flags.h, the same definition as `sparsering plan`), with the executor's switches
// --skip-empty-sends and --fwd-runs on top, and the layer patterns it implies (pattern_source_load: a
// recorded trace, or the planner's parser).
#ifndef SR_EXEC_PLAN_H
#define SR_EXEC_PLAN_H

#include "exec/dist_attn.h"
#include "exec/exec.h"
#include "plan/pattern.h"
#include "plan/plan.h"
#include "plan/plan_flags.h"

// --plan, --skip-empty-sends, --fwd-runs (and --index-build, read by exec_index_build): what exec_plan_load reads
// besides plan_spec_flags. A command's
// cli_usage lists both tables.
extern const cli_flag exec_plan_flags[];

// Read or build the plan, then its pattern (every layer). layout/schedule/pattern, when not NULL,
// replace the flags' values (one entry of a comma-separated list) and are read by the same rules.
// On error nothing needs freeing.
int exec_plan_load(const cli_args *a, const char *layout, const char *schedule, const char *pattern_src, plan *p,
                   pattern *pat, sr_error *e);

// --index-build: where the commands build their plans' tile indices (dist_attn.h).
int exec_index_build(const cli_args *a, dist_index_build *how, sr_error *e);
// The --moba-gate entry of the flag tables of attn and train.
#define EXEC_MOBA_GATE_FLAG                                                                                          \
  {"moba-gate", "WHERE", "auto",                                                                                     \
   "where moba:B:K selects its blocks: gpu (the host's selection bit for bit; --backend cuda, ring and double-ring " \
   "schedules on any number of ranks, K <= 64; one rank builds the tile form on the GPU too, several on the host "  \
   "from the GPU's selection), host, or auto: the gpu where it applies, else the host"}
// --moba-gate auto|host|gpu: *gate = EXEC_GATE_AUTO, _HOST or _GPU (dist_attn_moba_gate_gpu's `required` for
// _GPU); gpu is an input error on the CPU backend, auto there is the host.
enum { EXEC_GATE_HOST = 0, EXEC_GATE_GPU = 1, EXEC_GATE_AUTO = 2 };
int exec_moba_gate(const cli_args *a, int cuda, int *gate, sr_error *e);

#endif

// plan_flags.h — the plan's command-line flags, shared by `sparsering plan` and `sparsering sim`.
#ifndef SR_CLI_PLAN_FLAGS_H
#define SR_CLI_PLAN_FLAGS_H

#include "plan/args.h"
#include "plan/plan.h"

// Fill a plan spec from --model --cluster --seq --layout --schedule --granularity --inner --ulysses
// --pattern --strategy --seed (a strategy sets layout, schedule and pattern; explicit flags override it).
int cli_plan_spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e);
// Rewrite a library error that names a spec field ("inner: ...") as the flag ("--inner: ..."); a file
// error gets the flag that named the file in front. Returns e->code.
int cli_plan_error_as_flag(sr_error *e, const char *flag_of_file);

#endif

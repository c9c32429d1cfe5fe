// plan_flags.h — the one definition of the plan's command-line flags: the flags that make a plan spec
// (--model --cluster --seq --strategy --layout --granularity --schedule --inner --ulysses --pattern --seed
// --fpdt-chunk --fpdt-offload),
// read the same way by `sparsering plan`/`sim` and by `sparsering-exec attn`/`train`/`predict`.
#ifndef SR_PLAN_FLAGS_H
#define SR_PLAN_FLAGS_H

#include "plan/args.h"
#include "plan/plan.h"

// The plan flags as a table for a command's cli_usage (its parser and its --help).
extern const cli_flag plan_spec_flags[];

// What a training step does beyond the plan's attention, for the simulator's commands (sim, whatif):
// --recompute 0|1, --zero 0..3, --offload-activations, --offload-optimizer, --trainer mixed|exec, --mlp-chunk,
// --attention-only.
extern const cli_flag plan_step_flags[];
// Read those flags into s (absent flags keep s's values).
int plan_step_from_flags(const cli_args *a, plan_spec *s, sr_error *e);
// --mlp-chunk's row, one text for `train` and for the simulator's commands (plan_step_flags).
#define PLAN_MLP_CHUNK_FLAG                                                                                          \
  {"mlp-chunk", "N|auto", "auto",                                                                                  \
   "sparsering-exec train's MLP over the rank's tokens in chunks of N (0: the whole local sequence; auto: whole up " \
   "to 64K local tokens, else 32K-token chunks); its gate|up, h and dh buffers hold one chunk"}
// An --mlp-chunk value: "auto" (MODEL_EXEC_MLP_AUTO), 0 (the whole local sequence) or a token count (512, 32K);
// errors name `flag`.
int plan_mlp_chunk_parse(const char *v, const char *flag, int64_t *out, sr_error *e);

// Fill a plan spec from the plan flags. A strategy sets layout, schedule and pattern, and explicit flags
// override it; without one --layout and --schedule are required. The spec is canonical: "striped" plus
// a granularity, never "striped:G" (--granularity must agree with a G in --layout); --seed lies in
// [0, 2^53] (it travels through JSON numbers). Errors name the flag ("--seed: ...").
int plan_spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e);
// Rewrite a library error that names a spec field ("inner: ...") as the flag ("--inner: ..."); a file
// error gets the flag that named the file in front (flag_of_file: "model", "cluster", "layout", or NULL).
// Returns e->code.
int plan_error_as_flag(sr_error *e, const char *flag_of_file);
// The --layout text of a spec's layout: "striped:G" for the striped layout (the spec keeps G apart), else
// the spec's layout ("zigzag", "permutation:PATH"). Returns out.
const char *plan_spec_layout_flag(const plan_spec *s, char *out, size_t size);
// Build the plan the flags describe (plan_spec_from_flags, then plan_build_at), errors named as flags.
int plan_build_from_flags(const cli_args *a, plan *p, sr_error *e);

#endif

// api.h — sparsering's C API for other languages (the Python package python/sparsering loads it with
// ctypes): plain C types only, every result a malloc'd string (JSON, CSV or text) the caller releases
// with sr_api_free, and every failure an error the caller can take apart.
//
// The planner and simulator functions take a command's flags as an argv (argv[0] the command's name,
// then "--flag", "value", ...), parsed by the same flag tables as `bin/sparsering` (plan/plan_flags.h,
// sim/study_flags.h), so a call means what the command line means and fails with the same message. They
// return SR_OK (0), SR_EINPUT (2: bad input) or SR_EINTERNAL (1); on failure *err (when err != NULL) gets
// the error as JSON {"code", "message", "file", "field", "reason"}: message as the CLI prints it after
// "sparsering CMD: ", file and field as the error was raised ("" when none), reason the text after them.
//
// Built into build/release/libsparsering.so (CPU: planner, simulator, traces, the attention patterns and
// the CPU reference kernels) and into libsparsering_cuda.so (all of it plus the GPU attention of
// api/attn_cuda.c, where nvcc exists). Nothing here prints or exits.
#ifndef SR_API_H
#define SR_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The library's version and the commit it was built from, as JSON {"version", "commit", "cuda"}
// ("cuda": 1 in libsparsering_cuda.so). Free with sr_api_free.
char *sr_api_version(void);
// Release a string (or array) this API returned.
void sr_api_free(void *p);

// `sparsering plan`'s flags (without --out) -> the plan file's JSON text (byte for byte what `plan -o` writes).
int sr_api_plan(int argc, const char *const *argv, char **plan_json, char **err);
// Read and check a plan file (as `sparsering show` and `sim --plan` do) -> its JSON as `plan -o` writes it.
int sr_api_plan_read(const char *path, char **plan_json, char **err);
// `sparsering sim`'s flags (the plan flags or --plan FILE, and the step's; no output flags) -> the report
// as JSON (report_csv_row's columns by name, the attention times, the memory, "calibration": the line `sim`
// prints on where the cluster's efficiencies come from) and, when timeline_csv is not
// NULL, the step's timeline as the CSV `sim --csv` writes.
int sr_api_sim(int argc, const char *const *argv, char **report_json, char **timeline_csv, char **err);
// `sparsering whatif`'s flags (without --csv) -> the CSV `whatif --csv` writes.
int sr_api_whatif(int argc, const char *const *argv, char **csv, char **err);
// `sparsering tune`'s flags (without --out and --csv), one process -> the CSV `tune --csv` writes, the
// report it prints, and the chosen plan's JSON (what `tune -o` writes; "" when no point fits).
int sr_api_tune(int argc, const char *const *argv, char **csv, char **report, char **plan_json, char **err);

// ---- inspection (api_tools.c) -----------------------------------------------------------------
// `sparsering model --model M [--seq N --world W]`'s figures as JSON (counts, FLOPs, bytes by name; under
// "sequence" those of one sequence when seq is neither NULL nor ""); errors name --model, --seq, --world.
int sr_api_model(const char *model, const char *seq, int world, char **json, char **err);
// `sparsering cluster --cluster C --json`: the normalised description file, every default explicit.
int sr_api_cluster(const char *cluster, char **json, char **err);
// `sparsering compare SIM.csv EXEC.csv [--run-sim R] [--run-exec R]` (runs NULL: all rows) as JSON: phases, steps
// ([{name, predicted_us, measured_us, rel_err}]), total, the mean and max |error| per phase and per step.
int sr_api_compare(const char *sim_csv, const char *exec_csv, const char *run_sim, const char *run_exec, char **json,
                   char **err);

// ---- attention on one device ------------------------------------------------------------------
// One causal attention shape (n tokens, heads query heads over kv_heads KV heads, head_dim) with its
// pattern, on one rank (the whole sequence, positions 0..n-1). Tensors are [n, heads, head_dim] for Q, O,
// dO and [n, kv_heads, head_dim] for K, V (tokens outermost), LSE [heads, n] (natural log), as
// kernels/sparse_attn.h. The pattern's execution form is built on the host here; the GPU functions
// (sr_attn_forward, sr_attn_backward, sr_attn_estimate) are in libsparsering_cuda.so only.
typedef struct sr_attn sr_attn;

// A shape with a pattern source (plan/pattern_spec.h: "dense", "window:S:W", "vs-topp:0.95", "vs-online:0.95",
// "moba:B:K", "token-topk:K", ...; layer 0 of a one-layer model of this shape, synthetic sources drawn from seed).
// scale: the softmax scale (0: 1/sqrt(head_dim)). "vs-online:..." is estimated from Q and K in every GPU forward;
// the gated "moba:..." and "token-topk:..." are selected from Q and K in every CPU reference call (the GPU
// calls refuse them).
int sr_attn_new(const char *pattern, int64_t n, int heads, int kv_heads, int head_dim, double scale, uint64_t seed,
                sr_attn **out, char **err);
// A shape with the pattern of layer `layer` (0 .. num_layers - 1) of a num_layers-layer model of this shape: the
// heads the trainer's layer runs for the same source, length and seed (`sparsering-exec train --pattern P`, whose
// patterns are drawn from --seed, 0 by default: plan/pattern_spec.h pattern_from_spec_layer). Estimated and gated
// sources are the same on every layer. sr_attn_new is layer 0 of 1. A layer outside [0, num_layers) is an input
// error naming "layer"; num_layers outside [1, 65536] one naming "num_layers".
int sr_attn_new_layer(const char *pattern, int64_t n, int heads, int kv_heads, int head_dim, double scale, uint64_t seed,
                      int layer, int num_layers, sr_attn **out, char **err);
// A shape with explicit vertical-slash indices: per head h, counts[2h] verticals (key positions) then
// counts[2h + 1] slashes (offsets q - k), each list ascending, unique, in [0, n), all heads' lists
// concatenated in indices in that order.
int sr_attn_new_vs(int64_t n, int heads, int kv_heads, int head_dim, double scale, const int32_t *counts,
                   const int32_t *indices, sr_attn **out, char **err);
// Release a shape (and its device copies).
void sr_attn_free(sr_attn *a);
// What the shape runs, as JSON: n, heads, kv_heads, head_dim, scale, pattern, layer, num_layers, online (estimated
// per forward), gated (selected per forward), and for a fixed pattern its kept pairs, density (kept share of the
// causal pairs), computed (the share the kernels compute: whole tiles and bars), tiles (full, partial), bars.
int sr_attn_info(const sr_attn *a, char **json, char **err);
// CPU reference (float64 accumulation; small shapes, for tests): float32 host tensors; o and lse written.
// An online pattern is estimated from q and k on the CPU first (sr_attn_estimate_cpu), a gated one selected
// (plan/gating.h), in the backward too.
int sr_attn_forward_cpu(const sr_attn *a, const float *q, const float *k, const float *v, float *o, float *lse,
                        char **err);
// CPU reference backward with the forward's o and lse: dq, dk, dv (float32 host) overwritten.
int sr_attn_backward_cpu(const sr_attn *a, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, const float *dout, float *dq, float *dk, float *dv, char **err);
// The online estimate on the CPU (float32 host q, k; the GPU's bits): as sr_attn_estimate.
int sr_attn_estimate_cpu(const sr_attn *a, const float *q, const float *k, uint32_t *vbits, uint32_t *sbits,
                         char **err);

// What one GPU forward keeps for its backward: the pattern the online estimate selected (NULL for a fixed
// pattern, whose execution form the shape holds).
typedef struct sr_attn_saved sr_attn_saved;

// GPU forward on the current device: q, k, v, o bf16 device tensors, lse fp32 device [heads, n] (may be
// NULL); stream a cudaStream_t (NULL: the default stream). With an online pattern the estimate is made
// from q and k first and *saved (when saved != NULL) keeps it for the backward; else *saved = NULL.
int sr_attn_forward(sr_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, void *stream,
                    sr_attn_saved **saved, char **err);
// GPU backward with the forward's o (bf16), lse and saved pattern: dq, dk, dv fp32 device tensors are
// overwritten; d_row is fp32 device scratch of heads * n floats. deterministic 0 runs the fastest kernels
// (on Hopper dQ is summed by float atomics, in an order that varies from call to call); 1 the split kernels
// without float atomics (sa_shape.deterministic: dq, dk, dv repeat bit for bit, slower). The forward and the
// CPU reference are bit-reproducible either way.
int sr_attn_backward(sr_attn *a, const sr_attn_saved *saved, const void *q, const void *k, const void *v,
                     const void *o, const float *lse, const void *dout, float *d_row, float *dq, float *dk, float *dv,
                     int deterministic, void *stream, char **err);
// Release what a forward saved (NULL is fine).
void sr_attn_saved_free(sr_attn_saved *s);
// The online estimate alone (MTraining's vertical-slash selection from the last 64 queries, the shape's
// vs-online settings): per head the kept verticals and slashes as bit sets into host arrays vbits and sbits
// of heads * ceil(n / 32) words each (bit k of head h: word h * words + k / 32, bit k % 32).
int sr_attn_estimate(sr_attn *a, const void *q, const void *k, void *stream, uint32_t *vbits, uint32_t *sbits,
                     char **err);

#ifdef __cplusplus
}
#endif

#endif

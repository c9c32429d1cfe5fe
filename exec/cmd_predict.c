// cmd_predict.c — `sparsering-exec predict`: the simulator's prediction of one layer's distributed attention,
// forward and backward and its memory on the CUDA backend (sim/predict.h), as `attn --predict` prints them, for a plan and a recorded pattern (a trace, e.g. the
// one `attn --trace-out` wrote), without running anything. Without --trace the plan's own pattern is used
// (dense, window, synthetic, preset: what `attn` runs on that plan); a vs-online plan needs the trace. With a vs-online plan the prediction charges the
// online estimation on top of the recorded pattern, as for the run that estimated it; so a cost-model change
// can be checked against a GPU run's measured time after the fact. A moba plan without --trace predicts the
// selection the run made: its gate's choices recomputed from the run's seeded inputs (--inputs, --data-seed; as
// bf16, the CUDA backend's tensors), exec/attn_data.h attn_gated_selection.
//
//   sparsering-exec predict --model M --cluster C --seq N --strategy S --pattern P [--trace T] [--layer L]
//                           [--step K] [--csv OUT.csv]
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec/attn_data.h"
#include "exec/exec.h"
#include "exec/exec_plan.h"
#include "sim/predict.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"
#include "traces/trace.h"

static const cli_flag predict_flags[] = {
    {"trace", "FILE", "required for vs-online", "the recorded pattern to predict (attn --trace-out writes one)"},
    {"inputs", "KIND", "random", "moba without --trace: the run's Q, K (random or vs), whose selection is recomputed"},
    {"data-seed", "X", "1", "moba without --trace: the seed of the run's inputs"},
    {"layer", "L", "0", "the layer to predict"},
    {"step", "K", "0", "the step of the trace to predict"},
    {"csv", cli_out_file, NULL, "write the predicted timeline as CSV"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage predict_usage = {
    NULL,
    "sparsering-exec predict --strategy mtraining --model qwen2.5-3b --cluster h200-1x2 --seq 256K "
    "--pattern vs-online:0.95 --trace run.safetensors",
    {plan_spec_flags, exec_plan_flags, predict_flags, NULL}};

static int cmd_predict(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  plan p;
  pattern pat, rec;
  memset(&p, 0, sizeof p);
  memset(&pat, 0, sizeof pat);
  memset(&rec, 0, sizeof rec);
  trace_file t;
  int t_open = 0, rc;
  int64_t layer, step;
  const char *path = NULL;
  if ((rc = cli_parse(argc, argv, &predict_usage, &a, &e))) goto out;
  if ((rc = cli_get_int(&a, "layer", 0, 0, 1 << 20, &layer, &e)) || (rc = cli_get_int(&a, "step", 0, 0, 1 << 30, &step, &e)))
    goto out;
  path = cli_get(&a, "trace", NULL);
  if ((rc = exec_plan_load(&a, NULL, NULL, NULL, &p, &pat, &e))) goto out;
  const pattern *use = &pat;  // the plan's own pattern, or step K of the trace
  char what[1100];
  snprintf(what, sizeof what, "pattern %s", p.spec.pattern);
  gating_opts g;
  if (!path && pattern_spec_estimation(p.spec.pattern) == PATTERN_GATED &&
      pattern_spec_gating_opts(p.spec.pattern, &g, &e) == SR_OK && g.kind == PATTERN_MOBA) {
    int inputs;
    int64_t seed;
    if ((rc = attn_inputs_parse(cli_get(&a, "inputs", "random"), &inputs, &e)) ||
        (rc = cli_get_int(&a, "data-seed", 1, 0, INT64_MAX, &seed, &e)) ||
        (rc = attn_gated_selection(&p, (int)layer, inputs, (uint64_t)seed, 1, &pat, &e)))
      goto out;
    snprintf(what, sizeof what, "the run's selection (%s inputs, data seed %lld)", cli_get(&a, "inputs", "random"),
             (long long)seed);
  } else if (!path && pattern_spec_at_run_time(p.spec.pattern)) {
    rc = sr_input_error(&e, NULL, "--trace",
                        "required for the online pattern '%s': the recorded pattern to predict (attn --trace-out writes one)",
                        p.spec.pattern);
    goto out;
  }
  if (path) {
    if ((rc = trace_open(path, &t, &e))) goto out;
    t_open = 1;
    if ((rc = trace_read_step(&t, (int)step, &rec, &e))) goto out;
    if (rec.n_tokens != pat.n_tokens || rec.heads != pat.heads || rec.layers != pat.layers) {
      rc = sr_input_error(&e, path, "shape",
                          "the trace holds %lld tokens x %d layers x %d heads; the plan's model at --seq is %lld x %d x %d",
                          (long long)rec.n_tokens, rec.layers, rec.heads, (long long)pat.n_tokens, pat.layers, pat.heads);
      goto out;
    }
    use = &rec;
    snprintf(what, sizeof what, "%s", path);
  }
  if (layer >= use->layers) {
    rc = sr_input_error(&e, NULL, "--layer", "%lld: the model has %d layers", (long long)layer, use->layers);
    goto out;
  }
  double f, b;
  if ((rc = predict_attention(&p, use, (int)layer, cli_get(&a, "csv", NULL), &f, &b, &e))) goto out;
  printf("  layer %lld: predicted (sim, %s, cluster %s) fwd %.3f ms bwd %.3f ms\n", (long long)layer, what,
         p.cluster.name, 1e3 * f, 1e3 * b);
  char note[600];
  printf("  %s\n", cluster_calibration_note(&p.cluster, note, sizeof note));
  sim_attn_memory pm;
  if ((rc = predict_attention_memory(&p, use, (int)layer, &pm, &e))) goto out;
  predict_memory_text(&pm, note, sizeof note);
  printf("  memory predicted (sim, the CUDA backend): %s\n", note);
out:
  if (t_open) trace_close(&t);
  pattern_free(&rec);
  pattern_free(&pat);
  plan_free(&p);
  return rc ? sr_error_report(&e, "sparsering-exec predict") : 0;
}

EXEC_COMMAND("predict", cmd_predict, "the simulator's prediction of one layer's attention for a plan (and a trace: vs-online)",
             &predict_usage)

// cmd_replay.c — `sparsering replay t.safetensors --cluster C --strategy S`: simulate every recorded
// step of a trace with its recorded pattern on a cluster and strategy, and summarise over steps.
//
// The strategy sets layout, schedule and options as in `sim`; its own pattern source stays in the
// plan so the simulator charges what the strategy pays to obtain a pattern (MTraining's online
// estimation), while the work simulated is the recorded pattern's. --no-estimate makes the trace the
// plan's pattern source instead ("trace:PATH", a given pattern: no estimation cost).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "traces/trace.h"

typedef struct {
  double step_s, tokens_per_s, worker_imbalance, step_imbalance, exposed_comm_s, density;
} replay_row;

static int write_csv(const char *path, const replay_row *rows, int n, sr_error *e) {
  sr_buf b = {0};
  int bad = sr_buf_printf(&b, "step,step_s,tokens_per_s,worker_imbalance,step_imbalance,exposed_comm_s,density\n");
  for (int i = 0; i < n && !bad; i++)
    bad |= sr_buf_printf(&b, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", i, rows[i].step_s, rows[i].tokens_per_s,
                         rows[i].worker_imbalance, rows[i].step_imbalance, rows[i].exposed_comm_s, rows[i].density);
  int rc = bad ? sr_internal_error(e, 12, "building %s", path) : sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}

static const cli_flag replay_flags[] = {
    {"cluster", "NAME|PATH", "required", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"strategy", "NAME", "required", "a named strategy (as in sim): layout, schedule and what obtaining the pattern costs"},
    {"model", "NAME|PATH", "the trace's", "the model"},
    {"csv", cli_out_file, NULL, "write one row per step as CSV"},
    {"no-estimate", NULL, NULL, "the trace is a given pattern: no online estimation cost"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage replay_usage = {
    "t.safetensors",
    "sparsering replay traces/samples/tiny25m-vs-topp-32k.safetensors --cluster h200-1x2 --strategy mtraining",
    {replay_flags, NULL}};

static int cmd_replay(int argc, char **argv) {
  const char *prog = "sparsering replay";
  cli_args a;
  sr_error e = {0};
  const char *cluster, *strategy;
  if (cli_parse(argc, argv, &replay_usage, &a, &e) || cli_require(&a, "cluster", &cluster, &e) ||
      cli_require(&a, "strategy", &strategy, &e))
    return sr_error_report(&e, prog);
  if (a.n_pos != 1) {
    sr_input_error(&e, NULL, "replay", "expected one trace file (sparsering replay t.safetensors --cluster C "
                   "--strategy S)");
    return sr_error_report(&e, prog);
  }
  trace_file t;
  if (trace_open(a.pos[0], &t, &e)) return sr_error_report(&e, prog);
  const trace_info *in = &t.info;
  const char *model = cli_get(&a, "model", in->model);
  if (!model[0]) {
    trace_close(&t);
    sr_input_error(&e, a.pos[0], "__metadata__.model", "the trace names no model: pass --model");
    return sr_error_report(&e, prog);
  }
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "%s", model);
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = in->seq_len;
  s.seed = in->seed;
  plan p;
  const char *field = NULL;
  int rc = plan_spec_apply_strategy(&s, strategy, &e);
  if (rc == SR_OK && cli_has(&a, "no-estimate")) snprintf(s.pattern, sizeof s.pattern, "trace:%s", a.pos[0]);
  if (rc || plan_build_at(&s, &p, &field, &e)) {
    trace_close(&t);
    return sr_error_report(&e, prog);
  }
  if (p.model.num_layers != in->layers || p.model.num_heads != in->heads)
    rc = sr_input_error(&e, a.pos[0], "layers/heads", "the trace records %d layers x %d heads but model %s has "
                        "%lld x %lld", in->layers, in->heads, p.model.name, (long long)p.model.num_layers,
                        (long long)p.model.num_heads);
  replay_row *rows = calloc((size_t)in->steps, sizeof *rows);
  if (!rows && rc == SR_OK) rc = sr_internal_error(&e, 12, "replay");
  char buf[32];
  if (rc == SR_OK)
    printf("replay %s: %s, %s tokens, %d steps, pattern %s (%s: %s)\n  on %s, strategy %s%s\n\n%5s %12s %14s %10s %10s "
           "%12s %9s\n", a.pos[0], p.model.name, sr_format_tokens(in->seq_len, buf, sizeof buf), in->steps,
           in->pattern_kind, in->source, in->origin, cluster, strategy,
           cli_has(&a, "no-estimate") ? " (no estimation cost)" : "", "step", "time (s)", "tokens/s", "worker imb",
           "step imb", "exposed (s)", "density");
  if (rc == SR_OK) {
    char note[600];
    printf("%s\n\n", cluster_calibration_note(&p.cluster, note, sizeof note));
  }
  sim_options o = {0};
  for (int step = 0; step < in->steps && rc == SR_OK; step++) {
    pattern pat;
    sim_result r;
    if ((rc = trace_read_step(&t, step, &pat, &e))) break;
    rc = sim_run(&p, &pat, &o, &r, NULL, &e);
    pattern_free(&pat);
    if (rc) break;
    if (!r.feasible) {
      rc = sr_input_error(&e, NULL, "--strategy", "%s cannot run this configuration: %s", strategy, r.note);
      break;
    }
    rows[step] = (replay_row){r.step_s, r.tokens_per_s, r.worker_imbalance, r.step_imbalance, r.exposed_comm_s,
                              r.density};
    printf("%5d %12.6g %14.1f %10.4f %10.4f %12.6g %8.3f%%\n", step, r.step_s, r.tokens_per_s, r.worker_imbalance,
           r.step_imbalance, r.exposed_comm_s, 100 * r.density);
  }
  if (rc == SR_OK) {
    double sum = 0, lo = INFINITY, hi = 0, wi = 0, si = 0;
    for (int i = 0; i < in->steps; i++) {
      sum += rows[i].step_s;
      lo = fmin(lo, rows[i].step_s);
      hi = fmax(hi, rows[i].step_s);
      wi += rows[i].worker_imbalance;
      si += rows[i].step_imbalance;
    }
    const double mean = sum / in->steps;
    printf("\nsummary over %d steps: mean %.6g s (min %.6g, max %.6g), total %.6g s, %.1f tokens/s, "
           "worker imbalance %.4f, step imbalance %.4f (means)\n", in->steps, mean, lo, hi, sum,
           (double)in->seq_len / mean, wi / in->steps, si / in->steps);
    const char *csv = cli_get(&a, "csv", NULL);
    if (csv) rc = write_csv(csv, rows, in->steps, &e);
  }
  free(rows);
  plan_free(&p);
  trace_close(&t);
  return rc ? sr_error_report(&e, prog) : 0;
}

CLI_COMMAND("replay", cmd_replay, "simulate every step of an attention trace",
            &replay_usage)

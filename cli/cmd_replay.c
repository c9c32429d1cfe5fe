// cmd_replay.c — `sparsering replay t.safetensors --cluster C --strategy S`: simulate every recorded
// step of a trace with its recorded pattern on a cluster and strategy, and summarise over steps.
//
// The strategy sets layout, schedule and options as in `sim`; its own pattern source stays in the
// plan so the simulator charges what the strategy pays to obtain a pattern (MTraining's online
// estimation), while the work simulated is the recorded pattern's. --no-estimate makes the trace the
// plan's pattern source instead ("trace:PATH", a given pattern: no estimation cost).
//
// --layout balanced deals the layout by the recorded step 0's work (plan/balance.h); the pattern drifts
// over the steps, so --rebalance-every K and --rebalance-above X deal it again by the step's own pattern
// (every K steps, or when the step's worker imbalance on the current layout exceeds X) and charge that
// step the re-shard all-to-all (sim_reshard_s) on top of its simulated time. Without those, step 0 is also
// simulated on the strategy's striped:128 and the faster of the two layouts runs every step (the summary says
// when striped:128 was kept).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/balance.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/sim.h"
#include "traces/trace.h"

typedef struct {
  double step_s, tokens_per_s, worker_imbalance, step_imbalance, exposed_comm_s, density, reshard_s;
} replay_row;

static int write_csv(const char *path, const replay_row *rows, int n, sr_error *e) {
  sr_buf b = {0};
  int bad = sr_buf_printf(&b, "step,step_s,tokens_per_s,worker_imbalance,step_imbalance,exposed_comm_s,density,"
                             "reshard_s\n");
  for (int i = 0; i < n && !bad; i++)
    bad |= sr_buf_printf(&b, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", i, rows[i].step_s, rows[i].tokens_per_s,
                         rows[i].worker_imbalance, rows[i].step_imbalance, rows[i].exposed_comm_s, rows[i].density,
                         rows[i].reshard_s);
  int rc = bad ? sr_internal_error(e, 12, "building %s", path) : sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}

// Deal the balanced layout by step 0's pattern, and again at later steps when asked (every K steps, or when
// the step's worker imbalance on the current layout exceeds `above`); a re-deal charges the re-shard.
static int replay_balance(plan *p, const pattern *pat, int step, int64_t every, double above, int *dealt,
                          double *reshard_s, double *wall_s, sr_error *e) {
  *dealt = step == 0 || (every > 0 && step % every == 0);
  if (!*dealt && above > 0) {
    balance_figures f;
    if (balance_of(pat, &p->layout, &f, e)) return e->code;
    *dealt = f.worker > above;
  }
  if (!*dealt) return SR_OK;
  layout old;
  int rc = layout_copy(&p->layout, &old, e);
  double t0 = sr_now();
  if (!rc) rc = plan_rebalance(p, pat, e);
  *wall_s += sr_now() - t0;
  if (!rc && step > 0) rc = sim_reshard_s(p, &old, &p->layout, reshard_s, e);
  layout_free(&old);
  return rc;
}

static const cli_flag replay_flags[] = {
    {"cluster", "NAME|PATH", "required", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"strategy", "NAME", "required", "a named strategy (as in sim): layout, schedule and what obtaining the pattern costs"},
    {"model", "NAME|PATH", "the trace's", "the model"},
    {"csv", cli_out_file, NULL, "write one row per step as CSV"},
    {"no-estimate", NULL, NULL, "the trace is a given pattern: no online estimation cost"},
    {"layout", "L", "the strategy's", "the layout instead (balanced: dealt by step 0's work; striped:128 kept if faster)"},
    {"rebalance-every", "K", NULL, "balanced: deal the layout again by the step's pattern every K steps (re-shard charged)"},
    {"rebalance-above", "X", NULL, "balanced: deal it again when the step's worker imbalance on it exceeds X (re-shard charged)"},
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
  // A balanced layout is dealt by the recorded steps below, not by the strategy's own pattern source.
  const char *layout_text = cli_get(&a, "layout", NULL);
  layout_kind lk = LAYOUT_STRIPED;
  int64_t every = 0, g = 0;
  double above = 0;
  if (rc == SR_OK && layout_text && !(rc = layout_parse_kind(layout_text, &lk, &g, &e))) {
    snprintf(s.layout, sizeof s.layout, "%s", lk == LAYOUT_BALANCED ? "striped" : layout_text);
    s.granularity = lk == LAYOUT_STRIPED ? (g > 0 ? g : 128) : lk == LAYOUT_BALANCED ? 128 : 1;
  }
  if (rc == SR_OK) rc = cli_get_int(&a, "rebalance-every", 0, 1, INT32_MAX, &every, &e);
  if (rc == SR_OK) rc = cli_get_num(&a, "rebalance-above", 0, 1, 1e9, &above, &e);
  if (rc == SR_OK && (every || above) && lk != LAYOUT_BALANCED)
    rc = sr_input_error(&e, NULL, every ? "--rebalance-every" : "--rebalance-above", "re-balances --layout balanced only");
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
  int n_rebalanced = 0, fell_back = 0;
  double plan_wall_s = 0, balanced_s = 0;
  for (int step = 0; step < in->steps && rc == SR_OK; step++) {
    pattern pat;
    sim_result r;
    if ((rc = trace_read_step(&t, step, &pat, &e))) break;
    double reshard_s = 0;
    int dealt = 0;
    // Without re-deals, step 0 decides between the balanced layout and the plan's striped:128: the faster
    // simulated step keeps (a transfer-bound step can favour striped's ring order over a better dealing).
    sim_result striped_r = {0};
    const int compare = lk == LAYOUT_BALANCED && step == 0 && !every && !above;
    if (compare) rc = sim_run(&p, &pat, &o, &striped_r, NULL, &e);
    if (rc == SR_OK && lk == LAYOUT_BALANCED && !fell_back)
      rc = replay_balance(&p, &pat, step, every, above, &dealt, &reshard_s, &plan_wall_s, &e);
    n_rebalanced += dealt;
    if (rc == SR_OK) rc = sim_run(&p, &pat, &o, &r, NULL, &e);
    if (rc == SR_OK && compare && striped_r.feasible && striped_r.step_s < r.step_s) {
      fell_back = 1, balanced_s = r.step_s, r = striped_r;
      plan_free(&p);
      rc = plan_build_at(&s, &p, &field, &e);
    }
    pattern_free(&pat);
    if (rc) break;
    if (!r.feasible) {
      rc = sr_input_error(&e, NULL, "--strategy", "%s cannot run this configuration: %s", strategy, r.note);
      break;
    }
    const double step_s = r.step_s + reshard_s;
    rows[step] = (replay_row){step_s, (double)in->seq_len / step_s, r.worker_imbalance, r.step_imbalance,
                              r.exposed_comm_s, r.density, reshard_s};
    printf("%5d %12.6g %14.1f %10.4f %10.4f %12.6g %8.3f%%", step, step_s, rows[step].tokens_per_s, r.worker_imbalance,
           r.step_imbalance, r.exposed_comm_s, 100 * r.density);
    if (dealt && step > 0) printf("   re-balanced, re-shard %.6g s", reshard_s);
    printf("\n");
  }
  if (rc == SR_OK && lk == LAYOUT_BALANCED)
    printf("\nbalanced layout dealt %d time(s) by the recorded steps' work (planner %.3f s on this machine)\n",
           n_rebalanced, plan_wall_s);
  if (rc == SR_OK && fell_back)
    printf("balanced layout not kept: striped:128 simulates step 0 faster (%.6g s against %.6g s dealt), so every "
           "step runs on striped:128\n", rows[0].step_s, balanced_s);
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

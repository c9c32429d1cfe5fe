// cmd_sim.c — `sparsering sim`: simulate one training step of a plan (from a plan file or from the
// same flags as `plan`), print the summary and memory, and write the timeline (Perfetto JSON, CSV, SVG).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/plan_flags.h"
#include "plan/timeline.h"
#include "plan/util.h"
#include "sim/report.h"
#include "sim/strategy.h"
#include "sim/svg.h"

#define GIB 1073741824.0

static const cli_flag sim_flags[] = {
    {"plan", "FILE", NULL, "simulate this plan file (sparsering plan -o) instead of the plan flags"},
    {"recompute", "0|1", "1", "per-layer activation recomputation"},
    {"zero", "0|1", "1", "optimizer state sharded over ranks (ZeRO-1)"},
    {"trainer", "NAME", "mixed", "whose memory to count: mixed (a bf16 mixed-precision trainer) or exec (sparsering-exec train)"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time (faster)"},
    {"attention-only", NULL, NULL, "the step holds only each layer's attention, forward and backward (kernel and ring studies)"},
    {"first-step", NULL, NULL, "a first training step: every layer's attention plan is built on the host when its layer comes"},
    {"timeline", "FILE", NULL, "write the step's timeline as Perfetto / Chrome trace JSON"},
    {"csv", "FILE", NULL, "write the step's timeline as CSV (sparsering compare reads it)"},
    {"svg", "FILE", NULL, "draw the step's timeline as SVG"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage sim_usage = {
    NULL, "sparsering sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining --svg step.svg",
    {plan_spec_flags, sim_flags, NULL}};

// The plan's flags (plan/plan_flags.h) and the step's: recomputation and optimizer sharding.
static int spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  int64_t x;
  int rc;
  if ((rc = plan_spec_from_flags(a, s, e))) return rc;
  if ((rc = cli_get_int(a, "recompute", s->recompute, 0, 1, &x, e))) return rc;
  s->recompute = (int)x;
  if ((rc = cli_get_int(a, "zero", s->zero, 0, 1, &x, e))) return rc;
  s->zero = (int)x;
  s->attention_only = cli_has(a, "attention-only");
  if (cli_has(a, "first-step")) s->first_step_plans = 1 << 20;  // every layer
  const char *tr = cli_get(a, "trainer", NULL);
  if (tr && snprintf(s->trainer, sizeof s->trainer, "%s", tr) >= (int)sizeof s->trainer)
    return sr_input_error(e, NULL, "--trainer", "'%s' is not one of mixed, exec", tr);
  return SR_OK;
}

static void print_memory(const sim_memory *m) {
  printf("memory per GPU (GiB): weights %.2f, grads %.2f, optimizer %.2f, activations %.2f, KV buffers %.2f, "
         "index %.2f, workspace+reserve %.2f = %.2f of %.0f: %s\n",
         m->weights / GIB, m->grads / GIB, m->optim / GIB, m->activations / GIB, m->kv_buffers / GIB,
         m->index_bytes / GIB, m->workspace / GIB, m->total / GIB, m->capacity / GIB, m->fits ? "fits" : "OUT OF MEMORY");
  if (m->host_bytes > 0) printf("pinned host memory per node: %.1f GiB\n", m->host_bytes / GIB);
}

static int cmd_sim(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan p;
  if (cli_parse(argc, argv, &sim_usage, &a, &e)) return sr_error_report(&e, "sparsering sim");
  if (a.n_pos > 0) {
    sr_input_error(&e, NULL, a.pos[0], "unexpected argument");
    return sr_error_report(&e, "sparsering sim");
  }
  if (cli_has(&a, "plan")) {
    if (plan_read(cli_get(&a, "plan", ""), &p, &e)) return sr_error_report(&e, "sparsering sim");
    if (cli_has(&a, "attention-only")) p.spec.attention_only = 1;
    if (cli_has(&a, "first-step")) p.spec.first_step_plans = 1 << 20;
  } else {
    plan_spec s;
    const char *field = NULL;
    if (spec_from_flags(&a, &s, &e)) return sr_error_report(&e, "sparsering sim");
    if (plan_build_at(&s, &p, &field, &e)) {
      plan_error_as_flag(&e, field);
      return sr_error_report(&e, "sparsering sim");
    }
  }
  sim_options o = {cli_has(&a, "representative"), cli_has(&a, "timeline") || cli_has(&a, "csv") || cli_has(&a, "svg"), 0};
  sim_timeline tl = {0};
  sim_result r;
  int rc = sim_plan(&p, &o, &r, &tl, &e);
  if (!rc) {
    const char *run = p.spec.strategy[0] ? p.spec.strategy : "sim";
    if (cli_has(&a, "timeline"))
      rc = timeline_write_json(tl.ev, tl.n, run, cluster_world(&p.cluster), "sparsering sim", cli_get(&a, "timeline", ""), &e);
    if (!rc && cli_has(&a, "csv")) rc = timeline_write_csv(tl.ev, tl.n, run, cli_get(&a, "csv", ""), &e);
    if (!rc && cli_has(&a, "svg")) {
      char title[1024];
      snprintf(title, sizeof title, "%s: %s on %s, %lld tokens, layout %s, schedule %s, pattern %s", run, p.model.name,
               p.cluster.name, (long long)p.spec.seq, p.spec.layout, p.spec.schedule, p.spec.pattern);
      sim_svg_options so = sim_svg_defaults();
      so.title = title;
      so.world = cluster_world(&p.cluster);
      rc = sim_svg_write(&tl, &so, cli_get(&a, "svg", ""), &e);
    }
  }
  if (!rc) {
    char tok[32];
    printf("%s: %s on %s (%d GPUs), %s tokens, layout %s, schedule %s, pattern %s\n", p.spec.strategy, p.model.name,
           p.cluster.name, cluster_world(&p.cluster), sr_format_tokens(p.spec.seq, tok, sizeof tok), p.spec.layout,
           p.spec.schedule, p.spec.pattern);
    char note[600];
    printf("%s\n", cluster_calibration_note(&p.cluster, note, sizeof note));
    sr_buf b = {0};
    report_table(&b, &r, 1);
    fputs(b.data ? b.data : "", stdout);
    sr_buf_free(&b);
    if (r.feasible) {
      printf("attention (busiest rank): forward %.3f s, backward %.3f s; kept pairs %.2f%% of causal", r.attn_fwd_s,
             r.attn_bwd_s, 100 * r.density);
      if (r.exec_density > 0) printf(", computed (whole tiles and bars) %.2f%%", 100 * r.exec_density);
      printf("; %.2f GB on the wire\n", r.comm_bytes / 1e9);
      print_memory(&r.mem);
    }
    printf("simulated %lld tasks in %.3f s (%.3f s of it in tile accounting)\n", (long long)r.n_tasks, r.sim_wall_s,
           r.account_wall_s);
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc ? sr_error_report(&e, "sparsering sim") : 0;
}

CLI_COMMAND("sim", cmd_sim,
            "simulate one training step of a plan: summary, memory, timeline",
            &sim_usage)

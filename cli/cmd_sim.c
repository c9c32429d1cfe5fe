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
#include "sim/study_flags.h"
#include "sim/svg.h"

#define GIB 1073741824.0

// The outputs: the sim flags themselves are sim/study_flags.h's.
static const cli_flag sim_out_flags[] = {
    {"timeline", cli_out_file, NULL, "write the step's timeline as Perfetto / Chrome trace JSON"},
    {"csv", cli_out_file, NULL, "write the step's timeline as CSV (sparsering compare reads it)"},
    {"svg", cli_out_file, NULL, "draw the step's timeline as SVG"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage sim_usage = {
    NULL, "sparsering sim --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining --svg step.svg",
    {plan_spec_flags, plan_step_flags, sim_step_flags, sim_out_flags, NULL}};

static void print_memory(const sim_memory *m) {
  char builder[64] = "";
  if (m->builder > 0) snprintf(builder, sizeof builder, ", GPU index builder %.2f", m->builder / GIB);
  printf("memory per GPU (GiB): weights %.2f, grads %.2f, optimizer %.2f, activations %.2f, KV buffers %.2f, "
         "index %.2f, workspace+reserve %.2f%s = %.2f of %.0f: %s\n",
         m->weights / GIB, m->grads / GIB, m->optim / GIB, m->activations / GIB, m->kv_buffers / GIB,
         m->index_bytes / GIB, m->workspace / GIB, builder, m->total / GIB, m->capacity / GIB,
         m->total <= m->capacity ? "fits" : "OUT OF MEMORY");  // the GPU's own verdict: the host has its line
  if (m->host_bytes > 0)
    printf("host memory per node (GiB): optimizer %.2f, checkpoints %.2f, attention chunks %.2f = %.2f of %.0f%s\n",
           m->host_optim / GIB, m->host_activations / GIB, m->host_attn / GIB, m->host_bytes / GIB,
           m->host_capacity / GIB, m->host_bytes > m->host_capacity ? ": OUT OF HOST MEMORY" : "");
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
  if (sim_plan_from_flags(&a, &p, &e)) return sr_error_report(&e, "sparsering sim");
  sim_options o = sim_options_from_flags(&a, cli_has(&a, "timeline") || cli_has(&a, "csv") || cli_has(&a, "svg"));
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
      char plans[512];
      if (sim_plans_text(&r, plans, sizeof plans)) printf("%s\n", plans);
    }
    printf("simulated %lld tasks in %.3f s (%.3f s of it drawing the pattern, %.3f s in tile accounting)\n",
           (long long)r.n_tasks, r.sim_wall_s, r.pattern_wall_s, r.account_wall_s);
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  return rc ? sr_error_report(&e, "sparsering sim") : 0;
}

CLI_COMMAND("sim", cmd_sim,
            "simulate one training step of a plan: summary, memory, timeline",
            &sim_usage)

// study_flags.c — the flags of sim, whatif and tune and the what-if study (study_flags.h).
#include "sim/study_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_flags.h"
#include "sim/report.h"

// ---------------------------------------------------------------------------------------------
// sim

const cli_flag sim_step_flags[] = {
    {"plan", "FILE", NULL, "simulate this plan file (sparsering plan -o) instead of the plan flags"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time (faster)"},
    {"first-step", NULL, NULL, "a first training step: every layer's attention plan is built on the host when its layer comes"},
    {NULL, NULL, NULL, NULL},
};

// The plan's flags and the step's (plan/plan_flags.h): recomputation, ZeRO, offloads, whose memory.
static int step_spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  int rc = plan_spec_from_flags(a, s, e);
  return rc ? rc : plan_step_from_flags(a, s, e);
}

int sim_plan_from_flags(const cli_args *a, plan *p, sr_error *e) {
  memset(p, 0, sizeof *p);
  if (cli_has(a, "plan")) {
    if (plan_read(cli_get(a, "plan", ""), p, e)) return e->code;
    // a plan file's step simulated as attention alone, or as a first step, without planning it again
    if (cli_has(a, "attention-only")) p->spec.attention_only = 1;
    if (cli_has(a, "first-step")) p->spec.first_step_plans = 1 << 20;  // every layer
    return SR_OK;
  }
  plan_spec s;
  const char *field = NULL;
  if (step_spec_from_flags(a, &s, e)) return e->code;
  if (cli_has(a, "first-step")) s.first_step_plans = 1 << 20;  // every layer
  if (plan_build_at(&s, p, &field, e)) return plan_error_as_flag(e, field);
  return SR_OK;
}

sim_options sim_options_from_flags(const cli_args *a, int record_timeline) {
  sim_options o = {cli_has(a, "representative"), record_timeline, 0, 0, 0, 0, 0, 0};
  return o;
}

// ---------------------------------------------------------------------------------------------
// whatif

const cli_flag whatif_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model: a shipped name (models/NAME.json) or a config file"},
    {"cluster", "NAME|PATH", "a100-4x8", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"seq", "N", "512K", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"pattern", "P", "each strategy's", "the sparse strategies' attention pattern (docs/patterns.md)"},
    {"seed", "X", "0", "seed of synthetic patterns, 0 to 2^53"},
    {"strategies", "A,B,...", "all but adaspa", "the strategies to compare, comma-separated"},
    {"search-every", "K", "1", "adaspa-online: a block search every K training steps, the mask reused in between"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time (faster)"},
    {NULL, NULL, NULL, NULL},
};

// Put the flag that named a file in front of the file's error ("--model: models/x.json: ...").
static int flag_in_front(sr_error *e, const char *flag) {
  char msg[sizeof e->msg];
  snprintf(msg, sizeof msg, "%s: %s", flag, e->msg);
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  return e->code;
}

// The study's settings: model, cluster, length, seed, the step's options, sparse pattern.
static int study_base_from_flags(const cli_args *a, strategy_study *st, sr_error *e) {
  int64_t x;
  int rc;
  memset(st, 0, sizeof *st);
  plan_spec_defaults(&st->base);
  snprintf(st->base.model, sizeof st->base.model, "%s", cli_get(a, "model", "qwen2.5-3b"));
  snprintf(st->base.cluster, sizeof st->base.cluster, "%s", cli_get(a, "cluster", "a100-4x8"));
  if ((rc = sr_parse_tokens(cli_get(a, "seq", "512K"), "--seq", &st->base.seq, e))) return rc;
  if ((rc = cli_get_int(a, "seed", 0, 0, (int64_t)1 << 53, &x, e))) return rc;
  st->base.seed = (uint64_t)x;
  // the step's options (recomputation, ZeRO, offloads, whose memory; plan_build checks what exec runs)
  if ((rc = plan_step_from_flags(a, &st->base, e))) return rc;
  if ((rc = cli_get_int(a, "search-every", 1, 1, (int64_t)1 << 40, &st->base.search_every, e))) return rc;
  const char *pat = cli_get(a, "pattern", "");
  if (strlen(pat) >= sizeof st->sparse_pattern) return sr_input_error(e, NULL, "--pattern", "too long");
  snprintf(st->sparse_pattern, sizeof st->sparse_pattern, "%s", pat);
  return SR_OK;
}

int whatif_from_flags(const cli_args *a, whatif_study *w, sr_error *e) {
  memset(w, 0, sizeof *w);
  int rc = study_base_from_flags(a, &w->st, e);
  if (rc) return rc;
  // The study's model and cluster must load: errors in them are the user's, not a strategy's.
  if (model_load(w->st.base.model, &w->m, e)) return flag_in_front(e, "--model");
  if (cluster_load(w->st.base.cluster, &w->c, e)) return flag_in_front(e, "--cluster");
  // Strategies: the planner's list, or a comma-separated subset.
  if (cli_has(a, "strategies")) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", cli_get(a, "strategies", ""));
    for (char *tok = strtok(buf, ","); tok && w->n < WHATIF_MAX_STRATEGIES; tok = strtok(NULL, ","))
      snprintf(w->names[w->n++], 64, "%s", tok);
    if (w->n == 0) return sr_input_error(e, NULL, "--strategies", "empty list");
  } else {
    for (int i = 0; plan_strategy_names[i] && w->n < WHATIF_MAX_STRATEGIES; i++)
      if (plan_strategy_in_default_study(plan_strategy_names[i]))
        snprintf(w->names[w->n++], 64, "%s", plan_strategy_names[i]);
  }
  w->o = sim_options_from_flags(a, 0);
  return SR_OK;
}

int whatif_run(whatif_study *w, sr_error *e) {
  free(w->res);
  w->res = calloc((size_t)w->n, sizeof *w->res);
  if (!w->res) return sr_internal_error(e, 0, "whatif: out of memory");
  double t0 = sr_now();
  // The strategies share their pattern and accounting (the sparse ones run the same pattern, some on the
  // same layout): built and counted once. A cache the caller set is kept (and left open).
  sim_cache *own = NULL;
  if (!w->st.cache) {
    if (sim_cache_open(&own, e)) return e->code;
    w->st.cache = own;
  }
  int rc = SR_OK;
  for (int i = 0; i < w->n && !rc; i++) {
    if ((rc = sim_strategy(&w->st, w->names[i], &w->o, &w->res[i], NULL, e))) {
      if (strncmp(e->msg, "strategy:", 9) == 0) {  // the flag that named it
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "--strategies%s", e->msg + 8);
        snprintf(e->msg, sizeof e->msg, "%s", msg);
      }
    }
  }
  if (own) {
    sim_cache_close(own);
    w->st.cache = NULL;
  }
  if (rc) return e->code;
  w->wall_s = sr_now() - t0;
  return SR_OK;
}

int whatif_csv(const whatif_study *w, sr_buf *b) {
  char lead[1200];
  int rc = report_csv_header(b, "model,cluster,seq");
  snprintf(lead, sizeof lead, "%s,%s,%lld", w->m.name, w->c.name, (long long)w->st.base.seq);
  for (int i = 0; i < w->n && w->res && !rc; i++) rc = report_csv_row(b, lead, &w->res[i]);
  return rc ? -1 : 0;
}

void whatif_free(whatif_study *w) {
  free(w->res);
  w->res = NULL;
}

// ---------------------------------------------------------------------------------------------
// tune

const cli_flag tune_flags[] = {
    {"model", "NAME|PATH", "required", "the model: a shipped name (models/NAME.json) or a config file"},
    {"cluster", "NAME|PATH", "required", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"seq", "N", "required", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"pattern", "P", "required unless --trace", "attention pattern (docs/patterns.md)"},
    {"trace", "FILE", NULL, "tune on a recorded trace: its step 0, its later steps for the robustness check"},
    {"seed", "X", "0", "seed of synthetic patterns, 0 to 2^53"},
    {"search-every", "K", "1", "adaspa-online: a block search every K training steps, the mask reused in between"},
    {"trainer", "NAME", "mixed", "whose memory decides what fits: mixed (bf16 mixed precision) or exec (sparsering-exec train)"},
    {"top", "N", "10", "rows of the ranking kept and shown, 1 to 1000"},
    {"robust-top", "N", "5", "leaders re-simulated on perturbed patterns (0: no robustness check)"},
    {"robust-steps", "N", "4", "perturbed pattern steps of the robustness check"},
    {"margin", "F", "0.02", "means within this fraction of the best are tied: the best worst case wins"},
    {"batch", "N", "16", "points a batch (pruning uses the best of earlier batches)"},
    {"no-prune", NULL, NULL, "simulate every valid point that may fit (exhaustive)"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time"},
    {NULL, NULL, NULL, NULL},
};

// --pattern P or --trace FILE (the source "trace:PATH": its step 0 is tuned, its later steps are the
// perturbed patterns of the robustness check).
static int tune_pattern_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  const char *v;
  int rc;
  if (cli_has(a, "trace") && cli_has(a, "pattern"))
    return sr_input_error(e, NULL, "--trace", "give either --pattern or --trace, not both");
  if (cli_has(a, "trace")) {
    v = cli_get(a, "trace", "");
    if (!*v || strlen(v) + 6 >= sizeof s->pattern) return sr_input_error(e, NULL, "--trace", "empty or too long");
    snprintf(s->pattern, sizeof s->pattern, "trace:%s", v);
    return SR_OK;
  }
  if ((rc = cli_require(a, "pattern", &v, e))) return rc;
  if (!*v || strlen(v) >= sizeof s->pattern) return sr_input_error(e, NULL, "--pattern", "empty or too long");
  snprintf(s->pattern, sizeof s->pattern, "%s", v);
  return SR_OK;
}

int tune_spec_from_flags(const cli_args *a, plan_spec *s, tune_options *o, int *representative, sr_error *e) {
  const char *v;
  int64_t x;
  int rc;
  plan_spec_defaults(s);
  if ((rc = cli_require(a, "model", &v, e))) return rc;
  snprintf(s->model, sizeof s->model, "%s", v);
  if ((rc = cli_require(a, "cluster", &v, e))) return rc;
  snprintf(s->cluster, sizeof s->cluster, "%s", v);
  if ((rc = cli_require(a, "seq", &v, e)) || (rc = sr_parse_tokens(v, "--seq", &s->seq, e))) return rc;
  if ((rc = tune_pattern_from_flags(a, s, e))) return rc;
  if ((rc = cli_get_int(a, "seed", 0, 0, (int64_t)1 << 53, &x, e))) return rc;
  s->seed = (uint64_t)x;
  if ((rc = cli_get_int(a, "search-every", 1, 1, (int64_t)1 << 40, &s->search_every, e))) return rc;
  // whose memory decides "fits": a mixed-precision trainer's, or sparsering-exec train's (then the points it
  // cannot run, FPDT, no ZeRO-1, fp8 KV, are invalid: plan_build says why)
  v = cli_get(a, "trainer", "mixed");
  if (strcmp(v, "mixed") != 0 && strcmp(v, "exec") != 0)
    return sr_input_error(e, NULL, "--trainer", "'%s' is not one of mixed, exec", v);
  snprintf(s->trainer, sizeof s->trainer, "%s", v);
  tune_options_defaults(o);
  if ((rc = cli_get_int(a, "top", o->top, 1, 1000, &x, e))) return rc;
  o->top = (int)x;
  if ((rc = cli_get_int(a, "robust-top", o->robust_top, 0, 100, &x, e))) return rc;
  o->robust_top = (int)x;
  if ((rc = cli_get_int(a, "robust-steps", o->robust_steps, 0, 64, &x, e))) return rc;
  o->robust_steps = (int)x;
  if ((rc = cli_get_int(a, "batch", o->batch, 1, 100000, &x, e))) return rc;
  o->batch = (int)x;
  if ((rc = cli_get_num(a, "margin", o->robust_margin, 0, 1, &o->robust_margin, e))) return rc;
  o->no_prune = cli_has(a, "no-prune");
  *representative = cli_has(a, "representative");
  return SR_OK;
}

// plan.c — the plan: spec defaults, named strategies, and building model + cluster + layout +
// schedule from a spec (JSON reading and writing live in plan_json.c).
#include "plan/plan.h"

#include "plan/pattern_spec.h"

#include <stdio.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/pattern_spec.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// spec

void plan_spec_defaults(plan_spec *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->layout, sizeof s->layout, "striped");
  s->granularity = 128;  // MTraining's striping granularity (one 128x128 attention tile a block)
  snprintf(s->schedule, sizeof s->schedule, "ring");
  snprintf(s->pattern, sizeof s->pattern, "dense");
  snprintf(s->strategy, sizeof s->strategy, "custom");
  s->recompute = 1;
  s->zero = 1;
  s->kv_bytes = 2;  // bf16
  s->search_every = 1;
  s->mlp_chunk = MODEL_EXEC_MLP_AUTO;
  s->attn_prefetch = -1;
  s->attn_host_cache = -1;
  snprintf(s->trainer, sizeof s->trainer, "mixed");
}

// The strategies users compare (COMMON names): what each sets. VS strategies default to the top-p
// VS pattern at p = 0.95, MTraining's setting; a --pattern given alongside overrides it.
typedef struct {
  const char *name, *layout;
  int64_t granularity;
  const char *schedule, *pattern;
  int64_t fpdt_chunk;
} strategy_row;

static const strategy_row strategies[] = {
    {"dense-ring", "contiguous", 1, "ring", "dense", 0},         // ring attention (Liu et al.)
    {"zigzag-ring", "zigzag", 1, "ring", "dense", 0},            // ring-flash-attention's zigzag
    {"striped-ring", "striped", 1, "ring", "dense", 0},          // Striped Attention (G = 1)
    {"ulysses", "contiguous", 1, "ulysses", "dense", 0},         // DeepSpeed-Ulysses
    {"usp", "zigzag", 1, "usp", "dense", 0},                     // USP / LoongTrain: Ulysses in a node x ring
    {"fpdt", "contiguous", 1, "ulysses", "dense", 65536},        // FPDT: Ulysses over 64K-token chunks, offloaded
    {"naive-sparse", "contiguous", 1, "ring", "vs-topp:0.95", 0},
    {"mtraining", "striped", 128, "double-ring", "vs-topp:0.95", 0},
    {"mtraining-zigzag", "zigzag", 1, "double-ring", "vs-topp:0.95", 0},
    {"mtraining-flat", "striped", 128, "ring", "vs-topp:0.95", 0},
    // AdaSpa's LSE-cached block search, searched from the data (sparsity 0.9: one block in ten a row, near the
    // density of MTraining's top-p patterns); --search-every sets how often
    {"adaspa", "striped", 128, "ring", "adaspa-online:0.9", 0},
};

const char *const plan_strategy_names[] = {"dense-ring", "zigzag-ring", "striped-ring", "ulysses", "usp", "fpdt",
                                           "naive-sparse", "mtraining", "mtraining-zigzag", "mtraining-flat", "adaspa", NULL};

int plan_strategy_in_default_study(const char *name) { return strcmp(name, "adaspa") != 0; }

int plan_spec_apply_strategy(plan_spec *s, const char *name, sr_error *e) {
  for (size_t i = 0; i < sizeof strategies / sizeof *strategies; i++) {
    const strategy_row *r = &strategies[i];
    if (strcmp(r->name, name) != 0) continue;
    snprintf(s->strategy, sizeof s->strategy, "%s", r->name);
    snprintf(s->layout, sizeof s->layout, "%s", r->layout);
    s->granularity = r->granularity;
    snprintf(s->schedule, sizeof s->schedule, "%s", r->schedule);
    snprintf(s->pattern, sizeof s->pattern, "%s", r->pattern);
    s->fpdt_chunk = r->fpdt_chunk;
    s->fpdt_offload = r->fpdt_chunk > 0;
    return SR_OK;
  }
  char known[512] = "";
  for (size_t i = 0; plan_strategy_names[i]; i++)
    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", plan_strategy_names[i]);
  return sr_input_error(e, NULL, "strategy", "unknown strategy '%s' (expected one of %s)", name, known);
}

// ---------------------------------------------------------------------------------------------
// building

// The balanced layout is dealt by the work of the plan's own pattern at step 0 (plan/balance.h). The
// pattern may be a recorded trace ("trace:PATH") or a generator fitted to one ("vs-fit:PATH"), which the
// traces module reads: the one place the planner reaches into traces/.
static int balanced_layout(plan *p, int world, sr_error *e) {
  pattern pat;
  int rc = pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, &pat, e);
  if (rc) return rc;
  rc = balance_layout(&pat, world, &p->layout, e);
  pattern_free(&pat);
  return rc;
}

static int build_schedule(plan *p, sr_error *e) {
  const plan_spec *s = &p->spec;
  schedule_kind sk;
  int rc = schedule_parse_kind(s->schedule, &sk, e);
  if (!rc) rc = schedule_build(sk, &p->cluster, &p->model, &p->layout, s->inner, s->ulysses, s->kv_bytes, &p->schedule, e);
  return rc;
}

int plan_rebalance(plan *p, const pattern *pat, sr_error *e) {
  if (pat->n_tokens != p->layout.n_tokens)
    return sr_input_error(e, NULL, "pattern", "covers %lld tokens; the plan has %lld", (long long)pat->n_tokens,
                          (long long)p->layout.n_tokens);
  layout l;
  int rc = balance_layout(pat, p->layout.world, &l, e);
  if (rc) return rc;
  schedule old = p->schedule;
  layout was = p->layout;
  p->layout = l;
  if ((rc = build_schedule(p, e))) {  // the plan stays as it was
    p->layout = was, p->schedule = old;
    layout_free(&l);
    return rc;
  }
  schedule_free(&old);
  layout_free(&was);
  snprintf(p->spec.layout, sizeof p->spec.layout, "balanced");
  p->spec.granularity = 1;  // as plan_flags writes every layout but striped
  return SR_OK;
}

// adaspa-online searches its mask over the ring at run time (exec/online_adaspa.h): no skip map can be made at plan
// time, and a schedule that splits the heads over ranks (Ulysses, USP) or chunks the sequence (FPDT) does not run it
// (the simulator would charge no search there).
static int searched_check(const plan_spec *s, const schedule *sc, const char **field, sr_error *e) {
  if (pattern_spec_estimation(s->pattern) != PATTERN_SEARCHED) return SR_OK;
  *field = "skip_empty_sends";
  if (s->skip_empty_sends)
    return sr_input_error(e, NULL, "skip_empty_sends", "%s searches its mask at run time, so the shards it needs are not "
                          "known at plan time; plan it without skipping", s->pattern);
  *field = "fpdt_chunk";
  if (s->fpdt_chunk > 0)
    return sr_input_error(e, NULL, "fpdt_chunk", "%s searches over the ring, not inside FPDT's chunks", s->pattern);
  *field = "pattern";
  if (sc->kind == SCHED_ULYSSES || (sc->kind == SCHED_USP && sc->ulysses > 1))
    return sr_input_error(e, NULL, "pattern", "%s runs with ring and double-ring schedules, not %s", s->pattern,
                          s->schedule);
  return SR_OK;
}

int plan_build_at(const plan_spec *s, plan *p, const char **field, sr_error *e) {
  memset(p, 0, sizeof *p);
  p->spec = *s;
  int rc;
  const char *f_unused;
  if (!field) field = &f_unused;
  *field = "pattern";
  if (!s->pattern[0]) return sr_input_error(e, NULL, "pattern", "empty (expected e.g. dense, vs-topp:0.95)");
  *field = "strategy";
  if (!s->strategy[0]) return sr_input_error(e, NULL, "strategy", "empty (use \"custom\" for a hand-made plan)");
  *field = "seq";
  if (s->seq < 1) return sr_input_error(e, NULL, "seq", "%lld tokens: need at least 1", (long long)s->seq);
  *field = "trainer";
  if (strcmp(s->trainer, "mixed") != 0 && strcmp(s->trainer, "exec") != 0)
    return sr_input_error(e, NULL, "trainer", "'%s' is not one of mixed, exec", s->trainer);
  *field = "zero";
  if (s->zero < 0 || s->zero > 3) return sr_input_error(e, NULL, "zero", "stage %d: expected 0, 1, 2 or 3", s->zero);
  *field = "fpdt_chunk";
  if (s->fpdt_chunk < 0) return sr_input_error(e, NULL, "fpdt_chunk", "%lld tokens: expected 0 (off) or more",
                                               (long long)s->fpdt_chunk);
  if (s->fpdt_offload && s->fpdt_chunk == 0)
    return sr_input_error(e, NULL, "fpdt_offload", "offloads FPDT's chunks: give a chunk size (fpdt_chunk) too");
  *field = "search_every";
  if (s->search_every < 1)
    return sr_input_error(e, NULL, "search_every", "%lld steps: expected 1 (every step) or more", (long long)s->search_every);
  *field = "trainer";
  if (strcmp(s->trainer, "exec") == 0 && s->zero != 1)
    return sr_input_error(e, NULL, "trainer", "exec: sparsering-exec train shards the optimizer state only (ZeRO-1), "
                          "not ZeRO-%d", s->zero);
  if (strcmp(s->trainer, "exec") == 0 && s->offload_optimizer)
    return sr_input_error(e, NULL, "trainer", "exec: sparsering-exec train keeps the optimizer on the GPU "
                          "(no optimizer offload)");
  if (strcmp(s->trainer, "exec") == 0 && s->kv_bytes != 2)
    return sr_input_error(e, NULL, "trainer", "exec: sparsering-exec train sends K and V in bf16 (kv_bytes 2, not %d)",
                          s->kv_bytes);
  *field = "model";
  if ((rc = model_load(s->model, &p->model, e))) return rc;
  *field = "pattern";
  if ((rc = pattern_spec_check(s->pattern, &p->model, s->seq, e))) return rc;
  *field = "cluster";
  if ((rc = cluster_load(s->cluster, &p->cluster, e))) return rc;
  *field = "layout";
  layout_kind lk;
  int64_t g = s->granularity;
  if ((rc = layout_parse_kind(s->layout, &lk, &g, e))) return rc;
  const int world = cluster_world(&p->cluster);
  if (lk == LAYOUT_PERMUTATION) rc = layout_load_permutation(layout_permutation_path(s->layout), s->seq, world, &p->layout, e);
  else if (lk == LAYOUT_BALANCED) rc = balanced_layout(p, world, e);
  else rc = layout_build(lk, s->seq, world, g, NULL, &p->layout, e);
  if (rc) return rc;
  *field = "schedule";
  rc = build_schedule(p, e);
  if (!rc) rc = searched_check(s, &p->schedule, field, e);
  if (rc) {
    if (!strcmp(*field, "schedule")) layout_free(&p->layout);
    else plan_free(p);
    return rc;
  }
  *field = NULL;
  return SR_OK;
}

int plan_build(const plan_spec *s, plan *p, sr_error *e) { return plan_build_at(s, p, NULL, e); }

void plan_free(plan *p) {
  layout_free(&p->layout);
  schedule_free(&p->schedule);
}

// plan.c — the plan: spec defaults, named strategies, and building model + cluster + layout +
// schedule from a spec (JSON reading and writing live in plan_json.c).
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

#include "plan/pattern_spec.h"

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
};

const char *const plan_strategy_names[] = {"dense-ring", "zigzag-ring", "striped-ring", "ulysses", "usp", "fpdt",
                                           "naive-sparse", "mtraining", "mtraining-zigzag", "mtraining-flat", NULL};

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
  else rc = layout_build(lk, s->seq, world, g, NULL, &p->layout, e);
  if (rc) return rc;
  *field = "schedule";
  schedule_kind sk;
  rc = schedule_parse_kind(s->schedule, &sk, e);
  if (!rc) rc = schedule_build(sk, &p->cluster, &p->model, &p->layout, s->inner, s->ulysses, s->kv_bytes, &p->schedule, e);
  if (rc) {
    layout_free(&p->layout);
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

// plan_flags.c — the plan's command-line flags (plan_flags.h).
#include "plan/plan_flags.h"

#include <stdio.h>
#include <string.h>

#include "plan/util.h"

#define SEED_MAX ((int64_t)1 << 53)  // every seed a JSON number (a double) holds exactly

const cli_flag plan_spec_flags[] = {
    {"model", "NAME|PATH", "required", "the model: a shipped name (models/NAME.json) or a config file"},
    {"cluster", "NAME|PATH", "required", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"seq", "N", "required", "tokens in the sequence: 524288, 512K, 1M, 1.5M (K = 1024)"},
    {"strategy", "NAME", NULL,
     "a named strategy (dense-ring, zigzag-ring, striped-ring, ulysses, usp, fpdt, naive-sparse, mtraining, "
     "mtraining-zigzag, mtraining-flat, adaspa): sets layout, schedule and pattern; flags given alongside override it"},
    {"layout", "L", "required unless --strategy",
     "contiguous, zigzag, striped, striped:G, striped1, permutation:PATH, balanced (dealt by the pattern's work)"},
    {"granularity", "G", "128", "tokens a block of the striped layout (striped only; a G in --layout must agree)"},
    {"schedule", "S", "required unless --strategy", "ring, double-ring, ulysses, usp"},
    {"inner", "K", "GPUs per node", "inner ring size of the double ring"},
    {"ulysses", "U", "GPUs per node (usp), all GPUs (ulysses)", "Ulysses degree of the ulysses and usp schedules"},
    {"pattern", "P", "dense, or the strategy's",
     "attention pattern: dense, window:S:W, vs-like:S:W:N, vs-preset:MODEL, vs-topp:P, vs-online:P, block:D, "
     "adaspa:S, adaspa-online:S, moba:B:K, token-topk:K, trace:PATH, vs-fit:PATH (docs/patterns.md)"},
    {"search-every", "K", "1", "adaspa-online: search the block mask every K training steps, reuse it in between"},
    {"seed", "X", "0", "seed of synthetic patterns, 0 to 2^53"},
    {"fpdt-chunk", "N", "64K with --strategy fpdt, else 0 (off)",
     "FPDT: tokens a chunk (the sequence in chunks of N consecutive tokens spread over every rank, Ulysses inside a "
     "chunk); 0 turns FPDT off"},
    {"fpdt-offload", "0|1", "1 with --strategy fpdt, else 0",
     "FPDT: keep the gathered KV chunks in pinned host memory and fetch them back ahead of use"},
    {NULL, NULL, NULL, NULL},
};

const cli_flag plan_step_flags[] = {
    {"recompute", "0|1", "1", "per-layer activation recomputation"},
    {"zero", "0..3", "1", "ZeRO stage: 1 shards the optimizer state over the ranks, 2 also the gradients, 3 also the weights"},
    {"offload-activations", NULL, NULL, "keep the per-layer checkpoints in pinned host memory between forward and backward"},
    {"offload-optimizer", NULL, NULL, "keep the optimizer state and its update in host memory (ZeRO-Offload)"},
    {"trainer", "NAME", "mixed", "whose memory to count: mixed (a bf16 mixed-precision trainer) or exec (sparsering-exec train)"},
    PLAN_MLP_CHUNK_FLAG,
    {"index-build", "WHERE", "auto", "--trainer exec: where it builds the tile indices: auto (vertical-slash layers on ring "
     "layouts on the GPU), gpu, cpu"},
    {"attn-cache", "K", "as memory allows", "--trainer exec: per-layer attention plans kept on the device"},
    {"attn-prefetch", "D", "2", "--trainer exec: attention plans built ahead of use when not every plan is kept"},
    {"attn-host-cache", NULL, NULL, "--trainer exec: dropped plans wait in host memory and are uploaded again (the "
     "default unless --offload-activations)"},
    {"no-attn-host-cache", NULL, NULL, "--trainer exec: dropped plans are rebuilt when their layer comes"},
    {"attention-only", NULL, NULL, "the step holds only each layer's attention, forward and backward (kernel and ring studies)"},
    {NULL, NULL, NULL, NULL},
};

int plan_step_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  int64_t x;
  int rc;
  if ((rc = cli_get_int(a, "recompute", s->recompute, 0, 1, &x, e))) return rc;
  s->recompute = (int)x;
  if ((rc = cli_get_int(a, "zero", s->zero, 0, 3, &x, e))) return rc;
  s->zero = (int)x;
  if (cli_has(a, "offload-activations")) s->offload_activations = 1;
  if (cli_has(a, "offload-optimizer")) s->offload_optimizer = 1;
  if (cli_has(a, "attention-only")) s->attention_only = 1;
  const char *tr = cli_get(a, "trainer", NULL);
  if (tr && (strcmp(tr, "mixed") != 0 && strcmp(tr, "exec") != 0))
    return sr_input_error(e, NULL, "--trainer", "'%s' is not one of mixed, exec", tr);
  if (tr) snprintf(s->trainer, sizeof s->trainer, "%s", tr);
  const char *ib = cli_get(a, "index-build", NULL);
  if (ib && strcmp(ib, "auto") && strcmp(ib, "cpu") && strcmp(ib, "gpu"))
    return sr_input_error(e, NULL, "--index-build", "'%s' is not one of auto, gpu, cpu", ib);
  if (ib) s->index_build = strcmp(ib, "cpu") == 0 ? 1 : strcmp(ib, "gpu") == 0 ? 2 : 0;
  if (cli_get(a, "attn-cache", NULL)) {
    if ((rc = cli_get_int(a, "attn-cache", 0, 0, 1 << 20, &x, e))) return rc;
    s->attn_cache = (int)x;
  }
  if (cli_get(a, "attn-prefetch", NULL)) {
    if ((rc = cli_get_int(a, "attn-prefetch", 0, 0, 1024, &x, e))) return rc;
    s->attn_prefetch = (int)x;
  }
  if (cli_has(a, "attn-host-cache") && cli_has(a, "no-attn-host-cache"))
    return sr_input_error(e, NULL, "--no-attn-host-cache", "contradicts --attn-host-cache");
  if (cli_has(a, "attn-host-cache")) s->attn_host_cache = 1;
  if (cli_has(a, "no-attn-host-cache")) s->attn_host_cache = 0;
  const char *mc = cli_get(a, "mlp-chunk", NULL);
  return mc ? plan_mlp_chunk_parse(mc, "--mlp-chunk", &s->mlp_chunk, e) : SR_OK;
}

int plan_mlp_chunk_parse(const char *v, const char *flag, int64_t *out, sr_error *e) {
  if (strcmp(v, "auto") == 0) *out = MODEL_EXEC_MLP_AUTO;
  else if (strcmp(v, "0") == 0) *out = 0;
  else if (sr_parse_tokens(v, flag, out, e))
    return sr_input_error(e, NULL, flag, "'%s' is not auto, 0 (the whole local sequence) or a token count such as 32K",
                          v);
  return SR_OK;
}

// Library errors name spec fields ("inner: ...") or files ("models/x.json: ..."); on the command line
// the field is a flag: "--inner: ...", and a file error gets the flag that named the file in front.
int plan_error_as_flag(sr_error *e, const char *flag_of_file) {
  static const char *const fields[] = {"seq", "layout", "granularity", "schedule", "inner", "ulysses", "pattern",
                                       "strategy", "trainer", "zero", "fpdt_chunk", "fpdt_offload", "search_every",
                                       "skip_empty_sends", NULL};
  char msg[sizeof e->msg];
  for (const char *const *f = fields; *f; f++) {
    size_t n = strlen(*f);
    if (strncmp(e->msg, *f, n) == 0 && e->msg[n] == ':') {
      snprintf(msg, sizeof msg, "--%s", e->msg);
      for (size_t i = 2; i < n + 2; i++)  // a field's underscores are a flag's dashes (fpdt_chunk: --fpdt-chunk)
        if (msg[i] == '_') msg[i] = '-';
      snprintf(e->msg, sizeof e->msg, "%s", msg);
      return e->code;
    }
  }
  if (flag_of_file && e->code == SR_EINPUT) {
    snprintf(msg, sizeof msg, "--%s: %s", flag_of_file, e->msg);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
  }
  return e->code;
}

// --layout (and --granularity): the spec keeps "striped" plus a granularity, never "striped:G".
static int layout_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  const char *v = cli_get(a, "layout", NULL);
  int rc;
  if (v) {
    layout_kind k;
    int64_t g = 0;
    if ((rc = layout_parse_kind(v, &k, &g, e))) return plan_error_as_flag(e, NULL);
    if (g > 0 && cli_has(a, "granularity")) {
      int64_t flag_g;
      if ((rc = cli_get_int(a, "granularity", 0, 1, (int64_t)1 << 40, &flag_g, e))) return rc;
      if (flag_g != g)
        return sr_input_error(e, NULL, "--granularity", "%lld conflicts with --layout %s", (long long)flag_g, v);
    }
    if (snprintf(s->layout, sizeof s->layout, "%s", k == LAYOUT_PERMUTATION ? v : layout_kind_name(k)) >= (int)sizeof s->layout)
      return sr_input_error(e, NULL, "--layout", "too long");
    s->granularity = k == LAYOUT_STRIPED ? (g > 0 ? g : 128) : 1;
  }
  if (cli_has(a, "granularity")) {
    if (strcmp(s->layout, "striped") != 0)
      return sr_input_error(e, NULL, "--granularity", "only the striped layout has a granularity (layout is %s)",
                            s->layout);
    if ((rc = cli_get_int(a, "granularity", 128, 1, (int64_t)1 << 40, &s->granularity, e))) return rc;
  }
  return SR_OK;
}

// --fpdt-chunk and --fpdt-offload over what a strategy set: a chunk alone turns FPDT on without offload
// (--strategy fpdt offloads), --fpdt-chunk 0 turns it off (and its offload with it).
static int fpdt_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  const char *v = cli_get(a, "fpdt-chunk", NULL);
  int64_t x;
  int rc;
  if (v) {
    if (strcmp(v, "0") == 0) s->fpdt_chunk = 0, s->fpdt_offload = 0;
    else if ((rc = sr_parse_tokens(v, "--fpdt-chunk", &s->fpdt_chunk, e))) return rc;
  }
  if ((rc = cli_get_int(a, "fpdt-offload", s->fpdt_offload, 0, 1, &x, e))) return rc;
  s->fpdt_offload = (int)x;
  if (s->fpdt_offload && s->fpdt_chunk == 0)
    return sr_input_error(e, NULL, "--fpdt-offload", "offloads FPDT's chunks: give --fpdt-chunk N (or --strategy fpdt)");
  return SR_OK;
}

int plan_spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  const char *v;
  int64_t x;
  int rc;
  plan_spec_defaults(s);
  if ((v = cli_get(a, "strategy", NULL)) && (rc = plan_spec_apply_strategy(s, v, e))) return plan_error_as_flag(e, NULL);
  if ((rc = cli_require(a, "model", &v, e))) return rc;
  if (snprintf(s->model, sizeof s->model, "%s", v) >= (int)sizeof s->model) return sr_input_error(e, NULL, "--model", "too long");
  if ((rc = cli_require(a, "cluster", &v, e))) return rc;
  if (snprintf(s->cluster, sizeof s->cluster, "%s", v) >= (int)sizeof s->cluster)
    return sr_input_error(e, NULL, "--cluster", "too long");
  if ((rc = cli_require(a, "seq", &v, e))) return rc;
  if ((rc = sr_parse_tokens(v, "--seq", &s->seq, e))) return rc;
  // Without a strategy the layout and schedule must be said; with one, flags override its choices.
  if (!cli_has(a, "strategy") && !cli_has(a, "layout"))
    return sr_input_error(e, NULL, "--layout", "required (or give --strategy NAME)");
  if (!cli_has(a, "strategy") && !cli_has(a, "schedule"))
    return sr_input_error(e, NULL, "--schedule", "required (or give --strategy NAME)");
  if ((rc = layout_from_flags(a, s, e))) return rc;
  if ((v = cli_get(a, "schedule", NULL))) {
    schedule_kind k;
    if ((rc = schedule_parse_kind(v, &k, e))) return plan_error_as_flag(e, NULL);
    snprintf(s->schedule, sizeof s->schedule, "%s", schedule_kind_name(k));
  }
  if ((rc = cli_get_int(a, "inner", 0, 1, 1 << 20, &x, e))) return rc;
  s->inner = (int)x;
  if ((rc = cli_get_int(a, "ulysses", 0, 1, 1 << 20, &x, e))) return rc;
  s->ulysses = (int)x;
  if ((v = cli_get(a, "pattern", NULL))) {
    if (!*v || strlen(v) >= sizeof s->pattern) return sr_input_error(e, NULL, "--pattern", "empty or too long");
    snprintf(s->pattern, sizeof s->pattern, "%s", v);
  }
  if ((rc = cli_get_int(a, "seed", 0, 0, SEED_MAX, &x, e))) return rc;
  s->seed = (uint64_t)x;
  if ((rc = cli_get_int(a, "search-every", s->search_every, 1, (int64_t)1 << 40, &s->search_every, e))) return rc;
  return fpdt_from_flags(a, s, e);
}

const char *plan_spec_layout_flag(const plan_spec *s, char *out, size_t size) {
  if (strcmp(s->layout, "striped") == 0) snprintf(out, size, "striped:%lld", (long long)s->granularity);
  else snprintf(out, size, "%s", s->layout);
  return out;
}

int plan_build_from_flags(const cli_args *a, plan *p, sr_error *e) {
  plan_spec s;
  const char *field = NULL;
  memset(p, 0, sizeof *p);
  if (plan_spec_from_flags(a, &s, e)) return e->code;
  if (plan_build_at(&s, p, &field, e)) return plan_error_as_flag(e, field);
  return SR_OK;
}

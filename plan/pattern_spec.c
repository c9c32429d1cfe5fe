// pattern_spec.c — parse a pattern source string and build the pattern (see pattern_spec.h).
#include "plan/pattern_spec.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/synth.h"
#include "plan/synth_internal.h"
#include "plan/util.h"

#define MAX_PARTS 6

// Split text at ':' into parts (copies into buf); returns the number of parts.
static int split(const char *text, char *buf, size_t size, char **parts) {
  snprintf(buf, size, "%s", text);
  int n = 0;
  char *s = buf;
  while (n < MAX_PARTS) {
    parts[n++] = s;
    char *c = strchr(s, ':');
    if (!c) break;
    *c = '\0';
    s = c + 1;
  }
  return n;
}

static int parse_int(const char *spec, const char *text, const char *what, int64_t lo, int64_t *out, sr_error *e) {
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (errno || !end || end == text || *end || v < lo)
    return sr_input_error(e, NULL, "pattern", "'%s': %s '%s' should be an integer >= %lld", spec, what, text,
                          (long long)lo);
  *out = v;
  return SR_OK;
}

static int parse_frac(const char *spec, const char *text, const char *what, double lo, double hi, double *out,
                      sr_error *e) {
  errno = 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (errno || !end || end == text || *end || !(v >= lo && v <= hi))
    return sr_input_error(e, NULL, "pattern", "'%s': %s '%s' should be a number in [%g, %g]", spec, what, text, lo, hi);
  *out = v;
  return SR_OK;
}

static int expect_parts(const char *spec, int n, int lo, int hi, const char *form, sr_error *e) {
  if (n < lo || n > hi) return sr_input_error(e, NULL, "pattern", "'%s': expected %s", spec, form);
  return SR_OK;
}

pattern_estimation pattern_spec_estimation(const char *spec) {
  if (strncmp(spec, "vs-online:", 10) == 0) return PATTERN_ONLINE;
  if (strncmp(spec, "adaspa-online:", 14) == 0) return PATTERN_SEARCHED;
  if (strncmp(spec, "moba:", 5) == 0 || strncmp(spec, "token-topk:", 11) == 0) return PATTERN_GATED;
  if (strncmp(spec, "vs-topp", 7) == 0 || strncmp(spec, "vs-preset", 9) == 0) return PATTERN_STAND_IN;
  return PATTERN_FIXED;
}

// The selection's own `at` parts, then optionally SINKS:WINDOW: columns [0, SINKS) and diagonals [0, WINDOW)
// forced into every head (MInference's estimate always keeps 30 and 100; ours keeps none unless asked).
static int online_forced(const char *spec, int n, char **part, int at, const char *usage, vs_est_opts *o,
                         sr_error *e) {
  if (n != at + 2) return expect_parts(spec, n, at, at, usage, e);
  int64_t sinks = 0, window = 0;
  int rc = parse_int(spec, part[at], "forced sinks", 0, &sinks, e);
  if (!rc) rc = parse_int(spec, part[at + 1], "forced window", 0, &window, e);
  o->sinks = sinks, o->window = window;
  return rc;
}

// vs-online:P[:SINKS:WINDOW] or vs-online:topk:V:S[:SINKS:WINDOW] (parts already split); budgets above
// 2^31 - 1 are refused
static int online_parts(const char *spec, int n, char **part, vs_est_opts *o, sr_error *e) {
  *o = vs_est_defaults();
  if (n >= 2 && strcmp(part[1], "topk") == 0) {
    int64_t v = 0, s = 0;
    int rc = online_forced(spec, n, part, 4, "vs-online:topk:V:S[:SINKS:WINDOW] (V verticals and S slashes a head)", o, e);
    if (!rc) rc = parse_int(spec, part[2], "vertical budget", 1, &v, e);
    if (!rc) rc = parse_int(spec, part[3], "slash budget", 1, &s, e);
    if (!rc && (v > INT32_MAX || s > INT32_MAX))
      rc = sr_input_error(e, NULL, "pattern", "'%s': a budget above %d", spec, INT32_MAX);
    o->topk_v = (int32_t)v, o->topk_s = (int32_t)s;
    return rc;
  }
  int rc = online_forced(spec, n, part, 2, "vs-online:P[:SINKS:WINDOW] with P in (0, 1), or vs-online:topk:V:S", o, e);
  if (!rc) rc = parse_frac(spec, part[1], "top-p mass", 1e-6, 1 - 1e-6, &o->p, e);
  return rc;
}

int pattern_spec_online_opts(const char *spec, vs_est_opts *o, sr_error *e) {
  char buf[512], *part[MAX_PARTS];
  if (!spec || pattern_spec_estimation(spec) != PATTERN_ONLINE)
    return sr_input_error(e, NULL, "pattern", "'%s' is not an online pattern (vs-online:P or vs-online:topk:V:S)",
                          spec ? spec : "");
  return online_parts(spec, split(spec, buf, sizeof buf, part), part, o, e);
}

int pattern_spec_at_run_time(const char *spec) {
  pattern_estimation k = pattern_spec_estimation(spec);
  return k == PATTERN_ONLINE || k == PATTERN_SEARCHED || k == PATTERN_GATED;
}

int pattern_spec_device_made(const char *spec) {
  pattern_estimation k = pattern_spec_estimation(spec);
  return k == PATTERN_ONLINE || k == PATTERN_SEARCHED;
}

// adaspa:S[:B] and adaspa-online:S[:B] (parts already split)
static int adaspa_parts(const char *spec, int n, char **part, adaspa_opts *o, sr_error *e) {
  *o = adaspa_defaults();
  int64_t B = o->block;
  int rc = expect_parts(spec, n, 2, 3, strcmp(part[0], "adaspa") ? "adaspa-online:SPARSITY[:B]" : "adaspa:SPARSITY[:B]", e);
  if (!rc) rc = parse_frac(spec, part[1], "sparsity", 0, 0.999999, &o->sparsity, e);
  if (!rc && n == 3) rc = parse_int(spec, part[2], "block size", 1, &B, e);
  if (!rc && B > INT32_MAX) rc = sr_input_error(e, NULL, "pattern", "'%s': block size above %d", spec, INT32_MAX);
  o->block = (int32_t)B;
  return rc;
}

int pattern_spec_adaspa_opts(const char *spec, adaspa_opts *o, sr_error *e) {
  char buf[512], *part[MAX_PARTS];
  if (!spec || pattern_spec_estimation(spec) != PATTERN_SEARCHED)
    return sr_input_error(e, NULL, "pattern", "'%s' is not a searched pattern (adaspa-online:S[:B])", spec ? spec : "");
  return adaspa_parts(spec, split(spec, buf, sizeof buf, part), part, o, e);
}

// moba:B:K or token-topk:K[:IH:ID] (parts already split)
static int gating_parts(const char *spec, int n, char **part, gating_opts *o, sr_error *e) {
  memset(o, 0, sizeof *o);
  int64_t a = 0, b = 0, c = 0;
  int rc;
  if (strcmp(part[0], "moba") == 0) {
    o->kind = PATTERN_MOBA;
    rc = expect_parts(spec, n, 3, 4, "moba:B:K[:RHO] (blocks of B tokens, a multiple of 128; K blocks a query, its own "
                      "included; RHO the stand-in's union ratio)", e);
    if (!rc) rc = parse_int(spec, part[1], "block size", 128, &a, e);
    if (!rc) rc = parse_int(spec, part[2], "top-k", 1, &b, e);
    o->rho = MOBA_DEFAULT_RHO;
    if (!rc && n == 4) rc = parse_frac(spec, part[3], "union ratio", 1, 1e6, &o->rho, e);
    if (!rc && (a % 128 || a > INT32_MAX))
      rc = sr_input_error(e, NULL, "pattern", "'%s': block size %lld should be a multiple of 128 (a query tile)", spec, (long long)a);
    if (!rc && b > INT32_MAX) rc = sr_input_error(e, NULL, "pattern", "'%s': top-k above %d", spec, INT32_MAX);
    o->block = (int32_t)a, o->topk = (int32_t)b;
    return rc;
  }
  o->kind = PATTERN_TOKENS;
  b = TOKENS_DEFAULT_IH, c = TOKENS_DEFAULT_ID;
  rc = n == 2 || n == 4 ? SR_OK
                        : sr_input_error(e, NULL, "pattern", "'%s': expected token-topk:K[:IH:ID] (K tokens a query; "
                                                             "indexer heads and their dimension)", spec);
  if (!rc) rc = parse_int(spec, part[1], "top-k", 1, &a, e);
  if (!rc && n == 4) rc = parse_int(spec, part[2], "indexer heads", 1, &b, e);
  if (!rc && n == 4) rc = parse_int(spec, part[3], "indexer dimension", 1, &c, e);
  if (!rc && (a > INT32_MAX || b > 4096 || c > 4096))
    rc = sr_input_error(e, NULL, "pattern", "'%s': top-k above %d or an indexer above 4096 heads or dimensions", spec, INT32_MAX);
  o->topk = (int32_t)a, o->ih = (int32_t)b, o->id = (int32_t)c;
  return rc;
}

int pattern_spec_gating_opts(const char *spec, gating_opts *o, sr_error *e) {
  char buf[512], *part[MAX_PARTS];
  if (!spec || pattern_spec_estimation(spec) != PATTERN_GATED)
    return sr_input_error(e, NULL, "pattern", "'%s' is not a gated pattern (moba:B:K or token-topk:K[:IH:ID])", spec ? spec : "");
  return gating_parts(spec, split(spec, buf, sizeof buf, part), part, o, e);
}

int pattern_from_spec(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                      sr_error *e) {
  memset(out, 0, sizeof *out);
  if (!spec || !*spec) return sr_input_error(e, NULL, "pattern", "empty pattern source");
  if (step < 0) return sr_input_error(e, NULL, "step", "%d must be >= 0", step);
  if (n_tokens > INT32_MAX)
    return sr_input_error(e, NULL, "seq", "%lld tokens exceed the 32-bit index range of patterns", (long long)n_tokens);
  char buf[512], *part[MAX_PARTS];
  int n = split(spec, buf, sizeof buf, part);
  const char *kind = part[0];
  if (strcmp(kind, "trace") == 0 || strcmp(kind, "vs-fit") == 0)
    return sr_input_error(e, NULL, "pattern", "'%s': trace patterns and fits are read by the traces module "
                          "(pattern_source_load), not synthesised here", spec);
  static const char *const known[] = {"dense",     "window", "vs-like", "vs-preset",     "vs-topp", "vs-online",
                                      "block",     "adaspa", "adaspa-online", "moba", "token-topk"};
  int found = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) found |= strcmp(kind, known[i]) == 0;
  if (!found)
    return sr_input_error(e, NULL, "pattern",
                          "unknown pattern source '%s' (expected dense, window:S:W, vs-like:S:W:NV, vs-preset:NAME, "
                          "vs-topp:P, vs-online:P, vs-online:topk:V:S, block:D[:B], adaspa:S[:B], adaspa-online:S[:B], "
                          "moba:B:K, token-topk:K[:IH:ID], trace:PATH or vs-fit:PATH)", spec);
  int rc = pattern_alloc(out, n_tokens, (int)m->num_layers, (int)m->num_heads, e);
  if (rc) return rc;
  synth_opts o = synth_defaults(seed, step);
  int64_t a = 0, b = 0, c = 0, B = 128;
  double x = 0;
  if (strcmp(kind, "dense") == 0) {
    rc = expect_parts(spec, n, 1, 1, "'dense'", e);
  } else if (strcmp(kind, "window") == 0) {
    rc = expect_parts(spec, n, 3, 3, "window:SINKS:WINDOW", e);
    if (!rc) rc = parse_int(spec, part[1], "sinks", 0, &a, e);
    if (!rc) rc = parse_int(spec, part[2], "window", 1, &b, e);
    for (int64_t h = 0; !rc && h < (int64_t)out->layers * out->heads; h++) {
      out->h[h].kind = PATTERN_WINDOW;
      out->h[h].sinks = a;
      out->h[h].window = b;
    }
  } else if (strcmp(kind, "vs-like") == 0) {
    rc = expect_parts(spec, n, 4, 4, "vs-like:SINKS:WINDOW:NVERT", e);
    if (!rc) rc = parse_int(spec, part[1], "sinks", 0, &a, e);
    if (!rc) rc = parse_int(spec, part[2], "window", 0, &b, e);
    if (!rc) rc = parse_int(spec, part[3], "verticals", 0, &c, e);
    if (!rc) rc = synth_vs_like(out, a, b, c, &o, e);
  } else if (strcmp(kind, "vs-preset") == 0) {
    rc = expect_parts(spec, n, 2, 2, "vs-preset:NAME", e);
    if (!rc) rc = synth_vs_preset(out, part[1], &o, e);
  } else if (strcmp(kind, "vs-online") == 0) {
    vs_est_opts eo;
    rc = online_parts(spec, n, part, &eo, e);
    if (!rc && eo.topk_v > 0) {  // the fixed budget: V verticals and S slashes on every head
      int32_t *bv = malloc(sizeof(int32_t) * (size_t)(out->layers * out->heads) * 2);
      if (!bv) rc = sr_internal_error(e, 0, "out of memory");
      for (int64_t h = 0; !rc && h < (int64_t)out->layers * out->heads; h++)
        bv[h] = eo.topk_v, bv[(int64_t)out->layers * out->heads + h] = eo.topk_s;
      if (!rc) rc = synth_vs_budgets(out, bv, bv + (int64_t)out->layers * out->heads, &o, e);
      free(bv);
    } else if (!rc) {
      rc = synth_vs_topp(out, eo.p, &o, e);
    }
  } else if (strcmp(kind, "vs-topp") == 0) {
    rc = expect_parts(spec, n, 2, 2, "vs-topp:P with P in (0, 1)", e);
    if (!rc) rc = parse_frac(spec, part[1], "top-p mass", 1e-6, 1 - 1e-6, &x, e);
    if (!rc) rc = synth_vs_topp(out, x, &o, e);
  } else if (strcmp(kind, "moba") == 0 || strcmp(kind, "token-topk") == 0) {
    gating_opts g;
    rc = gating_parts(spec, n, part, &g, e);
    if (!rc)
      rc = g.kind == PATTERN_MOBA ? gating_moba_standin(out, g.block, g.topk, g.rho, &o, e) : gating_tokens_standin(out, g.topk, &o, e);
  } else if (strcmp(kind, "block") == 0) {
    rc = expect_parts(spec, n, 2, 3, "block:DENSITY[:B]", e);
    if (!rc) rc = parse_frac(spec, part[1], "density", 1e-9, 1, &x, e);
    if (!rc && n == 3) rc = parse_int(spec, part[2], "block size", 1, &B, e);
    if (!rc && B > INT32_MAX) rc = sr_input_error(e, NULL, "pattern", "'%s': block size above %d", spec, INT32_MAX);
    if (!rc) rc = synth_block(out, x, (int32_t)B, &o, e);
  } else {  // adaspa, and adaspa-online's stand-in (the same synthetic AdaSpa-like heads)
    adaspa_opts ao;
    rc = adaspa_parts(spec, n, part, &ao, e);
    if (!rc) rc = synth_adaspa(out, ao.sparsity, ao.block, &o, e);
  }
  if (rc) pattern_free(out);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// heads drawn one at a time

int pattern_spec_by_heads(const char *spec) {
  return spec && (strncmp(spec, "vs-topp:", 8) == 0 || strncmp(spec, "vs-preset:", 10) == 0 ||
                  strncmp(spec, "vs-online:", 10) == 0);
}

struct pattern_drawer {
  synth_vs_source src;
  int threads;
  synth_ctx *ctx;      // [threads] scratch
  head_pattern *head;  // [threads] a head with room for n_tokens indices of each kind
};

void pattern_drawer_close(pattern_drawer *d) {
  if (!d) return;
  for (int t = 0; t < d->threads; t++) {
    if (d->ctx) synth_ctx_free(&d->ctx[t]);
    if (d->head) free(d->head[t].vertical), free(d->head[t].slash);
  }
  free(d->ctx);
  free(d->head);
  synth_vs_source_free(&d->src);
  free(d);
}

// The source of a spec of pattern_spec_by_heads, as pattern_from_spec parses it and its generator builds it.
static int vs_source(const char *spec, const model_config *m, int64_t n_tokens, const synth_opts *o,
                     synth_vs_source *out, sr_error *e) {
  char buf[512], *part[MAX_PARTS];
  int n = split(spec, buf, sizeof buf, part), L = (int)m->num_layers, H = (int)m->num_heads, rc;
  double x = 0;
  if (strcmp(part[0], "vs-preset") == 0) {
    rc = expect_parts(spec, n, 2, 2, "vs-preset:NAME", e);
    return rc ? rc : synth_vs_preset_source(L, H, n_tokens, part[1], o, out, e);
  }
  if (strcmp(part[0], "vs-topp") == 0) {
    rc = expect_parts(spec, n, 2, 2, "vs-topp:P with P in (0, 1)", e);
    if (!rc) rc = parse_frac(spec, part[1], "top-p mass", 1e-6, 1 - 1e-6, &x, e);
    return rc ? rc : synth_vs_topp_source(L, H, n_tokens, x, o, 0, out, e);
  }
  vs_est_opts eo;  // vs-online: the fixed budget on every head, or top-p
  if ((rc = online_parts(spec, n, part, &eo, e))) return rc;
  if (eo.topk_v <= 0) return synth_vs_topp_source(L, H, n_tokens, eo.p, o, 0, out, e);
  int32_t *bv = malloc(sizeof(int32_t) * (size_t)(L * H) * 2 + 1);
  if (!bv) return sr_internal_error(e, 0, "out of memory");
  for (int64_t h = 0; h < (int64_t)L * H; h++) bv[h] = eo.topk_v, bv[(int64_t)L * H + h] = eo.topk_s;
  rc = synth_vs_budgets_source(L, H, n_tokens, bv, bv + (int64_t)L * H, o, out, e);
  free(bv);
  return rc;
}

int pattern_drawer_open(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, int threads,
                        pattern_drawer **out, sr_error *e) {
  *out = NULL;
  if (!pattern_spec_by_heads(spec))
    return sr_internal_error(e, 0, "pattern: the heads of '%s' are not drawn one at a time", spec ? spec : "");
  if (step < 0) return sr_input_error(e, NULL, "step", "%d must be >= 0", step);
  if (n_tokens < 1 || n_tokens > INT32_MAX)
    return sr_input_error(e, NULL, "seq", "%lld tokens: expected 1 to %d", (long long)n_tokens, INT32_MAX);
  pattern_drawer *d = calloc(1, sizeof *d);
  if (!d) return sr_internal_error(e, 0, "pattern: out of memory");
  synth_opts o = synth_defaults(seed, step);
  int rc = vs_source(spec, m, n_tokens, &o, &d->src, e);
  d->threads = threads > 0 ? threads : 1;
  d->ctx = calloc((size_t)d->threads, sizeof *d->ctx);
  d->head = calloc((size_t)d->threads, sizeof *d->head);
  if (!rc && (!d->ctx || !d->head)) rc = sr_internal_error(e, 0, "pattern: out of memory");
  for (int t = 0; !rc && t < d->threads; t++) {
    rc = synth_ctx_init(&d->ctx[t], n_tokens, e);
    d->head[t].vertical = malloc((size_t)n_tokens * sizeof(int32_t));
    d->head[t].slash = malloc((size_t)n_tokens * sizeof(int32_t));
    if (!rc && (!d->head[t].vertical || !d->head[t].slash)) rc = sr_internal_error(e, 0, "pattern: out of memory");
  }
  if (rc) {
    pattern_drawer_close(d);
    return rc;
  }
  *out = d;
  return SR_OK;
}

const head_pattern *pattern_drawer_head(pattern_drawer *d, int thread, int layer, int head) {
  synth_vs_source_draw(&d->src, &d->ctx[thread], layer, head, &d->head[thread]);
  return &d->head[thread];
}

// ---------------------------------------------------------------------------------------------
// one layer

// A copy of a drawn vertical-slash head (the drawer's arrays are reused by its next draw).
static int vs_head_copy(const head_pattern *src, head_pattern *dst, sr_error *e) {
  pattern_head_clear(dst);
  dst->kind = PATTERN_VS;
  dst->vertical = malloc(sizeof(int32_t) * (size_t)src->n_vertical + 1);
  dst->slash = malloc(sizeof(int32_t) * (size_t)src->n_slash + 1);
  if (!dst->vertical || !dst->slash) return sr_internal_error(e, 0, "pattern: out of memory");
  memcpy(dst->vertical, src->vertical, sizeof(int32_t) * (size_t)src->n_vertical);
  memcpy(dst->slash, src->slash, sizeof(int32_t) * (size_t)src->n_slash);
  dst->n_vertical = src->n_vertical, dst->n_slash = src->n_slash;
  return SR_OK;
}

int pattern_from_spec_layer(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step, int layer,
                            pattern *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (layer < 0 || layer >= m->num_layers)
    return sr_input_error(e, NULL, "layer", "%d: expected 0 to %lld (a %lld-layer model)", layer,
                          (long long)m->num_layers - 1, (long long)m->num_layers);
  int rc;
  if (pattern_spec_by_heads(spec)) {  // drawn alone: a 36-layer model's layer costs one layer's draws
    pattern_drawer *d = NULL;
    rc = pattern_drawer_open(spec, m, n_tokens, seed, step, 1, &d, e);
    if (!rc) rc = pattern_alloc(out, n_tokens, 1, (int)m->num_heads, e);
    for (int h = 0; !rc && h < out->heads; h++) rc = vs_head_copy(pattern_drawer_head(d, 0, layer, h), &out->h[h], e);
    pattern_drawer_close(d);
  } else {  // every other source drawn whole (cheap: under a second at 128K for 36 layers), its layer moved out
    pattern whole;
    rc = pattern_from_spec(spec, m, n_tokens, seed, step, &whole, e);
    if (!rc && (rc = pattern_alloc(out, n_tokens, 1, whole.heads, e)) == SR_OK) {
      memcpy(out->h, pattern_head(&whole, layer, 0), sizeof *out->h * (size_t)whole.heads);
      memset(pattern_head(&whole, layer, 0), 0, sizeof *out->h * (size_t)whole.heads);  // now out's
    }
    if (whole.h) pattern_free(&whole);
  }
  if (rc) pattern_free(out);
  return rc;
}

int pattern_spec_check(const char *spec, const model_config *m, int64_t n_tokens, sr_error *e) {
  if (spec && strncmp(spec, "trace:", 6) == 0)
    return spec[6] ? SR_OK : sr_input_error(e, NULL, "pattern", "'trace:' names no trace file (trace:PATH)");
  if (spec && strncmp(spec, "vs-fit:", 7) == 0)
    return spec[7] ? SR_OK : sr_input_error(e, NULL, "pattern", "'vs-fit:' names no trace file (vs-fit:PATH)");
  if (n_tokens > INT32_MAX)
    return sr_input_error(e, NULL, "seq", "%lld tokens exceed the 32-bit index range of patterns", (long long)n_tokens);
  // No spec's validity depends on the length, so a short one checks it without the cost of a long one. A source whose
  // heads are drawn one at a time is checked by building its source (its parse, budgets or targets: every error
  // pattern_from_spec gives it but running out of memory) without drawing its heads: thousands a plan, and the tuner
  // builds a plan a point.
  if (pattern_spec_by_heads(spec) && n_tokens >= 1) {
    pattern_drawer *d = NULL;
    int rc = pattern_drawer_open(spec, m, n_tokens < 1024 ? n_tokens : 1024, 0, 0, 1, &d, e);
    pattern_drawer_close(d);
    return rc;
  }
  pattern p;
  int rc = pattern_from_spec(spec, m, n_tokens < 1024 ? n_tokens : 1024, 0, 0, &p, e);
  if (rc == SR_OK) pattern_free(&p);
  return rc;
}

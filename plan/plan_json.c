// plan_json.c — the plan file: writing it deterministically, and reading it back strictly (the spec
// is authoritative; everything derived is rebuilt from it and must match the file). Format in docs/plan.md.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"
#include "plan/plan.h"
#include "plan/util.h"

#define PLAN_FORMAT "sparsering-plan"
#define PLAN_VERSION 1
#define MAX_SEED 9007199254740992.0  // 2^53: the largest integer a JSON number carries exactly

// ---------------------------------------------------------------------------------------------
// writing

static cJSON *spec_to_json(const plan_spec *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "model", s->model);
  cJSON_AddStringToObject(o, "cluster", s->cluster);
  cJSON_AddNumberToObject(o, "seq", (double)s->seq);
  cJSON_AddStringToObject(o, "layout", s->layout);
  cJSON_AddNumberToObject(o, "granularity", (double)s->granularity);
  cJSON_AddStringToObject(o, "schedule", s->schedule);
  cJSON_AddNumberToObject(o, "inner", s->inner);
  cJSON_AddNumberToObject(o, "ulysses", s->ulysses);
  cJSON_AddStringToObject(o, "pattern", s->pattern);
  cJSON_AddStringToObject(o, "strategy", s->strategy);
  cJSON_AddBoolToObject(o, "recompute", s->recompute);
  cJSON_AddNumberToObject(o, "zero", s->zero);
  cJSON_AddBoolToObject(o, "offload_activations", s->offload_activations);
  cJSON_AddBoolToObject(o, "offload_optimizer", s->offload_optimizer);
  cJSON_AddNumberToObject(o, "kv_bytes", s->kv_bytes);
  cJSON_AddBoolToObject(o, "skip_empty_sends", s->skip_empty_sends);
  cJSON_AddBoolToObject(o, "fwd_runs", s->fwd_runs);
  cJSON_AddBoolToObject(o, "deterministic", s->deterministic);
  if (s->attention_only) cJSON_AddBoolToObject(o, "attention_only", 1);  // absent (false) in every other plan
  if (s->first_step_plans) cJSON_AddNumberToObject(o, "first_step_plans", s->first_step_plans);  // absent: 0
  if (s->mlp_chunk != MODEL_EXEC_MLP_AUTO) cJSON_AddNumberToObject(o, "mlp_chunk", (double)s->mlp_chunk);  // absent: auto
  if (s->index_build) cJSON_AddNumberToObject(o, "index_build", s->index_build);  // absent: 0, auto
  if (s->attn_cache) cJSON_AddNumberToObject(o, "attn_cache", s->attn_cache);                  // absent: 0
  if (s->attn_prefetch >= 0) cJSON_AddNumberToObject(o, "attn_prefetch", s->attn_prefetch);        // absent: -1
  if (s->attn_host_cache >= 0) cJSON_AddBoolToObject(o, "attn_host_cache", s->attn_host_cache);    // absent: -1
  cJSON_AddNumberToObject(o, "fpdt_chunk", (double)s->fpdt_chunk);
  cJSON_AddBoolToObject(o, "fpdt_offload", s->fpdt_offload);
  cJSON_AddNumberToObject(o, "seed", (double)s->seed);
  cJSON_AddNumberToObject(o, "search_every", (double)s->search_every);
  cJSON_AddStringToObject(o, "trainer", s->trainer);
  cJSON_AddNumberToObject(o, "predicted_step_s", s->predicted_step_s);
  return o;
}

static cJSON *model_to_json(const model_config *m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", m->name);
  cJSON_AddStringToObject(o, "architecture", m->architecture);
  cJSON_AddNumberToObject(o, "params", (double)model_param_count(m));
  cJSON_AddNumberToObject(o, "layers", (double)m->num_layers);
  cJSON_AddNumberToObject(o, "hidden_size", (double)m->hidden_size);
  cJSON_AddNumberToObject(o, "heads", (double)m->num_heads);
  cJSON_AddNumberToObject(o, "kv_heads", (double)m->num_kv_heads);
  cJSON_AddNumberToObject(o, "head_dim", (double)m->head_dim);
  return o;
}

static cJSON *cluster_summary_to_json(const cluster_desc *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", c->name);
  cJSON_AddNumberToObject(o, "nodes", c->nodes);
  cJSON_AddNumberToObject(o, "gpus_per_node", c->gpus_per_node);
  cJSON_AddStringToObject(o, "gpu", c->gpu.name);
  cJSON_AddNumberToObject(o, "intra_gbps", c->intra.gbps);
  cJSON_AddNumberToObject(o, "inter_gbps_per_gpu", cluster_inter_gbps_per_gpu(c));
  return o;
}

static cJSON *int_array(const int64_t *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static cJSON *layout_to_json(const layout *l) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "kind", layout_kind_name(l->kind));
  cJSON_AddNumberToObject(o, "granularity", (double)l->granularity);
  cJSON_AddNumberToObject(o, "world", l->world);
  cJSON_AddNumberToObject(o, "runs", (double)l->n_runs);
  cJSON_AddItemToObject(o, "rank_tokens", int_array(l->rank_count, l->world));
  int64_t *runs = malloc((size_t)l->world * sizeof *runs);
  if (runs) {
    for (int r = 0; r < l->world; r++) runs[r] = l->rank_run_begin[r + 1] - l->rank_run_begin[r];
    cJSON_AddItemToObject(o, "rank_runs", int_array(runs, l->world));
    free(runs);
  }
  return o;
}

// One sent transfer as a compact array (receives mirror sends, so they are not written):
// forward [from, to, shard, bytes, link, level], backward [from, to, shard, grad_shard, bytes, grad_bytes, link, level].
static void add_transfer(cJSON *list, int from, const transfer *t, int backward) {
  if (t->peer < 0) return;
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, cJSON_CreateNumber(from));
  cJSON_AddItemToArray(a, cJSON_CreateNumber(t->peer));
  cJSON_AddItemToArray(a, cJSON_CreateNumber(t->shard));
  if (backward) cJSON_AddItemToArray(a, cJSON_CreateNumber(t->grad_shard));
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->bytes));
  if (backward) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->grad_bytes));
  cJSON_AddItemToArray(a, cJSON_CreateString(link_class_name(t->link)));
  cJSON_AddItemToArray(a, cJSON_CreateNumber(t->level));
  cJSON_AddItemToArray(list, a);
}

static cJSON *schedule_to_json(const schedule *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "kind", schedule_kind_name(s->kind));
  cJSON_AddNumberToObject(o, "world", s->world);
  cJSON_AddNumberToObject(o, "inner", s->inner);
  cJSON_AddNumberToObject(o, "outer", s->outer);
  cJSON_AddNumberToObject(o, "ulysses", s->ulysses);
  cJSON_AddNumberToObject(o, "ring", s->ring);
  cJSON_AddNumberToObject(o, "heads_per_rank", s->heads_per_rank);
  cJSON_AddNumberToObject(o, "kv_heads_per_rank", s->kv_heads_per_rank);
  cJSON_AddBoolToObject(o, "kv_heads_replicated", s->kv_heads_replicated);
  cJSON_AddNumberToObject(o, "kv_bytes_per_elem", s->kv_bytes_per_elem);
  cJSON_AddNumberToObject(o, "grad_bytes_per_elem", s->grad_bytes_per_elem);
  cJSON_AddNumberToObject(o, "a2a_bytes_qkv", (double)s->a2a_bytes_qkv);
  cJSON_AddNumberToObject(o, "a2a_bytes_out", (double)s->a2a_bytes_out);
  cJSON_AddStringToObject(o, "a2a_link", link_class_name(s->a2a_link));
  cJSON_AddNumberToObject(o, "n_steps", s->n_steps);
  cJSON *steps = cJSON_AddArrayToObject(o, "steps");
  for (int t = 0; t < s->n_steps; t++) {
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "step", t);
    cJSON *src = cJSON_AddArrayToObject(st, "kv_src");
    cJSON *fwd = cJSON_AddArrayToObject(st, "fwd");
    cJSON *bwd = cJSON_AddArrayToObject(st, "bwd");
    for (int r = 0; r < s->world; r++) {
      const ring_step *rs = schedule_at(s, t, r);
      cJSON_AddItemToArray(src, cJSON_CreateNumber(rs->kv_src));
      add_transfer(fwd, r, &rs->send, 0);
      add_transfer(fwd, r, &rs->send_outer, 0);
      add_transfer(bwd, r, &rs->send_bwd, 1);
      add_transfer(bwd, r, &rs->send_outer_bwd, 1);
    }
    cJSON_AddItemToArray(steps, st);
  }
  return o;
}

static cJSON *plan_to_cjson(const plan *p) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", PLAN_FORMAT);
  cJSON_AddNumberToObject(root, "version", PLAN_VERSION);
  cJSON_AddItemToObject(root, "spec", spec_to_json(&p->spec));
  cJSON_AddItemToObject(root, "model", model_to_json(&p->model));
  cJSON_AddItemToObject(root, "cluster", cluster_summary_to_json(&p->cluster));
  cJSON_AddItemToObject(root, "layout", layout_to_json(&p->layout));
  cJSON_AddItemToObject(root, "schedule", schedule_to_json(&p->schedule));
  return root;
}

int plan_to_json(const plan *p, char **out, sr_error *e) {
  cJSON *root = plan_to_cjson(p);
  *out = root ? json_print_stable(root) : NULL;
  cJSON_Delete(root);
  if (!*out) return sr_internal_error(e, ENOMEM, "serialising the plan");
  return SR_OK;
}

int plan_write(const plan *p, const char *path, sr_error *e) {
  char *text = NULL;
  int rc = plan_to_json(p, &text, e);
  if (rc) return rc;
  rc = sr_write_atomic(path, text, strlen(text), e);
  free(text);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// reading

// spec.zero: the ZeRO stage 0..3; plan files from before the stages say true (ZeRO-1) or false.
static int read_zero(const cJSON *o, const char *file, int *zero, sr_error *e) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "zero");
  if (it && cJSON_IsBool(it)) {
    *zero = cJSON_IsTrue(it);
    return SR_OK;
  }
  int64_t v;
  int rc = json_get_int(o, "zero", 1, 0, 3, &v, file, "spec", e);
  if (rc == SR_OK) *zero = (int)v;
  return rc;
}

static int read_spec(const cJSON *o, const char *file, plan_spec *s, sr_error *e) {
  static const char *const known[] = {"model", "cluster", "seq", "layout", "granularity", "schedule", "inner",
                                      "ulysses", "pattern", "strategy", "recompute", "zero", "kv_bytes",
                                      "skip_empty_sends", "fpdt_chunk", "fpdt_offload", "seed", "predicted_step_s",
                                      "trainer", "fwd_runs", "deterministic", "offload_activations", "offload_optimizer",
                                      "attention_only", "first_step_plans", "search_every", "mlp_chunk", "index_build",
                                      "attn_cache", "attn_prefetch", "attn_host_cache", NULL};
  int rc;
  int64_t v;
  double d;
  plan_spec_defaults(s);
  if ((rc = json_check_known(o, known, file, "spec", e))) return rc;
  if ((rc = json_get_str(o, "model", 1, s->model, sizeof s->model, file, "spec", e))) return rc;
  if ((rc = json_get_str(o, "cluster", 1, s->cluster, sizeof s->cluster, file, "spec", e))) return rc;
  if ((rc = json_get_int(o, "seq", 1, 1, (int64_t)1e12, &s->seq, file, "spec", e))) return rc;
  if ((rc = json_get_str(o, "layout", 1, s->layout, sizeof s->layout, file, "spec", e))) return rc;
  if ((rc = json_get_int(o, "granularity", 1, 1, (int64_t)1 << 40, &s->granularity, file, "spec", e))) return rc;
  if ((rc = json_get_str(o, "schedule", 1, s->schedule, sizeof s->schedule, file, "spec", e))) return rc;
  if ((rc = json_get_int(o, "inner", 1, 0, 1 << 20, &v, file, "spec", e))) return rc;
  s->inner = (int)v;
  if ((rc = json_get_int(o, "ulysses", 1, 0, 1 << 20, &v, file, "spec", e))) return rc;
  s->ulysses = (int)v;
  if ((rc = json_get_str(o, "pattern", 1, s->pattern, sizeof s->pattern, file, "spec", e))) return rc;
  if ((rc = json_get_str(o, "strategy", 1, s->strategy, sizeof s->strategy, file, "spec", e))) return rc;
  if ((rc = json_get_bool(o, "recompute", 1, &s->recompute, file, "spec", e))) return rc;
  if ((rc = read_zero(o, file, &s->zero, e))) return rc;
  if ((rc = json_get_int(o, "kv_bytes", 1, 1, 8, &v, file, "spec", e))) return rc;
  s->kv_bytes = (int)v;
  if ((rc = json_get_bool(o, "skip_empty_sends", 1, &s->skip_empty_sends, file, "spec", e))) return rc;
  if ((rc = json_get_int(o, "fpdt_chunk", 1, 0, (int64_t)1e12, &s->fpdt_chunk, file, "spec", e))) return rc;
  if ((rc = json_get_bool(o, "fpdt_offload", 1, &s->fpdt_offload, file, "spec", e))) return rc;
  if ((rc = json_get_num(o, "seed", 1, 0, MAX_SEED, &d, file, "spec", e))) return rc;
  if (d != (double)(uint64_t)d) return sr_input_error(e, file, "spec.seed", "expected an integer");
  s->seed = (uint64_t)d;
  if ((rc = json_get_num(o, "predicted_step_s", 1, 0, 1e12, &s->predicted_step_s, file, "spec", e))) return rc;
  // optional (plan files from before it count a mixed-precision trainer)
  if ((rc = json_get_str(o, "trainer", 0, s->trainer, sizeof s->trainer, file, "spec", e))) return rc;
  if ((rc = json_get_bool(o, "fwd_runs", 0, &s->fwd_runs, file, "spec", e))) return rc;  // optional, as trainer
  if ((rc = json_get_bool(o, "deterministic", 0, &s->deterministic, file, "spec", e))) return rc;  // optional
  if ((rc = json_get_bool(o, "offload_activations", 0, &s->offload_activations, file, "spec", e))) return rc;  // optional
  if ((rc = json_get_bool(o, "offload_optimizer", 0, &s->offload_optimizer, file, "spec", e))) return rc;      // optional
  if ((rc = json_get_int(o, "search_every", 0, 1, (int64_t)1 << 40, &s->search_every, file, "spec", e))) return rc;  // optional
  if ((rc = json_get_bool(o, "attention_only", 0, &s->attention_only, file, "spec", e))) return rc;
  int64_t fsp = 0;
  if ((rc = json_get_int(o, "first_step_plans", 0, 0, 1 << 20, &fsp, file, "spec", e))) return rc;
  s->first_step_plans = (int)fsp;
  // optional: absent, the trainer's rule (MODEL_EXEC_MLP_AUTO)
  if ((rc = json_get_int(o, "mlp_chunk", 0, 0, (int64_t)1e12, &s->mlp_chunk, file, "spec", e))) return rc;
  // optional: the exec trainer's plan building (absent: its defaults)
  int64_t ib = 0, ap = -1, ac = 0;
  if ((rc = json_get_int(o, "index_build", 0, 0, 2, &ib, file, "spec", e))) return rc;
  if ((rc = json_get_int(o, "attn_cache", 0, 0, 1 << 20, &ac, file, "spec", e))) return rc;
  s->attn_cache = (int)ac;
  if ((rc = json_get_int(o, "attn_prefetch", 0, 0, 1024, &ap, file, "spec", e))) return rc;
  s->index_build = (int)ib, s->attn_prefetch = (int)ap;
  if (cJSON_GetObjectItemCaseSensitive(o, "attn_host_cache") &&
      (rc = json_get_bool(o, "attn_host_cache", 1, &s->attn_host_cache, file, "spec", e)))
    return rc;
  return SR_OK;
}

static const char *type_name(const cJSON *j) {
  if (cJSON_IsBool(j)) return "true or false";
  if (cJSON_IsNumber(j)) return "a number";
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsArray(j)) return "an array";
  if (cJSON_IsObject(j)) return "an object";
  return "null";
}

// Walk the file's tree against the tree rebuilt from the spec; report the first difference with its
// path. values = 0 checks structure and types only (summaries of files that calibration may change).
static int diff_json(const cJSON *got, const cJSON *want, char *path, size_t cap, int values, const char *file,
                     sr_error *e) {
  size_t len = strlen(path);
  int same_type = (cJSON_IsBool(got) && cJSON_IsBool(want)) || (got->type & 0xFF) == (want->type & 0xFF);
  if (!same_type) return sr_input_error(e, file, path, "expected %s, found %s", type_name(want), type_name(got));
  int rc = SR_OK;
  if (cJSON_IsObject(want)) {
    const cJSON *it;
    cJSON_ArrayForEach(it, got) {
      if (!cJSON_GetObjectItemCaseSensitive(want, it->string)) {
        snprintf(path + len, cap - len, "%s%s", len ? "." : "", it->string);
        return sr_input_error(e, file, path, "unknown field");
      }
    }
    cJSON_ArrayForEach(it, want) {
      snprintf(path + len, cap - len, "%s%s", len ? "." : "", it->string);
      const cJSON *g = cJSON_GetObjectItemCaseSensitive(got, it->string);
      if (!g) return sr_input_error(e, file, path, "missing (%s is required)", type_name(it));
      if ((rc = diff_json(g, it, path, cap, values, file, e))) return rc;
      path[len] = '\0';
    }
  } else if (cJSON_IsArray(want)) {
    int n = cJSON_GetArraySize(want), m = cJSON_GetArraySize(got);
    if (n != m)
      return sr_input_error(e, file, path, "%d entries in the file, %d when rebuilt from the spec", m, n);
    const cJSON *g = got->child, *w = want->child;
    for (int i = 0; i < n; i++, g = g->next, w = w->next) {
      snprintf(path + len, cap - len, "[%d]", i);
      if ((rc = diff_json(g, w, path, cap, values, file, e))) return rc;
      path[len] = '\0';
    }
  } else if (values) {
    const char *why = "(edited by hand, or built from other model/cluster files)";
    if (cJSON_IsNumber(want) && got->valuedouble != want->valuedouble)
      return sr_input_error(e, file, path, "%.17g in the file, %.17g when rebuilt from the spec %s", got->valuedouble,
                            want->valuedouble, why);
    if (cJSON_IsString(want) && strcmp(got->valuestring, want->valuestring) != 0)
      return sr_input_error(e, file, path, "\"%s\" in the file, \"%s\" when rebuilt from the spec %s", got->valuestring,
                            want->valuestring, why);
    if (cJSON_IsBool(want) && cJSON_IsTrue(got) != cJSON_IsTrue(want))
      return sr_input_error(e, file, path, "%s in the file, %s when rebuilt from the spec %s",
                            cJSON_IsTrue(got) ? "true" : "false", cJSON_IsTrue(want) ? "true" : "false", why);
  }
  return SR_OK;
}

// Errors from building name a spec field ("inner: ...") or another file ("models/x.json: ...");
// say that they come from this plan's spec, and which field of it.
static int in_file(sr_error *e, const char *file, const char *field) {
  if (e->code != SR_EINPUT) return e->code;
  static const char *const spec_fields[] = {"seq", "layout", "granularity", "schedule", "inner", "ulysses",
                                            "pattern", "strategy", "kv_bytes", "zero", "fpdt_chunk", "fpdt_offload",
                                            "search_every", "skip_empty_sends", NULL};
  char msg[sizeof e->msg];
  for (const char *const *f = spec_fields; *f; f++) {
    size_t n = strlen(*f);
    if (strncmp(e->msg, *f, n) == 0 && e->msg[n] == ':') {
      snprintf(msg, sizeof msg, "%s: spec.%s", file, e->msg);
      snprintf(e->msg, sizeof e->msg, "%s", msg);
      return e->code;
    }
  }
  if (field) snprintf(msg, sizeof msg, "%s: spec.%s: %s", file, field, e->msg);
  else snprintf(msg, sizeof msg, "%s: spec: %s", file, e->msg);
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  return e->code;
}

int plan_read(const char *path, plan *p, sr_error *e) {
  memset(p, 0, sizeof *p);
  char *text = NULL;
  int rc = sr_read_file(path, &text, NULL, e);
  if (rc) return rc;
  rc = plan_parse(text, path, p, e);
  free(text);
  return rc;
}

int plan_parse(const char *text, const char *path, plan *p, sr_error *e) {
  memset(p, 0, sizeof *p);
  cJSON *root = NULL;
  int rc = json_parse_text(text, path, &root, e);
  if (rc) return rc;
  static const char *const known[] = {"format", "version", "spec", "model", "cluster", "layout", "schedule", NULL};
  char fmt[64] = "";
  int64_t version = 0;
  const cJSON *spec = NULL;
  plan_spec s;
  if (!cJSON_IsObject(root)) rc = sr_input_error(e, path, NULL, "expected a JSON object (a sparsering plan)");
  if (!rc) rc = json_check_known(root, known, path, NULL, e);
  if (!rc) rc = json_get_str(root, "format", 1, fmt, sizeof fmt, path, NULL, e);
  if (!rc && strcmp(fmt, PLAN_FORMAT) != 0)
    rc = sr_input_error(e, path, "format", "\"%s\" is not \"%s\"", fmt, PLAN_FORMAT);
  if (!rc) rc = json_get_int(root, "version", 1, PLAN_VERSION, PLAN_VERSION, &version, path, NULL, e);
  if (!rc) rc = json_get_obj(root, "spec", &spec, path, NULL, e);
  if (!rc) rc = read_spec(spec, path, &s, e);
  const char *field = NULL;
  if (!rc && (rc = plan_build_at(&s, p, &field, e))) in_file(e, path, field);
  if (!rc) {
    cJSON *want = plan_to_cjson(p);
    if (!want) rc = sr_internal_error(e, ENOMEM, "rebuilding %s", path);
    const char *parts[] = {"model", "cluster", "layout", "schedule"};
    for (int i = 0; !rc && i < 4; i++) {
      const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, parts[i]);
      const cJSON *w = cJSON_GetObjectItemCaseSensitive(want, parts[i]);
      char fpath[256];
      snprintf(fpath, sizeof fpath, "%s", parts[i]);
      if (g) rc = diff_json(g, w, fpath, sizeof fpath, i >= 2, path, e);  // absent: a hand-written spec-only plan
    }
    cJSON_Delete(want);
    if (rc) plan_free(p);
  }
  cJSON_Delete(root);
  return rc;
}

// import.c — MInference / MTraining per-head pattern configs as traces.
//
// The config (e.g. MInference's configs/Qwen2.5_3B_kv_out_v32_fit_o_best_pattern.json) is a JSON list
// with one entry per layer; a layer maps head index ("0", "1", ...) to [TYPE, A, B, SCORE], or is a
// list of such entries in head order. TYPE "vertical_and_slash" keeps A vertical columns and B slash
// diagonals (MInference's fixed budgets); "stream_llm" is the A-shape of A initial tokens (sinks) and a
// local window of B. The budgets are exact (capped at the sequence length: there are only n distinct
// columns or diagonals); the configs carry no positions, so the planner's generator (synth.h) places them.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"
#include "plan/synth.h"
#include "plan/util.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// config

static int parse_entry(const cJSON *v, minference_config *c, int64_t idx, const char *file, const char *field,
                       sr_error *e) {
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 3 || cJSON_GetArraySize(v) > 4)
    return sr_input_error(e, file, field, "expected [TYPE, VERTICAL, SLASH, SCORE]");
  const cJSON *type = cJSON_GetArrayItem(v, 0), *a = cJSON_GetArrayItem(v, 1), *b = cJSON_GetArrayItem(v, 2);
  const cJSON *score = cJSON_GetArrayItem(v, 3);
  if (!cJSON_IsString(type)) return sr_input_error(e, file, field, "the pattern type must be a string");
  if (strcmp(type->valuestring, "vertical_and_slash") == 0) c->kind[idx] = TRACE_KIND_VS;
  else if (strcmp(type->valuestring, "stream_llm") == 0) c->kind[idx] = TRACE_KIND_WINDOW;
  else
    return sr_input_error(e, file, field, "pattern type '%.60s' has no fixed budget to import (expected "
                          "vertical_and_slash or stream_llm; for top-p configs use trace gen --pattern vs-topp:P)",
                          type->valuestring);
  const cJSON *nums[2] = {a, b};
  int64_t *dst[2] = {&c->a[idx], &c->b[idx]};
  for (int i = 0; i < 2; i++) {
    double d = cJSON_IsNumber(nums[i]) ? nums[i]->valuedouble : -1;
    if (d < 0 || d > 2147483647.0 || d != (double)(int64_t)d)
      return sr_input_error(e, file, field, "%s budget must be a non-negative integer",
                            i == 0 ? "the vertical (first)" : "the slash (second)");
    *dst[i] = (int64_t)d;
  }
  if (score && !cJSON_IsNumber(score)) return sr_input_error(e, file, field, "the score must be a number");
  c->score[idx] = score ? (float)score->valuedouble : 0.0f;
  return SR_OK;
}

int minference_load(const char *path, const model_config *m, minference_config *c, sr_error *e) {
  memset(c, 0, sizeof *c);
  char *text = NULL;
  int rc = sr_read_file(path, &text, NULL, e);
  if (rc) return rc;
  rc = minference_parse(text, path, m, c, e);
  free(text);
  return rc;
}

int minference_parse(const char *text, const char *path, const model_config *m, minference_config *c, sr_error *e) {
  memset(c, 0, sizeof *c);
  cJSON *root;
  int rc = json_parse_text(text, path, &root, e);
  if (rc) return rc;
  if (!cJSON_IsArray(root) || cJSON_GetArraySize(root) < 1) {
    cJSON_Delete(root);
    return sr_input_error(e, path, NULL, "expected a JSON list with one entry per layer");
  }
  c->layers = cJSON_GetArraySize(root);
  c->heads = cJSON_GetArraySize(cJSON_GetArrayItem(root, 0));
  if (c->heads < 1 || c->layers > 4096 || c->heads > 4096) {
    cJSON_Delete(root);
    return sr_input_error(e, path, "[0]", "layer 0 lists %d heads (expected 1 to 4096)", c->heads);
  }
  if (m && (m->num_layers != c->layers || m->num_heads != c->heads)) {
    cJSON_Delete(root);
    return sr_input_error(e, path, NULL, "%d layers x %d heads, but model %s has %lld x %lld", c->layers, c->heads,
                          m->name, (long long)m->num_layers, (long long)m->num_heads);
  }
  // every layer's size first: the arrays are allocated for layers x heads, which a short hostile file
  // (one long layer, thousands of empty ones) would otherwise make hundreds of megabytes
  char field[64];
  const cJSON *layer;
  int l = 0;
  cJSON_ArrayForEach(layer, root) {
    if ((!cJSON_IsObject(layer) && !cJSON_IsArray(layer)) || cJSON_GetArraySize(layer) != c->heads) {
      snprintf(field, sizeof field, "[%d]", l);
      rc = sr_input_error(e, path, field, "expected %d heads (as layer 0), found %d", c->heads,
                          cJSON_IsObject(layer) || cJSON_IsArray(layer) ? cJSON_GetArraySize(layer) : 0);
      cJSON_Delete(root);
      return rc;
    }
    l++;
  }
  size_t n = (size_t)c->layers * (size_t)c->heads;
  c->kind = calloc(n, sizeof *c->kind);
  c->a = calloc(n, sizeof *c->a);
  c->b = calloc(n, sizeof *c->b);
  c->score = calloc(n, sizeof *c->score);
  if (!c->kind || !c->a || !c->b || !c->score) rc = sr_internal_error(e, ENOMEM, "%s", path);
  l = 0;
  cJSON_ArrayForEach(layer, root) {
    if (rc != SR_OK) break;
    for (int h = 0; h < c->heads && rc == SR_OK; h++) {
      const cJSON *v;
      if (cJSON_IsArray(layer)) {
        v = cJSON_GetArrayItem(layer, h);
        snprintf(field, sizeof field, "[%d][%d]", l, h);
      } else {
        char key[16];
        snprintf(key, sizeof key, "%d", h);
        v = cJSON_GetObjectItemCaseSensitive(layer, key);
        snprintf(field, sizeof field, "[%d][\"%d\"]", l, h);
        if (!v) {
          rc = sr_input_error(e, path, field, "head %d missing (heads are keyed \"0\" to \"%d\")", h, c->heads - 1);
          break;
        }
      }
      rc = parse_entry(v, c, (int64_t)l * c->heads + h, path, field, e);
    }
    l++;
  }
  cJSON_Delete(root);
  if (rc) minference_free(c);
  return rc;
}

void minference_free(minference_config *c) {
  free(c->kind);
  free(c->a);
  free(c->b);
  free(c->score);
  memset(c, 0, sizeof *c);
}

// ---------------------------------------------------------------------------------------------
// index synthesis

int minference_pattern(const minference_config *c, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                       sr_error *e) {
  int rc = pattern_alloc(out, n_tokens, c->layers, c->heads, e);
  if (rc) return rc;
  const int64_t n = (int64_t)c->layers * c->heads;
  int32_t *nv = calloc((size_t)n, sizeof *nv), *ns = calloc((size_t)n, sizeof *ns);
  if (!nv || !ns) rc = sr_internal_error(e, ENOMEM, "minference pattern");
  // Budgets are exact up to the sequence length (only n_tokens distinct columns or diagonals exist).
  for (int64_t i = 0; i < n && rc == SR_OK; i++)
    if (c->kind[i] == TRACE_KIND_VS) {
      nv[i] = (int32_t)sr_min64(c->a[i], n_tokens);
      ns[i] = (int32_t)sr_min64(c->b[i], n_tokens);
    }
  // The planner's VS generator places the indices (sinks and early columns, offset 0 and a local
  // window, the rest spread toward small offsets) and drifts them from step to step.
  synth_opts o = synth_defaults(seed, step);
  if (rc == SR_OK) rc = synth_vs_budgets(out, nv, ns, &o, e);
  for (int64_t i = 0; i < n && rc == SR_OK; i++) {
    if (c->kind[i] != TRACE_KIND_WINDOW) continue;
    head_pattern *hp = &out->h[i];
    free(hp->vertical);
    free(hp->slash);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_WINDOW;
    hp->sinks = sr_min64(c->a[i], n_tokens);
    hp->window = sr_min64(c->b[i], n_tokens);
  }
  free(nv);
  free(ns);
  if (rc) pattern_free(out);
  return rc;
}

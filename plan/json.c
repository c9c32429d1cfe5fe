// json.c — typed, validated access to JSON input files (see json.h).
#include "plan/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

static void field_name(char *out, size_t size, const char *ctx, const char *key) {
  if (ctx && *ctx) snprintf(out, size, "%s.%s", ctx, key);
  else snprintf(out, size, "%s", key);
}

int json_parse_text(const char *text, const char *name, cJSON **out, sr_error *e) {
  *out = NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    int line = 1;
    if (at && at >= text)
      for (const char *p = text; p < at && *p; p++) line += (*p == '\n');
    if (!at || !*at) return sr_input_error(e, name, NULL, "malformed JSON: unexpected end of file (truncated?)");
    return sr_input_error(e, name, NULL, "malformed JSON near line %d", line);
  }
  *out = root;
  return SR_OK;
}

int json_load_file(const char *path, cJSON **out, sr_error *e) {
  char *text = NULL;
  int rc = sr_read_file(path, &text, NULL, e);
  if (rc) return rc;
  rc = json_parse_text(text, path, out, e);
  free(text);
  return rc;
}

int json_get_num(const cJSON *obj, const char *key, int required, double lo, double hi, double *out,
                 const char *file, const char *ctx, sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return required ? sr_input_error(e, file, f, "missing (a number is required)") : SR_OK;
  if (!cJSON_IsNumber(it)) return sr_input_error(e, file, f, "expected a number");
  double v = it->valuedouble;
  if (!isfinite(v) || v < lo || v > hi) return sr_input_error(e, file, f, "%g is out of range [%g, %g]", v, lo, hi);
  *out = v;
  return SR_OK;
}

int json_get_int(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi, int64_t *out,
                 const char *file, const char *ctx, sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return required ? sr_input_error(e, file, f, "missing (an integer is required)") : SR_OK;
  if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble))
    return sr_input_error(e, file, f, "expected an integer");
  double v = it->valuedouble;
  if (v < (double)lo || v > (double)hi)
    return sr_input_error(e, file, f, "%.0f is out of range [%lld, %lld]", v, (long long)lo, (long long)hi);
  *out = (int64_t)v;
  return SR_OK;
}

int json_get_bool(const cJSON *obj, const char *key, int required, int *out, const char *file, const char *ctx,
                  sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return required ? sr_input_error(e, file, f, "missing (true or false is required)") : SR_OK;
  if (!cJSON_IsBool(it)) return sr_input_error(e, file, f, "expected true or false");
  *out = cJSON_IsTrue(it);
  return SR_OK;
}

int json_get_str(const cJSON *obj, const char *key, int required, char *out, size_t size, const char *file,
                 const char *ctx, sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return required ? sr_input_error(e, file, f, "missing (a string is required)") : SR_OK;
  if (!cJSON_IsString(it)) return sr_input_error(e, file, f, "expected a string");
  if (strlen(it->valuestring) >= size) return sr_input_error(e, file, f, "string longer than %zu characters", size - 1);
  snprintf(out, size, "%s", it->valuestring);
  return SR_OK;
}

int json_get_obj(const cJSON *obj, const char *key, const cJSON **out, const char *file, const char *ctx,
                 sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it) return sr_input_error(e, file, f, "missing (an object is required)");
  if (!cJSON_IsObject(it)) return sr_input_error(e, file, f, "expected an object");
  *out = it;
  return SR_OK;
}

int json_check_known(const cJSON *obj, const char *const *known, const char *file, const char *ctx, sr_error *e) {
  const cJSON *it;
  cJSON_ArrayForEach(it, obj) {
    int ok = 0;
    for (const char *const *k = known; *k; k++)
      if (it->string && strcmp(it->string, *k) == 0) ok = 1;
    if (!ok) {
      char f[256];
      field_name(f, sizeof f, ctx, it->string ? it->string : "?");
      return sr_input_error(e, file, f, "unknown field (a typo?)");
    }
  }
  return SR_OK;
}

char *json_print_stable(const cJSON *root) {
  char *s = cJSON_Print(root);  // cJSON prints members in insertion order: deterministic
  if (!s) return NULL;
  size_t n = strlen(s);
  char *t = realloc(s, n + 2);
  if (!t) {
    free(s);
    return NULL;
  }
  t[n] = '\n';
  t[n + 1] = '\0';
  return t;
}

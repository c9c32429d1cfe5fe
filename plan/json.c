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

static int by_name(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

// The first name given twice in one object of the tree (path: its dotted place), sorting each object's
// names so an object of many members costs n log n, not n squared.
static int find_duplicate(const cJSON *node, char *path, size_t size, size_t len, sr_error *e, const char *file) {
  const cJSON *it;
  int n = 0;
  cJSON_ArrayForEach(it, node) n++;
  if (cJSON_IsObject(node) && n > 1) {
    const cJSON **names = malloc((size_t)n * sizeof *names);
    if (!names) return sr_internal_error(e, 0, "%s: out of memory checking the JSON", file);
    int k = 0;
    cJSON_ArrayForEach(it, node) names[k++] = it;
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (k = 1; k < n; k++)
      if (strcmp(names[k - 1]->string, names[k]->string) == 0) {
        snprintf(path + len, size - len, "%s%s", len ? "." : "", names[k]->string);
        free(names);
        return sr_input_error(e, file, path, "given twice (a duplicate key: readers disagree on which one counts)");
      }
    free(names);
  }
  int i = 0;
  cJSON_ArrayForEach(it, node) {
    size_t l = len;
    if (cJSON_IsObject(node)) l += (size_t)snprintf(path + len, size - len, "%s%s", len ? "." : "", it->string);
    else l += (size_t)snprintf(path + len, size - len, "[%d]", i);
    if (l >= size) l = size - 1;
    int rc = find_duplicate(it, path, size, l, e, file);
    path[len] = '\0';
    if (rc) return rc;
    i++;
  }
  return SR_OK;
}

int json_check_duplicates(const cJSON *root, const char *file, sr_error *e) {
  char path[512] = "";
  return find_duplicate(root, path, sizeof path, 0, e, file);
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
  int rc = json_check_duplicates(root, name, e);
  if (rc) {
    cJSON_Delete(root);
    return rc;
  }
  *out = root;
  return SR_OK;
}

// A number the parser read as infinite was written beyond a double's range (1e400).
static int not_finite(const char *file, const char *f, double v, sr_error *e) {
  return sr_input_error(e, file, f, "%s is beyond the range of a double (at most 1.8e308 in magnitude)",
                        v > 0 ? "a number as large as 1e400" : "a number as negative as -1e400");
}

// "[lo, hi]", "at least lo" or "at most hi": a bound that is infinite is no bound.
static void range_text(char *out, size_t size, double lo, double hi) {
  if (isinf(lo) && isinf(hi)) snprintf(out, size, "any finite number");
  else if (isinf(hi)) snprintf(out, size, "at least %g", lo);
  else if (isinf(lo)) snprintf(out, size, "at most %g", hi);
  else snprintf(out, size, "[%g, %g]", lo, hi);
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
  if (!isfinite(v)) return not_finite(file, f, v, e);
  if (v < lo || v > hi) {
    char r[96];
    range_text(r, sizeof r, lo, hi);
    return sr_input_error(e, file, f, "%g is out of range (%s)", v, r);
  }
  *out = v;
  return SR_OK;
}

int json_get_int(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi, int64_t *out,
                 const char *file, const char *ctx, sr_error *e) {
  char f[256];
  field_name(f, sizeof f, ctx, key);
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!it || cJSON_IsNull(it)) return required ? sr_input_error(e, file, f, "missing (an integer is required)") : SR_OK;
  if (cJSON_IsNumber(it) && !isfinite(it->valuedouble)) return not_finite(file, f, it->valuedouble, e);
  if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble))
    return sr_input_error(e, file, f, "expected an integer");
  double v = it->valuedouble;
  if (v < (double)lo || v > (double)hi || v >= 9223372036854775808.0)  // 2^63: (double)INT64_MAX rounds up to it
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

cJSON *json_add_number_exact(cJSON *obj, const char *key, double v) {
  if (!isfinite(v)) return cJSON_AddNumberToObject(obj, key, v);
  char buf[40];
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  return cJSON_AddRawToObject(obj, key, buf);
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

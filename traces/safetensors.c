// safetensors.c — the safetensors container: a validating reader for hostile input and an atomic writer.
//
// The rules enforced are the reference implementation's (safetensors/src/tensor.rs, `validate`): the
// header is at most 100 MB and fits in the file, is UTF-8 JSON starting with '{', every tensor has a
// known dtype, a shape whose element count times the dtype size equals its byte range, and the byte
// ranges tile the data section exactly. Every failure is an SR_EINPUT naming the file, the tensor or
// field, and the problem.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan/json.h"
#include "plan/util.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// dtypes

static const struct {
  const char *name;
  int size;
} dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},         [ST_U16] = {"U16", 2},
    [ST_I16] = {"I16", 2},   [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},     [ST_U32] = {"U32", 4},
    [ST_I32] = {"I32", 4},   [ST_F32] = {"F32", 4},   [ST_U64] = {"U64", 8},       [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? dtypes[d].name : "?"; }
int st_dtype_size(st_dtype d) { return (unsigned)d < ST_N_DTYPES ? dtypes[d].size : 0; }

static int dtype_parse(const char *s, st_dtype *out) {
  for (int i = 0; i < ST_N_DTYPES; i++)
    if (strcmp(s, dtypes[i].name) == 0) {
      *out = (st_dtype)i;
      return 1;
    }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// little-endian element access (tensor data need not be aligned)

static uint64_t load_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void store_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++, v >>= 8) p[i] = (uint8_t)(v & 0xff);
}

int32_t st_get_i32(const st_tensor *t, int64_t i) { return (int32_t)(uint32_t)load_le(t->data + 4 * i, 4); }
int64_t st_get_i64(const st_tensor *t, int64_t i) { return (int64_t)load_le(t->data + 8 * i, 8); }
float st_get_f32(const st_tensor *t, int64_t i) {
  uint32_t u = (uint32_t)load_le(t->data + 4 * i, 4);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------------------------
// header checks

// Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); returns the
// offset of the first bad byte, or n when all is well.
static size_t utf8_check(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int len;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (n - i < (size_t)len) return i;
    for (int k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += (size_t)len;
  }
  return n;
}

static int is_json_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A JSON number that is an exact non-negative integer representable in a double (<= 2^53).
static int json_uint(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!isfinite(d) || d < 0 || d > 9007199254740992.0 || d != floor(d)) return 0;
  *out = (uint64_t)d;
  return 1;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}
static int cmp_tensor_begin(const void *a, const void *b) {
  const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

// Parse __metadata__ into sorted key/value arrays.
static int parse_metadata(const cJSON *meta, st_file *f, sr_error *e) {
  if (!cJSON_IsObject(meta)) return sr_input_error(e, f->name, "__metadata__", "expected an object of strings");
  int n = cJSON_GetArraySize(meta);
  f->meta_key = calloc((size_t)n + 1, sizeof(char *));
  f->meta_val = calloc((size_t)n + 1, sizeof(char *));
  if (!f->meta_key || !f->meta_val) return sr_internal_error(e, ENOMEM, "%s: __metadata__", f->name);
  // Keys sorted alongside their values: sort an index of (key, value) pairs packed as key pointers.
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, meta) {
    if (!cJSON_IsString(it) || !it->valuestring)
      return sr_input_error(e, f->name, "__metadata__", "value of '%.200s' is not a string", it->string ? it->string : "");
    f->meta_key[i] = dup_str(it->string ? it->string : "");
    f->meta_val[i] = dup_str(it->valuestring);
    f->n_meta = ++i;
    if (!f->meta_key[i - 1] || !f->meta_val[i - 1]) return sr_internal_error(e, ENOMEM, "%s: __metadata__", f->name);
  }
  // Insertion sort by key keeps the pairing without an auxiliary struct; metadata maps are small.
  for (int a = 1; a < f->n_meta; a++) {
    char *k = f->meta_key[a], *v = f->meta_val[a];
    int b = a - 1;
    while (b >= 0 && strcmp(f->meta_key[b], k) > 0) {
      f->meta_key[b + 1] = f->meta_key[b];
      f->meta_val[b + 1] = f->meta_val[b];
      b--;
    }
    f->meta_key[b + 1] = k;
    f->meta_val[b + 1] = v;
  }
  for (int a = 1; a < f->n_meta; a++)
    if (strcmp(f->meta_key[a - 1], f->meta_key[a]) == 0)
      return sr_input_error(e, f->name, "__metadata__", "key '%.200s' appears twice", f->meta_key[a]);
  return SR_OK;
}

// Parse one tensor entry {"dtype", "shape", "data_offsets"} and check its size against its byte range.
static int parse_tensor(const cJSON *v, st_tensor *t, uint64_t data_len, const char *file, sr_error *e) {
  char field[300];
  snprintf(field, sizeof field, "tensor '%.200s'", t->name);
  if (!cJSON_IsObject(v)) return sr_input_error(e, file, field, "expected an object with dtype, shape, data_offsets");
  const cJSON *m;
  cJSON_ArrayForEach(m, v) {
    const char *k = m->string ? m->string : "";
    if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
      return sr_input_error(e, file, field, "unknown field '%.100s' (expected dtype, shape, data_offsets)", k);
  }
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
  if (!cJSON_IsString(dt) || !dt->valuestring) return sr_input_error(e, file, field, "dtype missing or not a string");
  if (!dtype_parse(dt->valuestring, &t->dtype))
    return sr_input_error(e, file, field, "unknown dtype '%.40s' (expected BOOL, U8, I8, U16, I16, F16, BF16, "
                          "U32, I32, F32, U64, I64, F64, F8_E4M3 or F8_E5M2)", dt->valuestring);
  if (!cJSON_IsArray(sh)) return sr_input_error(e, file, field, "shape missing or not an array");
  int nd = cJSON_GetArraySize(sh);
  if (nd > ST_MAX_DIMS) return sr_input_error(e, file, field, "shape has %d dimensions (at most %d)", nd, ST_MAX_DIMS);
  t->ndim = nd;
  uint64_t numel = 1;
  int d = 0, overflow = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, sh) {
    uint64_t s;
    if (!json_uint(x, &s)) return sr_input_error(e, file, field, "shape[%d] is not a non-negative integer", d);
    t->shape[d++] = (int64_t)s;
    if (__builtin_mul_overflow(numel, s, &numel)) overflow = 1;
  }
  uint64_t bytes;
  if (overflow || numel > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (uint64_t)st_dtype_size(t->dtype), &bytes))
    return sr_input_error(e, file, field, "shape's element count overflows");
  t->numel = (int64_t)numel;
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &t->begin) ||
      !json_uint(cJSON_GetArrayItem(off, 1), &t->end))
    return sr_input_error(e, file, field, "data_offsets must be two non-negative integers [begin, end]");
  if (t->begin > t->end)
    return sr_input_error(e, file, field, "data_offsets [%llu, %llu) end before they begin",
                          (unsigned long long)t->begin, (unsigned long long)t->end);
  if (t->end > data_len)
    return sr_input_error(e, file, field, "data_offsets [%llu, %llu) run past the data section's %llu bytes",
                          (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)data_len);
  if (t->end - t->begin != bytes)
    return sr_input_error(e, file, field, "shape holds %llu bytes of %s but data_offsets span %llu bytes",
                          (unsigned long long)bytes, dtypes[t->dtype].name,
                          (unsigned long long)(t->end - t->begin));
  return SR_OK;
}

// The byte ranges must tile [0, data_len) exactly: sorted by begin, each starts where the previous ends.
static int check_tiling(st_file *f, uint64_t data_len, sr_error *e) {
  const st_tensor **by = malloc(sizeof *by * (size_t)(f->n_tensors ? f->n_tensors : 1));
  if (!by) return sr_internal_error(e, ENOMEM, "%s", f->name);
  for (int i = 0; i < f->n_tensors; i++) by[i] = &f->tensors[i];
  qsort(by, (size_t)f->n_tensors, sizeof *by, cmp_tensor_begin);
  uint64_t at = 0;
  const char *prev = NULL;
  int rc = SR_OK;
  for (int i = 0; i < f->n_tensors && rc == SR_OK; i++) {
    char field[300];
    snprintf(field, sizeof field, "tensor '%.200s'", by[i]->name);
    if (by[i]->begin < at)
      rc = sr_input_error(e, f->name, field, "data_offsets [%llu, %llu) overlap tensor '%.200s' (ends at %llu)",
                          (unsigned long long)by[i]->begin, (unsigned long long)by[i]->end, prev,
                          (unsigned long long)at);
    else if (by[i]->begin > at)
      rc = sr_input_error(e, f->name, field, "data_offsets begin at %llu, leaving bytes [%llu, %llu) of the data "
                          "section unused", (unsigned long long)by[i]->begin, (unsigned long long)at,
                          (unsigned long long)by[i]->begin);
    at = by[i]->end;
    prev = by[i]->name;
  }
  if (rc == SR_OK && at != data_len)
    rc = sr_input_error(e, f->name, "data_offsets", "tensors cover %llu bytes but the data section holds %llu "
                        "(file truncated or trailing bytes)", (unsigned long long)at, (unsigned long long)data_len);
  free(by);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// reader

int st_parse(const void *bytes, size_t n, const char *name, st_file *f, sr_error *e) {
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name ? name : "safetensors");
  const uint8_t *b = bytes;
  if (n < 8) return sr_input_error(e, f->name, "header length", "file is %zu bytes, shorter than the 8-byte header length", n);
  uint64_t hlen = load_le(b, 8);
  if (hlen > n - 8)
    return sr_input_error(e, f->name, "header length", "%llu bytes, but only %zu bytes follow it (truncated or not "
                          "a safetensors file)", (unsigned long long)hlen, n - 8);
  if (hlen > ST_MAX_HEADER)
    return sr_input_error(e, f->name, "header length", "%llu bytes exceeds the %llu-byte limit",
                          (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
  const uint8_t *h = b + 8;
  if (hlen < 2 || h[0] != '{') return sr_input_error(e, f->name, "header", "does not start with '{'");
  size_t bad = utf8_check(h, (size_t)hlen);
  if (bad < hlen) return sr_input_error(e, f->name, "header", "invalid UTF-8 at header byte %zu", bad);
  for (size_t i = 0; i < hlen; i++)
    if (h[i] < 0x20 && !is_json_space(h[i]))
      return sr_input_error(e, f->name, "header", "control byte 0x%02x at header byte %zu", h[i], i);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)hlen, &end, 0);
  if (!root) {
    size_t at = end && end >= (const char *)h ? (size_t)(end - (const char *)h) : 0;
    const char *ep = cJSON_GetErrorPtr();
    if (ep && ep >= (const char *)h && ep <= (const char *)h + hlen) at = (size_t)(ep - (const char *)h);
    return sr_input_error(e, f->name, "header", "invalid JSON near header byte %zu", at);
  }
  int rc = SR_OK;
  for (const char *p = end; p && p < (const char *)h + hlen; p++)
    if (!is_json_space((uint8_t)*p)) {
      rc = sr_input_error(e, f->name, "header", "unexpected bytes after the JSON object at header byte %zu",
                          (size_t)(p - (const char *)h));
      break;
    }
  if (rc == SR_OK && !cJSON_IsObject(root)) rc = sr_input_error(e, f->name, "header", "is not a JSON object");
  if (rc == SR_OK) rc = json_check_duplicates(root, f->name, e);
  uint64_t data_len = n - 8 - hlen;
  const uint8_t *data = h + hlen;
  if (rc == SR_OK) {
    int members = cJSON_GetArraySize(root);
    f->tensors = calloc((size_t)members + 1, sizeof *f->tensors);
    if (!f->tensors) rc = sr_internal_error(e, ENOMEM, "%s", f->name);
    int seen_meta = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
      if (rc != SR_OK) break;
      const char *key = it->string ? it->string : "";
      if (strcmp(key, "__metadata__") == 0) {
        if (seen_meta++) rc = sr_input_error(e, f->name, "__metadata__", "appears twice");
        else rc = parse_metadata(it, f, e);
        continue;
      }
      st_tensor *t = &f->tensors[f->n_tensors];
      t->name = dup_str(key);
      if (!t->name) {
        rc = sr_internal_error(e, ENOMEM, "%s", f->name);
        break;
      }
      f->n_tensors++;
      rc = parse_tensor(it, t, data_len, f->name, e);
      if (rc == SR_OK) t->data = data + t->begin;
    }
  }
  cJSON_Delete(root);
  if (rc == SR_OK) {
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_name);
    for (int i = 1; i < f->n_tensors && rc == SR_OK; i++)
      if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
        rc = sr_input_error(e, f->name, "header", "tensor '%.200s' appears twice", f->tensors[i].name);
  }
  if (rc == SR_OK) rc = check_tiling(f, data_len, e);
  if (rc != SR_OK) st_close(f);
  return rc;
}

int st_read(const char *path, st_file *f, sr_error *e) {
  memset(f, 0, sizeof *f);
  FILE *fp = fopen(path, "rb");
  if (!fp) return sr_input_error(e, path, NULL, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(fp);
    return sr_input_error(e, path, NULL, "not a regular file");
  }
  size_t n = (size_t)st.st_size;
  uint8_t head[8];
  if (n < 8 || fread(head, 1, 8, fp) != 8) {
    fclose(fp);
    return sr_input_error(e, path, "header length", "file is %zu bytes, shorter than the 8-byte header length", n);
  }
  // Bound the header length by the file size before allocating anything: a hostile length must not
  // turn into a huge allocation.
  uint64_t hlen = load_le(head, 8);
  if (hlen > n - 8) {
    fclose(fp);
    return sr_input_error(e, path, "header length", "%llu bytes, but only %zu bytes follow it (truncated or not "
                          "a safetensors file)", (unsigned long long)hlen, n - 8);
  }
  uint8_t *buf = malloc(n);
  if (!buf) {
    fclose(fp);
    return sr_internal_error(e, ENOMEM, "reading %s (%zu bytes)", path, n);
  }
  memcpy(buf, head, 8);
  size_t got = 8 + fread(buf + 8, 1, n - 8, fp);
  fclose(fp);
  if (got != n) {
    free(buf);
    return sr_input_error(e, path, NULL, "short read (%zu of %zu bytes)", got, n);
  }
  int rc = st_parse(buf, n, path, f, e);
  if (rc != SR_OK) {
    free(buf);
    return rc;
  }
  f->owned = buf;
  return SR_OK;
}

void st_close(st_file *f) {
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->meta_key);
  free(f->meta_val);
  for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
  free(f->tensors);
  free(f->owned);
  char name[sizeof f->name];
  memcpy(name, f->name, sizeof name);
  memset(f, 0, sizeof *f);
  memcpy(f->name, name, sizeof name);
}

const st_tensor *st_find(const st_file *f, const char *name) {
  st_tensor key = {.name = (char *)name};
  return f->n_tensors ? bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, cmp_tensor_name) : NULL;
}

const char *st_meta(const st_file *f, const char *key) {
  if (!f->n_meta) return NULL;
  char *const *k = bsearch(&key, f->meta_key, (size_t)f->n_meta, sizeof(char *), cmp_str_ptr);
  return k ? f->meta_val[k - f->meta_key] : NULL;
}

int st_expect(const st_file *f, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
              const st_tensor **out, sr_error *e) {
  char field[300];
  snprintf(field, sizeof field, "tensor '%.200s'", name);
  const st_tensor *t = st_find(f, name);
  *out = NULL;
  if (!t) return sr_input_error(e, f->name, field, "missing");
  if (t->dtype != dtype)
    return sr_input_error(e, f->name, field, "dtype %s, expected %s", st_dtype_name(t->dtype), st_dtype_name(dtype));
  int ok = t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || t->shape[i] == shape[i];
  if (!ok) {
    char got[160] = "", want[160] = "";
    size_t a = 0, b = 0;
    for (int i = 0; i < t->ndim && a < sizeof got; i++)
      a += (size_t)snprintf(got + a, sizeof got - a, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    for (int i = 0; i < ndim && b < sizeof want; i++)
      b += shape[i] < 0 ? (size_t)snprintf(want + b, sizeof want - b, "%s*", i ? ", " : "")
                        : (size_t)snprintf(want + b, sizeof want - b, "%s%lld", i ? ", " : "", (long long)shape[i]);
    return sr_input_error(e, f->name, field, "shape [%s], expected [%s]", got, want);
  }
  *out = t;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// writer

void st_writer_init(st_writer *w) { memset(w, 0, sizeof *w); }

int st_writer_meta(st_writer *w, const char *key, const char *value, sr_error *e) {
  for (int i = 0; i < w->n_meta; i++)
    if (strcmp(w->meta_key[i], key) == 0) {
      char *v = dup_str(value);
      if (!v) return sr_internal_error(e, ENOMEM, "metadata %s", key);
      free(w->meta_val[i]);
      w->meta_val[i] = v;
      return SR_OK;
    }
  if (w->n_meta == w->cap_meta) {
    int cap = w->cap_meta ? 2 * w->cap_meta : 16;
    char **k = realloc(w->meta_key, sizeof *k * (size_t)cap);
    if (k) w->meta_key = k;
    char **v = realloc(w->meta_val, sizeof *v * (size_t)cap);
    if (v) w->meta_val = v;
    if (!k || !v) return sr_internal_error(e, ENOMEM, "metadata %s", key);
    w->cap_meta = cap;
  }
  char *k = dup_str(key), *v = dup_str(value);
  if (!k || !v) {
    free(k);
    free(v);
    return sr_internal_error(e, ENOMEM, "metadata %s", key);
  }
  w->meta_key[w->n_meta] = k;
  w->meta_val[w->n_meta] = v;
  w->n_meta++;
  return SR_OK;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape, const void *data,
                  sr_error *e) {
  if (!name[0] || strcmp(name, "__metadata__") == 0) return sr_input_error(e, NULL, "tensor name", "'%s' is reserved", name);
  if ((unsigned)dtype >= ST_N_DTYPES) return sr_input_error(e, NULL, name, "unknown dtype");
  if (ndim < 0 || ndim > ST_MAX_DIMS) return sr_input_error(e, NULL, name, "%d dimensions (at most %d)", ndim, ST_MAX_DIMS);
  for (int i = 0; i < w->n_tensors; i++)
    if (strcmp(w->tensors[i].name, name) == 0) return sr_input_error(e, NULL, name, "tensor added twice");
  uint64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
      return sr_input_error(e, NULL, name, "bad shape");
  }
  int size = st_dtype_size(dtype);
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, (uint64_t)size, &bytes) || bytes > SIZE_MAX / 2)
    return sr_input_error(e, NULL, name, "tensor too large");
  if (w->n_tensors == w->cap_tensors) {
    int cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
    st_tensor *t = realloc(w->tensors, sizeof *t * (size_t)cap);
    if (!t) return sr_internal_error(e, ENOMEM, "tensor %s", name);
    w->tensors = t;
    w->cap_tensors = cap;
  }
  st_tensor *t = &w->tensors[w->n_tensors];
  memset(t, 0, sizeof *t);
  t->name = dup_str(name);
  uint8_t *copy = malloc(bytes ? (size_t)bytes : 1);
  if (!t->name || !copy) {
    free(t->name);
    free(copy);
    return sr_internal_error(e, ENOMEM, "tensor %s", name);
  }
  // Store little-endian whatever the host order: go element by element through the host's value.
  const uint8_t *src = data;
  for (uint64_t i = 0; i < numel; i++) {
    uint64_t v = 0;
    if (size == 1) v = src[i];
    else if (size == 2) { uint16_t x; memcpy(&x, src + 2 * i, 2); v = x; }
    else if (size == 4) { uint32_t x; memcpy(&x, src + 4 * i, 4); v = x; }
    else { memcpy(&v, src + 8 * i, 8); }
    store_le(copy + (uint64_t)size * i, v, size);
  }
  t->dtype = dtype;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->numel = (int64_t)numel;
  t->begin = w->data_bytes;
  t->end = w->data_bytes + bytes;
  t->data = copy;
  w->data_bytes = t->end;
  w->n_tensors++;
  return SR_OK;
}

// JSON string literal with the escapes RFC 8259 requires.
static int put_json_string(sr_buf *b, const char *s) {
  if (sr_buf_append(b, "\"", 1)) return -1;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int r;
    if (*p == '"') r = sr_buf_append(b, "\\\"", 2);
    else if (*p == '\\') r = sr_buf_append(b, "\\\\", 2);
    else if (*p < 0x20) r = sr_buf_printf(b, "\\u%04x", *p);
    else r = sr_buf_append(b, p, 1);
    if (r) return -1;
  }
  return sr_buf_append(b, "\"", 1);
}

int st_writer_to_bytes(const st_writer *w, uint8_t **out, size_t *n, sr_error *e) {
  *out = NULL;
  *n = 0;
  sr_buf h = {0};
  int bad = sr_buf_append(&h, "{", 1);
  if (w->n_meta) {
    bad |= sr_buf_printf(&h, "\"__metadata__\":{");
    for (int i = 0; i < w->n_meta; i++) {
      if (i) bad |= sr_buf_append(&h, ",", 1);
      bad |= put_json_string(&h, w->meta_key[i]);
      bad |= sr_buf_append(&h, ":", 1);
      bad |= put_json_string(&h, w->meta_val[i]);
    }
    bad |= sr_buf_append(&h, "}", 1);
  }
  for (int i = 0; i < w->n_tensors; i++) {
    const st_tensor *t = &w->tensors[i];
    if (i || w->n_meta) bad |= sr_buf_append(&h, ",", 1);
    bad |= put_json_string(&h, t->name);
    bad |= sr_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) bad |= sr_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    bad |= sr_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->begin,
                         (unsigned long long)t->end);
  }
  bad |= sr_buf_append(&h, "}", 1);
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned, as the
  // reference writer does.
  while (!bad && h.len % 8) bad |= sr_buf_append(&h, " ", 1);
  size_t total = 8 + h.len + (size_t)w->data_bytes;
  uint8_t *img = bad ? NULL : malloc(total);
  if (!img) {
    sr_buf_free(&h);
    return sr_internal_error(e, ENOMEM, "serialising safetensors (%zu bytes)", total);
  }
  store_le(img, (uint64_t)h.len, 8);
  memcpy(img + 8, h.data, h.len);
  for (int i = 0; i < w->n_tensors; i++)
    if (w->tensors[i].end > w->tensors[i].begin)
      memcpy(img + 8 + h.len + w->tensors[i].begin, w->tensors[i].data, w->tensors[i].end - w->tensors[i].begin);
  sr_buf_free(&h);
  *out = img;
  *n = total;
  return SR_OK;
}

int st_writer_write(const st_writer *w, const char *path, sr_error *e) {
  uint8_t *img;
  size_t n;
  int rc = st_writer_to_bytes(w, &img, &n, e);
  if (rc != SR_OK) return rc;
  rc = sr_write_atomic(path, img, n, e);
  free(img);
  return rc;
}

void st_writer_free(st_writer *w) {
  for (int i = 0; i < w->n_meta; i++) {
    free(w->meta_key[i]);
    free(w->meta_val[i]);
  }
  free(w->meta_key);
  free(w->meta_val);
  for (int i = 0; i < w->n_tensors; i++) {
    free(w->tensors[i].name);
    free((void *)w->tensors[i].data);
  }
  free(w->tensors);
  memset(w, 0, sizeof *w);
}

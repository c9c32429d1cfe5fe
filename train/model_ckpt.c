// model_ckpt.c — safetensors reading and writing for weights and optimizer state.
#include "train/model_ckpt.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---- writing ----------------------------------------------------------------------------------

int ckpt_write_f32(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta, sr_error *e) {
  cJSON *root = cJSON_CreateObject(), *md = cJSON_CreateObject();
  if (!root || !md) goto oom;
  cJSON_AddItemToObject(root, "__metadata__", md);
  for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    if (!o || !shape || !offs) goto oom;
    int64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) {
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
      numel *= t[i].shape[d];
    }
    cJSON_AddStringToObject(o, "dtype", "F32");
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + numel * 4)));
    cJSON_AddItemToObject(o, "data_offsets", offs);
    cJSON_AddItemToObject(root, t[i].name, o);
    off += numel * 4;
  }
  char *json = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  root = NULL;
  if (!json) goto oom;
  // the header is padded with spaces to a multiple of 8 so tensor data stay 8-byte aligned
  size_t hl = strlen(json), hpad = (hl + 7) / 8 * 8, total = 8 + hpad + (size_t)off;
  unsigned char *buf = malloc(total);
  if (!buf) {
    free(json);
    goto oom;
  }
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hpad >> (8 * b));
  memcpy(buf + 8, json, hl);
  memset(buf + 8 + hl, ' ', hpad - hl);
  free(json);
  unsigned char *p = buf + 8 + hpad;
  for (int i = 0; i < n; i++) {
    int64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
    memcpy(p, t[i].data, (size_t)numel * 4);  // host is little-endian (x86-64, aarch64)
    p += numel * 4;
  }
  int rc = sr_write_atomic(path, buf, total, e);
  free(buf);
  return rc;
oom:
  cJSON_Delete(root);
  return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
}

// ---- reading ----------------------------------------------------------------------------------

struct ckpt_file {
  char path[512];
  char *buf;
  size_t n, data_start;
  cJSON *header;
};

int ckpt_open(const char *path, ckpt_file **out, sr_error *e) {
  *out = NULL;
  ckpt_file *f = calloc(1, sizeof *f);
  if (!f) return sr_internal_error(e, 0, "%s: out of memory", path);
  snprintf(f->path, sizeof f->path, "%s", path);
  int rc = sr_read_file(path, &f->buf, &f->n, e);
  if (rc) {
    free(f);
    return rc;
  }
  uint64_t hl = 0;
  if (f->n >= 8)
    for (int b = 0; b < 8; b++) hl |= (uint64_t)(unsigned char)f->buf[b] << (8 * b);
  if (f->n < 8 || hl > f->n - 8) {
    size_t n = f->n;
    ckpt_close(f);
    return sr_input_error(e, path, "header", "not a safetensors file (header length %llu, file %zu bytes)",
                          (unsigned long long)hl, n);
  }
  f->header = cJSON_ParseWithLength(f->buf + 8, (size_t)hl);
  f->data_start = 8 + (size_t)hl;
  if (!f->header || !cJSON_IsObject(f->header)) {
    ckpt_close(f);
    return sr_input_error(e, path, "header", "the JSON header does not parse");
  }
  *out = f;
  return SR_OK;
}

void ckpt_close(ckpt_file *f) {
  if (!f) return;
  cJSON_Delete(f->header);
  free(f->buf);
  free(f);
}

int ckpt_has(const ckpt_file *f, const char *name) { return cJSON_GetObjectItemCaseSensitive(f->header, name) != NULL; }

const char *ckpt_meta(const ckpt_file *f, const char *key) {
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
  const cJSON *v = md ? cJSON_GetObjectItemCaseSensitive(md, key) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static float half_to_f32(uint16_t h) {
  int s = h >> 15, ex = (h >> 10) & 31, mant = h & 1023;
  double v = ex == 0 ? ldexp(mant, -24) : ex == 31 ? (mant ? NAN : INFINITY) : ldexp(mant + 1024, ex - 25);
  return (float)(s ? -v : v);
}

int ckpt_read_f32(const ckpt_file *f, const char *name, int64_t numel, float *out, sr_error *e) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->header, name);
  if (!t) return sr_input_error(e, f->path, name, "tensor missing");
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype"), *shape = cJSON_GetObjectItemCaseSensitive(t, "shape"),
              *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || cJSON_GetArraySize(offs) != 2)
    return sr_input_error(e, f->path, name, "needs dtype, shape and data_offsets");
  int64_t count = 1;
  const cJSON *d;
  cJSON_ArrayForEach(d, shape) count *= (int64_t)d->valuedouble;
  if (count != numel)
    return sr_input_error(e, f->path, name, "has %lld elements, the model expects %lld", (long long)count,
                          (long long)numel);
  const char *ty = dt->valuestring;
  int w = strcmp(ty, "F32") == 0 ? 4 : strcmp(ty, "F64") == 0 ? 8 : strcmp(ty, "BF16") == 0 || strcmp(ty, "F16") == 0 ? 2 : 0;
  if (!w) return sr_input_error(e, f->path, name, "dtype %s is not one of F32, F64, BF16, F16", ty);
  double b0 = cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = cJSON_GetArrayItem(offs, 1)->valuedouble;
  if (b0 < 0 || b1 - b0 != (double)(count * w) || f->data_start + (size_t)b1 > f->n)
    return sr_input_error(e, f->path, name, "data_offsets [%.0f, %.0f] do not fit the file or the shape", b0, b1);
  const unsigned char *p = (const unsigned char *)f->buf + f->data_start + (size_t)b0;
  for (int64_t i = 0; i < count; i++) {
    if (w == 4) {
      memcpy(&out[i], p + 4 * i, 4);
    } else if (w == 8) {
      double v;
      memcpy(&v, p + 8 * i, 8);
      out[i] = (float)v;
    } else {
      uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
      if (ty[0] == 'B') {
        uint32_t bits = (uint32_t)h << 16;  // bfloat16 is the top half of a float32
        memcpy(&out[i], &bits, 4);
      } else {
        out[i] = half_to_f32(h);
      }
    }
  }
  return SR_OK;
}

// ---- model weights ----------------------------------------------------------------------------

int model_save_weights(const model_cpu *m, const char *path, const char *const *meta, int n_meta, sr_error *e) {
  if (m->dtype != MODEL_F32) return sr_input_error(e, path, NULL, "weights are saved from float32 models");
  ckpt_tensor *t = calloc((size_t)m->num_tensors, sizeof *t);
  if (!t) return sr_internal_error(e, 0, "%s: out of memory", path);
  for (int i = 0; i < m->num_tensors; i++) {
    const model_tensor *mt = &m->tensors[i];
    t[i] = (ckpt_tensor){mt->name, (const float *)m->params + mt->offset, mt->ndim, {mt->shape[0], mt->shape[1]}};
  }
  int rc = ckpt_write_f32(path, t, m->num_tensors, meta, n_meta, e);
  free(t);
  return rc;
}

int model_load_weights(model_cpu *m, const char *path, sr_error *e) {
  if (m->dtype != MODEL_F32) return sr_input_error(e, path, NULL, "weights are loaded into float32 models");
  ckpt_file *f;
  int rc = ckpt_open(path, &f, e);
  if (rc) return rc;
  for (int i = 0; i < m->num_tensors && rc == SR_OK; i++) {
    const model_tensor *mt = &m->tensors[i];
    rc = ckpt_read_f32(f, mt->name, mt->numel, (float *)m->params + mt->offset, e);
  }
  ckpt_close(f);
  return rc;
}

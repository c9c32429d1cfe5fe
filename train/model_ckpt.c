// model_ckpt.c — safetensors reading and writing for weights and optimizer state.
#include "train/model_ckpt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/checksum.h"
#include "plan/util.h"
#include "traces/trace.h"

// ---- writing ----------------------------------------------------------------------------------

static int64_t numel_of(const ckpt_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

// The header: 8-byte length, then the JSON padded with spaces to a multiple of 8 so tensor data stay
// 8-byte aligned. *data_bytes: the bytes of tensor data that follow it.
static int header_bytes(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta,
                        unsigned char **out, size_t *size, uint64_t *data_bytes, sr_error *e) {
  cJSON *root = cJSON_CreateObject(), *md = cJSON_CreateObject();
  if (!root || !md) {
    cJSON_Delete(root), cJSON_Delete(md);
    return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
  }
  cJSON_AddItemToObject(root, "__metadata__", md);
  for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(md, meta[2 * i], meta[2 * i + 1]);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
    if (!o || !shape || !offs) {
      cJSON_Delete(o), cJSON_Delete(shape), cJSON_Delete(offs), cJSON_Delete(root);
      return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
    }
    for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
    cJSON_AddStringToObject(o, "dtype", "F32");
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + numel_of(&t[i]) * 4)));
    cJSON_AddItemToObject(o, "data_offsets", offs);
    cJSON_AddItemToObject(root, t[i].name, o);
    off += numel_of(&t[i]) * 4;
  }
  char *json = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!json) return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
  size_t hl = strlen(json), hpad = (hl + 7) / 8 * 8;
  unsigned char *buf = malloc(8 + hpad);
  if (!buf) {
    free(json);
    return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
  }
  for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hpad >> (8 * b));
  memcpy(buf + 8, json, hl);
  memset(buf + 8 + hl, ' ', hpad - hl);
  free(json);
  *out = buf, *size = 8 + hpad, *data_bytes = (uint64_t)off;
  return SR_OK;
}

int ckpt_write_f32(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta, sr_error *e) {
  unsigned char *head;
  size_t hn;
  uint64_t data;
  int rc = header_bytes(path, t, n, meta, n_meta, &head, &hn, &data, e);
  if (rc) return rc;
  unsigned char *buf = realloc(head, hn + (size_t)data);
  if (!buf) {
    free(head);
    return sr_internal_error(e, 0, "%s: out of memory writing safetensors", path);
  }
  unsigned char *p = buf + hn;
  for (int i = 0; i < n; i++) {
    size_t b = (size_t)numel_of(&t[i]) * 4;
    if (b) memcpy(p, t[i].data, b);  // host is little-endian (x86-64, aarch64)
    p += b;
  }
  rc = sr_write_atomic(path, buf, hn + (size_t)data, e);
  free(buf);
  return rc;
}

// Write all n bytes (a short write continues; EINTR retries).
static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

int ckpt_write_f32_file(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta,
                        uint64_t *bytes, uint32_t *crc, void (*halfway)(void *ctx), void *ctx, sr_error *e) {
  unsigned char *head;
  size_t hn;
  uint64_t data;
  int rc = header_bytes(path, t, n, meta, n_meta, &head, &hn, &data, e);
  if (rc) return rc;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    free(head);
    return sr_internal_error(e, errno, "%s: cannot create", path);
  }
  uint32_t c = sr_crc32c(0, head, hn);
  int bad = write_all(fd, head, hn);
  free(head);
  uint64_t done = 0, half = data / 2;
  int halved = !halfway;
  const size_t chunk = (size_t)1 << 24;  // the CRC and the write take the data in 16 MiB pieces
  for (int i = 0; i < n && !bad; i++) {
    const unsigned char *p = (const unsigned char *)t[i].data;
    for (size_t left = (size_t)numel_of(&t[i]) * 4; left > 0 && !bad;) {
      size_t k = left < chunk ? left : chunk;
      if (!halved && done + k > half) k = half > done ? (size_t)(half - done) : 0;
      if (k) {
        c = sr_crc32c(c, p, k);
        bad = write_all(fd, p, k);
        p += k, left -= k, done += k;
      }
      if (!halved && done >= half) {
        halved = 1;
        halfway(ctx);
      }
    }
  }
  if (!halved) halfway(ctx);  // no data at all: half of nothing is done
  int err = errno;
  if (!bad && fsync(fd) != 0 && errno != EINVAL) bad = 1, err = errno;
  if (close(fd) != 0 && !bad) bad = 1, err = errno;
  if (bad) return sr_internal_error(e, err, "writing %s", path);
  *bytes = hn + data, *crc = c;
  return SR_OK;
}

// ---- reading ----------------------------------------------------------------------------------

struct ckpt_file {
  st_file st;
};

int ckpt_open_bytes(void *bytes, size_t n, const char *name, ckpt_file **out, sr_error *e) {
  *out = NULL;
  ckpt_file *f = calloc(1, sizeof *f);
  if (!f) {
    free(bytes);
    return sr_internal_error(e, 0, "%s: out of memory", name);
  }
  int rc = st_parse(bytes, n, name, &f->st, e);
  if (rc) {
    free(bytes);
    free(f);
    return rc;
  }
  f->st.owned = bytes;
  *out = f;
  return SR_OK;
}

int ckpt_open(const char *path, ckpt_file **out, sr_error *e) {
  *out = NULL;
  ckpt_file *f = calloc(1, sizeof *f);
  if (!f) return sr_internal_error(e, 0, "%s: out of memory", path);
  int rc = st_read(path, &f->st, e);
  if (rc) {
    free(f);
    return rc;
  }
  *out = f;
  return SR_OK;
}

void ckpt_close(ckpt_file *f) {
  if (!f) return;
  st_close(&f->st);
  free(f);
}

int ckpt_has(const ckpt_file *f, const char *name) { return st_find(&f->st, name) != NULL; }

int ckpt_count(const ckpt_file *f) { return f->st.n_tensors; }

const char *ckpt_meta(const ckpt_file *f, const char *key) { return st_meta(&f->st, key); }

const char *ckpt_name(const ckpt_file *f) { return f->st.name; }

static float half_to_f32(uint16_t h) {
  int s = h >> 15, ex = (h >> 10) & 31, mant = h & 1023;
  double v = ex == 0 ? ldexp(mant, -24) : ex == 31 ? (mant ? NAN : INFINITY) : ldexp(mant + 1024, ex - 25);
  return (float)(s ? -v : v);
}

static int read_tensor(const ckpt_file *f, const char *name, int ndim, const int64_t *shape, int exact, float *out,
                       sr_error *e) {
  const st_tensor *t = st_find(&f->st, name);
  char field[160];
  snprintf(field, sizeof field, "tensor '%.120s'", name);
  if (!t) return sr_input_error(e, f->st.name, field, "missing");
  st_dtype want = t->dtype;
  if (exact) want = ST_F32;
  else if (want != ST_F64 && want != ST_BF16 && want != ST_F16) want = ST_F32;
  if (!exact && t->dtype != want)
    return sr_input_error(e, f->st.name, field, "dtype %s is not one of F32, F64, BF16, F16", st_dtype_name(t->dtype));
  const st_tensor *ok;
  int rc = st_expect(&f->st, name, want, ndim, shape, &ok, e);  // exact shape: [a, b] is not [b, a]
  if (rc) return rc;
  const unsigned char *p = t->data;
  for (int64_t i = 0; i < t->numel; i++) {
    if (t->dtype == ST_F32) {
      memcpy(&out[i], p + 4 * i, 4);  // host is little-endian (x86-64, aarch64)
    } else if (t->dtype == ST_F64) {
      double v;
      memcpy(&v, p + 8 * i, 8);
      out[i] = (float)v;
    } else {
      uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
      if (t->dtype == ST_BF16) {
        uint32_t bits = (uint32_t)h << 16;  // bfloat16 is the top half of a float32
        memcpy(&out[i], &bits, 4);
      } else {
        out[i] = half_to_f32(h);
      }
    }
    if (!isfinite(out[i]))
      return sr_input_error(e, f->st.name, field, "element %lld is %g: weights and optimizer state must be finite",
                            (long long)i, (double)out[i]);
  }
  return SR_OK;
}

int ckpt_read_f32(const ckpt_file *f, const char *name, int ndim, const int64_t *shape, float *out, sr_error *e) {
  return read_tensor(f, name, ndim, shape, 0, out, e);
}

int ckpt_read_f32_exact(const ckpt_file *f, const char *name, int ndim, const int64_t *shape, float *out, sr_error *e) {
  return read_tensor(f, name, ndim, shape, 1, out, e);
}

// ---- model weights ----------------------------------------------------------------------------

void model_weight_tensors(const model_cpu *m, ckpt_tensor *t) {
  for (int i = 0; i < m->num_tensors; i++) {
    const model_tensor *mt = &m->tensors[i];
    t[i] = (ckpt_tensor){mt->name, (const float *)m->params + mt->offset, mt->ndim, {mt->shape[0], mt->shape[1]}};
  }
}

int model_save_weights(const model_cpu *m, const char *path, const char *const *meta, int n_meta, sr_error *e) {
  if (m->dtype != MODEL_F32) return sr_input_error(e, path, NULL, "weights are saved from float32 models");
  ckpt_tensor *t = calloc((size_t)m->num_tensors, sizeof *t);
  if (!t) return sr_internal_error(e, 0, "%s: out of memory", path);
  model_weight_tensors(m, t);
  int rc = ckpt_write_f32(path, t, m->num_tensors, meta, n_meta, e);
  free(t);
  return rc;
}

int model_read_weights(model_cpu *m, const ckpt_file *f, int exact, sr_error *e) {
  if (m->dtype != MODEL_F32) return sr_input_error(e, f->st.name, NULL, "weights are loaded into float32 models");
  if (exact && f->st.n_tensors != m->num_tensors)
    return sr_input_error(e, f->st.name, NULL, "holds %d tensors; model %s has %d", f->st.n_tensors, m->cfg.name,
                          m->num_tensors);
  int rc = SR_OK;
  for (int i = 0; i < m->num_tensors && rc == SR_OK; i++) {
    const model_tensor *mt = &m->tensors[i];
    rc = read_tensor(f, mt->name, mt->ndim, mt->shape, exact, (float *)m->params + mt->offset, e);
  }
  return rc;
}

int model_load_weights(model_cpu *m, const char *path, sr_error *e) {
  ckpt_file *f;
  int rc = ckpt_open(path, &f, e);
  if (rc) return rc;
  rc = model_read_weights(m, f, 0, e);
  ckpt_close(f);
  return rc;
}

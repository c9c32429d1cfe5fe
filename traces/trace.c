// trace.c — the trace schema on the safetensors container: per-step patterns written as per-(step,
// layer) tensors with their provenance in __metadata__, and read back with every count, order and
// range checked (trace.h lists the tensors; docs/traces.md is the user's description).
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tile_index.h"
#include "plan/util.h"
#include "traces/trace.h"

#include "plan/gating.h"

static const char *const kind_names[] = {"dense", "window", "vs", "block"};

// Largest sequence the schema stores: positions are int32.
#define TRACE_MAX_SEQ ((int64_t)INT32_MAX)
#define TRACE_MAX_STEPS 1000000
#define TRACE_MAX_LAYERS 4096
#define TRACE_MAX_HEADS 4096

static int to_trace_kind(pattern_kind k) {
  switch (k) {
    case PATTERN_DENSE: return TRACE_KIND_DENSE;
    case PATTERN_WINDOW: return TRACE_KIND_WINDOW;
    case PATTERN_VS: return TRACE_KIND_VS;
    case PATTERN_BLOCK: return TRACE_KIND_BLOCK;
    case PATTERN_MOBA: return TRACE_KIND_BLOCK;  // stored as its BLOCK mask of TILE-token blocks
    case PATTERN_TOKENS: return -1;              // per-row choices: no trace kind holds them
  }
  return -1;
}

static void tensor_name(char *buf, size_t size, int step, int layer, const char *field) {
  snprintf(buf, size, "s%d.l%d.%s", step, layer, field);
}

void trace_info_set_model(trace_info *info, const model_config *m) {
  snprintf(info->model, sizeof info->model, "%s", m->name);
  info->hidden_size = m->hidden_size;
  info->num_heads = m->num_heads;
  info->num_kv_heads = m->num_kv_heads;
  info->head_dim = m->head_dim;
  info->num_layers = m->num_layers;
}

// ---------------------------------------------------------------------------------------------
// writer

int trace_writer_begin(trace_writer *t, const trace_info *info, sr_error *e) {
  memset(t, 0, sizeof *t);
  t->info = *info;
  t->info.steps = 0;
  st_writer_init(&t->w);
  if (info->seq_len < 1 || info->seq_len > TRACE_MAX_SEQ)
    return sr_input_error(e, NULL, "seq_len", "%lld tokens (a trace holds 1 to %lld)", (long long)info->seq_len,
                          (long long)TRACE_MAX_SEQ);
  if (info->layers < 1 || info->layers > TRACE_MAX_LAYERS || info->heads < 1 || info->heads > TRACE_MAX_HEADS)
    return sr_input_error(e, NULL, "layers/heads", "%d layers x %d heads (1 to %d each)", info->layers, info->heads,
                          TRACE_MAX_HEADS);
  if (t->info.tile_size == 0) t->info.tile_size = TILE;
  return SR_OK;
}

// Bit-pack one head's block mask rows (LSB first within each byte, numpy packbits bitorder="little").
static void pack_block_mask(const head_pattern *h, int64_t nb, int64_t row_bytes, uint8_t *out) {
  memset(out, 0, (size_t)(nb * row_bytes));
  for (int64_t p = 0; p < nb; p++)
    for (int64_t c = 0; c < nb; c++)
      if ((h->mask[p * h->row_words + c / 64] >> (c % 64)) & 1) out[p * row_bytes + c / 8] |= (uint8_t)(1u << (c % 8));
}

static int write_layer(trace_writer *t, const pattern *p, int step, int layer, const float *scores, sr_error *e) {
  const int H = p->heads;
  const int64_t n = p->n_tokens;
  char name[96];
  uint8_t *kind = malloc((size_t)H);
  if (!kind) return sr_internal_error(e, ENOMEM, "trace step %d", step);
  int any[4] = {0};
  int32_t max_v = 0, max_s = 0;
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(p, layer, h);
    int k = to_trace_kind(hp->kind);
    if (k < 0) {
      free(kind);
      if (hp->kind == PATTERN_TOKENS)
        return sr_input_error(e, NULL, "pattern", "layer %d head %d: token top-k selections (each row its own keys) "
                              "have no trace kind", layer, h);
      return sr_input_error(e, NULL, "pattern", "layer %d head %d has an unknown kind %d", layer, h, (int)hp->kind);
    }
    kind[h] = (uint8_t)k;
    any[k] = 1;
    t->kinds_seen |= 1 << k;
    if (k == TRACE_KIND_VS) {
      if (hp->n_vertical > max_v) max_v = hp->n_vertical;
      if (hp->n_slash > max_s) max_s = hp->n_slash;
    }
    if (k == TRACE_KIND_BLOCK) {
      int32_t bs = hp->kind == PATTERN_MOBA ? TILE : hp->block;
      if (t->info.block_size == 0) t->info.block_size = bs;
      if (bs != t->info.block_size) {
        free(kind);
        return sr_input_error(e, NULL, "pattern", "layer %d head %d has block size %d but the trace uses %lld (one "
                              "block size per trace)", layer, h, bs, (long long)t->info.block_size);
      }
    }
  }
  tensor_name(name, sizeof name, step, layer, "kind");
  int rc = st_writer_add(&t->w, name, ST_U8, 1, (int64_t[]){H}, kind, e);
  free(kind);
  if (rc) return rc;

  if (any[TRACE_KIND_WINDOW]) {
    int64_t *win = calloc((size_t)H * 2, sizeof *win);
    if (!win) return sr_internal_error(e, ENOMEM, "trace step %d", step);
    for (int h = 0; h < H; h++) {
      const head_pattern *hp = pattern_head(p, layer, h);
      if (hp->kind == PATTERN_WINDOW) win[2 * h] = hp->sinks, win[2 * h + 1] = hp->window;
    }
    tensor_name(name, sizeof name, step, layer, "window");
    rc = st_writer_add(&t->w, name, ST_I64, 2, (int64_t[]){H, 2}, win, e);
    free(win);
    if (rc) return rc;
  }

  if (any[TRACE_KIND_VS]) {
    for (int which = 0; which < 2 && rc == SR_OK; which++) {
      int32_t width = which == 0 ? max_v : max_s;
      int32_t *idx = malloc(sizeof *idx * (size_t)H * (size_t)(width ? width : 1));
      int32_t *cnt = calloc((size_t)H, sizeof *cnt);
      if (!idx || !cnt) {
        free(idx);
        free(cnt);
        return sr_internal_error(e, ENOMEM, "trace step %d", step);
      }
      for (int64_t i = 0; i < (int64_t)H * width; i++) idx[i] = -1;
      for (int h = 0; h < H; h++) {
        const head_pattern *hp = pattern_head(p, layer, h);
        if (hp->kind != PATTERN_VS) continue;
        cnt[h] = which == 0 ? hp->n_vertical : hp->n_slash;
        if (cnt[h]) memcpy(idx + (int64_t)h * width, which == 0 ? hp->vertical : hp->slash, sizeof *idx * (size_t)cnt[h]);
      }
      tensor_name(name, sizeof name, step, layer, which == 0 ? "vertical" : "slash");
      rc = st_writer_add(&t->w, name, ST_I32, 2, (int64_t[]){H, width}, idx, e);
      tensor_name(name, sizeof name, step, layer, which == 0 ? "vertical_count" : "slash_count");
      if (rc == SR_OK) rc = st_writer_add(&t->w, name, ST_I32, 1, (int64_t[]){H}, cnt, e);
      free(idx);
      free(cnt);
    }
    if (rc) return rc;
  }

  if (any[TRACE_KIND_BLOCK]) {
    int64_t nb = sr_cdiv(n, t->info.block_size), row_bytes = sr_cdiv(nb, 8);
    uint8_t *bits = calloc((size_t)(H * nb * row_bytes), 1);
    if (!bits) return sr_internal_error(e, ENOMEM, "trace step %d: block mask", step);
    for (int h = 0; h < H && rc == SR_OK; h++) {
      const head_pattern *hp = pattern_head(p, layer, h);
      if (hp->kind == PATTERN_BLOCK) pack_block_mask(hp, nb, row_bytes, bits + h * nb * row_bytes);
      if (hp->kind != PATTERN_MOBA) continue;
      head_pattern as_block = {.kind = PATTERN_BLOCK, .block = TILE, .n_blocks = nb};
      if (moba_block_mask(hp, n, &as_block.mask, &as_block.row_words)) {
        rc = sr_internal_error(e, ENOMEM, "trace step %d: block mask", step);
        break;
      }
      pack_block_mask(&as_block, nb, row_bytes, bits + h * nb * row_bytes);
      free(as_block.mask);
    }
    if (rc) {
      free(bits);
      return rc;
    }
    tensor_name(name, sizeof name, step, layer, "block_mask");
    rc = st_writer_add(&t->w, name, ST_U8, 3, (int64_t[]){H, nb, row_bytes}, bits, e);
    free(bits);
    if (rc) return rc;
  }

  if (scores) {
    tensor_name(name, sizeof name, step, layer, "scores");
    rc = st_writer_add(&t->w, name, ST_F32, 1, (int64_t[]){H}, scores + (int64_t)layer * H, e);
  }
  return rc;
}

int trace_writer_add_step(trace_writer *t, const pattern *p, const float *scores, sr_error *e) {
  if (p->n_tokens != t->info.seq_len || p->layers != t->info.layers || p->heads != t->info.heads)
    return sr_input_error(e, NULL, "pattern", "%lld tokens x %d layers x %d heads does not match the trace's "
                          "%lld x %d x %d", (long long)p->n_tokens, p->layers, p->heads, (long long)t->info.seq_len,
                          t->info.layers, t->info.heads);
  if (t->info.steps >= TRACE_MAX_STEPS) return sr_input_error(e, NULL, "steps", "at most %d steps", TRACE_MAX_STEPS);
  for (int l = 0; l < p->layers; l++) {
    int rc = write_layer(t, p, t->info.steps, l, scores, e);
    if (rc) return rc;
  }
  t->info.steps++;
  return SR_OK;
}

int trace_writer_finish(trace_writer *t, const char *path, sr_error *e) {
  const trace_info *in = &t->info;
  if (in->steps < 1) return sr_input_error(e, path, "steps", "a trace needs at least one step");
  const char *kind = "mixed";
  for (int k = 0; k < 4; k++)
    if (t->kinds_seen == 1 << k) kind = kind_names[k];
  snprintf(t->info.pattern_kind, sizeof t->info.pattern_kind, "%s", kind);
  char v[64];
  struct {
    const char *key;
    int64_t value;
  } ints[] = {{"hidden_size", in->hidden_size},  {"num_attention_heads", in->num_heads},
              {"num_key_value_heads", in->num_kv_heads}, {"head_dim", in->head_dim},
              {"num_hidden_layers", in->num_layers}, {"seq_len", in->seq_len},
              {"steps", in->steps}, {"layers", in->layers}, {"heads", in->heads},
              {"tile_size", in->tile_size}, {"block_size", in->block_size}};
  int rc = st_writer_meta(&t->w, "format", TRACE_FORMAT, e);
  snprintf(v, sizeof v, "%d", TRACE_VERSION);
  if (!rc) rc = st_writer_meta(&t->w, "version", v, e);
  if (!rc) rc = st_writer_meta(&t->w, "model", in->model, e);
  for (size_t i = 0; !rc && i < sizeof ints / sizeof ints[0]; i++) {
    snprintf(v, sizeof v, "%lld", (long long)ints[i].value);
    rc = st_writer_meta(&t->w, ints[i].key, v, e);
  }
  if (!rc) rc = st_writer_meta(&t->w, "pattern_kind", kind, e);
  if (!rc) rc = st_writer_meta(&t->w, "source", in->source[0] ? in->source : "generator", e);
  if (!rc) rc = st_writer_meta(&t->w, "origin", in->origin, e);
  snprintf(v, sizeof v, "%llu", (unsigned long long)in->seed);
  if (!rc) rc = st_writer_meta(&t->w, "seed", v, e);
  if (!rc) rc = st_writer_write(&t->w, path, e);
  return rc;
}

void trace_writer_free(trace_writer *t) { st_writer_free(&t->w); }

// ---------------------------------------------------------------------------------------------
// reader: metadata

// A required decimal metadata integer within [lo, hi].
static int meta_int(const st_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out, sr_error *e) {
  char field[80];
  snprintf(field, sizeof field, "__metadata__.%s", key);
  const char *s = st_meta(f, key);
  if (!s) return sr_input_error(e, f->name, field, "missing");
  int64_t v = 0;
  const char *p = s;
  if (!*p) return sr_input_error(e, f->name, field, "empty (expected an integer)");
  for (; *p; p++) {
    if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
      return sr_input_error(e, f->name, field, "'%.40s' is not an integer in [%lld, %lld]", s, (long long)lo,
                            (long long)hi);
    v = v * 10 + (*p - '0');
  }
  if (v < lo || v > hi)
    return sr_input_error(e, f->name, field, "%lld is outside [%lld, %lld]", (long long)v, (long long)lo, (long long)hi);
  *out = v;
  return SR_OK;
}

static int meta_str(const st_file *f, const char *key, char *out, size_t size, sr_error *e) {
  const char *s = st_meta(f, key);
  if (!s) return sr_input_error(e, f->name, "__metadata__", "'%s' missing", key);
  snprintf(out, size, "%s", s);
  return SR_OK;
}

// "sS.lL.FIELD" with S < steps, L < layers and a known field.
static int check_tensor_name(const char *name, const trace_info *in) {
  static const char *const fields[] = {"kind", "window", "vertical", "vertical_count", "slash", "slash_count",
                                       "block_mask", "scores"};
  const char *p = name;
  int64_t num[2];
  for (int part = 0; part < 2; part++) {
    if (*p++ != (part == 0 ? 's' : 'l')) return 0;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return 0;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + (*p++ - '0');
      if (v > TRACE_MAX_STEPS) return 0;
    }
    if (*p++ != '.') return 0;
    num[part] = v;
  }
  if (num[0] >= in->steps || num[1] >= in->layers) return 0;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (strcmp(p, fields[i]) == 0) return 1;
  return 0;
}

static int check_metadata(trace_file *t, sr_error *e) {
  const st_file *f = &t->f;
  trace_info *in = &t->info;
  memset(in, 0, sizeof *in);
  const char *fmt = st_meta(f, "format");
  if (!fmt || strcmp(fmt, TRACE_FORMAT) != 0)
    return sr_input_error(e, f->name, "__metadata__.format", "'%.60s' (expected \"%s\": not a sparsering trace)",
                          fmt ? fmt : "(missing)", TRACE_FORMAT);
  int64_t v;
  int rc = meta_int(f, "version", 0, INT32_MAX, &v, e);
  if (rc) return rc;
  if (v != TRACE_VERSION)
    return sr_input_error(e, f->name, "__metadata__.version", "%lld (this build reads version %d)", (long long)v,
                          TRACE_VERSION);
  int64_t steps, layers, heads;
  if ((rc = meta_str(f, "model", in->model, sizeof in->model, e)) || (rc = meta_int(f, "hidden_size", 0, INT32_MAX, &in->hidden_size, e)) ||
      (rc = meta_int(f, "num_attention_heads", 0, INT32_MAX, &in->num_heads, e)) ||
      (rc = meta_int(f, "num_key_value_heads", 0, INT32_MAX, &in->num_kv_heads, e)) ||
      (rc = meta_int(f, "head_dim", 0, INT32_MAX, &in->head_dim, e)) ||
      (rc = meta_int(f, "num_hidden_layers", 0, INT32_MAX, &in->num_layers, e)) ||
      (rc = meta_int(f, "seq_len", 1, TRACE_MAX_SEQ, &in->seq_len, e)) ||
      (rc = meta_int(f, "steps", 1, TRACE_MAX_STEPS, &steps, e)) ||
      (rc = meta_int(f, "layers", 1, TRACE_MAX_LAYERS, &layers, e)) ||
      (rc = meta_int(f, "heads", 1, TRACE_MAX_HEADS, &heads, e)) ||
      (rc = meta_int(f, "tile_size", 1, INT32_MAX, &in->tile_size, e)) ||
      (rc = meta_int(f, "block_size", 0, in->seq_len, &in->block_size, e)) ||
      (rc = meta_str(f, "pattern_kind", in->pattern_kind, sizeof in->pattern_kind, e)) ||
      (rc = meta_str(f, "source", in->source, sizeof in->source, e)) ||
      (rc = meta_str(f, "origin", in->origin, sizeof in->origin, e)))
    return rc;
  const char *seed = st_meta(f, "seed");
  if (!seed) return sr_input_error(e, f->name, "__metadata__.seed", "missing");
  char *end = NULL;
  errno = 0;
  unsigned long long sd = strtoull(seed, &end, 10);
  if (!*seed || *end || errno || seed[0] == '-' || seed[0] == '+' || seed[0] == ' ')
    return sr_input_error(e, f->name, "__metadata__.seed", "'%.40s' is not an unsigned integer", seed);
  in->seed = sd;
  in->steps = (int)steps;
  in->layers = (int)layers;
  in->heads = (int)heads;
  int kind_ok = strcmp(in->pattern_kind, "mixed") == 0;
  for (int k = 0; k < 4; k++) kind_ok |= strcmp(in->pattern_kind, kind_names[k]) == 0;
  if (!kind_ok)
    return sr_input_error(e, f->name, "__metadata__.pattern_kind", "'%s' (expected dense, window, vs, block or mixed)",
                          in->pattern_kind);
  if (strcmp(in->source, "generator") && strcmp(in->source, "executor") && strcmp(in->source, "import"))
    return sr_input_error(e, f->name, "__metadata__.source", "'%s' (expected generator, executor or import)",
                          in->source);
  // Every (step, layer) has a kind tensor; check the count first so a hostile step count cannot
  // make the lookups below run long.
  if ((int64_t)in->steps * in->layers > f->n_tensors)
    return sr_input_error(e, f->name, "__metadata__.steps", "%d steps x %d layers need %lld kind tensors but the file "
                          "holds %d tensors", in->steps, in->layers, (long long)in->steps * in->layers, f->n_tensors);
  for (int i = 0; i < f->n_tensors; i++)
    if (!check_tensor_name(f->tensors[i].name, in))
      return sr_input_error(e, f->name, "tensor", "'%.200s' is not part of a %d-step, %d-layer trace (expected "
                            "sSTEP.lLAYER.FIELD)", f->tensors[i].name, in->steps, in->layers);
  char name[96];
  for (int s = 0; s < in->steps; s++)
    for (int l = 0; l < in->layers; l++) {
      tensor_name(name, sizeof name, s, l, "kind");
      const st_tensor *k;
      if ((rc = st_expect(f, name, ST_U8, 1, (int64_t[]){in->heads}, &k, e))) return rc;
    }
  return SR_OK;
}

int trace_parse(const void *bytes, size_t n, const char *name, trace_file *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  int rc = st_parse(bytes, n, name, &t->f, e);
  if (rc == SR_OK && (rc = check_metadata(t, e)) != SR_OK) st_close(&t->f);
  return rc;
}

int trace_open(const char *path, trace_file *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  int rc = st_read(path, &t->f, e);
  if (rc == SR_OK && (rc = check_metadata(t, e)) != SR_OK) st_close(&t->f);
  return rc;
}

void trace_close(trace_file *t) { st_close(&t->f); }

// ---------------------------------------------------------------------------------------------
// reader: one step

// Copy and check count entries of row h of a padded index tensor: sorted, unique, in [0, n).
static int read_indices(const trace_file *t, const st_tensor *idx, const st_tensor *cnt, int h, int32_t **out,
                        int32_t *n_out, sr_error *e) {
  const int64_t width = idx->shape[1];
  int32_t c = st_get_i32(cnt, h);
  if (c < 0 || c > width)
    return sr_input_error(e, t->f.name, cnt->name, "head %d: count %d outside [0, %lld] (the padded width)", h, c,
                          (long long)width);
  int32_t *a = malloc(sizeof *a * (size_t)(c ? c : 1));
  if (!a) return sr_internal_error(e, ENOMEM, "%s", idx->name);
  for (int32_t j = 0; j < c; j++) {
    int32_t v = st_get_i32(idx, (int64_t)h * width + j);
    if (v < 0 || v >= t->info.seq_len) {
      free(a);
      return sr_input_error(e, t->f.name, idx->name, "head %d entry %d: position %d outside [0, %lld)", h, j, v,
                            (long long)t->info.seq_len);
    }
    if (j > 0 && v <= a[j - 1]) {
      int32_t before = a[j - 1];
      free(a);
      return sr_input_error(e, t->f.name, idx->name, "head %d entry %d: %d after %d (entries must be sorted "
                            "ascending and unique)", h, j, v, before);
    }
    a[j] = v;
  }
  *out = a;
  *n_out = c;
  return SR_OK;
}

static int read_layer(const trace_file *t, int step, int layer, pattern *p, sr_error *e) {
  const st_file *f = &t->f;
  const int H = t->info.heads;
  const int64_t n = t->info.seq_len;
  char name[96];
  const st_tensor *kind, *win = NULL, *vi = NULL, *vc = NULL, *si = NULL, *sc = NULL, *bm = NULL;
  tensor_name(name, sizeof name, step, layer, "kind");
  int rc = st_expect(f, name, ST_U8, 1, (int64_t[]){H}, &kind, e);
  if (rc) return rc;
  int any[4] = {0};
  for (int h = 0; h < H; h++) {
    uint8_t k = st_get_u8(kind, h);
    if (k > TRACE_KIND_BLOCK)
      return sr_input_error(e, f->name, kind->name, "head %d: kind %d (expected 0 dense, 1 window, 2 vs, 3 block)",
                            h, k);
    any[k] = 1;
  }
  // Optional tensors are read when present (their counts must then be zero for heads of other kinds)
  // and required when some head needs them.
  tensor_name(name, sizeof name, step, layer, "window");
  if (any[TRACE_KIND_WINDOW] || st_find(f, name))
    if ((rc = st_expect(f, name, ST_I64, 2, (int64_t[]){H, 2}, &win, e))) return rc;
  const char *vs_fields[4] = {"vertical", "vertical_count", "slash", "slash_count"};
  const st_tensor **vs_t[4] = {&vi, &vc, &si, &sc};
  for (int i = 0; i < 4; i++) {
    tensor_name(name, sizeof name, step, layer, vs_fields[i]);
    if (any[TRACE_KIND_VS] || st_find(f, name)) {
      if (i % 2 == 0) rc = st_expect(f, name, ST_I32, 2, (int64_t[]){H, -1}, vs_t[i], e);
      else rc = st_expect(f, name, ST_I32, 1, (int64_t[]){H}, vs_t[i], e);
      if (rc) return rc;
    }
  }
  if ((vi != NULL) != (vc != NULL) || (si != NULL) != (sc != NULL) || (vi != NULL) != (si != NULL))
    return sr_input_error(e, f->name, "tensor", "s%d.l%d: vertical, vertical_count, slash and slash_count come "
                          "together", step, layer);
  tensor_name(name, sizeof name, step, layer, "block_mask");
  int64_t nb = 0, row_bytes = 0;
  if (any[TRACE_KIND_BLOCK] || st_find(f, name)) {
    if (t->info.block_size < 1)
      return sr_input_error(e, f->name, "__metadata__.block_size", "0, but s%d.l%d has block heads", step, layer);
    nb = sr_cdiv(n, t->info.block_size);
    row_bytes = sr_cdiv(nb, 8);
    if ((rc = st_expect(f, name, ST_U8, 3, (int64_t[]){H, nb, row_bytes}, &bm, e))) return rc;
  }

  for (int h = 0; h < H && rc == SR_OK; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    uint8_t k = st_get_u8(kind, h);
    if (vc && k != TRACE_KIND_VS && (st_get_i32(vc, h) != 0 || st_get_i32(sc, h) != 0))
      return sr_input_error(e, f->name, vc->name, "head %d is %s but has vertical/slash counts", h, kind_names[k]);
    if (k == TRACE_KIND_DENSE) {
      hp->kind = PATTERN_DENSE;
    } else if (k == TRACE_KIND_WINDOW) {
      int64_t sinks = st_get_i64(win, 2 * h), window = st_get_i64(win, 2 * h + 1);
      if (sinks < 0 || sinks > n || window < 0 || window > n)
        return sr_input_error(e, f->name, win->name, "head %d: (sinks %lld, window %lld) outside [0, %lld]", h,
                              (long long)sinks, (long long)window, (long long)n);
      hp->kind = PATTERN_WINDOW;
      hp->sinks = sinks;
      hp->window = window;
    } else if (k == TRACE_KIND_VS) {
      hp->kind = PATTERN_VS;
      rc = read_indices(t, vi, vc, h, &hp->vertical, &hp->n_vertical, e);
      if (rc == SR_OK) rc = read_indices(t, si, sc, h, &hp->slash, &hp->n_slash, e);
    } else {
      hp->kind = PATTERN_BLOCK;
      hp->block = (int32_t)t->info.block_size;
      hp->n_blocks = nb;
      hp->row_words = sr_cdiv(nb, 64);
      hp->mask = calloc((size_t)(nb * hp->row_words), sizeof *hp->mask);
      if (!hp->mask) return sr_internal_error(e, ENOMEM, "%s", bm->name);
      const uint8_t *bits = bm->data + h * nb * row_bytes;
      for (int64_t r = 0; r < nb; r++) {
        // Bits past the last block in a row's final byte must be clear: they name no block.
        if (nb % 8 && (bits[r * row_bytes + row_bytes - 1] >> (nb % 8)))
          return sr_input_error(e, f->name, bm->name, "head %d row %lld: bits set past block %lld", h, (long long)r,
                                (long long)(nb - 1));
        for (int64_t c = 0; c < nb; c++)
          if ((bits[r * row_bytes + c / 8] >> (c % 8)) & 1) hp->mask[r * hp->row_words + c / 64] |= 1ull << (c % 64);
      }
    }
  }
  return rc;
}

int trace_read_step(const trace_file *t, int step, pattern *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (step < 0 || step >= t->info.steps)
    return sr_input_error(e, t->f.name, "step", "%d is outside the trace's %d recorded steps", step, t->info.steps);
  int rc = pattern_alloc(out, t->info.seq_len, t->info.layers, t->info.heads, e);
  if (rc) return rc;
  for (int l = 0; l < t->info.layers && rc == SR_OK; l++) rc = read_layer(t, step, l, out, e);
  char field[64];
  for (int l = 0; l < t->info.layers && rc == SR_OK; l++)
    for (int h = 0; h < t->info.heads && rc == SR_OK; h++) {
      snprintf(field, sizeof field, "s%d.l%d head %d", step, l, h);
      rc = pattern_validate_head(pattern_head(out, l, h), t->info.seq_len, t->f.name, field, e);
    }
  if (rc) pattern_free(out);
  return rc;
}

int trace_read_scores(const trace_file *t, int step, float *out, int *present, sr_error *e) {
  *present = 0;
  if (step < 0 || step >= t->info.steps)
    return sr_input_error(e, t->f.name, "step", "%d is outside the trace's %d recorded steps", step, t->info.steps);
  char name[96];
  const st_tensor *sc;
  int found = 0;
  for (int l = 0; l < t->info.layers; l++) {
    tensor_name(name, sizeof name, step, l, "scores");
    if (st_find(&t->f, name)) found++;
  }
  if (found == 0) return SR_OK;
  for (int l = 0; l < t->info.layers; l++) {
    tensor_name(name, sizeof name, step, l, "scores");
    int rc = st_expect(&t->f, name, ST_F32, 1, (int64_t[]){t->info.heads}, &sc, e);
    if (rc) return rc;
    for (int h = 0; h < t->info.heads; h++) out[(int64_t)l * t->info.heads + h] = st_get_f32(sc, h);
  }
  *present = 1;
  return SR_OK;
}

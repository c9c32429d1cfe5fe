// gating_select.c — MoBA's block gating and the token top-k indexer computed from the data (gating.h): the
// CPU reference the executor (exec/online_gate_cpu.c) and the trainer run, in float64 with ties to the lower
// index, and block sums in exact fixed point so that the ranks' partial sums add up to one process's.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/gating.h"
#include "plan/tile_index.h"
#include "plan/util.h"

#define FIXED_ONE 4611686018427387904.0  // 2^62, as vs_acc

// ---------------------------------------------------------------------------------------------
// MoBA

int64_t moba_bits_words(const moba_shape *s) { return sr_cdiv(sr_cdiv(s->n_tokens, s->block), 64); }

void moba_block_sums(const moba_shape *s, const float *k, const int64_t *pos, int64_t n, vs_acc *sums) {
  int64_t row = (int64_t)s->kv_heads * s->head_dim;
  for (int64_t i = 0; i < n; i++) {
    vs_acc *dst = sums + (pos[i] / s->block) * row;
    for (int64_t x = 0; x < row; x++) dst[x] += (vs_acc)(__int128)((double)k[i * row + x] * FIXED_ONE);  // two's complement
  }
}

// Means of the complete blocks (every candidate block is complete: it ends before the query's own block).
static double *block_means(const moba_shape *s, const vs_acc *sums) {
  int64_t nb = sr_cdiv(s->n_tokens, s->block), row = (int64_t)s->kv_heads * s->head_dim;
  double *m = malloc(sizeof(double) * (size_t)(nb * row + 1));
  if (!m) return NULL;
  for (int64_t i = 0; i < nb * row; i++) m[i] = (double)(__int128)sums[i] / FIXED_ONE / (double)s->block;
  return m;
}

typedef struct {
  double score;
  int32_t idx;
} scored;

// a ranks before b: higher score, then lower index
static int better(scored a, scored b) { return a.score > b.score || (a.score == b.score && a.idx < b.idx); }

// Insert x into the best-first list top[0..*n) of at most cap entries.
static void top_insert(scored *top, int64_t *n, int64_t cap, scored x) {
  if (*n == cap && !better(x, top[cap - 1])) return;
  int64_t i = *n < cap ? (*n)++ : cap - 1;
  while (i > 0 && better(x, top[i - 1])) {
    top[i] = top[i - 1];
    i--;
  }
  top[i] = x;
}

static int moba_rows(const moba_shape *s, const double *mean, const float *q, const int64_t *pos, int64_t n,
                     uint64_t *bits) {
  int64_t want = (int64_t)s->topk - 1, words = moba_bits_words(s), ng = gating_n_groups(s->n_tokens);
  int group = s->heads / s->kv_heads, d = s->head_dim;
  scored *top = malloc(sizeof(scored) * (size_t)(want + 1));
  if (!top) return -1;
  for (int64_t i = 0; i < n; i++) {
    int64_t own = pos[i] / s->block, t = pos[i] / TILE;
    for (int h = 0; h < s->heads; h++) {
      uint64_t *b = bits + ((int64_t)h * ng + t) * words;
      if (own <= want || want == 0) {  // every earlier block (K = 1: the own block only, none)
        if (want == 0) continue;
        for (int64_t c = 0; c < own; c++) b[c / 64] |= 1ull << (c % 64);
        continue;
      }
      const float *qr = q + (i * s->heads + h) * d;
      int64_t nt = 0;
      for (int64_t c = 0; c < own; c++) {
        const double *mc = mean + (c * s->kv_heads + h / group) * d;
        double sc = 0;
        for (int x = 0; x < d; x++) sc += (double)qr[x] * mc[x];
        top_insert(top, &nt, want, (scored){sc, (int32_t)c});
      }
      for (int64_t x = 0; x < nt; x++) b[top[x].idx / 64] |= 1ull << (top[x].idx % 64);
    }
  }
  free(top);
  return 0;
}

void moba_select_rows(const moba_shape *s, const vs_acc *sums, const float *q, const int64_t *pos, int64_t n,
                      uint64_t *bits) {
  double *mean = block_means(s, sums);
  if (mean) moba_rows(s, mean, q, pos, n, bits);
  free(mean);
}

int moba_heads_from_bits(const moba_shape *s, const uint64_t *bits, pattern *p, int layer, sr_error *e) {
  int64_t ng = gating_n_groups(s->n_tokens), words = moba_bits_words(s);
  for (int h = 0; h < s->heads; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    pattern_head_clear(hp);
    hp->kind = PATTERN_MOBA;
    hp->block = s->block;
    hp->topk = s->topk;
    hp->n_groups = ng;
    const uint64_t *hb = bits + (int64_t)h * ng * words;
    int64_t total = 0;
    for (int64_t x = 0; x < ng * words; x++) total += __builtin_popcountll(hb[x]);
    hp->sel_off = malloc(sizeof(int64_t) * (size_t)(ng + 1));
    hp->sel = malloc(sizeof(int32_t) * (size_t)(total + 1));
    if (!hp->sel_off || !hp->sel) return sr_internal_error(e, 0, "moba: out of memory for %lld selections", (long long)total);
    int64_t at = 0;
    for (int64_t t = 0; t < ng; t++) {
      hp->sel_off[t] = at;
      for (int64_t w = 0; w < words; w++)
        for (uint64_t x = hb[t * words + w]; x; x &= x - 1) hp->sel[at++] = (int32_t)(w * 64 + __builtin_ctzll(x));
    }
    hp->sel_off[ng] = at;
  }
  return SR_OK;
}

int moba_select(const moba_shape *s, const float *q, const float *k, const int64_t *pos, int64_t n, pattern *p,
                int layer, sr_error *e) {
  int64_t nb = sr_cdiv(s->n_tokens, s->block), words = moba_bits_words(s), ng = gating_n_groups(s->n_tokens);
  vs_acc *sums = calloc((size_t)(nb * s->kv_heads * s->head_dim + 1), sizeof *sums);
  uint64_t *bits = calloc((size_t)((int64_t)s->heads * ng * words + 1), sizeof *bits);
  double *mean = NULL;
  int rc = SR_OK;
  if (sums && bits) moba_block_sums(s, k, pos, n, sums);
  if (!sums || !bits || !(mean = block_means(s, sums)) || moba_rows(s, mean, q, pos, n, bits))
    rc = sr_internal_error(e, 0, "moba: out of memory for %lld blocks", (long long)nb);
  if (!rc) rc = moba_heads_from_bits(s, bits, p, layer, e);
  free(sums), free(bits), free(mean);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// token top-k

static uint64_t mix64(uint64_t x) {  // splitmix64's finaliser (Steele, Lea, Flood 2014)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double tokens_indexer_sign(int j, int x, int y) {
  uint64_t h = mix64(TOKENS_INDEXER_SEED ^ ((uint64_t)(uint32_t)j << 42) ^ ((uint64_t)(uint32_t)x << 21) ^ (uint64_t)(uint32_t)y);
  return (h & 1u) ? 1.0 : -1.0;
}

void tokens_indexer_keys(const tokens_shape *s, const float *k, int64_t n, float *ki) {
  int d = s->head_dim;
  double *mean = malloc(sizeof(double) * (size_t)d);
  if (!mean) return;
  for (int64_t i = 0; i < n; i++) {
    for (int y = 0; y < d; y++) {
      double a = 0;
      for (int g = 0; g < s->kv_heads; g++) a += (double)k[(i * s->kv_heads + g) * d + y];
      mean[y] = a / s->kv_heads;
    }
    for (int x = 0; x < s->id; x++) {
      double a = 0;
      for (int y = 0; y < d; y++) a += tokens_indexer_sign(s->ih, x, y) * mean[y];
      ki[i * s->id + x] = (float)a;
    }
  }
  free(mean);
}

static int cmp_scored(const void *a, const void *b) {
  scored x = *(const scored *)a, y = *(const scored *)b;
  return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int tokens_select_rows(const tokens_shape *s, const float *ki_all, const float *q, const int64_t *pos, int64_t n,
                       int32_t *keys, int32_t *cnt, sr_error *e) {
  int d = s->head_dim, ih = s->ih, id = s->id;
  double *qi = malloc(sizeof(double) * (size_t)(ih * id));
  scored *sc = malloc(sizeof(scored) * (size_t)s->n_tokens);
  if (!qi || !sc) {
    free(qi), free(sc);
    return sr_internal_error(e, 0, "token top-k: out of memory for %lld scores", (long long)s->n_tokens);
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t p = pos[i], c = p + 1 < s->topk ? p + 1 : s->topk;
    int32_t *out = keys + i * s->topk;
    cnt[i] = (int32_t)c;
    if (c == p + 1) {  // every earlier token
      for (int64_t x = 0; x <= p; x++) out[x] = (int32_t)x;
      continue;
    }
    for (int j = 0; j < ih; j++) {
      const float *qr = q + (i * s->heads + j % s->heads) * d;
      for (int x = 0; x < id; x++) {
        double a = 0;
        for (int y = 0; y < d; y++) a += tokens_indexer_sign(j, x, y) * (double)qr[y];
        qi[j * id + x] = a;
      }
    }
    for (int64_t k = 0; k <= p; k++) {
      const float *kr = ki_all + k * id;
      double total = 0;
      for (int j = 0; j < ih; j++) {
        double a = 0;
        for (int x = 0; x < id; x++) a += qi[j * id + x] * (double)kr[x];
        total += a > 0 ? a : 0;  // ReLU
      }
      sc[k] = (scored){total / ih, (int32_t)k};
    }
    qsort(sc, (size_t)(p + 1), sizeof *sc, cmp_scored);
    for (int64_t x = 0; x < c; x++) out[x] = sc[x].idx;
    qsort(out, (size_t)c, sizeof *out, cmp_i32);
  }
  free(qi), free(sc);
  return SR_OK;
}

typedef struct {
  int64_t group;
  int32_t key, row;
} key_use;

static int cmp_use(const void *a, const void *b) {
  const key_use *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  return (x->key > y->key) - (x->key < y->key);
}

int tokens_heads_from_rows(const tokens_shape *s, const int32_t *keys, const int32_t *cnt, const int64_t *pos,
                           int64_t n, pattern *p, int layer, sr_error *e) {
  int64_t ng = gating_n_groups(s->n_tokens), total = 0;
  for (int64_t i = 0; i < n; i++) total += cnt[i];
  key_use *u = malloc(sizeof(key_use) * (size_t)(total + 1));
  int64_t *off = calloc((size_t)(ng + 1), sizeof *off);
  int32_t *key = malloc(sizeof(int32_t) * (size_t)(total + 1));
  uint64_t *rows = calloc((size_t)(2 * total + 2), sizeof *rows);
  if (!u || !off || !key || !rows) {
    free(u), free(off), free(key), free(rows);
    return sr_internal_error(e, 0, "token top-k: out of memory for %lld selections", (long long)total);
  }
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    for (int32_t x = 0; x < cnt[i]; x++) u[m++] = (key_use){pos[i] / TILE, keys[i * s->topk + x], (int32_t)(pos[i] % TILE)};
  qsort(u, (size_t)m, sizeof *u, cmp_use);
  int64_t nk = 0;
  for (int64_t x = 0; x < m; x++) {
    if (x == 0 || u[x].group != u[x - 1].group || u[x].key != u[x - 1].key) {  // a new (group, key)
      key[nk++] = u[x].key;
      off[u[x].group + 1]++;
    }
    rows[2 * (nk - 1) + u[x].row / 64] |= 1ull << (u[x].row % 64);
  }
  for (int64_t t = 0; t < ng; t++) off[t + 1] += off[t];
  for (int h = 0; h < s->heads; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    pattern_head_clear(hp);
    hp->kind = PATTERN_TOKENS;
    hp->topk = s->topk;
    hp->n_groups = ng;
    hp->tok_off = malloc(sizeof(int64_t) * (size_t)(ng + 1));
    hp->tok_key = malloc(sizeof(int32_t) * (size_t)(nk + 1));
    hp->tok_rows = malloc(sizeof(uint64_t) * (size_t)(2 * nk + 2));
    if (!hp->tok_off || !hp->tok_key || !hp->tok_rows) {
      free(u), free(off), free(key), free(rows);
      return sr_internal_error(e, 0, "token top-k: out of memory for %lld keys", (long long)nk);
    }
    memcpy(hp->tok_off, off, sizeof(int64_t) * (size_t)(ng + 1));
    memcpy(hp->tok_key, key, sizeof(int32_t) * (size_t)nk);
    memcpy(hp->tok_rows, rows, sizeof(uint64_t) * (size_t)(2 * nk));
  }
  free(u), free(off), free(key), free(rows);
  return SR_OK;
}

int tokens_select(const tokens_shape *s, const float *q, const float *k, const int64_t *pos, int64_t n, pattern *p,
                  int layer, sr_error *e) {
  float *ki = malloc(sizeof(float) * (size_t)(n * s->id + 1)), *all = calloc((size_t)(s->n_tokens * s->id + 1), sizeof(float));
  int32_t *keys = malloc(sizeof(int32_t) * (size_t)(n * s->topk + 1)), *cnt = malloc(sizeof(int32_t) * (size_t)(n + 1));
  int rc = SR_OK;
  if (!ki || !all || !keys || !cnt) rc = sr_internal_error(e, 0, "token top-k: out of memory for %lld tokens", (long long)n);
  if (!rc) {
    tokens_indexer_keys(s, k, n, ki);
    for (int64_t i = 0; i < n; i++) memcpy(all + pos[i] * s->id, ki + i * s->id, sizeof(float) * (size_t)s->id);
    rc = tokens_select_rows(s, all, q, pos, n, keys, cnt, e);
  }
  if (!rc) rc = tokens_heads_from_rows(s, keys, cnt, pos, n, p, layer, e);
  free(ki), free(all), free(keys), free(cnt);
  return rc;
}

// bar_chunks.c — regroups the bar keys of a transposed index (tile_index_t) for the deterministic
// backward: dK/dV of a key are owned by one CTA, so the keys of all query heads that share a KV head
// (GQA) are merged into one sorted list per KV head and cut into chunks of 64 (the kernel's key tile).
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"

#define CHUNK 64

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Sort and drop repeats; returns the new length.
static int64_t sort_unique(int32_t *v, int64_t n) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_i32);
  int64_t m = 1;
  for (int64_t i = 1; i < n; i++)
    if (v[i] != v[m - 1]) v[m++] = v[i];
  return m;
}

void sa_bar_chunks_free(sa_bar_chunks *b) {
  free(b->hc_head), free(b->hc_first), free(b->hc_n), free(b->hc_q_cnt), free(b->hc_q_idx);
  free(b->chunk_kvh), free(b->chunk_n), free(b->chunk_key), free(b->slot_entry);
  memset(b, 0, sizeof *b);
}

// Grow an array of elem-byte items to hold n; returns 0 or -1 (the old block stays valid).
static int grow(void **p, int64_t *cap, int64_t n, size_t elem) {
  if (n <= *cap) return 0;
  int64_t c = 2 * n + 64;
  void *q = realloc(*p, elem * (size_t)c);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

int sa_bar_chunks_build(const tile_index_t *t, int32_t heads, int32_t kv_heads, sa_bar_chunks *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  if (t->heads != 1 && t->heads != heads)
    return sr_input_error(e, NULL, "heads", "transposed index built for %d heads, shape has %d", t->heads, heads);
  int group = heads / kv_heads, ih_n = t->heads;
  int64_t nk = t->n_bar_keys;
  out->group = group, out->scratch_heads = ih_n == 1 ? heads : 1;
  // Entries of index head ih are bar_key[hb[ih] .. hb[ih+1]) (sorted by (head, key)).
  int64_t *hb = calloc((size_t)ih_n + 1, sizeof *hb);
  int32_t *keys = malloc(sizeof(int32_t) * (size_t)(nk * group + 1));
  unsigned char *mark = calloc((size_t)t->n_qtiles + 1, 1);  // query tiles already in the current union
  int64_t cap_q = 0, cap_c = 0, nq = 0, nh = 0, nc = 0, cap_hq = 0, cap_k = 0, cap_s = 0, cap_n = 0;
  int64_t cap_kv = 0, cap_hh = 0, cap_hf = 0;
  if (!hb || !keys || !mark) goto oom;
  for (int64_t i = 0; i < nk; i++) hb[t->bar_key_head[i] + 1]++;
  for (int i = 0; i < ih_n; i++) hb[i + 1] += hb[i];

  // Compute chunks, per query head.
  for (int h = 0; h < heads; h++) {
    int ih = ih_n == 1 ? 0 : h;
    for (int64_t f = hb[ih]; f < hb[ih + 1]; f += CHUNK, nh++) {
      int cnt = hb[ih + 1] - f < CHUNK ? (int)(hb[ih + 1] - f) : CHUNK;
      if (grow((void **)&out->hc_head, &cap_hh, nh + 1, 4) || grow((void **)&out->hc_first, &cap_hf, nh + 1, 4) ||
          grow((void **)&out->hc_n, &cap_n, nh + 1, 4) || grow((void **)&out->hc_q_cnt, &cap_hq, nh + 2, 8))
        goto oom;
      out->hc_head[nh] = h, out->hc_first[nh] = (int32_t)f, out->hc_n[nh] = cnt, out->hc_q_cnt[nh] = nq;
      int64_t q0 = nq;
      for (int64_t x = f; x < f + cnt; x++)
        for (int64_t y = t->bar_q_cnt[x]; y < t->bar_q_cnt[x + 1]; y++) {
          int32_t qt = t->bar_q_idx[y];
          if (mark[qt]) continue;
          if (grow((void **)&out->hc_q_idx, &cap_q, nq + 1, 4)) goto oom;
          mark[qt] = 1, out->hc_q_idx[nq++] = qt;
        }
      qsort(out->hc_q_idx + q0, (size_t)(nq - q0), sizeof(int32_t), cmp_i32);
      for (int64_t x = q0; x < nq; x++) mark[out->hc_q_idx[x]] = 0;
    }
  }
  if (grow((void **)&out->hc_q_cnt, &cap_hq, nh + 2, 8)) goto oom;
  out->hc_q_cnt[nh] = nq, out->n_hchunks = (int32_t)nh;

  // Reduce chunks, per KV head.
  for (int kvh = 0; kvh < kv_heads; kvh++) {
    int64_t n = 0;
    for (int gi = 0; gi < group; gi++) {
      int ih = ih_n == 1 ? 0 : kvh * group + gi;
      for (int64_t x = hb[ih]; x < hb[ih + 1]; x++) keys[n++] = t->bar_key[x];
    }
    n = sort_unique(keys, n);
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK, nc++) {
      if (grow((void **)&out->chunk_kvh, &cap_kv, nc + 1, 4) || grow((void **)&out->chunk_n, &cap_c, nc + 1, 4) ||
          grow((void **)&out->chunk_key, &cap_k, (nc + 1) * CHUNK, 4) ||
          grow((void **)&out->slot_entry, &cap_s, (nc + 1) * group * CHUNK, 4))
        goto oom;
      int cnt = n - c0 < CHUNK ? (int)(n - c0) : CHUNK;
      out->chunk_kvh[nc] = kvh, out->chunk_n[nc] = cnt;
      for (int r = 0; r < CHUNK; r++) out->chunk_key[nc * CHUNK + r] = r < cnt ? keys[c0 + r] : -1;
      for (int gi = 0; gi < group; gi++) {
        int ih = ih_n == 1 ? 0 : kvh * group + gi;
        for (int r = 0; r < CHUNK; r++) {
          int32_t ent = -1;
          if (r < cnt) {  // binary search of the key among head ih's sorted bar keys
            int64_t lo = hb[ih], hi = hb[ih + 1];
            while (lo < hi) {
              int64_t mid = (lo + hi) / 2;
              if (t->bar_key[mid] < keys[c0 + r]) lo = mid + 1;
              else hi = mid;
            }
            if (lo < hb[ih + 1] && t->bar_key[lo] == keys[c0 + r]) ent = (int32_t)lo;
          }
          out->slot_entry[(nc * group + gi) * CHUNK + r] = ent;
        }
      }
    }
  }
  out->n_chunks = (int32_t)nc;
  free(hb), free(keys), free(mark);
  return SR_OK;
oom:
  free(hb), free(keys), free(mark);
  sa_bar_chunks_free(out);
  return sr_internal_error(e, 0, "bar chunks: out of memory");
}

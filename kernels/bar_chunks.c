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
  free(b->chunk_kvh), free(b->chunk_n), free(b->chunk_key), free(b->slot_entry), free(b->q_cnt), free(b->q_idx);
  memset(b, 0, sizeof *b);
}

int sa_bar_chunks_build(const tile_index_t *t, int32_t heads, int32_t kv_heads, sa_bar_chunks *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  if (t->heads != 1 && t->heads != heads)
    return sr_input_error(e, NULL, "heads", "transposed index built for %d heads, shape has %d", t->heads, heads);
  int group = heads / kv_heads, ih_n = t->heads;
  int64_t nk = t->n_bar_keys;
  // Entries of index head ih are bar_key[hb[ih] .. hb[ih+1]) (sorted by (head, key)).
  int64_t *hb = calloc((size_t)ih_n + 1, sizeof *hb);
  int32_t *keys = malloc(sizeof(int32_t) * (size_t)(nk * group + 1));
  unsigned char *mark = calloc((size_t)t->n_qtiles + 1, 1);  // query tiles already in the current union
  int32_t *ck = NULL, *cn = NULL, *kv = NULL, *slot = NULL, *qi = NULL;
  int64_t *qc = NULL, n_chunks = 0, cap = 0, nq = 0, qcap = 0;
  if (!hb || !keys || !mark) goto oom;
  for (int64_t i = 0; i < nk; i++) hb[t->bar_key_head[i] + 1]++;
  for (int i = 0; i < ih_n; i++) hb[i + 1] += hb[i];
  for (int kvh = 0; kvh < kv_heads; kvh++) {
    int64_t n = 0;
    for (int gi = 0; gi < group; gi++) {
      int ih = ih_n == 1 ? 0 : kvh * group + gi;
      for (int64_t x = hb[ih]; x < hb[ih + 1]; x++) keys[n++] = t->bar_key[x];
    }
    n = sort_unique(keys, n);
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {
      if (n_chunks == cap) {
        cap = cap ? 2 * cap : 64;
        int32_t *a1 = realloc(ck, sizeof(int32_t) * (size_t)(cap * CHUNK)), *a2;
        if (!a1) goto oom;
        ck = a1;
        if (!(a1 = realloc(cn, sizeof(int32_t) * (size_t)cap))) goto oom;
        cn = a1;
        if (!(a1 = realloc(kv, sizeof(int32_t) * (size_t)cap))) goto oom;
        kv = a1;
        if (!(a2 = realloc(slot, sizeof(int32_t) * (size_t)(cap * group * CHUNK)))) goto oom;
        slot = a2;
        int64_t *a3 = realloc(qc, sizeof(int64_t) * (size_t)(cap * group + 1));
        if (!a3) goto oom;
        qc = a3;
      }
      int cnt = n - c0 < CHUNK ? (int)(n - c0) : CHUNK;
      kv[n_chunks] = kvh, cn[n_chunks] = cnt;
      for (int r = 0; r < CHUNK; r++) ck[n_chunks * CHUNK + r] = r < cnt ? keys[c0 + r] : -1;
      for (int gi = 0; gi < group; gi++) {
        int ih = ih_n == 1 ? 0 : kvh * group + gi;
        int64_t cg = n_chunks * group + gi, q0 = nq;
        qc[cg] = nq;
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
          slot[cg * CHUNK + r] = ent;
          if (ent < 0) continue;
          int64_t m = t->bar_q_cnt[ent + 1] - t->bar_q_cnt[ent];
          if (nq + m > qcap) {
            qcap = 2 * (nq + m) + 64;
            int32_t *a = realloc(qi, sizeof(int32_t) * (size_t)qcap);
            if (!a) goto oom;
            qi = a;
          }
          for (int64_t x = t->bar_q_cnt[ent]; x < t->bar_q_cnt[ent + 1]; x++)
            if (!mark[t->bar_q_idx[x]]) mark[t->bar_q_idx[x]] = 1, qi[nq++] = t->bar_q_idx[x];
        }
        // The union, sorted: sort the few new entries, then clear their marks.
        qsort(qi + q0, (size_t)(nq - q0), sizeof(int32_t), cmp_i32);
        for (int64_t x = q0; x < nq; x++) mark[qi[x]] = 0;
      }
      n_chunks++;
    }
  }
  if (!qc && !(qc = malloc(sizeof(int64_t)))) goto oom;
  qc[n_chunks * group] = nq;
  free(hb), free(keys), free(mark);
  out->n_chunks = (int32_t)n_chunks, out->group = group;
  out->chunk_kvh = kv, out->chunk_n = cn, out->chunk_key = ck, out->slot_entry = slot, out->q_cnt = qc, out->q_idx = qi;
  return SR_OK;
oom:
  free(hb), free(keys), free(mark), free(ck), free(cn), free(kv), free(slot), free(qc), free(qi);
  return sr_internal_error(e, 0, "bar chunks: out of memory");
}

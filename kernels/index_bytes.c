// index_bytes.c — the device footprint of the execution form (kernels/sparse_attn.h, "device footprint"):
// plain C, so the executor's accounting, the trainer's plan fitting and the CPU tests share the arithmetic
// that kernels/index_gpu.cu's uploads allocate by. Every array takes at least one element there (an empty
// array is still a valid pointer), so it does here.
#include "kernels/sparse_attn.h"

// n elements of `size` bytes, at least one.
static int64_t arr(int64_t n, int64_t size) { return size * (n > 0 ? n : 1); }

int64_t sa_index_count_bytes(int32_t heads, int64_t n_qtiles, int32_t world, int64_t n_tiles, int64_t n_bars,
                             int64_t n_runs) {
  int64_t cells = (int64_t)heads * n_qtiles, offs = cells * (world + 1);
  int64_t b = arr(cells * world, 4);                        // heaviest-first cell order, per source
  b += 2 * arr(offs, 8);                                    // tile_cnt, bar_cnt
  b += arr(n_tiles, 4) + arr(n_tiles, 1);                   // tile_idx, tile_kind
  if (n_bars >= 0) b += arr(n_bars, 4);                     // bar_idx (the compact form has none)
  if (n_runs >= 0) b += arr(offs, 8) + arr(n_runs, 4) + arr(n_runs, 1);  // run_cnt, run_key, run_len
  return b;
}

int64_t sa_index_dev_bytes(const tile_index *t) {
  return sa_index_count_bytes(t->heads, t->n_qtiles, t->world, t->n_tiles, t->n_bars, t->run_cnt ? t->n_runs : -1);
}

int64_t sa_bar_cols_count_bytes(int32_t heads, int32_t world, int64_t n_cols) {
  return arr((int64_t)heads * world + 1, 8) + arr(n_cols, 4);  // col_cnt, col_key
}

int64_t sa_index_compact_dev_bytes(const tile_index *t, const tile_bar_cols *c) {
  return sa_index_count_bytes(t->heads, t->n_qtiles, t->world, t->n_tiles, -1, t->run_cnt ? t->n_runs : -1) +
         sa_bar_cols_count_bytes(c->heads, c->world, c->n_cols);
}

int64_t sa_index_t_count_bytes(int32_t heads, int64_t n_kvtiles, int64_t n_tiles, int64_t n_bar_keys, int64_t n_bars) {
  int64_t nkv = (int64_t)heads * n_kvtiles;
  return arr(nkv + 1, 8) + arr(n_tiles, 4) + arr(n_tiles, 1)  // kv_cnt, q_idx, q_kind
         + 2 * arr(n_bar_keys, 4) + arr(n_bar_keys + 1, 8)     // bar_key_head, bar_key, bar_q_cnt
         + (n_bars >= 0 ? arr(n_bars, 4) : 0);                 // bar_q_idx (the compact form has none)
}

int64_t sa_index_t_dev_bytes(const tile_index_t *t) {
  int64_t nkv = (int64_t)t->heads * t->n_kvtiles, nb = t->n_bar_keys;
  return sa_index_t_count_bytes(t->heads, t->n_kvtiles, t->kv_cnt[nkv], nb, t->bar_q_cnt[nb]);
}

int64_t sa_index_t_compact_dev_bytes(const tile_index_t *t) {
  return sa_index_t_count_bytes(t->heads, t->n_kvtiles, t->kv_cnt[(int64_t)t->heads * t->n_kvtiles], t->n_bar_keys, -1);
}

int64_t sa_bar_chunks_count_bytes(int64_t n_hchunks, int64_t n_hc_q, int64_t n_chunks, int32_t group) {
  int64_t nh = n_hchunks, nc = n_chunks;
  return 3 * arr(nh, 4) + arr(nh + 1, 8) + arr(n_hc_q, 4)                 // compute chunks
         + 2 * arr(nc, 4) + arr(nc * 64, 4) + arr(nc * group * 64, 4);    // reduce chunks
}

int64_t sa_bar_chunks_dev_bytes(const sa_bar_chunks *c) {
  return sa_bar_chunks_count_bytes(c->n_hchunks, c->hc_q_cnt ? c->hc_q_cnt[c->n_hchunks] : 0, c->n_chunks, c->group);
}

int64_t sa_bar_scratch_bytes(const sa_bar_chunks *c, int32_t n_bar_keys) {
  return arr((int64_t)c->scratch_heads * n_bar_keys * 2 * 128, 4);
}

int64_t sa_masks_dev_bytes(const head_mask *masks, int heads) {
  int64_t b = arr(heads, (int64_t)sizeof(head_mask));
  for (int h = 0; masks && h < heads; h++) {
    const head_mask *m = &masks[h];
    int64_t words = (m->n_tokens + 31) / 32;
    if (m->vbits) b += arr(words, 4);
    if (m->sbits) b += arr(words, 4);
    if (m->bmask && m->block > 0) b += arr((m->n_tokens + m->block - 1) / m->block * m->row_words, 8);
  }
  return b;
}

// index_gpu.cu — moves the execution form (tile_index, tile_index_t with its bar chunks, head masks)
// to device memory for the kernels, and orders each source's cells heaviest first for the forward grid.
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_gpu.h"
#include "kernels/sparse_attn.h"

// ---- copies ----------------------------------------------------------------------------------------

// cudaMalloc + copy of n elements (at least one element allocated so empty arrays are valid pointers, as
// kernels/index_bytes.c counts them: the copies' footprints, which the executor's memory sizing reads, come from there).
template <typename T>
static int to_dev(T **dst, const T *src, int64_t n, sr_error *e) {
  *dst = NULL;
  SA_CUDA(cudaMalloc((void **)dst, sizeof(T) * (size_t)(n > 0 ? n : 1)));
  if (n > 0 && src) SA_CUDA(cudaMemcpy(*dst, src, sizeof(T) * (size_t)n, cudaMemcpyHostToDevice));
  return SR_OK;
}

// ---- tile index ----------------------------------------------------------------------------------

typedef struct {
  int64_t work;
  int32_t cell;
} cell_work;

static int cmp_work(const void *a, const void *b) {
  const cell_work *x = (const cell_work *)a, *y = (const cell_work *)b;
  if (x->work != y->work) return x->work > y->work ? -1 : 1;
  return (x->cell > y->cell) - (x->cell < y->cell);
}

// The copy of h with its bar lists (cols NULL) or with the columns of the compact form instead.
static int index_upload(const tile_index *h, const tile_bar_cols *cols, sa_gpu_index *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  out->d = *h;
  out->d.run_cnt = NULL, out->d.run_key = NULL, out->d.run_len = NULL;  // set as they reach the device
  int64_t cells = (int64_t)h->heads * h->n_qtiles, offs = cells * (h->world + 1);
  out->cells = cells;
  // Work of a cell for one source: 64-key chunks it runs (2 per tile entry, 1 per run, bars in 64s).
  int32_t *order = (int32_t *)malloc(sizeof(int32_t) * (size_t)(cells * h->world + 1));
  cell_work *cw = (cell_work *)malloc(sizeof(cell_work) * (size_t)(cells + 1));
  if (!order || !cw) {
    free(order), free(cw);
    return sr_internal_error(e, 0, "gpu index: out of memory");
  }
  for (int s = 0; s < h->world; s++) {
    for (int64_t c = 0; c < cells; c++) {
      const int64_t *tc = h->tile_cnt + c * (h->world + 1), *bc = h->bar_cnt + c * (h->world + 1);
      const int64_t *rc_ = h->run_cnt ? h->run_cnt + c * (h->world + 1) : NULL;
      cw[c].work = 2 * (tc[s + 1] - tc[s]) + (rc_ ? rc_[s + 1] - rc_[s] : 0) + (bc[s + 1] - bc[s] + 63) / 64;
      cw[c].cell = (int32_t)c;
    }
    qsort(cw, (size_t)cells, sizeof *cw, cmp_work);
    for (int64_t c = 0; c < cells; c++) order[s * cells + c] = cw[c].cell;
  }
  free(cw);
  out->dev_bytes = cols ? sa_index_compact_dev_bytes(h, cols) : sa_index_dev_bytes(h);
  int rc = to_dev(&out->order, order, cells * h->world, e);
  free(order);
  if (rc) return rc;
  if ((rc = to_dev(&out->d.tile_cnt, h->tile_cnt, offs, e))) return rc;
  if ((rc = to_dev(&out->d.bar_cnt, h->bar_cnt, offs, e))) return rc;
  if ((rc = to_dev(&out->d.tile_idx, h->tile_idx, h->n_tiles, e))) return rc;
  if ((rc = to_dev(&out->d.tile_kind, h->tile_kind, h->n_tiles, e))) return rc;
  out->d.bar_idx = NULL;
  if (cols) {
    out->bars_bytes = 4 * h->n_bars;
    if ((rc = to_dev(&out->col_cnt, cols->col_cnt, (int64_t)cols->heads * cols->world + 1, e))) return rc;
    if ((rc = to_dev(&out->col_key, cols->col_key, cols->n_cols, e))) return rc;
  } else if ((rc = to_dev(&out->d.bar_idx, h->bar_idx, h->n_bars, e))) {
    return rc;
  }
  if (!h->run_cnt) return SR_OK;
  if ((rc = to_dev(&out->d.run_cnt, h->run_cnt, offs, e))) return rc;
  if ((rc = to_dev(&out->d.run_key, h->run_key, h->n_runs, e))) return rc;
  return to_dev(&out->d.run_len, h->run_len, h->n_runs, e);
}

int sa_gpu_index_upload(const tile_index *h, sa_gpu_index *out, sr_error *e) { return index_upload(h, NULL, out, e); }

int sa_gpu_index_upload_compact(const tile_index *h, const tile_bar_cols *cols, sa_gpu_index *out, sr_error *e) {
  if (cols->heads != h->heads || cols->world != h->world) {
    memset(out, 0, sizeof *out);
    return sr_input_error(e, NULL, "columns", "for %d heads over %d sources, the index has %d over %d", cols->heads,
                          cols->world, h->heads, h->world);
  }
  return index_upload(h, cols, out, e);
}

void sa_gpu_index_free(sa_gpu_index *g) {
  cudaFree(g->order), cudaFree(g->d.tile_cnt), cudaFree(g->d.bar_cnt), cudaFree(g->d.tile_idx);
  cudaFree(g->d.tile_kind), cudaFree(g->d.bar_idx);
  cudaFree(g->d.run_cnt), cudaFree(g->d.run_key), cudaFree(g->d.run_len);
  cudaFree(g->col_cnt), cudaFree(g->col_key);
  memset(g, 0, sizeof *g);
}

// ---- transposed index ------------------------------------------------------------------------------

int sa_gpu_index_t_upload(const tile_index_t *h, int32_t heads, int32_t kv_heads, sa_gpu_index_t *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  sa_bar_chunks bc;
  int rc = sa_bar_chunks_build(h, heads, kv_heads, &bc, e);
  if (rc) return rc;
  rc = sa_gpu_index_t_upload_chunks(h, &bc, out, e);
  sa_bar_chunks_free(&bc);
  // the copy's own scratch for the bar entries' partial dK, dV (head_dim up to 128)
  if (!rc) rc = to_dev(&out->bc.scratch, (const float *)NULL, out->scratch_bytes / (int64_t)sizeof(float), e);
  if (!rc) out->dev_bytes += out->scratch_bytes;
  return rc;
}

// The transposed copy with its bar_q_idx (compact 0) or without (1: expanded by each call).
static int index_t_upload(const tile_index_t *h, const sa_bar_chunks *bc_host, int compact, sa_gpu_index_t *out,
                          sr_error *e) {
  memset(out, 0, sizeof *out);
  const sa_bar_chunks bc = *bc_host;
  int rc = SR_OK;
  out->d = *h;
  int64_t nkv = (int64_t)h->heads * h->n_kvtiles, nq = h->kv_cnt[nkv], nb = h->n_bar_keys;
  int64_t ns = (int64_t)bc.n_chunks * bc.group * 64;
  // scalars from the host structs, arrays only as they reach the device (a failure leaves no host pointer
  // for sa_gpu_index_t_free to hand to cudaFree)
  out->d.kv_cnt = NULL, out->d.q_idx = NULL, out->d.q_kind = NULL, out->d.bar_key_head = NULL;
  out->d.bar_key = NULL, out->d.bar_q_cnt = NULL, out->d.bar_q_idx = NULL;
  out->bc.group = bc.group, out->bc.scratch_heads = bc.scratch_heads;
  out->bc.n_hchunks = bc.n_hchunks, out->bc.n_chunks = bc.n_chunks;
  if (!rc) rc = to_dev(&out->d.kv_cnt, h->kv_cnt, nkv + 1, e);
  if (!rc) rc = to_dev(&out->d.q_idx, h->q_idx, nq, e);
  if (!rc) rc = to_dev(&out->d.q_kind, h->q_kind, nq, e);
  if (!rc) rc = to_dev(&out->d.bar_key_head, h->bar_key_head, nb, e);
  if (!rc) rc = to_dev(&out->d.bar_key, h->bar_key, nb, e);
  if (!rc) rc = to_dev(&out->d.bar_q_cnt, h->bar_q_cnt, nb + 1, e);
  if (!rc && !compact) rc = to_dev(&out->d.bar_q_idx, h->bar_q_idx, h->bar_q_cnt[nb], e);
  out->compact_bars = compact, out->bars_bytes = compact ? 4 * h->bar_q_cnt[nb] : 0;
  if (!rc) rc = to_dev(&out->bc.hc_head, bc.hc_head, bc.n_hchunks, e);
  if (!rc) rc = to_dev(&out->bc.hc_first, bc.hc_first, bc.n_hchunks, e);
  if (!rc) rc = to_dev(&out->bc.hc_n, bc.hc_n, bc.n_hchunks, e);
  if (!rc) rc = to_dev(&out->bc.hc_q_cnt, bc.hc_q_cnt, (int64_t)bc.n_hchunks + 1, e);
  if (!rc) rc = to_dev(&out->bc.hc_q_idx, bc.hc_q_idx, bc.hc_q_cnt[bc.n_hchunks], e);
  if (!rc) rc = to_dev(&out->bc.chunk_kvh, bc.chunk_kvh, bc.n_chunks, e);
  if (!rc) rc = to_dev(&out->bc.chunk_n, bc.chunk_n, bc.n_chunks, e);
  if (!rc) rc = to_dev(&out->bc.chunk_key, bc.chunk_key, (int64_t)bc.n_chunks * 64, e);
  if (!rc) rc = to_dev(&out->bc.slot_entry, bc.slot_entry, ns, e);
  out->index_bytes = compact ? sa_index_t_compact_dev_bytes(h) : sa_index_t_dev_bytes(h);
  out->chunks_bytes = sa_bar_chunks_dev_bytes(&bc);
  out->scratch_bytes = sa_bar_scratch_bytes(&bc, h->n_bar_keys);
  out->dev_bytes = out->index_bytes + out->chunks_bytes;  // the scratch is the caller's here
  return rc;
}

int sa_gpu_index_t_upload_chunks(const tile_index_t *h, const sa_bar_chunks *bc, sa_gpu_index_t *out, sr_error *e) {
  return index_t_upload(h, bc, 0, out, e);
}

int sa_gpu_index_t_upload_compact(const tile_index_t *h, const sa_bar_chunks *bc, sa_gpu_index_t *out, sr_error *e) {
  return index_t_upload(h, bc, 1, out, e);
}

void sa_gpu_index_t_free(sa_gpu_index_t *g) {
  cudaFree(g->d.kv_cnt), cudaFree(g->d.q_idx), cudaFree(g->d.q_kind), cudaFree(g->d.bar_key_head);
  cudaFree(g->d.bar_key), cudaFree(g->d.bar_q_cnt), cudaFree(g->d.bar_q_idx);
  cudaFree(g->bc.hc_head), cudaFree(g->bc.hc_first), cudaFree(g->bc.hc_n), cudaFree(g->bc.hc_q_cnt);
  cudaFree(g->bc.hc_q_idx), cudaFree(g->bc.chunk_kvh), cudaFree(g->bc.chunk_n), cudaFree(g->bc.chunk_key);
  cudaFree(g->bc.slot_entry), cudaFree(g->bc.scratch);
  memset(g, 0, sizeof *g);
}

// ---- masks -------------------------------------------------------------------------------------------

int sa_gpu_masks_upload(const head_mask *host, int heads, head_mask **out, sr_error *e) {
  *out = NULL;
  head_mask *m = (head_mask *)calloc((size_t)heads, sizeof *m);
  if (!m) return sr_internal_error(e, 0, "gpu masks: out of memory");
  int rc = SR_OK;
  for (int h = 0; h < heads && !rc; h++) {
    m[h] = host[h];
    int64_t words = (host[h].n_tokens + 31) / 32 + 1;
    m[h].vbits = NULL, m[h].sbits = NULL, m[h].bmask = NULL;
    if (host[h].vbits) rc = to_dev((uint32_t **)&m[h].vbits, host[h].vbits, words - 1, e);
    if (!rc && host[h].sbits) rc = to_dev((uint32_t **)&m[h].sbits, host[h].sbits, words - 1, e);
    if (!rc && host[h].bmask) {
      int64_t nb = (host[h].n_tokens + host[h].block - 1) / host[h].block;
      rc = to_dev((uint64_t **)&m[h].bmask, host[h].bmask, nb * host[h].row_words, e);
    }
  }
  if (!rc) rc = to_dev(out, m, heads, e);
  // The device array holds the device pointers; the host mirror is rebuilt from it when freeing.
  free(m);
  return rc;
}

void sa_gpu_masks_free(head_mask *dev, int heads) {
  if (!dev) return;
  head_mask *m = (head_mask *)calloc((size_t)heads, sizeof *m);
  if (m && cudaMemcpy(m, dev, sizeof *m * (size_t)heads, cudaMemcpyDeviceToHost) == cudaSuccess)
    for (int h = 0; h < heads; h++)
      cudaFree((void *)m[h].vbits), cudaFree((void *)m[h].sbits), cudaFree((void *)m[h].bmask);
  free(m);
  cudaFree(dev);
}

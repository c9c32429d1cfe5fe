// dist_attn_cuda_copies.c — the CUDA backend's own device copies of a plan (dist_attn_cuda_state.h): tile
// index, transposed indices with their bar chunks, masks and positions; freed and uploaded again by
// dist_attn_device_release / dist_attn_device_restore (dist_attn.h) while what set-up built on the host stays.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include "exec/dist_attn_cuda_state.h"
#include "kernels/transpose_gpu.h"

// Every group's global positions to the device (qpos: this rank's group).
int dist_cuda_positions_upload(struct dist_attn *a, sr_error *e) {
  cuda_state *s = a->cuda;
  for (int g = 0; g < a->R; g++) {
    size_t pb = sizeof(int64_t) * (size_t)sr_max64(1, rows_of(a, g));
    CUDA_TRY(cudaMalloc((void **)&s->kpos[g], pb));
    CUDA_TRY(cudaMemcpy(s->kpos[g], a->kpos[g], sizeof(int64_t) * (size_t)rows_of(a, g), cudaMemcpyHostToDevice));
  }
  s->qpos = s->kpos[a->group];
  return SR_OK;
}

int dist_cuda_index_put(const tile_index *t, const tile_bar_cols *cols, sa_gpu_index *out, sr_error *e) {
  return cols->col_cnt ? sa_gpu_index_upload_compact(t, cols, out, e) : sa_gpu_index_upload(t, out, e);
}

int dist_cuda_transpose_put_as(const tile_index_t *tt, const sa_bar_chunks *bc, int compact, sa_gpu_index_t *out,
                               sr_error *e) {
  return compact ? sa_gpu_index_t_upload_compact(tt, bc, out, e) : sa_gpu_index_t_upload_chunks(tt, bc, out, e);
}

int dist_cuda_transpose_put(const tile_index_t *tt, const sa_bar_chunks *bc, sa_gpu_index_t *out, sr_error *e) {
  return dist_cuda_transpose_put_as(tt, bc, dist_transpose_compact(tt), out, e);
}

int dist_cuda_bars_ready(struct dist_attn *a, const sa_gpu_index *ix, int32_t *bars, int64_t room, sa_gpu_index *out,
                         const sa_gpu_index **use, sr_error *e) {
  *use = ix;
  if (!ix->col_cnt) return SR_OK;
  if (ix->bars_bytes > room)
    return sr_internal_error(e, 0, "rank %d: the expanded bars (%lld B) exceed the workspace's (%lld B)", a->c->rank,
                             (long long)ix->bars_bytes, (long long)room);
  if (sa_bars_expand(ix, bars, CS(a), e)) return e->code;
  *out = *ix, out->d.bar_idx = bars, *use = out;
  return SR_OK;
}

int dist_cuda_bars_t_ready(struct dist_attn *a, sa_gpu_index_t *t, float *scratch, int64_t scratch_room,
                           int32_t *bars_t, int64_t room, sr_error *e) {
  if (!t->bc.scratch && t->scratch_bytes > scratch_room)
    return sr_internal_error(e, 0, "rank %d: a transpose's bars' scratch (%lld B) exceeds the workspace's (%lld B)",
                             a->c->rank, (long long)t->scratch_bytes, (long long)scratch_room);
  if (!t->bc.scratch) t->bc.scratch = scratch;
  if (!t->compact_bars) return SR_OK;
  if (t->bars_bytes > room)
    return sr_internal_error(e, 0, "rank %d: the expanded transposed bars (%lld B) exceed the workspace's (%lld B)",
                             a->c->rank, (long long)t->bars_bytes, (long long)room);
  if (sa_bars_t_expand(t, bars_t, CS(a), e)) return e->code;
  t->d.bar_q_idx = bars_t;
  return SR_OK;
}

// What the plan's own copies hold: the index, forward form, masks and positions by the host-built plan's
// footprints (kernels/index_bytes.c, which the uploads' sizes follow), the transposes as uploaded (their host
// form is freed after the upload).
int64_t dist_cuda_copies_bytes(struct dist_attn *a) {
  cuda_state *s = a->cuda;
  dist_plan_bytes *b = &s->bytes;
  dist_plan_bytes_fixed(a, &s->cols, &s->cols_fwd, b);
  for (int g = 0; a->nh > 0 && g < a->R; g++) {
    const sa_gpu_index_t *t = &s->ixt[g];
    b->transposed += t->index_bytes, b->bar_chunks += t->chunks_bytes, b->bars_t = sr_max64(b->bars_t, t->bars_bytes);
    b->bar_scratch = sr_max64(b->bar_scratch, t->scratch_bytes);
  }
  return dist_plan_bytes_total(b);
}

int dist_attn_cuda_plan_bytes(const struct dist_attn *a, dist_plan_bytes *out) {
  const cuda_state *s = a->cuda;
  if (!s) return 0;
  *out = s->bytes;
  return 1;
}

// Free the plan's own device copies (the shared workspace is not the plan's: it stays joined).
void dist_cuda_copies_free(struct dist_attn *a) {
  cuda_state *s = a->cuda;
  sa_gpu_index_free(&s->ix);
  sa_gpu_index_free(&s->ix_fwd);
  if (s->masks) sa_gpu_masks_free(s->masks, a->H);
  s->masks = NULL;
  for (int g = 0; s->ixt && g < a->R; g++) sa_gpu_index_t_free(&s->ixt[g]);
  for (int g = 0; s->kpos && g < a->R; g++) cudaFree(s->kpos[g]), s->kpos[g] = NULL;
  s->qpos = NULL;
}

void dist_cuda_host_transposes_free(struct dist_attn *a) {
  cuda_state *s = a->cuda;
  for (int g = 0; s->tt_host && g < a->R; g++) tiles_transpose_free(&s->tt_host[g]);
  for (int g = 0; s->bc_host && g < a->R; g++) sa_bar_chunks_free(&s->bc_host[g]);
  free(s->tt_host), free(s->bc_host);
  s->tt_host = NULL, s->bc_host = NULL;
}

// ---------------------------------------------------------------------------------------------
// device copies dropped and brought back (dist_attn_device_release / dist_attn_device_restore)

int dist_attn_cuda_device_release(struct dist_attn *a, sr_error *e) {
  cuda_state *s = a->cuda;
  if (!s || s->released) return SR_OK;
  // vs-online's index is the GPU estimate of each forward, held in device state of its own (online_vs_cuda.c)
  if (a->online || a->adaspa)
    return sr_input_error(e, NULL, "pattern", "%s plans make their index at run time: their device copies cannot be "
                          "released", a->p->spec.pattern);
  CUDA_TRY(cudaDeviceSynchronize());  // the work queued so far reads the copies
  if (a->nh > 0 && !s->tt_host) {
    // The transposes are the one set-up product not kept on the host; copying them back (tens of ms a GiB)
    // is far cheaper than transposing again (seconds a source on long sparse layers).
    s->tt_host = calloc((size_t)a->R, sizeof *s->tt_host);
    s->bc_host = calloc((size_t)a->R, sizeof *s->bc_host);
    if (!s->tt_host || !s->bc_host) {
      dist_cuda_host_transposes_free(a);
      return sr_internal_error(e, 0, "rank %d: out of memory for the host transposes", a->c->rank);
    }
    for (int g = 0; g < a->R; g++)
      if (sa_gpu_index_t_download(&s->ixt[g], &s->tt_host[g], &s->bc_host[g], e)) {
        dist_cuda_host_transposes_free(a);  // the device copies stay: the plan runs on as it was
        return e->code ? e->code : SR_EINTERNAL;
      }
  }
  dist_cuda_copies_free(a);
  s->released = 1;
  return SR_OK;
}

int dist_attn_cuda_device_restore(struct dist_attn *a, sr_error *e) {
  cuda_state *s = a->cuda;
  if (!s || !s->released) return SR_OK;
  int rc = sa_gpu_masks_upload(a->masks, a->H, &s->masks, e);
  if (!rc && a->nh > 0) rc = dist_cuda_index_put(&a->ti_view, &s->cols, &s->ix, e);
  if (!rc && a->nh > 0 && a->ti_fwd.n_runs) rc = dist_cuda_index_put(&a->ti_fwd_view, &s->cols_fwd, &s->ix_fwd, e);
  for (int g = 0; !rc && a->nh > 0 && g < a->R; g++)
    rc = dist_cuda_transpose_put(&s->tt_host[g], &s->bc_host[g], &s->ixt[g], e);
  if (!rc) rc = dist_cuda_positions_upload(a, e);
  if (rc) {  // stays released: what came up goes again
    dist_cuda_copies_free(a);
    return e->code ? e->code : SR_EINTERNAL;
  }
  s->plan_bytes = dist_cuda_copies_bytes(a);
  s->released = 0;
  return SR_OK;
}

int64_t dist_attn_cuda_host_bytes(const struct dist_attn *a) {
  const cuda_state *s = a->cuda;
  int64_t b = 0;
  for (int g = 0; s && s->tt_host && g < a->R; g++) {
    const tile_index_t *t = &s->tt_host[g];
    const sa_bar_chunks *c = &s->bc_host[g];
    int64_t nkv = (int64_t)t->heads * t->n_kvtiles, nq = t->kv_cnt[nkv], nb = t->n_bar_keys;
    b += 8 * (nkv + 1) + 5 * nq + 8 * nb + 8 * (nb + 1) + 4 * t->bar_q_cnt[nb];
    b += 12 * (int64_t)c->n_hchunks + 8 * ((int64_t)c->n_hchunks + 1) + 4 * c->hc_q_cnt[c->n_hchunks];
    b += 8 * (int64_t)c->n_chunks + 4 * (int64_t)c->n_chunks * 64 + 4 * (int64_t)c->n_chunks * c->group * 64;
  }
  return b;
}

#else  // no CUDA in this build: no device copies

int dist_attn_cuda_plan_bytes(const struct dist_attn *a, dist_plan_bytes *out) { return 0; }
int dist_attn_cuda_device_release(struct dist_attn *a, sr_error *e) { return SR_OK; }
int dist_attn_cuda_device_restore(struct dist_attn *a, sr_error *e) { return SR_OK; }
int64_t dist_attn_cuda_host_bytes(const struct dist_attn *a) { return 0; }

#endif

// fpdt_plan.c — what an FPDT plan keeps in device memory (fpdt.h fpdt_plan_walk): per query chunk i its index
// against every chunk and its forward form, in the bars' compact form where it gives their lists exactly (the
// ring's choice, dist_bar_cols); per chunk pair (i, j <= i) the transpose with its bar chunks, compact likewise
// (dist_transpose_compact), built in threads (dist_transposes_each); the masks and every chunk's positions. The
// bars' scratch and the expanded lists are the shared workspace's, sized for the largest index and pair. Counted
// item by item with the ring's arithmetic (dist_plan_bytes.c, kernels/index_bytes.c), so the CUDA set-up, which
// uploads what the walk hands it, and the CPU backend's count (attn --plan-bytes-only) agree by construction.
#include <stdlib.h>
#include <string.h>

#include "exec/fpdt.h"
#include "plan/parallel.h"
#include "plan/util.h"

typedef struct {
  const struct dist_attn *a;
  const fpdt_uploads *up;
  const dist_transpose_src *src;  // [pairs] pair k's transpose: its KV chunk is src[k].src
  const int *pair_i;              // [pairs] its query chunk
  dist_plan_bytes *out;
} walk;

static int take_pair(void *arg, int64_t k, const tile_index_t *tt, const sa_bar_chunks *bc, int compact, sr_error *e) {
  walk *w = arg;
  dist_plan_bytes_add_transposed(tt, bc, compact, w->out);
  return w->up ? w->up->pair(w->up->arg, w->pair_i[k], w->src[k].src, tt, bc, compact, e) : SR_OK;
}

// Query chunk i's compact columns of its index and forward form (an sr_parallel_for item; empty where not compact).
typedef struct {
  const struct fpdt_state *f;
  tile_bar_cols *cols, *cols_fwd;  // [u] each
} columns_job;

static int chunk_columns(void *ctx, int item, int thread, sr_error *e) {
  columns_job *j = ctx;
  int i = j->f->u - 1 - item;  // the largest first
  if (dist_bar_cols(&j->f->view[i], &j->cols[i], e)) return e->code;
  if (j->f->ti_fwd[i].n_runs && dist_bar_cols(&j->f->fwd_view[i], &j->cols_fwd[i], e)) return e->code;
  return SR_OK;
}

// Every query chunk's index and forward form: their columns built in threads, then counted and handed on in order.
static int take_indices(const walk *w, sr_error *e) {
  struct fpdt_state *f = w->a->fpdt;
  columns_job j = {f, calloc((size_t)f->u, sizeof(tile_bar_cols)), calloc((size_t)f->u, sizeof(tile_bar_cols))};
  int rc = j.cols && j.cols_fwd ? sr_parallel_for(f->u, sr_threads(), chunk_columns, &j, e)
                                : sr_internal_error(e, 0, "out of memory");
  for (int i = 0; !rc && i < f->u; i++) {
    w->out->index += dist_index_dev_bytes(&f->view[i], &j.cols[i], &w->out->bars);
    if (f->ti_fwd[i].n_runs) w->out->fwd_form += dist_index_dev_bytes(&f->fwd_view[i], &j.cols_fwd[i], &w->out->bars);
    if (w->up) rc = w->up->index(w->up->arg, i, &j.cols[i], &j.cols_fwd[i], e);
  }
  for (int i = 0; j.cols && j.cols_fwd && i < f->u; i++) tiles_bar_cols_free(&j.cols[i]), tiles_bar_cols_free(&j.cols_fwd[i]);
  free(j.cols), free(j.cols_fwd);
  return rc;
}

int fpdt_plan_walk(const struct dist_attn *a, const fpdt_uploads *up, dist_plan_bytes *out, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  double t0 = sr_now();
  memset(out, 0, sizeof *out);
  out->masks = sa_masks_dev_bytes(a->masks, a->H);
  for (int i = 0; i < f->u; i++) out->positions += 8 * sr_max64(1, f->n[i]);
  if (a->nh == 0) return SR_OK;  // no heads here: no index
  int64_t pairs = (int64_t)f->u * (f->u + 1) / 2;
  dist_transpose_src *src = malloc(sizeof *src * (size_t)pairs);
  int *pair_i = malloc(sizeof *pair_i * (size_t)pairs);
  if (!src || !pair_i) {
    free(src), free(pair_i);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t k = 0;
  for (int i = 0; i < f->u; i++)
    for (int j = 0; j <= i; j++, k++) src[k].t = &f->view[i], src[k].src = j, src[k].rows = f->n[j], pair_i[k] = i;
  walk w = {a, up, src, pair_i, out};
  int rc = take_indices(&w, e);
  double t1 = sr_now();
  if (!rc) rc = dist_transposes_each(src, pairs, a->nh, a->nkv, take_pair, &w, e);
  f->columns_s = t1 - t0, f->pairs_s = sr_now() - t1;
  free(src), free(pair_i);
  return rc;
}

int fpdt_plan_bytes(const struct dist_attn *a, dist_plan_bytes *out, sr_error *e) {
  if (a->be == DIST_CUDA && fpdt_cuda_plan_items(a, out)) return SR_OK;
  return fpdt_plan_walk(a, NULL, out, e);
}

int dist_attn_fpdt_build_s(const dist_attn *a, double *indices, double *columns, double *transposes, int64_t *pairs) {
  const struct fpdt_state *f = a->fpdt;
  *indices = f ? f->index_s : 0, *columns = f ? f->columns_s : 0, *transposes = f ? f->pairs_s : 0;
  *pairs = f ? (int64_t)f->u * (f->u + 1) / 2 : 0;
  return f != NULL;
}

// dist_plan_bytes.c — what one rank's attention plan keeps in device memory, item by item (dist_attn.h
// dist_plan_bytes): the CUDA backend records it as its copies go up (dist_attn_cuda_copies.c); the CPU backend
// builds what set-up would upload and counts it with the same arithmetic (kernels/index_bytes.c).
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/fpdt.h"
#include "kernels/workspace.h"
#include "plan/parallel.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

int64_t dist_plan_bytes_total(const dist_plan_bytes *b) {
  return b->index + b->fwd_form + b->transposed + b->bar_chunks + b->masks + b->positions;
}

int dist_bars_compact(void) {
  const char *v = getenv("SR_BARS");
  return !v || strcmp(v, "stored") != 0;
}

int dist_bar_cols(const tile_index *t, tile_bar_cols *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (!dist_bars_compact() || t->n_bars == 0) return SR_OK;  // no lists: nothing to spare
  // a few threads: the trainer builds several layers' plans at once, each on its own thread
  int exact = 0, threads = (int)sr_min64(sr_threads(), DIST_BAR_COLS_THREADS);
  if (tiles_bar_cols_find(t, threads, out, &exact, e)) return e->code;
  if (!exact) tiles_bar_cols_free(out);
  return SR_OK;
}

int dist_transpose_compact(const tile_index_t *t) {
  return dist_bars_compact() && t->bar_q_cnt[t->n_bar_keys] > 0 && tiles_transpose_bars_compact_exact(t);
}

int64_t dist_index_dev_bytes(const tile_index *t, const tile_bar_cols *cols, int64_t *bars) {
  if (!cols || !cols->col_cnt) return sa_index_dev_bytes(t);
  *bars = sr_max64(*bars, 4 * t->n_bars);
  return sa_index_compact_dev_bytes(t, cols);
}

// The items every backend knows from the host-built plan: index, forward form, masks, positions. A pattern made on
// the device every forward (vs-online, adaspa-online) has only the positions: the CUDA set-up uploads no copies
// of its stand-in (dist_attn_cuda.c).
void dist_plan_bytes_fixed(const struct dist_attn *a, const tile_bar_cols *cols, const tile_bar_cols *cols_fwd,
                           dist_plan_bytes *out) {
  memset(out, 0, sizeof *out);
  int copies = !pattern_spec_device_made(a->p->spec.pattern);
  if (copies && a->nh > 0) out->index = dist_index_dev_bytes(&a->ti_view, cols, &out->bars);
  if (copies && a->nh > 0 && a->ti_fwd.n_runs)
    out->fwd_form = dist_index_dev_bytes(&a->ti_fwd_view, cols_fwd, &out->bars);
  if (copies) out->masks = sa_masks_dev_bytes(a->masks, a->H);
  out->positions = ws_plan_positions_bytes(a->glay->rank_count, a->R);
}

// Add one source's transposed index and bar chunks (host) to out.
void dist_plan_bytes_add_transposed(const tile_index_t *t, const sa_bar_chunks *c, int compact, dist_plan_bytes *out) {
  out->transposed += compact ? sa_index_t_compact_dev_bytes(t) : sa_index_t_dev_bytes(t);
  if (compact) out->bars_t = sr_max64(out->bars_t, 4 * t->bar_q_cnt[t->n_bar_keys]);
  out->bar_chunks += sa_bar_chunks_dev_bytes(c);
  out->bar_scratch = sr_max64(out->bar_scratch, sa_bar_scratch_bytes(c, t->n_bar_keys));
}

// Whether set-up uploads transposes of the host index (not for patterns made at run time).
int dist_plan_has_transposes(const struct dist_attn *a) {
  return a->nh > 0 && !a->fpdt && !pattern_spec_at_run_time(a->p->spec.pattern);
}

static int count_transposed(void *out, int64_t k, const tile_index_t *tt, const sa_bar_chunks *bc, int compact,
                            sr_error *e) {
  dist_plan_bytes_add_transposed(tt, bc, compact, out);
  return SR_OK;
}

static int host_breakdown(const struct dist_attn *a, dist_plan_bytes *out, sr_error *e) {
  tile_bar_cols cols = {0}, cols_fwd = {0};
  int fixed = a->nh > 0 && !pattern_spec_at_run_time(a->p->spec.pattern);  // as set-up decides (dist_attn_cuda.c)
  int rc = fixed ? dist_bar_cols(&a->ti_view, &cols, e) : SR_OK;
  if (!rc && fixed && a->ti_fwd.n_runs) rc = dist_bar_cols(&a->ti_fwd_view, &cols_fwd, e);
  if (!rc) dist_plan_bytes_fixed(a, &cols, &cols_fwd, out);
  tiles_bar_cols_free(&cols), tiles_bar_cols_free(&cols_fwd);
  if (rc) return rc;
  if (!dist_plan_has_transposes(a)) return SR_OK;
  dist_transpose_src *src = malloc(sizeof *src * (size_t)a->R);
  if (!src) return sr_internal_error(e, 0, "out of memory");
  for (int g = 0; g < a->R; g++) src[g].t = &a->ti_view, src[g].src = g, src[g].rows = a->glay->rank_count[g];
  rc = dist_transposes_each(src, a->R, a->nh, a->nkv, count_transposed, out, e);
  free(src);
  return rc;
}

int dist_attn_plan_bytes(const dist_attn *a, dist_plan_bytes *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (a->fpdt) return fpdt_plan_bytes(a, out, e);
  if (a->be == DIST_CUDA && dist_attn_cuda_plan_bytes(a, out)) return SR_OK;
  return host_breakdown(a, out, e);
}

int dist_attn_workspace_bytes(const dist_attn *a, const dist_plan_bytes *b, int64_t *out, sr_error *e) {
  ws_shape sh;
  *out = 0;
  if (ws_shape_of(a->p, a->c->rank, a->fpdt ? NULL : a->rp, &sh, e)) return e->code;
  sh.bar_scratch = b->bar_scratch, sh.bars = b->bars, sh.bars_t = b->bars_t;
  *out = ws_total_bytes(&sh);
  return SR_OK;
}

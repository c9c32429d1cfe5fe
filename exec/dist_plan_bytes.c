// dist_plan_bytes.c — what one rank's attention plan keeps in device memory, item by item (dist_attn.h
// dist_plan_bytes): the CUDA backend records it as its copies go up (dist_attn_cuda_copies.c); the CPU backend
// builds what set-up would upload and counts it with the same arithmetic (kernels/index_bytes.c).
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

int64_t dist_plan_bytes_total(const dist_plan_bytes *b) {
  return b->index + b->fwd_form + b->transposed + b->bar_chunks + b->masks + b->positions;
}

// The items every backend knows from the host-built plan: index, forward form, masks, positions.
void dist_plan_bytes_fixed(const struct dist_attn *a, dist_plan_bytes *out) {
  memset(out, 0, sizeof *out);
  if (a->nh > 0) out->index = sa_index_dev_bytes(&a->ti_view);
  if (a->nh > 0 && a->ti_fwd.n_runs) out->fwd_form = sa_index_dev_bytes(&a->ti_fwd_view);
  out->masks = sa_masks_dev_bytes(a->masks, a->H);
  for (int g = 0; g < a->R; g++) out->positions += 8 * sr_max64(1, a->glay->rank_count[g]);
}

// Add one source's transposed index and bar chunks (host) to out.
void dist_plan_bytes_add_transposed(const tile_index_t *t, const sa_bar_chunks *c, dist_plan_bytes *out) {
  out->transposed += sa_index_t_dev_bytes(t);
  out->bar_chunks += sa_bar_chunks_dev_bytes(c);
  out->bar_scratch = sr_max64(out->bar_scratch, sa_bar_scratch_bytes(c, t->n_bar_keys));
}

// Whether set-up uploads transposes of the host index (not for patterns made at run time).
int dist_plan_has_transposes(const struct dist_attn *a) {
  return a->nh > 0 && !a->fpdt && !pattern_spec_at_run_time(a->p->spec.pattern);
}

static int host_breakdown(const struct dist_attn *a, dist_plan_bytes *out, sr_error *e) {
  dist_plan_bytes_fixed(a, out);
  for (int g = 0; dist_plan_has_transposes(a) && g < a->R; g++) {
    tile_index_t tt;
    sa_bar_chunks bc;
    if (tiles_transpose(&a->ti_view, g, a->glay->rank_count[g], &tt, e)) return e->code;
    int rc = sa_bar_chunks_build(&tt, a->nh, a->nkv, &bc, e);
    if (!rc) dist_plan_bytes_add_transposed(&tt, &bc, out), sa_bar_chunks_free(&bc);
    tiles_transpose_free(&tt);
    if (rc) return rc;
  }
  return SR_OK;
}

int dist_attn_plan_bytes(const dist_attn *a, dist_plan_bytes *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (a->fpdt) return SR_OK;
  if (a->be == DIST_CUDA && dist_attn_cuda_plan_bytes(a, out)) return SR_OK;
  return host_breakdown(a, out, e);
}

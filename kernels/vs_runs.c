// vs_runs.c — the CPU mirror of the forward form's GPU build (kernels/vs_runs.cu): the same steps in the same
// order (the heads' slash counts and dilated sets, every cell counted, an exclusive scan, every cell written) through
// the same cell code (kernels/vs_runs_cell.h), so the tests hold the GPU's decomposition to tiles_runs_build on the CPU.
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
#include "kernels/vs_runs_cell.h"
#include "plan/tiles.h"
#include "plan/util.h"

void vs_runs_head_tables(const uint32_t *sbits, int64_t n_tokens, int32_t *scnt, uint32_t *dil) {
  int64_t words = (n_tokens + 31) / 32;
  scnt[0] = 0;
  for (int64_t w = 0; w < words; w++) scnt[w + 1] = scnt[w] + vr_popc32(sbits[w]);
  for (int64_t w = 0; w < words; w++) dil[w] = vs_runs_dil_word(sbits, scnt, n_tokens, w);
}

// Every cell of the index counted (out NULL) or written, by source within a cell.
static void cells_pass(const vs_runs_args *a, int write, int64_t *raw[3]) {
  int W = a->world;
  for (int64_t cell = 0; cell < (int64_t)a->heads * a->n_qtiles; cell++) {
    for (int s = 0; s < W; s++) {
      int64_t n[3];
      vs_runs_cell(a, cell, s, write, n);
      for (int k = 0; k < 3 && !write; k++) raw[k][cell * (W + 1) + s] = n[k];
    }
    for (int k = 0; k < 3 && !write; k++) raw[k][cell * (W + 1) + W] = 0;  // a cell's end slot: its next's start
  }
}

typedef struct {
  vs_layout_tables t;
  uint32_t *vbits, *sbits, *dil;
  int32_t *scnt;
  uint8_t *vs;
  int64_t *raw[3];
} mirror_scratch;

static void scratch_free(mirror_scratch *m) {
  vs_layout_tables_free(&m->t);
  free(m->vbits), free(m->sbits), free(m->dil), free(m->scnt), free(m->vs);
  for (int k = 0; k < 3; k++) free(m->raw[k]);
}

// The heads' bit sets flat [heads][words] (VS heads; others zero and not converted) and their tables.
static int heads_flat(const tile_index *in, const head_mask *masks, int64_t ntok, mirror_scratch *m) {
  int64_t words = (ntok + 31) / 32, H = in->heads;
  m->vbits = calloc((size_t)(H * words + 1), 4), m->sbits = calloc((size_t)(H * words + 1), 4);
  m->dil = calloc((size_t)(H * words + 1), 4), m->scnt = calloc((size_t)(H * (words + 1)), 4);
  m->vs = calloc((size_t)H + 1, 1);
  if (!m->vbits || !m->sbits || !m->dil || !m->scnt || !m->vs) return -1;
  for (int64_t h = 0; h < H; h++) {
    if (masks[h].kind == PATTERN_VS) {
      m->vs[h] = 1;
      memcpy(m->vbits + h * words, masks[h].vbits, 4 * (size_t)words);
      memcpy(m->sbits + h * words, masks[h].sbits, 4 * (size_t)words);
    }
    vs_runs_head_tables(m->sbits + h * words, ntok, m->scnt + h * (words + 1), m->dil + h * words);
  }
  return 0;
}

int vs_runs_build_host(const tile_index *in, const head_mask *masks, const layout *l, tile_index *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  int rc = tiles_runs_check(in, masks, l, e);
  if (rc) return rc;
  mirror_scratch m;
  memset(&m, 0, sizeof m);
  if ((rc = vs_layout_tables_build(l, &m.t, e))) return rc;
  int W = in->world;
  int64_t offs = (int64_t)in->heads * in->n_qtiles * (W + 1), ntok = l->n_tokens;
  for (int k = 0; k < 3; k++) m.raw[k] = malloc(sizeof(int64_t) * (size_t)(offs + 1));
  out->heads = in->heads, out->world = W, out->q_rank = in->q_rank, out->n_qtiles = in->n_qtiles;
  out->tile_cnt = calloc((size_t)offs + 1, sizeof(int64_t));
  out->run_cnt = calloc((size_t)offs + 1, sizeof(int64_t));
  out->bar_cnt = calloc((size_t)offs + 1, sizeof(int64_t));
  if (heads_flat(in, masks, ntok, &m) || !m.raw[0] || !m.raw[1] || !m.raw[2] || !out->tile_cnt || !out->run_cnt ||
      !out->bar_cnt) {
    scratch_free(&m);
    tiles_free(out);
    return sr_internal_error(e, 0, "vs runs: out of memory");
  }
  vs_runs_args a = {in->heads, W, in->n_qtiles, in->q_rank, in->tile_cnt, in->bar_cnt, in->tile_idx, in->bar_idx,
                    in->tile_kind, ntok, (ntok + 31) / 32, m.vbits, m.sbits, m.scnt, m.dil, m.vs,
                    m.t.tile_base, m.t.tile_gmin, m.t.tile_gmax, m.t.seg_off, m.t.seg_len,
                    out->tile_cnt, out->run_cnt, out->bar_cnt, NULL, NULL, NULL, NULL, NULL};
  cells_pass(&a, 0, m.raw);
  // exclusive scans: the cells' offsets, the last end slot's the totals
  int64_t *cnt[3] = {out->tile_cnt, out->run_cnt, out->bar_cnt}, tot[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++)
    for (int64_t x = 0; x < offs; x++) cnt[k][x] = tot[k], tot[k] += m.raw[k][x];
  out->n_tiles = tot[0], out->n_runs = tot[1], out->n_bars = tot[2];
  out->tile_idx = malloc(sizeof(int32_t) * (size_t)(tot[0] + 1)), out->tile_kind = malloc((size_t)tot[0] + 1);
  out->run_key = malloc(sizeof(int32_t) * (size_t)(tot[1] + 1)), out->run_len = malloc((size_t)tot[1] + 1);
  out->bar_idx = malloc(sizeof(int32_t) * (size_t)(tot[2] + 1));
  if (!out->tile_idx || !out->tile_kind || !out->run_key || !out->run_len || !out->bar_idx) {
    scratch_free(&m);
    tiles_free(out);
    return sr_internal_error(e, 0, "vs runs: out of memory for %lld tiles, %lld runs, %lld bars", (long long)tot[0],
                             (long long)tot[1], (long long)tot[2]);
  }
  a.out_tile_idx = out->tile_idx, a.out_tile_kind = out->tile_kind;
  a.out_run_key = out->run_key, a.out_run_len = out->run_len, a.out_bar_idx = out->bar_idx;
  cells_pass(&a, 1, m.raw);
  scratch_free(&m);
  return SR_OK;
}

// layout_views.c — layouts made from a plan's layout for the attention the executor runs (layout.h): the
// Ulysses groups' (U consecutive ranks as one) and FPDT's chunks' (chunk i as "rank" i). The executor builds
// its rings and tile indices on them, and the simulator counts its memory on the same ones.
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/util.h"

static int compare_run_global(const void *x, const void *y, void *runs_) {
  const layout_run *runs = runs_;
  int64_t a = runs[*(const int64_t *)x].global, b = runs[*(const int64_t *)y].global;
  return a < b ? -1 : a > b;
}

// Allocate out's arrays for `world` ranks and up to `cap` runs.
static int alloc_view(layout *out, int world, int64_t cap, sr_error *e) {
  out->rank_count = calloc((size_t)world, sizeof(int64_t));
  out->runs = malloc(sizeof(layout_run) * (size_t)sr_max64(1, cap));
  out->rank_run_begin = malloc(sizeof(int64_t) * (size_t)(world + 1));
  out->by_global = malloc(sizeof(int64_t) * (size_t)sr_max64(1, cap));
  if (!out->rank_count || !out->runs || !out->rank_run_begin || !out->by_global) {
    layout_free(out);
    return sr_internal_error(e, 0, "out of memory");
  }
  return SR_OK;
}

// Close a view of n runs: the global order of its runs.
static void finish_view(layout *out, int64_t n) {
  out->rank_run_begin[out->world] = n;
  out->n_runs = n;
  for (int64_t i = 0; i < n; i++) out->by_global[i] = i;
  qsort_r(out->by_global, (size_t)n, sizeof(int64_t), compare_run_global, out->runs);
}

int layout_group_ranks(const layout *l, int U, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  int R = l->world / U;
  out->kind = l->kind, out->n_tokens = l->n_tokens, out->world = R, out->granularity = l->granularity;
  out->granularity_asked = l->granularity_asked;
  if (alloc_view(out, R, l->n_runs, e)) return e->code;
  int64_t n = 0;
  for (int gr = 0; gr < R; gr++) {
    out->rank_run_begin[gr] = n;
    int64_t off = 0;
    for (int j = 0; j < U; j++) {
      int r = gr * U + j;
      for (int64_t i = l->rank_run_begin[r]; i < l->rank_run_begin[r + 1]; i++) {
        layout_run run = l->runs[i];
        run.rank = gr, run.local += off;
        layout_run *last = n > out->rank_run_begin[gr] ? &out->runs[n - 1] : NULL;
        if (last && last->global + last->len == run.global && last->local + last->len == run.local) last->len += run.len;
        else out->runs[n++] = run;  // runs stay maximal
      }
      off += l->rank_count[r];
    }
    out->rank_count[gr] = off;
  }
  finish_view(out, n);
  return SR_OK;
}

int layout_chunks(const layout *l, int64_t chunk, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  int u = (int)sr_cdiv(l->n_tokens, chunk), W = l->world;
  out->kind = LAYOUT_PERMUTATION, out->n_tokens = l->n_tokens, out->world = u, out->granularity = 1;
  out->granularity_asked = 1;
  if (alloc_view(out, u, l->n_runs + (int64_t)u * W, e)) return e->code;  // a run is cut at most once a chunk boundary
  int64_t n = 0;
  for (int i = 0; i < u; i++) {
    out->rank_run_begin[i] = n;
    int64_t lo = (int64_t)i * chunk, hi = sr_min64(lo + chunk, l->n_tokens), local = 0;
    for (int r = 0; r < W; r++)
      for (int64_t k = l->rank_run_begin[r]; k < l->rank_run_begin[r + 1]; k++) {
        int64_t g0 = sr_max64(l->runs[k].global, lo), g1 = sr_min64(l->runs[k].global + l->runs[k].len, hi);
        if (g1 <= g0) continue;
        layout_run *last = n > out->rank_run_begin[i] ? &out->runs[n - 1] : NULL;
        if (last && last->global + last->len == g0) last->len += g1 - g0;  // runs stay maximal
        else out->runs[n++] = (layout_run){g0, local, g1 - g0, i};
        local += g1 - g0;
      }
    out->rank_count[i] = local;
  }
  finish_view(out, n);
  return SR_OK;
}

int64_t layout_chunk_part_max(const layout *l, int rank, int64_t chunk) {
  int64_t best = 0, cur = 0, at = -1;  // rank's tokens in chunk `at` so far
  // a rank's runs ascend in global order wherever FPDT runs (exec/fpdt.h), so a chunk's runs are adjacent
  for (int64_t k = l->rank_run_begin[rank]; k < l->rank_run_begin[rank + 1]; k++)
    for (int64_t t = l->runs[k].global, end = t + l->runs[k].len; t < end;) {
      int64_t i = t / chunk, stop = sr_min64(end, (i + 1) * chunk);
      if (i != at) cur = 0, at = i;
      cur += stop - t, t = stop;
      best = sr_max64(best, cur);
    }
  return best;
}

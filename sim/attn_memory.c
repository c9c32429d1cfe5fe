// attn_memory.c — the device memory one layer's distributed attention takes on the CUDA backend as `sparsering-exec
// attn` holds it (predict.h: predict_attention_memory), item by item as the executor reports it: the rank's tensors,
// the attention plan (kernels/index_bytes.c on the pattern's counts) and the shared workspace (kernels/workspace.h,
// the arithmetic the executor allocates by).
//
// The plan's tile indices are counted, not built: tiles_account_layer gives every index's entries and bars exactly
// (on the layout the executor builds them over: the Ulysses groups' or FPDT's chunks'). What only a build knows is
// estimated: a (head, source)'s distinct bar keys, the columns of the compact bars, are the head's columns
// (verticals, sinks) that the source holds before the query rank's last position, at most its bars (a KV head's,
// the union of its query heads'); a bar chunk of 64 keys covers the query tiles after its first key. Without bars
// (dense, windows without sinks, blocks) every figure is exact; with them the plan came within 2% and the workspace
// within 0.2% of the executor's on the kept 512K and 1M MTraining runs (results/sim/2026-11-27-attn-memory-workspace).
// A pattern made on the device (vs-online, adaspa-online) has the positions alone: its index and masks live in the
// estimator's state, which neither the executor nor this counts (docs/sim.md, "vs-online's plan").
// sim_exec_workspace gives the exec trainer's step model the same workspace without a pattern.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "kernels/workspace.h"
#include "plan/pattern_spec.h"
#include "plan/ring_plan.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/bar_walks.h"
#include "sim/memory.h"
#include "sim/predict.h"

// One layer's counts on the layout its indices are built over.
typedef struct {
  const layout *l;
  int Wl;              // the layout's ranks (groups or chunks)
  int Hi;              // heads of the index: 1 when one head's serves the layer, else the model's
  work_count *wc;      // [Hi * Wl * Wl] entries and bars: tiles_account_layer
  int64_t *keys;       // [Hi * Wl * Wl] estimated distinct bar keys of (head, query rank, source)
  int64_t *hcq;        // [Hi * Wl * Wl] estimated query tiles of its compute chunks (64 keys each) together
  bar_walks tiles;     // the query tiles' last positions and each rank's last position (sim/bar_walks.h)
  int Gi;              // KV heads of the index: 1 when one head's serves the layer, else the model's
  int64_t *ukeys;      // [Gi * Wl * Wl] the same for the union of a KV head's query heads (the bar chunks')
  work_count *runs;    // [Wl * Wl] the forward form's entries over every head (plan.spec.fwd_runs), or NULL
} layer_counts;

static int64_t cell(const layer_counts *c, int h, int q, int s) { return ((int64_t)h * c->Wl + q) * c->Wl + s; }

static void counts_free(layer_counts *c) {
  free(c->wc), free(c->keys), free(c->ukeys), free(c->hcq), free(c->runs);
  bar_walks_close(&c->tiles);
  memset(c, 0, sizeof *c);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// The columns (VS verticals, WINDOW sinks) of heads hs[0..n) of a layer, ascending and each once, into *out (*n_out
// of them); -1 in *n_out when a head has no columns of its own (other kinds: their bars bound their keys).
static int columns(const pattern *pat, int layer, const int *hs, int n, int64_t **out, int64_t *n_out, sr_error *e) {
  int64_t total = 0;
  *out = NULL, *n_out = -1;
  for (int i = 0; i < n; i++) {
    const head_pattern *hp = pattern_head(pat, layer, hs[i]);
    if (hp->kind != PATTERN_VS && hp->kind != PATTERN_WINDOW) return SR_OK;
    total += hp->kind == PATTERN_VS ? hp->n_vertical : sr_min64(hp->sinks, pat->n_tokens);
  }
  int64_t *v = malloc(sizeof *v * (size_t)sr_max64(1, total)), m = 0;
  if (!v) return sr_internal_error(e, 0, "out of memory");
  for (int i = 0; i < n; i++) {
    const head_pattern *hp = pattern_head(pat, layer, hs[i]);
    int64_t k = hp->kind == PATTERN_VS ? hp->n_vertical : sr_min64(hp->sinks, pat->n_tokens);
    for (int64_t x = 0; x < k; x++) v[m++] = hp->kind == PATTERN_VS ? hp->vertical[x] : x;
  }
  if (n > 1) qsort(v, (size_t)m, sizeof *v, cmp_i64);
  int64_t u = 0;
  for (int64_t x = 0; x < m; x++)
    if (u == 0 || v[x] != v[u - 1]) v[u++] = v[x];
  *out = v, *n_out = u;
  return SR_OK;
}

// Columns by the source that holds them, counted for every query rank whose last position is at or after them:
// what becomes a bar key there at most (plan/tiles.c's rule for bars), into keys [Wl * Wl] (INT64_MAX: no columns);
// hcq (NULL: not wanted): for each chunk of 64 of them, the query tiles at or after its first (a key is a bar of
// the query tiles after it).
static int count_keys(const layer_counts *c, const pattern *pat, int layer, const int *hs, int n, int64_t *keys,
                      int64_t *hcq, sr_error *e) {
  const int64_t *last_q = c->tiles.last_q;
  int64_t *col, m;
  if (columns(pat, layer, hs, n, &col, &m, e)) return e->code;
  for (int64_t i = 0; m < 0 && i < (int64_t)c->Wl * c->Wl; i++) keys[i] = hcq ? hcq[i] = INT64_MAX : INT64_MAX;
  int rc = SR_OK;
  for (int64_t i = 0; i < m && !rc; i++) {
    int32_t src;
    int64_t local;
    if (layout_locate(c->l, col[i], &src, &local)) rc = sr_internal_error(e, 0, "a column outside the layout");
    for (int q = 0; !rc && q < c->Wl; q++) {
      int64_t x = (int64_t)q * c->Wl + src;
      if (col[i] > last_q[q]) continue;
      if (hcq && keys[x] % 64 == 0) hcq[x] += bar_walks_tiles_after(&c->tiles, q, col[i]);
      keys[x]++;
    }
  }
  free(col);
  return rc;
}

static int counts_build(const pattern *pat, int layer, int kv_heads, const layout *l, int fwd_runs, layer_counts *c,
                        sr_error *e) {
  memset(c, 0, sizeof *c);
  c->l = l, c->Wl = l->world;
  int uniform = pattern_layer_heads_uniform(pat, layer);
  pattern one = *pat;  // one head's index serves the layer (exec/dist_attn.c, exec/fpdt.c)
  if (uniform) one.heads = 1, one.layers = 1, one.h = pattern_head(pat, layer, 0);
  c->Hi = uniform ? 1 : pat->heads, c->Gi = uniform ? 1 : kv_heads;
  int64_t cells = (int64_t)c->Wl * c->Wl;
  c->wc = calloc((size_t)(c->Hi * cells), sizeof *c->wc);
  c->keys = calloc((size_t)(c->Hi * cells), sizeof *c->keys);
  c->ukeys = calloc((size_t)(c->Gi * cells), sizeof *c->ukeys);
  c->hcq = calloc((size_t)(c->Hi * cells), sizeof *c->hcq);
  int *hs = malloc(sizeof(int) * (size_t)pat->heads);
  if (!c->wc || !c->keys || !c->ukeys || !c->hcq || !hs) {
    free(hs);
    return sr_internal_error(e, 0, "out of memory");
  }
  int rc = tiles_account_layer(uniform ? &one : pat, uniform ? 0 : layer, l, c->wc, e);
  if (!rc) rc = bar_walks_open(l, &c->tiles, e);
  for (int h = 0; !rc && h < c->Hi; h++) {  // a head's keys: at most its bars
    int64_t *kh = c->keys + h * cells;
    rc = count_keys(c, pat, layer, &h, 1, kh, c->hcq + h * cells, e);
    for (int64_t i = 0; !rc && i < cells; i++) {
      kh[i] = sr_min64(kh[i], c->wc[h * cells + i].bars);
      c->hcq[h * cells + i] = sr_min64(c->hcq[h * cells + i], c->wc[h * cells + i].bars);
    }
  }
  int group = c->Hi / c->Gi;
  for (int k = 0; !rc && k < c->Gi; k++) {  // a KV head's: at most the sum of its query heads'
    for (int i = 0; i < group; i++) hs[i] = k * group + i;
    int64_t *kk = c->ukeys + k * cells;
    rc = count_keys(c, pat, layer, hs, group, kk, NULL, e);
    for (int64_t i = 0; !rc && i < cells; i++) {
      int64_t sum = 0;
      for (int h = k * group; h < (k + 1) * group; h++) sum += c->keys[h * cells + i];
      kk[i] = sr_min64(kk[i], sum);
    }
  }
  free(hs);
  if (!rc && fwd_runs && !uniform) {  // one head's index (uniform) has no VS head to run as runs
    c->runs = calloc((size_t)c->Wl * c->Wl, sizeof *c->runs);
    rc = c->runs ? tiles_runs_account_layer(pat, layer, l, c->runs, e) : sr_internal_error(e, 0, "out of memory");
  }
  return rc;
}

// The bar chunks of a transpose of source s for query rank q, view heads [h0, h0 + vh) (vh 1: one head's index
// serving the nh heads of the kernels), nkv KV heads (kernels/bar_chunks.c): a compute chunk of 64 keys a kernel
// head (its query tiles: count_keys); a reduce chunk of 64 keys a KV head over the keys of its query heads,
// each once (a replicated KV head's share of them: at most the union of all of them).
static int64_t chunks_bytes(const layer_counts *c, int q, int s, int h0, int vh, int nh, int nkv) {
  int group = nkv > 0 ? nh / nkv : 1;
  int64_t nhc = 0, hcq = 0, nc = 0;
  for (int h = 0; h < nh; h++) {
    int64_t i = cell(c, vh == 1 ? h0 : h0 + h, q, s);
    nhc += sr_cdiv(c->keys[i], 64), hcq += c->hcq[i];
  }
  for (int kv = 0; kv < nkv; kv++) {  // the keys of the KV head's query heads, each once
    int h = vh == 1 ? h0 : h0 + kv * group, gh = c->Hi / c->Gi;
    int64_t k = 0;
    for (int gi = 0; gi < group; gi++) k += c->keys[cell(c, vh == 1 ? h0 : h + gi, q, s)];
    k = sr_min64(k, c->ukeys[((int64_t)(h / gh) * c->Wl + q) * c->Wl + s]);
    nc += sr_cdiv(k, 64);
  }
  return sa_bar_chunks_count_bytes(nhc, hcq, nc, group);
}

// Query rank q's index over view heads [h0, h0 + vh) (its entries and bars those of every index head), compact
// bars or stored; the expanded lists it asks the workspace for into *bars.
static int64_t index_bytes(const layer_counts *c, int q, int h0, int vh, int compact_ok, int64_t *bars) {
  int64_t tiles = 0, nb = 0, cols = 0;
  for (int h = 0; h < c->Hi; h++)
    for (int s = 0; s < c->Wl; s++) tiles += c->wc[cell(c, h, q, s)].full + c->wc[cell(c, h, q, s)].partial;
  for (int h = 0; h < c->Hi; h++)
    for (int s = 0; s < c->Wl; s++) nb += c->wc[cell(c, h, q, s)].bars;
  for (int h = h0; h < h0 + vh; h++)
    for (int s = 0; s < c->Wl; s++) cols += c->keys[cell(c, h, q, s)];
  int64_t nqt = sr_cdiv(c->l->rank_count[q], TILE);
  if (!compact_ok || nb == 0) return sa_index_count_bytes(vh, nqt, c->Wl, tiles, nb, -1);
  *bars = sr_max64(*bars, 4 * nb);
  return sa_index_count_bytes(vh, nqt, c->Wl, tiles, -1, -1) + sa_bar_cols_count_bytes(vh, c->Wl, cols);
}

// The forward form of query rank q (plan.spec.fwd_runs), when it has runs: its columns taken as the index's.
static int64_t fwd_bytes(const layer_counts *c, int q, int vh, int compact_ok, int64_t cols, int64_t *bars) {
  if (!c->runs) return 0;
  int64_t tiles = 0, nb = 0, runs = 0;
  for (int s = 0; s < c->Wl; s++) {
    const work_count *w = &c->runs[(int64_t)q * c->Wl + s];
    tiles += w->full + w->partial, nb += w->bars, runs += w->runs;
  }
  if (runs == 0) return 0;  // nothing to gain: the executor drops the form
  int64_t nqt = sr_cdiv(c->l->rank_count[q], TILE);
  if (!compact_ok || nb == 0) return sa_index_count_bytes(vh, nqt, c->Wl, tiles, nb, runs);
  *bars = sr_max64(*bars, 4 * nb);
  return sa_index_count_bytes(vh, nqt, c->Wl, tiles, -1, runs) + sa_bar_cols_count_bytes(vh, c->Wl, cols);
}

// Source s's transpose for query rank q over view heads [h0, h0 + vh), its bar chunks (for nh kernel heads over nkv),
// and its bars' scratch, added to *plan; compact: its expanded bar_q_idx into *bars_t, its scratch into *scratch
// (the workspace's), else the scratch is the plan's own.
static void transpose_bytes(const layer_counts *c, int q, int s, int h0, int vh, int nh, int nkv, int compact_ok,
                            int64_t *plan, int64_t *bars_t, int64_t *scratch) {
  int64_t tiles = 0, uses = 0, keys = 0;
  for (int h = h0; h < h0 + vh; h++) {
    const work_count *w = &c->wc[cell(c, h, q, s)];
    tiles += w->full + w->partial, uses += w->bars, keys += c->keys[cell(c, h, q, s)];
  }
  int compact = compact_ok && uses > 0;
  *plan += sa_index_t_count_bytes(vh, sr_cdiv(c->l->rank_count[s], TILE), tiles, keys, compact ? -1 : uses);
  *plan += chunks_bytes(c, q, s, h0, vh, nh, nkv);
  int64_t scr = 4 * sr_max64(1, (int64_t)(vh == 1 ? nh : 1) * keys * 2 * 128);  // sa_bar_scratch_bytes
  if (!compact_ok) {
    *plan += scr;
    return;
  }
  *scratch = sr_max64(*scratch, scr);
  if (compact) *bars_t = sr_max64(*bars_t, 4 * uses);
}

// Rank r's plan and workspace on the ring schedules (groups of U ranks).
static int ring_rank(const plan *p, const layer_counts *c, const ring_routes *rt, const head_mask *masks, int r,
                     int64_t *plan_b, int64_t *ws_b, sr_error *e) {
  int U = rt->ulysses, g = r / U, j = r % U, H = (int)p->model.num_heads;
  ws_shape sh;
  if (ws_shape_of(p, r, &rt->rings[j], &sh, e)) return e->code;
  int *h_lo = malloc(sizeof(int) * (size_t)(3 * U + 1));
  if (!h_lo) return sr_internal_error(e, 0, "out of memory");
  schedule_head_split(H, (int)p->model.num_kv_heads, U, h_lo, h_lo + U + 1, h_lo + 2 * U + 1);
  int h0 = c->Hi == 1 ? 0 : h_lo[j], vh = c->Hi == 1 ? 1 : sh.nh;
  free(h_lo);
  // a pattern chosen at run time keeps its lists and makes its transposes per call (online_*_cuda.c); one made on
  // the device (vs-online, adaspa-online) keeps no index or masks in the plan at all, only the positions
  int fixed = !pattern_spec_at_run_time(p->spec.pattern), copies = !pattern_spec_device_made(p->spec.pattern);
  int64_t plan = copies ? ws_plan_fixed_bytes(c->l->rank_count, c->Wl, masks, H)
                        : ws_plan_positions_bytes(c->l->rank_count, c->Wl);
  if (sh.nh > 0 && copies) {
    int64_t cols = 0;
    for (int h = h0; h < h0 + vh; h++)
      for (int s = 0; s < c->Wl; s++) cols += c->keys[cell(c, h, g, s)];
    plan += index_bytes(c, g, h0, vh, fixed, &sh.bars);
    if (fixed) plan += fwd_bytes(c, g, vh, fixed, cols, &sh.bars);
    for (int s = 0; fixed && s < c->Wl; s++)
      transpose_bytes(c, g, s, h0, vh, sh.nh, sh.nkv, 1, &plan, &sh.bars_t, &sh.bar_scratch);
  }
  *plan_b = plan, *ws_b = ws_total_bytes(&sh);
  return SR_OK;
}

// Rank r's plan and workspace under FPDT: every chunk's index against every chunk, the transposes of the pairs
// (i, j <= i), in the compact bars' form as the rings' (exec/fpdt_plan.c); the workspace's bars' scratch and expanded
// lists are those of the largest chunk's index and pair.
static int fpdt_rank(const plan *p, const layer_counts *c, const head_mask *masks, int r, int64_t *plan_b,
                     int64_t *ws_b, int64_t *host_b, sr_error *e) {
  int U = schedule_exec_ulysses(&p->schedule, 1), H = (int)p->model.num_heads, j = r % U;
  ws_shape sh;
  if (ws_shape_of(p, r, NULL, &sh, e)) return e->code;
  int *h_lo = malloc(sizeof(int) * (size_t)(3 * U + 1));
  if (!h_lo) return sr_internal_error(e, 0, "out of memory");
  schedule_head_split(H, (int)p->model.num_kv_heads, U, h_lo, h_lo + U + 1, h_lo + 2 * U + 1);
  int h0 = c->Hi == 1 ? 0 : h_lo[j], vh = c->Hi == 1 ? 1 : sh.nh;
  free(h_lo);
  int64_t plan = ws_plan_fixed_bytes(c->l->rank_count, c->Wl, masks, H);
  for (int i = 0; sh.nh > 0 && i < c->Wl; i++) {
    int64_t cols = 0;
    for (int h = h0; h < h0 + vh; h++)
      for (int s = 0; s < c->Wl; s++) cols += c->keys[cell(c, h, i, s)];
    plan += index_bytes(c, i, h0, vh, 1, &sh.bars) + fwd_bytes(c, i, vh, 1, cols, &sh.bars);
    for (int s = 0; s <= i; s++) transpose_bytes(c, i, s, h0, vh, sh.nh, sh.nkv, 1, &plan, &sh.bars_t, &sh.bar_scratch);
  }
  *plan_b = plan, *ws_b = ws_total_bytes(&sh), *host_b = ws_host_total_bytes(&sh);
  return SR_OK;
}

// The layer's routes as the executor builds them: from the pattern's counts over the rings' layout when skipping.
static int routes_build(const plan *p, const layer_counts *c, const pattern *pat, int layer, ring_routes *rt,
                        sr_error *e) {
  int R = c->Wl, H = pat->heads, U = schedule_exec_ulysses(&p->schedule, 0);
  if (!p->spec.skip_empty_sends) return ring_routes_build(p, NULL, rt, e);
  work_count *wh = calloc((size_t)H * R * R, sizeof *wh), *rc = calloc((size_t)U * R * R, sizeof *rc);
  int err = !wh || !rc ? sr_internal_error(e, 0, "out of memory") : SR_OK;
  for (int h = 0; !err && h < H; h++)  // one head's counts stand for every head of a uniform layer
    memcpy(wh + (int64_t)h * R * R, c->wc + (int64_t)(c->Hi == 1 ? 0 : h) * R * R, sizeof *wh * (size_t)R * R);
  if (!err) ring_counts_from_heads(p, wh, rc);
  if (!err) err = ring_routes_build(p, rc, rt, e);
  free(wh), free(rc);
  return err;
}

int predict_attention_memory(const plan *p, const pattern *pat, int layer, sim_attn_memory *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  const layout *l = &p->layout;
  int W = l->world, fpdt = p->spec.fpdt_chunk > 0, U = schedule_exec_ulysses(&p->schedule, fpdt);
  int64_t n = 0;
  for (int r = 0; r < W; r++) n = sr_max64(n, l->rank_count[r]);
  const model_config *m = &p->model;
  out->tensors = (double)ws_layer_tensor_bytes(n, (int)m->num_heads, (int)m->num_kv_heads, (int)m->head_dim);
  layout view;
  memset(&view, 0, sizeof view);
  int rc = fpdt ? layout_chunks(l, p->spec.fpdt_chunk, &view, e) : U > 1 ? layout_group_ranks(l, U, &view, e) : SR_OK;
  if (rc) return rc;
  const layout *vl = fpdt || U > 1 ? &view : l;
  layer_counts c;
  head_mask *masks = NULL;
  ring_routes rt;
  int have_rt = 0;
  memset(&rt, 0, sizeof rt);
  rc = counts_build(pat, layer, (int)m->num_kv_heads, vl, p->spec.fwd_runs && !pattern_spec_at_run_time(p->spec.pattern), &c, e);
  if (!rc) rc = tiles_masks_build(pat, layer, &masks, e);
  if (!rc && !fpdt) rc = routes_build(p, &c, pat, layer, &rt, e), have_rt = !rc;
  for (int r = 0; !rc && r < W; r++) {  // each item the largest over the ranks, as the executor reports them
    int64_t pb = 0, wb = 0, hb = 0;
    rc = fpdt ? fpdt_rank(p, &c, masks, r, &pb, &wb, &hb, e) : ring_rank(p, &c, &rt, masks, r, &pb, &wb, e);
    if (rc) break;
    if ((double)pb > out->plan) out->plan = (double)pb;
    if ((double)wb > out->workspace) out->workspace = (double)wb;
    if ((double)hb > out->host_bytes) out->host_bytes = (double)hb;
  }
  out->total = out->tensors + out->plan + out->workspace;
  if (have_rt) ring_routes_free(&rt);
  if (masks) tiles_masks_free(masks, pat->heads);
  counts_free(&c);
  if (vl == &view) layout_free(&view);
  return rc;
}

// Bytes as "12.34 GiB", "56.7 MiB" or "8.0 KiB", as exec/cmd_attn.c prints the measured line.
static void size_text(double b, char *t, size_t size) {
  if (b >= 1073741824.0) snprintf(t, size, "%.2f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) snprintf(t, size, "%.1f MiB", b / 1048576.0);
  else snprintf(t, size, "%.1f KiB", b / 1024.0);
}

void predict_memory_text(const sim_attn_memory *m, char *out, size_t size) {
  char t[5][32];
  double v[5] = {m->total, m->tensors, m->plan, m->workspace, m->host_bytes};
  for (int i = 0; i < 5; i++) size_text(v[i], t[i], sizeof t[i]);
  snprintf(out, size, "%s (the rank's tensors %s, the attention plan %s, the shared workspace %s); pinned host memory %s",
           t[0], t[1], t[2], t[3], t[4]);
}

int sim_exec_workspace(const plan *p, double *device, double *host, sr_error *e) {
  *device = *host = 0;
  int fpdt = p->spec.fpdt_chunk > 0, rc = SR_OK;
  ring_routes rt;
  memset(&rt, 0, sizeof rt);
  if (!fpdt && (rc = ring_routes_build(p, NULL, &rt, e))) return rc;
  for (int r = 0; !rc && r < p->layout.world; r++) {
    ws_shape sh;
    rc = ws_shape_of(p, r, fpdt ? NULL : &rt.rings[r % rt.ulysses], &sh, e);
    if (rc) break;
    if ((double)ws_total_bytes(&sh) > *device) *device = (double)ws_total_bytes(&sh);
    if ((double)ws_host_total_bytes(&sh) > *host) *host = (double)ws_host_total_bytes(&sh);
  }
  if (!fpdt) ring_routes_free(&rt);
  return rc;
}

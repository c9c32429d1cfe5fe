// calib_layer.c — attention calls shaped like a layer's, for calibration (calibrate.h, calib_layer): the FULL-tile
// rate and the cost of a walk measured where a layer runs. The kernel benchmark (exec/calib_attn.c) times walks of 8
// to 32 key tiles a query tile on constant inputs; a ring step of a 16K-128K shard walks 128-1024 key tiles a query
// tile on the run's random inputs, and there the kernels ran at another rate (one H100: forward 554 TFLOP/s by the
// benchmark, 602-605 in 16K-128K causal calls; backward 533 against 470-483), so a layer's passes were mispredicted
// by 7-12% each way. Here the calls are the two a ring step of a dense causal layer makes (its queries against an
// earlier shard, and its causal diagonal block) at the layer's shard lengths, and two short walks of the benchmark's
// shape on the same inputs, so that the fit (calib_fit_walk) separates a walk's fixed cost from a tile's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calib_attn.h"
#include "exec/calibrate.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/cost.h"

#define BAND_TOKENS 32768  // calib_attn_index's length

int calib_layer_lengths_parse(const char *text, int64_t *lengths, int *n, sr_error *e) {
  *n = 0;
  if (!strcmp(text, "none")) return SR_OK;
  char buf[256];
  if (strlen(text) >= sizeof buf) return sr_input_error(e, NULL, "--layer-lengths", "'%.40s...': too long", text);
  snprintf(buf, sizeof buf, "%s", text);
  for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (sr_parse_tokens(s, "--layer-lengths", &v, e)) return e->code;
    if (*n == CALIB_LAYER_LENGTHS)
      return sr_input_error(e, NULL, "--layer-lengths", "more than %d lengths", CALIB_LAYER_LENGTHS);
    if (v < 1024 || v > 262144 || v % TILE)
      return sr_input_error(e, NULL, "--layer-lengths", "%s: a shard length is a multiple of %d tokens in [1K, 256K]", s,
                            TILE);
    lengths[(*n)++] = v;
  }
  if (*n == 0) return sr_input_error(e, NULL, "--layer-lengths", "'%s': expected lengths like 16K,32K,64K or none", text);
  return SR_OK;
}

// The short walks' work: calib_attn_index's FULL tiles (one head serves every head).
static int band_work(int size, int heads, work_count *w, sr_error *e) {
  tile_index t;
  double elems = 0;
  int rc = calib_attn_index(0, size, &t, &elems) ? sr_internal_error(e, 0, "out of memory") : SR_OK;
  if (!rc) w->full = (int64_t)t.n_tiles * heads;
  tiles_free(&t);
  return rc;
}

// The layer calls' work as the planner counts it: a dense causal pattern over 2 L tokens on two contiguous ranks; the
// second rank's queries against the first's keys (off) and its own (diag).
static int layer_work(int64_t tokens, int src, int heads, work_count *w, sr_error *e) {
  layout l;
  pattern pat;
  memset(&l, 0, sizeof l), memset(&pat, 0, sizeof pat);
  work_count *counts = calloc((size_t)heads * 4, sizeof *counts);
  int rc = counts ? SR_OK : sr_internal_error(e, 0, "out of memory");
  if (!rc && !(rc = layout_build(LAYOUT_CONTIGUOUS, 2 * tokens, 2, 1, NULL, &l, e)) &&
      !(rc = pattern_alloc(&pat, 2 * tokens, 1, heads, e)) && !(rc = tiles_account_layer(&pat, 0, &l, counts, e)))
    for (int h = 0; h < heads; h++) {
      const work_count *c = &counts[((int64_t)h * 2 + 1) * 2 + src];
      w->full += c->full, w->partial += c->partial, w->bars += c->bars, w->runs += c->runs, w->pairs += c->pairs;
    }
  pattern_free(&pat), layout_free(&l), free(counts);
  return rc;
}

int calib_layer_add(calib_layer *out, const char *shape, int64_t tokens, int heads, sr_error *e) {
  if (out->n >= CALIB_LAYER_CALLS) return sr_input_error(e, NULL, "layer calls", "more than %d", CALIB_LAYER_CALLS);
  work_count w;
  memset(&w, 0, sizeof w);
  int band = !strcmp(shape, "band8") ? 1 : !strcmp(shape, "band32") ? 4 : 0, rc;
  if (band && tokens != BAND_TOKENS)
    return sr_input_error(e, NULL, "layer calls", "%s over %lld tokens: the short walks are on %d", shape,
                          (long long)tokens, BAND_TOKENS);
  if (band) rc = band_work(band, heads, &w, e);
  else if (!strcmp(shape, "off") || !strcmp(shape, "diag")) rc = layer_work(tokens, !strcmp(shape, "diag"), heads, &w, e);
  else return sr_input_error(e, NULL, "layer calls", "'%s': expected band8, band32, off or diag", shape);
  if (rc) return rc;
  int i = out->n++;
  snprintf(out->shape[i], sizeof out->shape[i], "%s", shape);
  out->tokens[i] = tokens;
  out->full[i] = (double)w.full, out->partial[i] = (double)w.partial;
  out->cells[i] = cost_ring_cells(&w, (double)((tokens + TILE - 1) / TILE), heads);
  out->seconds[0][i] = out->seconds[1][i] = 0;
  return SR_OK;
}

int calib_layer_fit(calib_layer *out, const gpu_desc *gpu, int heads, int kv_heads, int head_dim, sr_error *e) {
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_heads = heads, m.num_kv_heads = kv_heads, m.head_dim = head_dim;
  for (int p = 0; p < 2; p++) {
    cost_attn_rates r;
    cost_attn_rates_init(gpu, &m, p, &r);
    double flops[CALIB_LAYER_CALLS], rest[CALIB_LAYER_CALLS];
    int layer[CALIB_LAYER_CALLS];
    for (int i = 0; i < out->n; i++) {
      work_count full = {(int64_t)out->full[i], 0, 0, 0, 0}, part = {0, (int64_t)out->partial[i], 0, 0, 0};
      flops[i] = r.ratio * out->full[i] * r.tile;  // as cost_attn_time counts them
      rest[i] = out->seconds[p][i] - cost_attn_time(&r, &part);
      layer[i] = strncmp(out->shape[i], "band", 4) != 0;
      // the call's keys are its tokens (its queries against as many keys); cost_attn_l2's test
      out->beyond[i] = r.l2_keys > 0 && (double)out->tokens[i] > r.l2_keys;
      out->old_s[p][i] = cost_attn_time(&r, &full) + cost_attn_time(&r, &part);
    }
    int rc = calib_fit_walk(flops, out->cells, rest, layer, out->beyond, out->n, &out->tflops[p], &out->walk_us[p],
                            &out->fixed_us[p], &out->l2_slow[p], e);
    if (rc) return rc;
    for (int i = 0; i < out->n; i++)  // the fit's own terms: a call's fixed time, its walks, its tiles, beyond the L2
      out->model_s[p][i] = (out->fixed_us[p] + out->cells[i] * out->walk_us[p]) * 1e-6 +
                           flops[i] / (out->tflops[p] * 1e12) * (1 + (out->beyond[i] ? out->l2_slow[p] : 0)) +
                           (out->seconds[p][i] - rest[i]);
  }
  return SR_OK;
}

int64_t calib_attn_held_length(const int64_t *lengths, int n) {
  int64_t best = 0;
  for (int i = 0; i < n; i++) {
    int64_t d = llabs(lengths[i] - BAND_TOKENS), db = llabs(best - BAND_TOKENS);
    if (!best || d < db || (d == db && lengths[i] > best)) best = lengths[i];
  }
  return best;
}

double calib_attn_sustained(double burst_s, double held_s) {
  if (!(burst_s > 0) || !(held_s > 0)) return 0;
  return burst_s < held_s ? burst_s / held_s : 1;
}

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"

#define CK(call)                                                                                                  \
  do {                                                                                                            \
    cudaError_t r_ = (call);                                                                                      \
    if (r_ != cudaSuccess) {                                                                                      \
      rc = sr_internal_error(e, 0, "layer-call calibration: CUDA error %s at line %d", cudaGetErrorString(r_), __LINE__); \
      goto done;                                                                                                  \
    }                                                                                                             \
  } while (0)

// The calls of one index: its queries (n_q at positions qpos) against each source's keys.
typedef struct {
  tile_index t;
  head_mask *masks;  // host, one a head
  int world;
  int64_t n_q, n_k[2];
  int64_t *qpos, *kpos[2];
} call_set;

// One forward (phase 0) or backward call of source s.
#define CALL(phase, s)                                                                                              \
  ((phase) == 0 ? sa_fwd(&sh, x.q, x.k, x.v, qpos, kpos[s], &ix, s, masks_d, NULL, NULL, x.o, x.lse, NULL, e)        \
                : sa_bwd(&sh, x.q, x.k, x.v, x.lse, x.drow, x.dout, qpos, kpos[s], &ix, &ixt[s], s, masks_d, x.dq, x.dk, \
                         x.dv, NULL, e))

// Time every source's call of cs, forward then backward: secs[src][phase], one call (mean of 5 after 2 warm-ups).
// held_s > 0 instead: the last source's forward and backward back to back for held_s (half untimed, half timed in
// batches of 4 pairs, so that the host keeps the queue full), secs[last][0] the seconds of one pair.
static int time_set(const call_set *cs, int heads, int kv_heads, int head_dim, double held_s, double gemm_s,
                    double secs[2][2], double *gemm_tflops, sr_error *e) {
  int rc = SR_OK, W = cs->world;
  sa_gpu_index ix = {0};
  sa_gpu_index_t ixt[2];
  tile_index_t tt[2];
  memset(ixt, 0, sizeof ixt), memset(tt, 0, sizeof tt);
  head_mask *masks_d = NULL;
  int64_t *qpos = NULL, *kpos[2] = {NULL, NULL}, max_k = sr_max64(cs->n_k[0], W > 1 ? cs->n_k[1] : 0);
  calib_operands x = {0};
  cudaEvent_t e0 = NULL, e1 = NULL, ev[8] = {NULL}, gv[8] = {NULL};
  calib_gemm_load *load = NULL;
  if ((rc = sa_gpu_index_upload(&cs->t, &ix, e)) || (rc = sa_gpu_masks_upload(cs->masks, heads, &masks_d, e))) goto done;
  CK(cudaMalloc((void **)&qpos, sizeof(int64_t) * (size_t)cs->n_q));
  CK(cudaMemcpy(qpos, cs->qpos, sizeof(int64_t) * (size_t)cs->n_q, cudaMemcpyHostToDevice));
  for (int s = 0; s < W; s++) {
    CK(cudaMalloc((void **)&kpos[s], sizeof(int64_t) * (size_t)(cs->n_k[s] + 1)));
    CK(cudaMemcpy(kpos[s], cs->kpos[s], sizeof(int64_t) * (size_t)cs->n_k[s], cudaMemcpyHostToDevice));
    if ((rc = tiles_transpose(&cs->t, s, cs->n_k[s], &tt[s], e)) ||
        (rc = sa_gpu_index_t_upload(&tt[s], heads, kv_heads, &ixt[s], e)))
      goto done;
  }
  // Random operands, as the layers' (attn --inputs random): the rate depends on them through the power they draw.
  if ((rc = calib_operands_make(cs->n_q, max_k, heads, kv_heads, head_dim, 11, &x, e))) goto done;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int warm = 2, reps = 5;
  if (held_s > 0) {
    int s = W - 1, pairs = 0;
    sa_shape sh = {cs->n_q, cs->n_k[s], heads, kv_heads, head_dim, 1.0f / sqrtf((float)head_dim), 0};
    double spent[2] = {0, 0}, g_flops[2] = {0, 0}, g_secs = 0;
    if (gemm_s > 0 && (rc = calib_gemm_load_new(&load, e))) goto done;
    for (int i = 0; i < 8; i++) {
      CK(cudaEventCreate(&ev[i]));
      CK(cudaEventCreate(&gv[i]));
    }
    // four pairs a batch, each between its own two events (the GEMMs queued after a pair are not timed)
    for (int timed = 0; timed < 2; timed++)
      while (spent[timed] < held_s / 2) {
        for (int r = 0; r < 4; r++, pairs += timed) {
          CK(cudaEventRecord(ev[2 * r], NULL));
          if (CALL(0, s) || CALL(1, s)) {
            rc = e->code;
            goto done;
          }
          CK(cudaEventRecord(ev[2 * r + 1], NULL));
          if (load) {
            CK(cudaEventRecord(gv[2 * r], NULL));
            if ((rc = calib_gemm_load_queue(load, gemm_s, &g_flops[timed], e))) goto done;
            CK(cudaEventRecord(gv[2 * r + 1], NULL));
          }
        }
        CK(cudaEventSynchronize(ev[7]));
        if (load) CK(cudaEventSynchronize(gv[7]));
        for (int r = 0; r < 4; r++) {
          float ms;
          CK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
          spent[timed] += ms * 1e-3;
          if (load && timed) {
            CK(cudaEventElapsedTime(&ms, gv[2 * r], gv[2 * r + 1]));
            g_secs += ms * 1e-3;
          }
        }
      }
    CK(cudaDeviceSynchronize());
    secs[s][0] = spent[1] / pairs, secs[s][1] = 0;
    if (gemm_tflops) *gemm_tflops = g_secs > 0 ? g_flops[1] / g_secs / 1e12 : 0;
    goto done;
  }
  for (int s = 0; s < W; s++)
    for (int phase = 0; phase < 2; phase++) {
      // deterministic 0: the fastest backward, the one attn and train run by default
      sa_shape sh = {cs->n_q, cs->n_k[s], heads, kv_heads, head_dim, 1.0f / sqrtf((float)head_dim), 0};
      for (int r = 0; r < warm + reps; r++) {
        if (r == warm) CK(cudaEventRecord(e0, NULL));
        if (CALL(phase, s)) {
          rc = e->code;
          goto done;
        }
      }
      CK(cudaEventRecord(e1, NULL));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      secs[s][phase] = ms * 1e-3 / reps;
    }
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  for (int i = 0; i < 8; i++) {
    if (ev[i]) cudaEventDestroy(ev[i]);
    if (gv[i]) cudaEventDestroy(gv[i]);
  }
  calib_gemm_load_free(load);
  calib_operands_free(&x);
  cudaFree(qpos);
  for (int s = 0; s < W; s++) {
    cudaFree(kpos[s]);
    sa_gpu_index_t_free(&ixt[s]);
    if (tt[s].kv_cnt || tt[s].bar_q_cnt) tiles_transpose_free(&tt[s]);
  }
  if (masks_d) sa_gpu_masks_free(masks_d, heads);
  sa_gpu_index_free(&ix);
  return rc;
}

// The short walk of calib_attn_index size `size` on 32K tokens, dense masks (its tiles are all FULL).
static int time_band(int size, int heads, int kv_heads, int head_dim, double *fwd_s, double *bwd_s, sr_error *e) {
  call_set cs;
  memset(&cs, 0, sizeof cs);
  double elems, secs[2][2] = {{0}};
  cs.world = 1, cs.n_q = cs.n_k[0] = BAND_TOKENS;
  cs.masks = calloc((size_t)heads, sizeof *cs.masks);
  cs.qpos = malloc(sizeof(int64_t) * BAND_TOKENS);
  int rc = calib_attn_index(0, size, &cs.t, &elems) || !cs.masks || !cs.qpos ? sr_internal_error(e, 0, "out of memory")
                                                                             : SR_OK;
  if (!rc) {
    for (int h = 0; h < heads; h++) cs.masks[h].kind = PATTERN_DENSE, cs.masks[h].n_tokens = BAND_TOKENS;
    for (int64_t x = 0; x < BAND_TOKENS; x++) cs.qpos[x] = x;
    cs.kpos[0] = cs.qpos;
    rc = time_set(&cs, heads, kv_heads, head_dim, 0, 0, secs, NULL, e);
  }
  *fwd_s = secs[0][0], *bwd_s = secs[0][1];
  tiles_free(&cs.t), free(cs.masks), free(cs.qpos);
  return rc;
}

// The off and diag calls at shard length L: the second of two contiguous ranks over a dense causal 2 L tokens (held_s:
// time_set's).
static int time_layer(int64_t L, int heads, int kv_heads, int head_dim, double held_s, double gemm_s, double secs[2][2],
                      double *gemm_tflops, sr_error *e) {
  call_set cs;
  memset(&cs, 0, sizeof cs);
  layout l;
  pattern pat;
  memset(&l, 0, sizeof l), memset(&pat, 0, sizeof pat);
  cs.world = 2, cs.n_q = cs.n_k[0] = cs.n_k[1] = L;
  cs.qpos = malloc(sizeof(int64_t) * (size_t)L);
  cs.kpos[0] = malloc(sizeof(int64_t) * (size_t)L);
  int rc = cs.qpos && cs.kpos[0] ? SR_OK : sr_internal_error(e, 0, "out of memory");
  if (!rc && !(rc = layout_build(LAYOUT_CONTIGUOUS, 2 * L, 2, 1, NULL, &l, e)) &&
      !(rc = pattern_alloc(&pat, 2 * L, 1, heads, e)) && !(rc = tiles_build(&pat, 0, &l, 1, &cs.t, e)) &&
      !(rc = tiles_masks_build(&pat, 0, &cs.masks, e))) {
    layout_positions(&l, 0, cs.kpos[0]);
    layout_positions(&l, 1, cs.qpos);
    cs.kpos[1] = cs.qpos;
    rc = time_set(&cs, heads, kv_heads, head_dim, held_s, gemm_s, secs, gemm_tflops, e);
  }
  if (cs.masks) tiles_masks_free(cs.masks, heads);
  tiles_free(&cs.t), pattern_free(&pat), layout_free(&l), free(cs.qpos), free(cs.kpos[0]);
  return rc;
}

int calib_layer_measure(const int64_t *lengths, int n_lengths, int heads, int kv_heads, int head_dim, calib_layer *out,
                        sr_error *e) {
  memset(out, 0, sizeof *out);
  const char *bands[2] = {"band8", "band32"};
  for (int b = 0; b < 2; b++) {
    int i = out->n, rc = calib_layer_add(out, bands[b], BAND_TOKENS, heads, e);
    if (!rc) rc = time_band(b ? 4 : 1, heads, kv_heads, head_dim, &out->seconds[0][i], &out->seconds[1][i], e);
    if (rc) return rc;
  }
  for (int j = 0; j < n_lengths; j++) {
    double secs[2][2];
    int i = out->n, rc = calib_layer_add(out, "off", lengths[j], heads, e);
    if (!rc) rc = calib_layer_add(out, "diag", lengths[j], heads, e);
    if (!rc) rc = time_layer(lengths[j], heads, kv_heads, head_dim, 0, 0, secs, NULL, e);
    if (rc) return rc;
    for (int p = 0; p < 2; p++) out->seconds[p][i] = secs[0][p], out->seconds[p][i + 1] = secs[1][p];
  }
  return SR_OK;
}

int calib_attn_held_measure(int64_t tokens, int heads, int kv_heads, int head_dim, double seconds, double gemm_s,
                            double *pair_s, double *gemm_tflops, sr_error *e) {
  double secs[2][2] = {{0}};
  *pair_s = 0, *gemm_tflops = 0;
  if (!(seconds > 0)) return SR_OK;
  int rc = time_layer(tokens, heads, kv_heads, head_dim, seconds, gemm_s, secs, gemm_tflops, e);
  *pair_s = secs[1][0];
  return rc;
}

#else

int calib_layer_measure(const int64_t *lengths, int n_lengths, int heads, int kv_heads, int head_dim, calib_layer *out,
                        sr_error *e) {
  memset(out, 0, sizeof *out);
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (the layer-shaped calls need a GPU build)");
}

int calib_attn_held_measure(int64_t tokens, int heads, int kv_heads, int head_dim, double seconds, double gemm_s,
                            double *pair_s, double *gemm_tflops, sr_error *e) {
  *pair_s = 0, *gemm_tflops = 0;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (the held attention call needs a GPU build)");
}

#endif

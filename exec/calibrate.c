// calibrate.c — link and kernel-rate fits and the p2p / all-to-all measurements of calibration (calibrate.h).
#include "exec/calibrate.h"

#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

#include "sim/cost.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"
#endif

int calib_bar_walk_parts(void) {
#if SR_HAVE_CUDA
  return sa_bwd_default_variant() >= 3 ? COST_BAR_SPLIT_PARTS : 1;
#else
  return 0;
#endif
}

static const char *bars_kind(int parts, int ws, int pairs) {
  return ws && pairs ? "the warp-specialized kernel in pairs of compute chunks (backward variant 5)"
         : ws        ? "the warp-specialized kernel, a compute chunk a CTA (backward variant 4)"
         : parts > 1 ? "the mma.sync kernels with the split walk (variant 3)"
                     : "the mma.sync kernel's whole walk (variants 0-2)";
}

const char *calib_bars_note(const cluster_desc *c, int parts, int ws, int pairs, char *buf, size_t size) {
  const gpu_desc *g = &c->gpu;
  if (!c->calibrated || g->bar_walk_parts <= 0 || parts <= 0) return NULL;
  int fparts = g->bar_walk_parts > 1 ? 2 : 1, bparts = parts > 1 ? 2 : 1;
  int fpairs = g->bar_walk_ws && g->bar_walk_pairs, bpairs = ws && pairs;
  if (fparts == bparts && !g->bar_walk_ws == !ws && fpairs == bpairs) return NULL;
  snprintf(buf, size, "note: %s describes the bars' backward on %s, this binary runs %s: its bars may be mispredicted "
           "(rerun sparsering-exec calibrate on this build)", c->name,
           bars_kind(g->bar_walk_parts, g->bar_walk_ws, g->bar_walk_pairs), bars_kind(parts, ws, pairs));
  return buf;
}

int calib_bar_walk_ws(void) {
#if SR_HAVE_CUDA
  return sa_bwd_default_variant() >= 4;
#else
  return 0;
#endif
}

int calib_bar_walk_pairs(void) {
#if SR_HAVE_CUDA
  return sa_bwd_default_variant() >= 5;
#else
  return 0;
#endif
}

int calib_fit_link(const double *bytes, const double *seconds, int n, double *latency_us, double *gbps, sr_error *e) {
  if (n < 2) return sr_input_error(e, NULL, "sizes", "a link fit needs at least 2 message sizes, got %d", n);
  double *w = malloc(sizeof(double) * (size_t)n);
  if (!w) return sr_internal_error(e, 0, "out of memory");
  for (int i = 0; i < n; i++) w[i] = seconds[i] > 0 ? 1.0 / (seconds[i] * seconds[i]) : 0;
  double c0, c1, cov00, cov01, cov11, chisq;
  gsl_fit_wlinear(bytes, 1, w, 1, seconds, 1, (size_t)n, &c0, &c1, &cov00, &cov01, &cov11, &chisq);
  free(w);
  if (!(c1 > 0)) return sr_input_error(e, NULL, "timings", "time does not grow with message size (slope %g s/B)", c1);
  *latency_us = fmax(0, c0) * 1e6;  // a slightly negative intercept is noise around zero latency
  *gbps = 1.0 / c1 / 1e9;
  return SR_OK;
}

int calib_fit_rate(const double *flops, const double *seconds, int n, double *tflops, double *overhead_us, sr_error *e) {
  if (n < 2) return sr_input_error(e, NULL, "sizes", "a rate fit needs at least 2 work sizes, got %d", n);
  double lat, gflops;  // same model as a link: seconds = fixed + amount / rate
  if (calib_fit_link(flops, seconds, n, &lat, &gflops, e))
    return sr_input_error(e, NULL, "timings", "kernel time does not grow with its FLOPs");
  *tflops = gflops * 1e9 / 1e12;
  *overhead_us = lat;
  return SR_OK;
}

double calib_sustained_rate(const double *flops, const double *seconds, int n) {
  int big = -1;
  for (int i = 0; i < n; i++)
    if (seconds[i] > 0 && (big < 0 || flops[i] > flops[big])) big = i;
  return big < 0 ? 0 : flops[big] / seconds[big] / 1e12;
}

int calib_fit_ring_step(const double *steps, const double *cells, const double *extra_s, const double *total_s, int n,
                        double *step_us, double *cell_us, sr_error *e) {
  if (n < 2) return sr_input_error(e, NULL, "ring steps", "the fit needs at least 2 measurements, got %d", n);
  gsl_matrix *X = gsl_matrix_alloc((size_t)n, 2), *cov = gsl_matrix_alloc(2, 2);
  gsl_vector *y = gsl_vector_alloc((size_t)n), *w = gsl_vector_alloc((size_t)n), *c = gsl_vector_alloc(2);
  gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc((size_t)n, 2);
  int rc = SR_OK;
  if (!X || !cov || !y || !w || !c || !ws) {
    rc = sr_internal_error(e, 0, "out of memory");
  } else {
    for (int i = 0; i < n; i++) {
      gsl_matrix_set(X, (size_t)i, 0, steps[i]);
      gsl_matrix_set(X, (size_t)i, 1, cells[i]);
      gsl_vector_set(y, (size_t)i, extra_s[i]);
      gsl_vector_set(w, (size_t)i, total_s[i] > 0 ? 1.0 / (total_s[i] * total_s[i]) : 0);
    }
    size_t rank = 0;
    double chisq;
    // A rank-deficient design (steps proportional to cells) cannot separate the two costs.
    if (gsl_multifit_wlinear_tsvd(X, w, y, 1e-12, c, cov, &chisq, &rank, ws) || rank < 2) {
      rc = sr_input_error(e, NULL, "ring steps", "the measurements do not separate the fixed and the per-cell cost");
    } else {
      *step_us = fmax(0, gsl_vector_get(c, 0)) * 1e6;
      *cell_us = fmax(0, gsl_vector_get(c, 1)) * 1e6;
    }
  }
  if (X) gsl_matrix_free(X);
  if (cov) gsl_matrix_free(cov);
  if (y) gsl_vector_free(y);
  if (w) gsl_vector_free(w);
  if (c) gsl_vector_free(c);
  if (ws) gsl_multifit_linear_free(ws);
  return rc;
}

// Weighted least squares of seconds over k <= 4 columns (weights 1 / seconds^2), over the calls `use` marks (NULL:
// all): the coefficients in c. 0; -1 when the calls do not separate the columns (rank below k); 1 out of memory.
static int fit_columns(const double *const *cols, int k, const double *seconds, const int *use, int n, double *c) {
  int m = 0;
  for (int i = 0; i < n; i++) m += !use || use[i];
  if (m < k) return -1;
  gsl_matrix *X = gsl_matrix_alloc((size_t)m, (size_t)k), *cov = gsl_matrix_alloc((size_t)k, (size_t)k);
  gsl_vector *y = gsl_vector_alloc((size_t)m), *w = gsl_vector_alloc((size_t)m), *cv = gsl_vector_alloc((size_t)k);
  gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc((size_t)m, (size_t)k);
  int rc = 1;
  if (X && cov && y && w && cv && ws) {
    for (int i = 0, row = 0; i < n; i++) {
      if (use && !use[i]) continue;
      for (int j = 0; j < k; j++) gsl_matrix_set(X, (size_t)row, (size_t)j, cols[j][i]);
      gsl_vector_set(y, (size_t)row, seconds[i]);
      gsl_vector_set(w, (size_t)row++, seconds[i] > 0 ? 1.0 / (seconds[i] * seconds[i]) : 0);
    }
    size_t rank = 0;
    double chisq;
    rc = gsl_multifit_wlinear_tsvd(X, w, y, 1e-12, cv, cov, &chisq, &rank, ws) || rank < (size_t)k ? -1 : 0;
    for (int j = 0; !rc && j < k; j++) c[j] = gsl_vector_get(cv, (size_t)j);
  }
  if (X) gsl_matrix_free(X);
  if (cov) gsl_matrix_free(cov);
  if (y) gsl_vector_free(y);
  if (w) gsl_vector_free(w);
  if (cv) gsl_vector_free(cv);
  if (ws) gsl_multifit_linear_free(ws);
  return rc;
}

// Three terms where the data separate them: a call's fixed time, its walks' (each (query tile, head) cell loads its Q
// tile and ends in an epilogue whatever its walk's length, so short walks run below the rate of long ones) and its
// tiles'; a fourth, the FULL tiles' loss in calls whose keys outgrow the L2 cache (sim/cost.c, cost_attn_l2), where
// the layer-shaped calls hold some beyond it and some within. Weighted by 1 / seconds^2 as the link fit, so that the
// short calls count as much as the long ones.
int calib_fit_walk(const double *flops, const double *cells, const double *seconds, const int *layer, const int *beyond,
                   int n, double *tflops, double *walk_us, double *fixed_us, double *l2_slow, sr_error *e) {
  *l2_slow = 0;
  if (n < 3) return sr_input_error(e, NULL, "layer calls", "the walk's fit needs at least 3 timed calls, got %d", n);
  int within = 0, past = 0;
  for (int i = 0; beyond && i < n; i++)
    if (layer[i]) past += beyond[i] != 0, within += beyond[i] == 0;
  int l2 = within > 0 && past > 0;
  double *one = malloc(sizeof(double) * (size_t)n), *extra = malloc(sizeof(double) * (size_t)n), c[4] = {0};
  if (!one || !extra) {
    free(one), free(extra);
    return sr_internal_error(e, 0, "out of memory");
  }
  for (int i = 0; i < n; i++) one[i] = 1.0, extra[i] = l2 && beyond[i] ? flops[i] : 0;
  const double *cols[4] = {one, cells, flops, extra}, *no_walk[3] = {one, flops, extra};
  int rc = fit_columns(cols, l2 ? 4 : 3, seconds, NULL, n, c);
  double fixed = c[0], walk = c[1], per_flop = c[2], per_l2 = l2 ? c[3] : 0;
  if (!rc && l2 && !(walk > 0)) {
    // No cost a walk: the rates of the layer-shaped calls alone (the short ones would pull them towards their own).
    rc = fit_columns(no_walk, 3, seconds, layer, n, c);
    fixed = c[0], walk = 0, per_flop = c[1], per_l2 = c[2];
  }
  free(one), free(extra);
  if (rc > 0) return sr_internal_error(e, 0, "out of memory");
  if (rc)
    return sr_input_error(e, NULL, "layer calls",
                          "the calls do not separate a call's fixed time, its walks and its tiles");
  if (l2 && per_flop > 0 && !(per_l2 > 0))  // the calls beyond the L2 run no slower a tile: the rule without the term
    return calib_fit_walk(flops, cells, seconds, layer, NULL, n, tflops, walk_us, fixed_us, l2_slow, e);
  if (!l2 && !(walk > 0)) {
    // No cost a walk: the rate of the layer-shaped calls alone (the short ones would pull it towards their own).
    double f[CALIB_LAYER_CALLS], t[CALIB_LAYER_CALLS], fixed_pos_us;
    int m = 0;
    for (int i = 0; i < n && m < CALIB_LAYER_CALLS; i++)
      if (layer[i]) f[m] = flops[i], t[m++] = seconds[i];
    if (m < 2 || calib_fit_rate(f, t, m, tflops, &fixed_pos_us, e))
      return sr_input_error(e, NULL, "layer calls", "no cost a walk, and the layer-shaped calls give no rate");
    *walk_us = 0, *fixed_us = fixed_pos_us;
    return SR_OK;
  }
  if (!(per_flop > 0)) return sr_input_error(e, NULL, "layer calls", "time does not grow with the calls' tiles");
  *tflops = 1.0 / per_flop / 1e12, *walk_us = walk * 1e6, *fixed_us = fixed * 1e6, *l2_slow = per_l2 / per_flop;
  return SR_OK;
}

// NVIDIA's datasheets (dense, without sparsity): H100 SXM / H200 SXM 989 bf16 and 34 FP64, H100 PCIe 756
// and 26, H800 SXM 989 and 1 (FP64 cut), A100 / A800 312 and 9.7. The PCIe H100 is told apart by name.
void calib_gpu_peaks(const char *name, double *peak_tflops, double *fp64_tflops) {
  *peak_tflops = *fp64_tflops = 0;
  if (strstr(name, "H200")) *peak_tflops = 989, *fp64_tflops = 34;
  else if (strstr(name, "H800")) *peak_tflops = 989, *fp64_tflops = 1;
  else if (strstr(name, "H100") && strstr(name, "PCIe")) *peak_tflops = 756, *fp64_tflops = 26;
  else if (strstr(name, "H100")) *peak_tflops = 989, *fp64_tflops = 34;
  else if (strstr(name, "A100") || strstr(name, "A800")) *peak_tflops = 312, *fp64_tflops = 9.7;
}

// NVIDIA's architecture whitepapers: A100 40 MB of L2 (NVIDIA A100 Tensor Core GPU Architecture, 2020), H100 50 MB on
// both the SXM5 and the PCIe board (NVIDIA H100 Tensor Core GPU Architecture, 2022). The H200's datasheet does not list
// its L2; it is the H100 SXM's Hopper GH100 with 141 GB of HBM3e (docs/design.md, "A call's keys beyond the L2
// cache"), taken here at the H100's 50 MB. The export boards (A800, H800) are left unknown: no datasheet we found
// gives theirs.
double calib_gpu_l2(const char *name) {
  if (strstr(name, "H100") || strstr(name, "H200")) return 50;
  if (strstr(name, "A100")) return 40;
  return 0;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *buf_alloc(comm *c, int64_t bytes) {
  if (c->kind == COMM_CPU) return calloc(1, (size_t)(bytes > 0 ? bytes : 1));
#if SR_HAVE_CUDA
  void *p = NULL;
  if (cudaMalloc(&p, (size_t)(bytes > 0 ? bytes : 1)) != cudaSuccess) return NULL;
  cudaMemset(p, 0, (size_t)(bytes > 0 ? bytes : 1));
  return p;
#else
  return NULL;
#endif
}

static void buf_free(comm *c, void *p) {
  if (c->kind == COMM_CPU) free(p);
#if SR_HAVE_CUDA
  else if (p) cudaFree(p);
#endif
}

int calib_p2p(comm *c, int a, int b, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e) {
  int64_t maxb = 0;
  for (int i = 0; i < n; i++) maxb = sr_max64(maxb, sizes[i]);
  int me = c->rank == a ? 0 : c->rank == b ? 1 : -1;
  void *buf = me >= 0 ? buf_alloc(c, maxb) : NULL;
  double *t = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
  if ((me >= 0 && !buf) || !t) {
    buf_free(c, buf), free(t);
    return sr_internal_error(e, 0, "rank %d: out of memory for calibration buffers", c->rank);
  }
  int rc = SR_OK;
  for (int i = 0; i < n && rc == SR_OK; i++) {
    if (me >= 0) {
      int peer = me == 0 ? b : a;
      for (int r = 0; r <= reps && rc == SR_OK; r++) {  // r == 0 warms up
        comm_p2p ping = {peer, me == 0, buf, sizes[i], COMM_BYTE, 2 * r};
        comm_p2p pong = {peer, me == 1, buf, sizes[i], COMM_BYTE, 2 * r + 1};
        comm_pending p;
        double t0 = sr_now();
        rc = comm_p2p_start(c, &ping, 1, &p, e) || comm_p2p_wait(c, &p, e) || comm_sync(c, e) ||
             comm_p2p_start(c, &pong, 1, &p, e) || comm_p2p_wait(c, &p, e) || comm_sync(c, e);
        if (r > 0) t[r - 1] = (sr_now() - t0) / 2;
      }
      seconds[i] = median(t, reps);
    }
    if (rc == SR_OK && comm_barrier(c, e)) rc = e->code;
  }
  // Every rank gets rank a's medians.
  if (rc == SR_OK && comm_host_bcast(c, seconds, n, MPI_DOUBLE, a, e)) rc = e->code;
  buf_free(c, buf), free(t);
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

int calib_alltoall(comm *c, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e) {
  int W = c->world;
  int64_t maxb = 0;
  for (int i = 0; i < n; i++) maxb = sr_max64(maxb, sizes[i]);
  void *sb = buf_alloc(c, maxb), *rb = buf_alloc(c, maxb);
  int64_t *k = calloc((size_t)W * 4, sizeof(int64_t));
  double *t = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
  if (!sb || !rb || !k || !t) {
    buf_free(c, sb), buf_free(c, rb), free(k), free(t);
    return sr_internal_error(e, 0, "rank %d: out of memory for calibration buffers", c->rank);
  }
  int rc = SR_OK;
  for (int i = 0; i < n && rc == SR_OK; i++) {
    int64_t per = W > 1 ? sizes[i] / (W - 1) : 0;
    for (int r = 0; r < W; r++) {
      k[r] = k[2 * W + r] = r == c->rank ? 0 : per;
      k[W + r] = k[3 * W + r] = (int64_t)(r - (r > c->rank)) * per;
      if (r == c->rank) k[W + r] = k[3 * W + r] = 0;
    }
    for (int rep = 0; rep <= reps && rc == SR_OK; rep++) {
      if (comm_barrier(c, e)) {
        rc = e->code;
        break;
      }
      double t0 = sr_now();
      rc = comm_alltoallv(c, sb, k, k + W, rb, k + 2 * W, k + 3 * W, COMM_BYTE, e) || comm_sync(c, e);
      double dt = sr_now() - t0;
      if (rc == SR_OK && comm_host_allreduce(c, &dt, 1, MPI_DOUBLE, MPI_MAX, e)) rc = e->code;  // finished when the last rank is
      if (rep > 0) t[rep - 1] = dt;
    }
    seconds[i] = median(t, reps);
  }
  buf_free(c, sb), buf_free(c, rb), free(k), free(t);
  return rc ? (e->code ? e->code : SR_EINTERNAL) : SR_OK;
}

// calibrate.c — link and kernel-rate fits and the p2p / all-to-all measurements of calibration (calibrate.h).
#include "exec/calibrate.h"

#include <gsl/gsl_fit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>
#endif

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

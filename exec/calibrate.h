// calibrate.h — measuring the rates the simulator's cost model uses, on the machine at hand, and
// fitting them: link latency and bandwidth (time = latency + bytes / bandwidth, GSL weighted least
// squares), GEMM efficiency (cuBLAS) and attention kernel efficiency per tile kind and phase.
// `sparsering-exec calibrate` writes the results as a cluster file (plan/cluster.h format).
#ifndef SR_CALIBRATE_H
#define SR_CALIBRATE_H

#include <stdint.h>

#include "exec/comm.h"
#include "plan/error.h"

// Fit seconds = latency + bytes / bandwidth over n >= 2 points by least squares weighted by
// 1/seconds^2 (relative errors: small messages count as much as large ones). Outputs microseconds
// and GB/s (1e9 B/s). Input error when the points do not determine a positive bandwidth.
int calib_fit_link(const double *bytes, const double *seconds, int n, double *latency_us, double *gbps, sr_error *e);

// Fit seconds = overhead + flops / rate over n >= 2 kernel timings of growing work by least squares
// weighted by 1/seconds^2; outputs the rate in TFLOP/s (the slope's inverse: what the simulator's
// efficiency x peak stands for, sim/cost.c) and the fixed time per call in microseconds (launch,
// prologue; not in the simulator's model, so it is reported and left out of the efficiency).
int calib_fit_rate(const double *flops, const double *seconds, int n, double *tflops, double *overhead_us, sr_error *e);

// One-way time of a message between ranks a and b for each size (half the ping-pong round trip,
// median of reps). Collective over c (other ranks wait at the final barrier). Buffers are host
// memory on COMM_CPU and device memory on COMM_NCCL. seconds[] is filled on every rank.
int calib_p2p(comm *c, int a, int b, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e);
// Time of an all-to-all in which every rank sends `sizes[i]` bytes in total (split evenly over the
// other ranks), median of reps; seconds[] on every rank.
int calib_alltoall(comm *c, const int64_t *sizes, int n, int reps, double *seconds, sr_error *e);

#define CALIB_SIZES 3  // work sizes per (phase, kind) that the rate fit takes
// Measured kernel efficiencies (fraction of peak_tflops), CUDA only.
typedef struct {
  double gemm;
  double attn[2][3];  // [fwd, bwd][full, partial, bar]: fitted rate / peak
  double gemm_tflops, attn_tflops[2][3];  // the achieved rates behind them
  double attn_overhead_us[2][3];          // fitted fixed time per kernel call
  double flops[2][3][CALIB_SIZES], seconds[2][3][CALIB_SIZES];  // the timings the fits took
} calib_kernels;

// Run cuBLAS bf16 GEMMs and the sparse attention kernels on synthetic tile indices (one kind of
// tile each, CALIB_SIZES amounts of work) on this rank's GPU; fit each (phase, kind) with
// calib_fit_rate; efficiencies relative to peak_tflops.
int calib_kernels_measure(comm *c, double peak_tflops, int heads, int kv_heads, int head_dim, calib_kernels *k,
                          sr_error *e);

#endif

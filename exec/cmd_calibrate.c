// cmd_calibrate.c — `sparsering-exec calibrate`: measure p2p latency/bandwidth (inside a node and,
// with several nodes, across), all-to-all, and (CUDA) GEMM and attention kernel efficiencies; fit the
// links by least squares and write a cluster file the simulator reads (plan/cluster.h format).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/calibrate.h"
#include "exec/comm.h"
#include "exec/exec.h"
#include "plan/cluster.h"
#include "plan/util.h"

static void fail(comm *c, sr_error *e) __attribute__((noreturn));
static void fail(comm *c, sr_error *e) {
  char m[1100];
  snprintf(m, sizeof m, "%s", e->msg);
  comm_abort(c, c->rank, m, comm_status_of(e));
}

// Sizes 2^lo .. 2^hi bytes, every other power of two.
static int size_ladder(int lo, int hi, int64_t *s) {
  int n = 0;
  for (int p = lo; p <= hi; p += 2) s[n++] = (int64_t)1 << p;
  return n;
}

static void log_points(sr_buf *log, const char *what, const int64_t *sz, const double *t, int n) {
  for (int i = 0; i < n; i++) sr_buf_printf(log, "%s,%lld,%.3f\n", what, (long long)sz[i], t[i] * 1e6);
}

static const cli_flag calibrate_flags[] = {
    {"out", cli_out_file, "required", "the cluster file to write (the simulator reads it)"},
    {"backend", "NAME", "cuda", "cuda (links over NCCL, and the kernels) or cpu (links over MPI only)"},
    {"cluster", "NAME|PATH", "h200-1x2", "the cluster description the measured values replace"},
    {"reps", "N", "10", "repetitions a measured size"},
    {"heads", "N", "16", "query heads of the attention kernels measured"},
    {"kv-heads", "N", "2", "KV heads of the attention kernels measured"},
    {"head-dim", "N", "128", "head dimension of the attention kernels measured"},
    {"gemm-seconds", "S", "6",
     "seconds of back-to-back GEMMs for the sustained GEMM rate a training step sees (the second half timed; 0: "
     "none, the simulator then takes its fixed share of the burst rate)"},
    {"attn-seconds", "S", "4",
     "cuda: seconds of attention in one dense causal layer-shaped call (the diag call at the --layer-lengths length "
     "nearest 32K), forward and backward, held after every other measurement (the second half timed; --attn-held says "
     "what runs between them): its held rate over its short calls' is the rate a training step's attention sees "
     "(gpu.efficiency.attn_sustained; 0 or --layer-lengths none: not measured, a step's attention at the short calls' "
     "rates)"},
    {"attn-held", "gemm|alone", "gemm",
     "cuda, with --attn-seconds: gemm runs an equal time of the projections' GEMMs after each forward + backward, as a "
     "training step interleaves them, times the attention and those GEMMs apart, and writes the GEMMs' rate as "
     "gpu.efficiency.gemm_sustained in place of --gemm-seconds' back-to-back one; alone runs the attention back to back"},
    {"layer-lengths", "LIST", "16K,32K,64K,128K",
     "cuda: shard lengths at which to time attention calls shaped like a ring layer's (its queries against an earlier "
     "shard, and its causal diagonal block), on random inputs, beside two short walks: the full-tile rates, each "
     "walk's cost (gpu.attn_walk) and the full tiles' loss in calls whose keys outgrow the L2 cache (gpu.attn_l2: "
     "at d 128 on 40-50 MB of L2, 128K keys do) are fitted to them; none: the full-tile rates of the kernel "
     "benchmark's short calls, as before"},
    {"log", cli_out_file, NULL, "write every measured point as CSV"},
    {"refit", "CSV", NULL,
     "no measuring: calibrate again from an earlier calibration's --log under today's fitting rules (the attention "
     "efficiencies, the bars' backward walk, the layer-shaped calls' rates and walks where it logged them, and the ring "
     "steps; links, GEMM and GPU kept from --cluster, the file that calibration wrote)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage calibrate_usage = {
    NULL, "mpirun -np 2 sparsering-exec calibrate --backend cuda --cluster h200-1x2 --out measured.json",
    {calibrate_flags, NULL}};

static void print_l2(const double *slow, double l2_mb, int past);

// The layer-shaped calls against the fit: measured, the fitted model, and the rule before (the short calls' rates).
static void print_layer(const calib_layer *ly, double peak, double l2_mb) {
  const char *ph[2] = {"fwd", "bwd"};
  printf("attention calls shaped like a layer's (random inputs): measured | fitted model | the short calls' rates alone\n");
  for (int i = 0; i < ly->n; i++) {
    char tok[32];
    printf("  %-6s %5s %6.0f walks of %6.1f tiles:", ly->shape[i], sr_format_tokens(ly->tokens[i], tok, sizeof tok),
           ly->cells[i], (ly->full[i] + ly->partial[i]) / (ly->cells[i] > 0 ? ly->cells[i] : 1));
    for (int p = 0; p < 2; p++)
      printf(" %s %.3f | %.3f (%+.1f%%) | %.3f (%+.1f%%) ms%s", ph[p], ly->seconds[p][i] * 1e3, ly->model_s[p][i] * 1e3,
             100 * (ly->model_s[p][i] / ly->seconds[p][i] - 1), ly->old_s[p][i] * 1e3,
             100 * (ly->old_s[p][i] / ly->seconds[p][i] - 1), p ? "\n" : ";");
  }
  for (int p = 0; p < 2; p++)
    printf("attention %s full tiles: %.0f TFLOP/s = %.3f of peak; %.4f us a (query tile, head) walk; %.1f us a call\n",
           ph[p], ly->tflops[p], ly->tflops[p] / peak, ly->walk_us[p], ly->fixed_us[p]);
  int past = 0;
  for (int i = 0; i < ly->n; i++) past += ly->beyond[i];
  print_l2(ly->l2_slow, l2_mb, past);
}

// The FULL tiles' loss beyond the L2 cache as fitted (sim/cost.h, cost_attn_l2), or why none was: past, the
// layer-shaped calls whose keys outgrow the cache (-1: not known here).
static void print_l2(const double *slow, double l2_mb, int past) {
  if (!(l2_mb > 0)) printf("attention beyond the L2 cache: not modelled (the GPU's L2 is not known here)\n");
  else if (slow[0] > 0 || slow[1] > 0)
    printf("attention beyond the L2 cache (%.0f MiB): a FULL tile %+.1f%% forward, %+.1f%% backward in calls whose "
           "keys' K and V (one KV head) outgrow it\n", l2_mb, 100 * slow[0], 100 * slow[1]);
  else if (past == 0)
    printf("attention beyond the L2 cache (%.0f MiB): no layer-shaped call's keys outgrow it (longer --layer-lengths "
           "would), not modelled\n", l2_mb);
  else if (past > 0)
    printf("attention beyond the L2 cache (%.0f MiB): the calls beyond it run no slower a tile, not modelled\n", l2_mb);
  else
    printf("attention beyond the L2 cache (%.0f MiB): not modelled (no layer-shaped call's keys outgrow it, or those "
           "that do run no slower a tile)\n", l2_mb);
}

// --refit: the kept timings of an earlier calibration fitted again (calib_refit_from_log), on the host alone.
static int refit(cli_args *a, int heads, int kvh, int hd, const char *prog) {
  sr_error e = {0};
  const char *csv_path = cli_get(a, "refit", NULL), *src = cli_get(a, "cluster", "h200-1x2"), *out = cli_get(a, "out", NULL);
  cluster_desc cl;
  char *csv = NULL;
  size_t n;
  if (cluster_load(src, &cl, &e) || sr_read_file(csv_path, &csv, &n, &e) ||
      calib_refit_from_log(csv_path, csv, &cl, heads, kvh, hd, &e)) {
    free(csv);
    return sr_error_report(&e, prog);
  }
  free(csv);
  // what the file said it was, less an earlier refit's note (a refit replaces it)
  char was[sizeof cl.calibration];
  snprintf(was, sizeof was, "%s", cl.calibration[0] ? cl.calibration : src);
  char *prev = strstr(was, "; refitted from its log ");
  if (prev) *prev = 0;
  snprintf(cl.calibration, sizeof cl.calibration, "%s; refitted from its log %s (%s, the bars' walk)", was, csv_path,
           cl.gpu.attn_walk_us[0] > 0 || cl.gpu.attn_walk_us[1] > 0 ? "full tiles and walks from layer-shaped calls"
                                                                    : "sustained attention rates");
  const char *ph[2] = {"fwd", "bwd"};
  const double *ef[2][3] = {{&cl.gpu.eff_attn_fwd_full, &cl.gpu.eff_attn_fwd_partial, &cl.gpu.eff_attn_fwd_bar},
                            {&cl.gpu.eff_attn_bwd_full, &cl.gpu.eff_attn_bwd_partial, &cl.gpu.eff_attn_bwd_bar}};
  int walks = cl.gpu.attn_walk_us[0] > 0 || cl.gpu.attn_walk_us[1] > 0;
  for (int p = 0; p < 2; p++)
    printf("attention %s: full %.0f (%s), partial %.0f, bar %.0f (sustained) TFLOP/s (%.3f / %.3f / %.3f of peak %.0f)\n",
           ph[p], *ef[p][0] * cl.gpu.peak_tflops, walks ? "layer-shaped calls" : "sustained", *ef[p][1] * cl.gpu.peak_tflops,
           *ef[p][2] * cl.gpu.peak_tflops, *ef[p][0], *ef[p][1], *ef[p][2], cl.gpu.peak_tflops);
  if (walks)
    printf("attention walks (from the layer-shaped calls): fwd %.4f us, bwd %.4f us a (query tile, head) walk\n",
           cl.gpu.attn_walk_us[0], cl.gpu.attn_walk_us[1]);
  if (walks || cl.gpu.attn_l2[0] > 0 || cl.gpu.attn_l2[1] > 0) print_l2(cl.gpu.attn_l2, cl.gpu.l2_mb, -1);
  printf("ring step beyond the kernel: fwd %.1f us + %.3f us a cell, bwd %.1f us + %.3f us a cell\n", cl.gpu.ring_step_us[0],
         cl.gpu.ring_cell_us[0], cl.gpu.ring_step_us[1], cl.gpu.ring_cell_us[1]);
  if (cl.gpu.bar_walk_us > 0)
    printf("bars' backward walk: %.2f us a CTA per 64-row step (%d resident CTAs)\n", cl.gpu.bar_walk_us,
           calib_bar_walk_ctas(cl.gpu.name, hd, cl.gpu.bar_walk_ws));
  else
    printf("bars' backward walk: not modelled (%s is not a GPU known here)\n", cl.gpu.name);
  char *json = cluster_to_json(&cl);
  int rc = 0;
  if (!json || sr_write_atomic(out, json, strlen(json), &e)) rc = sr_error_report(&e, prog);
  free(json);
  if (!rc) printf("wrote %s\n", out);
  return rc;
}

static int cmd_calibrate(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  const char *prog = "sparsering-exec calibrate";
  if (cli_parse(argc, argv, &calibrate_usage, &a, &e)) return sr_error_report(&e, prog);
  const char *backend = cli_get(&a, "backend", "cuda");
  int cuda = strcmp(backend, "cuda") == 0;
  if (!cuda && strcmp(backend, "cpu") != 0) {
    sr_input_error(&e, NULL, "--backend", "'%s': expected cpu or cuda", backend);
    return sr_error_report(&e, prog);
  }
  int64_t reps, heads, kvh, hd;
  double gemm_s, attn_s;
  if (cli_get_int(&a, "reps", 10, 1, 1000, &reps, &e) || cli_get_int(&a, "heads", 16, 1, 1024, &heads, &e) ||
      cli_get_int(&a, "kv-heads", 2, 1, 1024, &kvh, &e) || cli_get_int(&a, "head-dim", 128, 1, 1024, &hd, &e) ||
      cli_get_num(&a, "gemm-seconds", 6, 0, 600, &gemm_s, &e) || cli_get_num(&a, "attn-seconds", 4, 0, 600, &attn_s, &e))
    return sr_error_report(&e, prog);
  int64_t lengths[CALIB_LAYER_LENGTHS];
  int n_lengths = 0;
  if (calib_layer_lengths_parse(cli_get(&a, "layer-lengths", "16K,32K,64K,128K"), lengths, &n_lengths, &e))
    return sr_error_report(&e, prog);
  const char *held_mode = cli_get(&a, "attn-held", "gemm");
  if (strcmp(held_mode, "gemm") != 0 && strcmp(held_mode, "alone") != 0) {
    sr_input_error(&e, NULL, "--attn-held", "'%s': expected gemm or alone", held_mode);
    return sr_error_report(&e, prog);
  }
  int held_gemm = strcmp(held_mode, "gemm") == 0;
  const char *out = cli_get(&a, "out", NULL);
  if (!out) {
    sr_input_error(&e, NULL, "--out", "required: the cluster file to write");
    return sr_error_report(&e, prog);
  }
  if (cli_has(&a, "refit")) return refit(&a, (int)heads, (int)kvh, (int)hd, prog);
  cluster_desc cl;
  if (cluster_load(cli_get(&a, "cluster", "h200-1x2"), &cl, &e)) return sr_error_report(&e, prog);
  comm c;
  if (comm_init(&c, cuda ? COMM_NCCL : COMM_CPU, &argc, &argv, &e)) {
    if (c.node_of) fail(&c, &e);
    return sr_error_report(&e, prog);
  }
  sr_buf log = {0};
  sr_buf_printf(&log, "measure,amount,us\n");  // amount: bytes (links) or FLOPs (kernels)
  int64_t sz[32];
  double t[32], lat, gbps;
  // Device links reach GB/s only with large messages; host MPI saturates earlier.
  int n = size_ladder(10, cuda ? 28 : 24, sz);
  if (c.world >= 2) {
    // Inside the node: rank 0 and the next rank on its node (else rank 1).
    int peer = 1;
    for (int r = 1; r < c.world; r++)
      if (c.node_of[r] == c.node_of[0]) {
        peer = r;
        break;
      }
    if (calib_p2p(&c, 0, peer, sz, n, (int)reps, t, &e)) fail(&c, &e);
    log_points(&log, "p2p_intra", sz, t, n);
    double b[32];
    for (int i = 0; i < n; i++) b[i] = (double)sz[i];
    if (calib_fit_link(b, t, n, &lat, &gbps, &e)) fail(&c, &e);
    cl.intra.gbps = gbps, cl.intra.latency_us = lat;
    if (c.rank == 0) printf("p2p inside a node (rank 0 <-> %d): latency %.2f us, bandwidth %.1f GB/s\n", peer, lat, gbps);
    if (c.nodes > 1) {
      int far = -1;
      for (int r = 1; r < c.world && far < 0; r++)
        if (c.node_of[r] != c.node_of[0]) far = r;
      if (calib_p2p(&c, 0, far, sz, n, (int)reps, t, &e) || calib_fit_link(b, t, n, &lat, &gbps, &e)) fail(&c, &e);
      log_points(&log, "p2p_inter", sz, t, n);
      cl.nic.gbps = gbps, cl.nic.latency_us = lat;
      if (c.rank == 0) printf("p2p across nodes (rank 0 <-> %d): latency %.2f us, bandwidth %.1f GB/s\n", far, lat, gbps);
    }
    if (calib_alltoall(&c, sz, n, (int)reps, t, &e) || calib_fit_link(b, t, n, &lat, &gbps, &e)) fail(&c, &e);
    log_points(&log, "alltoall", sz, t, n);
    if (c.rank == 0)
      printf("all-to-all over %d ranks: latency %.2f us, %.1f GB/s per rank (bytes sent per rank / time)\n", c.world,
             lat, gbps);
  }
  if (cuda) {
    // The GPU measured, not the cluster file's: its name, memory and HBM from the device, its peaks from the
    // datasheets (kept from the file when the name is not known), before the efficiencies relative to them.
    char gname[sizeof cl.gpu.name];
    double mem_gib, hbm, l2_mb, peak, fp64;
    if (calib_gpu_identity(gname, sizeof gname, &mem_gib, &hbm, &l2_mb, &peak, &fp64, &e)) fail(&c, &e);
    if (c.rank == 0) {
      printf("GPU: %s, %.1f GiB, HBM %.0f GB/s, L2 %.0f MiB (the file said %s, %.1f GiB, %.0f GB/s)", gname, mem_gib,
             hbm, l2_mb, cl.gpu.name, cl.gpu.mem_gib, cl.gpu.hbm_gbps);
      if (peak > 0) printf("; datasheet peaks %.0f bf16 / %.1f FP64 TFLOP/s\n", peak, fp64);
      else printf("; peaks of %s unknown here: the file's %.0f bf16 / %.1f FP64 TFLOP/s kept\n", gname, cl.gpu.peak_tflops,
                  cl.gpu.fp64_tflops);
    }
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "%s", gname);
    cl.gpu.mem_gib = mem_gib, cl.gpu.hbm_gbps = hbm, cl.gpu.l2_mb = l2_mb;
    if (peak > 0) cl.gpu.peak_tflops = peak, cl.gpu.fp64_tflops = fp64;
    calib_kernels k;
    const char *kind[3] = {"full", "partial", "bar"}, *ph[2] = {"fwd", "bwd"};
    if (calib_kernels_measure(&c, cl.gpu.peak_tflops, (int)heads, (int)kvh, (int)hd, gemm_s, &k, &e)) fail(&c, &e);
    cl.gpu.eff_gemm = k.gemm;
    cl.gpu.eff_gemm_sustained = k.gemm_sustained;  // 0 (--gemm-seconds 0): not measured, not written
    cl.gpu.eff_attn_fwd_full = k.attn[0][0], cl.gpu.eff_attn_fwd_partial = k.attn[0][1], cl.gpu.eff_attn_fwd_bar = k.attn[0][2];
    cl.gpu.eff_attn_bwd_full = k.attn[1][0], cl.gpu.eff_attn_bwd_partial = k.attn[1][1], cl.gpu.eff_attn_bwd_bar = k.attn[1][2];
    if (c.rank == 0) {
      printf("GEMM (cuBLAS bf16): %.0f TFLOP/s = %.3f of peak %.0f in a 12 ms burst", k.gemm_tflops, k.gemm,
             cl.gpu.peak_tflops);
      if (k.gemm_sustained > 0)
        printf("; %.0f TFLOP/s = %.3f of peak held over %.1f s (%.3f of the burst's)\n", k.gemm_sustained_tflops,
               k.gemm_sustained, gemm_s / 2, k.gemm_sustained / k.gemm);
      else
        printf("\n");
      for (int p = 0; p < 2; p++)
        for (int j = 0; j < 3; j++)
          printf("attention %s %-7s: %.0f TFLOP/s = %.3f of peak (sustained: the largest of %d sizes; fit slope %.0f, "
                 "fixed %.1f us per call)\n", ph[p], kind[j], k.attn_tflops[p][j], k.attn[p][j], CALIB_SIZES,
                 k.attn_slope_tflops[p][j], k.attn_overhead_us[p][j]);
    }
    for (int p = 0; p < 2; p++)
      for (int j = 0; j < 3; j++)
        for (int i = 0; i < CALIB_SIZES; i++)
          sr_buf_printf(&log, "attn_%s_%s,%.0f,%.3f\n", ph[p], kind[j], k.flops[p][j][i], k.seconds[p][j][i] * 1e6);
    // The bars' backward walk: what one CTA of the bar kernel spends on a 64-row step (sim/cost.h, cost_bar_walk).
    // Which kernel and walk the binary's bar backward runs, so that the fit counts its resident CTAs and a step
    // charges that walk (sim/cost.h, cost_bar_waves).
    // Variant 5 (gpu.bar_walk_pairs): the fit counts its pair CTAs' merged walks.
    int bars_ws = cuda ? calib_bar_walk_ws() : 0, bars_pairs = cuda ? calib_bar_walk_pairs() : 0;
    if (calib_bar_walk_fit(NULL, k.flops[1][2], k.seconds[1][2], CALIB_SIZES, (int)heads, (int)kvh, (int)hd, cl.gpu.name,
                           bars_ws, bars_pairs, &cl.gpu.bar_walk_us, &e))
      fail(&c, &e);
    if (cuda && cl.gpu.bar_walk_us > 0)
      cl.gpu.bar_walk_parts = calib_bar_walk_parts(), cl.gpu.bar_walk_ws = bars_ws,
      cl.gpu.bar_walk_pairs = bars_ws && bars_pairs;
    if (c.rank == 0 && cl.gpu.bar_walk_us > 0)
      printf("bars' backward walk: %.2f us a CTA per 64-row step (%d resident CTAs; the bar backward's slope over the "
             "calls' %s walks)\n", cl.gpu.bar_walk_us, calib_bar_walk_ctas(cl.gpu.name, (int)hd, cl.gpu.bar_walk_ws),
             cl.gpu.bar_walk_pairs ? "chunk pairs' merged" : "chunk");
    // Calls shaped like a layer's: the full-tile rates and each walk's cost where a layer runs (exec/calib_layer.c).
    gpu_desc slopes = cl.gpu;  // without them the 32K-token ring steps are set against the slopes' rates (calibrate.h)
    double *se[2][3] = {{&slopes.eff_attn_fwd_full, &slopes.eff_attn_fwd_partial, &slopes.eff_attn_fwd_bar},
                        {&slopes.eff_attn_bwd_full, &slopes.eff_attn_bwd_partial, &slopes.eff_attn_bwd_bar}};
    for (int p = 0; p < 2; p++)
      for (int j = 0; j < 3; j++) *se[p][j] = k.attn_slope_tflops[p][j] / cl.gpu.peak_tflops;
    cl.gpu.attn_l2[0] = cl.gpu.attn_l2[1] = 0;  // fitted below with the layer-shaped calls, else not modelled
    cl.gpu.eff_attn_sustained = 0;  // measured last, below, else not measured (not written)
    int64_t held_len = calib_attn_held_length(lengths, n_lengths);
    double held_burst_s = 0;  // the held call's forward + backward in its short calls
    if (n_lengths > 0) {
      calib_layer ly;
      if (calib_layer_measure(lengths, n_lengths, (int)heads, (int)kvh, (int)hd, &ly, &e) ||
          calib_layer_fit(&ly, &cl.gpu, (int)heads, (int)kvh, (int)hd, &e))
        fail(&c, &e);
      cl.gpu.eff_attn_fwd_full = ly.tflops[0] / cl.gpu.peak_tflops, cl.gpu.eff_attn_bwd_full = ly.tflops[1] / cl.gpu.peak_tflops;
      for (int p = 0; p < 2; p++) cl.gpu.attn_walk_us[p] = ly.walk_us[p];
      for (int p = 0; p < 2; p++) cl.gpu.attn_l2[p] = ly.l2_slow[p];
      for (int i = 0; i < ly.n; i++)
        if (!strcmp(ly.shape[i], "diag") && ly.tokens[i] == held_len) held_burst_s = ly.seconds[0][i] + ly.seconds[1][i];
      if (c.rank == 0) print_layer(&ly, cl.gpu.peak_tflops, cl.gpu.l2_mb);
      for (int i = 0; i < ly.n; i++)
        sr_buf_printf(&log, "layer_%s,%lld,%.3f,%.3f\n", ly.shape[i], (long long)ly.tokens[i], ly.seconds[0][i] * 1e6,
                      ly.seconds[1][i] * 1e6);
      slopes = cl.gpu;  // the ring steps on the same random inputs, against the model just fitted
    }
    // A layer split into the steps of a ring: what a step costs beyond its kernel's work (sim/cost.c).
    calib_ring rg;
    if (calib_ring_measure(&slopes, (int)heads, (int)kvh, (int)hd, n_lengths > 0, &rg, &e)) fail(&c, &e);
    for (int p = 0; p < 2; p++) cl.gpu.ring_step_us[p] = rg.step_us[p], cl.gpu.ring_cell_us[p] = rg.cell_us[p];
    if (c.rank == 0) {
      printf("ring steps (dense causal layer, 32K tokens, one GPU): measured vs the cost model's kernel time\n");
      for (int i = 0; i < rg.n; i++)
        printf("  %-12s W=%d: %2.0f steps, %6.0f cells: fwd %.3f ms (kernels %.3f), bwd %.3f ms (kernels %.3f)\n",
               rg.layout[i], rg.world[i], rg.steps[i], rg.cells[i], rg.measured_s[0][i] * 1e3, rg.kernel_s[0][i] * 1e3,
               rg.measured_s[1][i] * 1e3, rg.kernel_s[1][i] * 1e3);
      printf("ring step beyond the kernel: fwd %.1f us + %.3f us a cell, bwd %.1f us + %.3f us a cell\n", rg.step_us[0],
             rg.cell_us[0], rg.step_us[1], rg.cell_us[1]);
    }
    for (int i = 0; i < rg.n; i++)
      sr_buf_printf(&log, "ring_%s_w%d,%.0f,%.3f,%.3f\n", rg.layout[i], rg.world[i], rg.cells[i], rg.measured_s[0][i] * 1e6,
                    rg.measured_s[1][i] * 1e6);
    // Last, so that no other call is timed on a board held at its power limit: the rate a training step's attention
    // holds (sim/cost.c, cost_attn_held).
    if (held_burst_s > 0 && attn_s > 0) {
      double pair_s, mixed_tflops;
      if (calib_attn_held_measure(held_len, (int)heads, (int)kvh, (int)hd, attn_s, held_gemm ? held_burst_s : 0, &pair_s,
                                  &mixed_tflops, &e))
        fail(&c, &e);
      cl.gpu.eff_attn_sustained = calib_attn_sustained(held_burst_s, pair_s);
      // The GEMMs between the attention calls run as a step's do: their rate is the one a step's GEMMs are costed at
      // (sim/cost.c, cost_gemm_step), in place of the back-to-back figure above (a board at its power limit on
      // GEMMs alone holds a lower clock than one that alternates them with attention).
      if (mixed_tflops > 0) {
        double back = cl.gpu.eff_gemm_sustained;
        cl.gpu.eff_gemm_sustained = mixed_tflops / cl.gpu.peak_tflops;
        if (c.rank == 0)
          printf("GEMMs between the held attention calls: %.0f TFLOP/s = %.3f of peak (gpu.efficiency.gemm_sustained; "
                 "back to back: %.3f)\n",
                 mixed_tflops, cl.gpu.eff_gemm_sustained, back);
      }
      char tok[32];
      if (c.rank == 0)
        printf("attention held (diag %s, forward + backward %s, %.1f s of attention timed): %.3f ms a pair against "
               "%.3f ms in short calls: %.3f of the burst's rate (gpu.efficiency.attn_sustained)\n",
               sr_format_tokens(held_len, tok, sizeof tok),
               held_gemm ? "each followed by as long of GEMMs" : "back to back", attn_s / 2, pair_s * 1e3,
               held_burst_s * 1e3, cl.gpu.eff_attn_sustained);
    }
  }
  int rc = 0;
  if (c.rank == 0) {
    char base[sizeof cl.name];
    snprintf(base, sizeof base, "%s", cl.name);
    snprintf(cl.name, sizeof cl.name, "calibrated-%s", base);
    // The file says what was measured, on which GPU and when: reports print it ("calibrated: ...").
    char day[32];
    time_t now = time(NULL);
    strftime(day, sizeof day, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    cl.calibrated = cuda;  // links alone (the CPU backend) leave the efficiencies uncalibrated
    if (cuda)
    {
      snprintf(cl.calibration, sizeof cl.calibration, "sparsering-exec calibrate on %d x %s, %s%s", c.world, cl.gpu.name,
               day, n_lengths > 0 ? " (full tiles and walks from layer-shaped calls)" : "");
      // The input file's description named the GPU and the day it was measured on; the output's names this run's.
      snprintf(cl.description, sizeof cl.description, "%s; links, GPU and kernels measured; started from %s", cl.calibration,
               base);
    }
    else if (!cl.calibration[0])
      snprintf(cl.calibration, sizeof cl.calibration, "the file %s (links measured by sparsering-exec calibrate, %s)",
               cli_get(&a, "cluster", "h200-1x2"), day);
    char *json = cluster_to_json(&cl);
    if (!json || sr_write_atomic(out, json, strlen(json), &e)) rc = sr_error_report(&e, prog);
    free(json);
    const char *logp = cli_get(&a, "log", NULL);
    if (!rc && logp && sr_write_atomic(logp, log.data, log.len, &e)) rc = sr_error_report(&e, prog);
    if (!rc) printf("wrote %s\n", out);
  }
  sr_buf_free(&log);
  if (comm_host_bcast(&c, &rc, 1, MPI_INT, 0, &e)) fail(&c, &e);
  comm_free(&c);
  return rc;
}

EXEC_COMMAND("calibrate", cmd_calibrate, "measure links and kernels, fit them, write a cluster file for the simulator",
             &calibrate_usage)

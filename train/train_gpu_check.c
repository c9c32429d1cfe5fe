// train_gpu_check.c — `sparsering-exec train-gpu-check`: each fused kernel of the GPU model against its CPU
// reference (train/model_ref.h); the GPU model (model_cuda.cu) against the CPU model (model_cpu.c) on the same
// weights and tokens: loss, every parameter tensor's gradient and one AdamW update, and its recomputation modes
// and MLP chunks against each other; then the GPU step time of a larger model. Exit 0 when every error is within tolerance.
//
//   sparsering-exec train-gpu-check [--model tiny-test] [--seq 256] [--precision bf16|tf32]
//                                   [--time-model tiny-25m] [--time-seq 4096] [--time-steps 3] [--time-mlp-chunk N]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "plan/plan_flags.h"
#include "plan/util.h"
#include "train/model_cpu.h"

#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#include "train/model_cuda_ops.h"
#include "train/model_ref.h"

// Tolerances, against the CPU model's exact float32 arithmetic. A GEMM rounds its operands to p bits of
// significand (TF32: 11, bf16: 8, the implicit bit included), a relative error up to u = 2^-p each, and
// accumulates in fp32, so its outputs carry relative errors of order u that grow through the layers.
// TF32 (u = 4.9e-4): loss 2e-3 (4 u), gradients 3e-2 of the tensor's largest element (measured worst
// 2.2e-3 on tiny-25m). bf16 (u = 3.9e-3, 8x TF32's): the loss bound scales with u (4 u = 1.6e-2); the
// gradient bound stays 16 u = 6.25e-2: each gradient element is a sum over ~T products whose rounding
// errors are independent, and TF32's measured worst (4.5 u) scaled by 8 is 1.8e-2, under a third of it.
static double loss_tol(int bf16) { return bf16 ? 4.0 / 256 : 2e-3; }
static double grad_tol(int bf16) { return bf16 ? 16.0 / 256 : 3e-2; }

static void sample_tokens(int64_t T, int64_t vocab, int32_t *tok, int32_t *tgt, int64_t *pos) {
  uint64_t s = 12345;
  for (int64_t i = 0; i < T; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tok[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    pos[i] = i;
  }
  for (int64_t i = 0; i < T; i++) tgt[i] = i + 1 < T ? tok[i + 1] : -1;
  // scatter positions as a striped layout's rank would hold them: swap pairs of blocks of 8
  for (int64_t i = 0; i + 16 <= T; i += 16)
    for (int j = 0; j < 8; j++) {
      int64_t a = pos[i + j];
      pos[i + j] = pos[i + 8 + j];
      pos[i + 8 + j] = a;
    }
}

// The largest difference between two gradient sets, each tensor's relative to its largest |g0|; *name: that tensor.
static double worst_gradient(const model_cpu *h, const float *g, const float *g0, const char **name) {
  double worst = 0;
  for (int i = 0; i < h->num_tensors; i++) {
    const model_tensor *t = &h->tensors[i];
    double mx = 0, diff = 0;
    for (int64_t j = 0; j < t->numel; j++) {
      mx = fmax(mx, fabs(g0[t->offset + j]));
      diff = fmax(diff, fabs(g[t->offset + j] - g0[t->offset + j]));
    }
    double rel = mx > 0 ? diff / mx : diff;
    if (rel > worst) worst = rel, *name = t->name;
  }
  return worst;
}

// Two GPU runs' gradients differ by the order of float atomics (the naive attention's dK/dV, the embedding's and the
// norms' sums) and by the bf16 roundings those fp32 differences then flip: the attention takes bf16 Q, K, V, O and dO
// in both precisions (attn_naive_*_k), and in bf16 dQ|dK|dV go on to the GEMMs in bf16 (one unit in the last place is
// 2^-8 = 3.9e-3). Measured: two runs of one binary differ by up to 8.8e-3 of a tensor's largest gradient in bf16 on an
// H200 (results/train/2026-11-27-h200-mlp-chunk-gpu), and by 1.8e-3 to 3.7e-3 in TF32 on an H100, where a 1e-4 bound
// (fp32 operands assumed) failed (results/train/2026-11-27-h100-vs-peer-64k-keep-layers). The bound: 4 bf16 units
// (1.6e-2) in both precisions.
#define RERUN_TOL (4.0 / 256)

// The GPU model's recomputation modes against its run without recomputation (gradients g0, loss l0): full and
// selective recomputation (every layer keeping, and the first half of them), and selective with layers kept whole
// (the first half, and all: model_cuda_set_recompute's keep_all) rerun the same forward or none, so the loss is the
// same bit for bit and the gradients the same within RERUN_TOL.
static int check_recompute(model_cuda *d, const model_cpu *h, int64_t T, const int32_t *tok, const int64_t *pos,
                           const int32_t *tgt, double scale, double l0, const float *g0, int *bad, sr_error *e) {
  int L = (int)h->cfg.num_layers;
  enum { MODES = 5 };
  const int modes[MODES] = {MODEL_RECOMPUTE_FULL, MODEL_RECOMPUTE_KEEP_ATTN, MODEL_RECOMPUTE_KEEP_ATTN,
                            MODEL_RECOMPUTE_KEEP_ATTN, MODEL_RECOMPUTE_KEEP_ATTN};
  const int keep[MODES] = {0, L, L / 2, L, L}, whole[MODES] = {0, 0, 0, L / 2, L};
  const char *names[MODES] = {"full", "selective", "selective in the first half of the layers",
                              "selective, the first half of the layers kept whole", "selective, every layer kept whole"};
  float *g = malloc((size_t)h->num_params * 4);
  if (!g) return sr_internal_error(e, 0, "out of memory");
  int rc = SR_OK;
  for (int m = 0; m < MODES && !rc; m++) {
    double l = 0;
    if ((rc = model_cuda_set_recompute(d, modes[m], keep[m], whole[m], e)) || (rc = model_cuda_zero_grad(d, e)) ||
        (rc = model_cuda_forward_backward(d, T, tok, pos, tgt, 1, scale, &l, NULL, NULL, e)) ||
        (rc = model_cuda_sync(d, e)) || (rc = model_cuda_download_grads(d, g, e)))
      break;
    const char *wname = "";
    double worst = worst_gradient(h, g, g0, &wname);
    int ok = l == l0 && worst <= RERUN_TOL;
    printf("  recomputation %s: loss %s the run without, gradients within %.2e of its (%s; tol %.1e) %s\n", names[m],
           l == l0 ? "equals" : "DIFFERS from", worst, wname, RERUN_TOL, ok ? "ok" : "FAIL");
    *bad |= !ok;
  }
  free(g);
  if (!rc) rc = model_cuda_set_recompute(d, MODEL_RECOMPUTE_OFF, 0, 0, e);
  return rc;
}

// The MLP in chunks (model_cuda_set_mlp_chunk: T/3 + 1 rows, the last chunk shorter) in every recomputation mode
// against the whole-sequence run without recomputation (l0, g0): the same values but for the order of the weight
// gradients' sums over chunks and whatever cuBLAS does differently on fewer rows (another kernel may sum a dot
// product in another order, and a bf16 operand then round the other way): loss within 1e-4 (relative), gradients
// within RERUN_TOL in bf16. In TF32 the chunks' GEMM results, rounded differently, then flip the attention's bf16
// operands as a rerun does: twice RERUN_TOL (measured on an H100: 1.6e-2, where 1e-3 had been assumed).
static int check_mlp_chunk(model_cuda *d, const model_cpu *h, int64_t T, const int32_t *tok, const int64_t *pos,
                           const int32_t *tgt, double scale, double l0, const float *g0, int bf16, int *bad, sr_error *e) {
  enum { MODES = 4 };
  int L = (int)h->cfg.num_layers;
  const int modes[MODES] = {MODEL_RECOMPUTE_OFF, MODEL_RECOMPUTE_FULL, MODEL_RECOMPUTE_KEEP_ATTN,
                            MODEL_RECOMPUTE_KEEP_ATTN};
  const int whole[MODES] = {0, 0, 0, L / 2};  // the layers kept whole hold their gate|up and h for every chunk
  const char *names[MODES] = {"no", "full", "selective", "selective (the first half of the layers kept whole)"};
  float *g = malloc((size_t)h->num_params * 4);
  if (!g) return sr_internal_error(e, 0, "out of memory");
  int64_t rows = T / 3 + 1;
  int rc = model_cuda_set_mlp_chunk(d, rows, e);
  for (int m = 0; m < MODES && !rc; m++) {
    double l = 0;
    if ((rc = model_cuda_set_recompute(d, modes[m], L, whole[m], e)) || (rc = model_cuda_zero_grad(d, e)) ||
        (rc = model_cuda_forward_backward(d, T, tok, pos, tgt, 1, scale, &l, NULL, NULL, e)) ||
        (rc = model_cuda_sync(d, e)) || (rc = model_cuda_download_grads(d, g, e)))
      break;
    const char *wname = "";
    double worst = worst_gradient(h, g, g0, &wname);
    double lrel = fabs(l - l0) / fabs(l0);
    double gt = bf16 ? RERUN_TOL : 2 * RERUN_TOL;
    int ok = lrel <= 1e-4 && worst <= gt;
    printf("  MLP in chunks of %lld rows, %s recomputation: loss within %.2e of the whole run's (tol 1e-4), gradients "
           "within %.2e (%s; tol %.1e) %s\n", (long long)rows, names[m], lrel, worst, wname, gt, ok ? "ok" : "FAIL");
    *bad |= !ok;
  }
  free(g);
  if (!rc) rc = model_cuda_set_mlp_chunk(d, 0, e);
  if (!rc) rc = model_cuda_set_recompute(d, MODEL_RECOMPUTE_OFF, 0, 0, e);
  return rc;
}

static int check(const char *model_name, int64_t T, int bf16, sr_error *e) {
  model_config cfg;
  int rc = model_load(model_name, &cfg, e);
  if (rc) return rc;
  model_cpu h;
  if ((rc = model_cpu_create(&h, &cfg, MODEL_F32, T, T, 0, e))) return rc;
  model_init_random(&h, 3);
  model_cuda *d = NULL;
  int32_t *tok = malloc((size_t)T * 4), *tgt = malloc((size_t)T * 4), *am_c = malloc((size_t)T * 4),
          *am_g = malloc((size_t)T * 4);
  int64_t *pos = malloc((size_t)T * 8);
  float *g_gpu = malloc((size_t)h.num_params * 4);
  adamw_state sc, sg;
  memset(&sc, 0, sizeof sc);
  memset(&sg, 0, sizeof sg);
  if (!tok || !tgt || !pos || !am_c || !am_g || !g_gpu) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  sample_tokens(T, cfg.vocab_size, tok, tgt, pos);
  // the device's own random init must draw the host's weights (large models are initialised there)
  uint64_t seed = 3;
  if ((rc = model_cuda_create(&d, &h, T, h.num_params, &seed, 0, h.num_params, NULL, e))) goto done;
  model_cpu view0 = h;
  view0.params = g_gpu;
  if ((rc = model_cuda_download(d, &view0, e))) goto done;
  int64_t init_diff = 0;
  for (int64_t j = 0; j < h.num_params; j++) init_diff += g_gpu[j] != ((float *)h.params)[j];
  model_cuda_free(d);
  d = NULL;
  if ((rc = model_cuda_create(&d, &h, T, h.num_params, NULL, 0, h.num_params, NULL, e)) ||
      (rc = model_cuda_set_precision(d, bf16 ? MODEL_CUDA_BF16 : MODEL_CUDA_TF32, e)))
    goto done;
  double lc = 0, lg = 0, scale = 1.0 / (double)(T - 1), loss_rel_tol = loss_tol(bf16), grad_rel_tol = grad_tol(bf16);
  model_zero_grad(&h);
  if ((rc = model_forward_backward(&h, T, tok, pos, tgt, 1, scale, &lc, am_c, e))) goto done;
  if ((rc = model_cuda_zero_grad(d, e)) ||
      (rc = model_cuda_forward_backward(d, T, tok, pos, tgt, 1, scale, &lg, am_g, NULL, e)))
    goto done;
  if ((rc = model_cuda_sync(d, e))) goto done;
  if ((rc = model_cuda_download_grads(d, g_gpu, e))) goto done;
  double lrel = fabs(lc - lg) / fabs(lc);
  int64_t argmax_diff = 0;
  for (int64_t i = 0; i < T; i++) argmax_diff += am_c[i] != am_g[i];
  printf("train-gpu-check: %s, %lld tokens (scattered positions), %s GEMMs, naive GPU attention\n", model_name,
         (long long)T, bf16 ? "bf16" : "TF32");
  printf("  loss cpu %.6f gpu %.6f rel %.2e (tol %.0e) | argmax differs at %lld/%lld tokens\n", lc / (T - 1),
         lg / (T - 1), lrel, loss_rel_tol, (long long)argmax_diff, (long long)T);
  printf("  device random init vs host model_init_random: %lld of %lld weights differ\n", (long long)init_diff,
         (long long)h.num_params);
  int bad = lrel > loss_rel_tol || init_diff > 0;
  double worst = 0;
  const char *worst_name = "";
  for (int i = 0; i < h.num_tensors; i++) {
    const model_tensor *t = &h.tensors[i];
    const float *gc = (const float *)h.grads + t->offset, *gg = g_gpu + t->offset;
    double mx = 0, diff = 0;
    for (int64_t j = 0; j < t->numel; j++) {
      mx = fmax(mx, fabs(gc[j]));
      diff = fmax(diff, fabs(gc[j] - gg[j]));
    }
    double rel = mx > 0 ? diff / mx : diff;
    if (rel > worst) worst = rel, worst_name = t->name;
    if (rel > grad_rel_tol) {
      printf("  FAIL gradient %s: max |gpu - cpu| / max |cpu| = %.2e\n", t->name, rel);
      bad = 1;
    }
  }
  printf("  gradients: %d tensors, worst max|gpu-cpu|/max|cpu| %.2e (%s) (tol %.0e)\n", h.num_tensors, worst,
         worst_name, grad_rel_tol);
  if ((rc = check_recompute(d, &h, T, tok, pos, tgt, scale, lg, g_gpu, &bad, e)) ||
      (rc = check_mlp_chunk(d, &h, T, tok, pos, tgt, scale, lg, g_gpu, bf16, &bad, e)))
    goto done;
  // one AdamW update on both sides from their own gradients; compare the weights after
  if ((rc = adamw_create(&sc, 0, h.num_params, 1e-3, 0.1, e)) || (rc = adamw_create(&sg, 0, h.num_params, 1e-3, 0.1, e)))
    goto done;
  adamw_update(&sc, &h, 1.0);
  if ((rc = model_cuda_adamw(d, &sg, 1.0, e))) goto done;
  float *w_gpu = g_gpu;  // the gradients were compared: reuse their buffer for the weights
  model_cpu view = h;     // the host model's table, pointing at w_gpu
  view.params = w_gpu;
  if ((rc = model_cuda_download(d, &view, e))) goto done;
  double wdiff = 0;
  int64_t far = 0;
  for (int64_t j = 0; j < h.num_params; j++) {
    double dlt = fabs(((float *)h.params)[j] - w_gpu[j]);
    wdiff = fmax(wdiff, dlt);
    far += dlt > 2.5e-3;  // AdamW moves a weight by at most about lr = 1e-3 per step
  }
  printf("  AdamW step (lr 1e-3, wd 0.1): max |w_gpu - w_cpu| %.2e, weights apart by > 2.5 lr: %lld\n", wdiff,
         (long long)far);
  bad |= far > 0;
  // the loss after the update: the GEMMs must read the updated weights (bf16: a stale mirror would
  // reproduce the loss before the update exactly)
  double lc2 = 0, lg2 = 0;
  if ((rc = model_forward_backward(&h, T, tok, pos, tgt, 0, scale, &lc2, am_c, e)) ||
      (rc = model_cuda_forward_backward(d, T, tok, pos, tgt, 0, scale, &lg2, am_g, NULL, e)))
    goto done;
  double lrel2 = fabs(lc2 - lg2) / fabs(lc2);
  printf("  loss after the step: cpu %.6f (change %+.2e) gpu %.6f (change %+.2e) rel %.2e\n", lc2 / (T - 1),
         (lc2 - lc) / (T - 1), lg2 / (T - 1), (lg2 - lg) / (T - 1), lrel2);
  bad |= lrel2 > loss_rel_tol || lg2 == lg;
  printf("  %s\n", bad ? "FAIL" : "ok");
  rc = bad ? sr_internal_error(e, 0, "train-gpu-check: the GPU model disagrees with the CPU model") : SR_OK;
done:
  model_cuda_free(d);
  model_cpu_free(&h);
  adamw_free(&sc);
  adamw_free(&sg);
  free(tok);
  free(tgt);
  free(pos);
  free(am_c);
  free(am_g);
  free(g_gpu);
  return rc;
}

// ---- the fused kernels against their CPU references (train/model_ref.h) ---------------------------------

// Uniform values in [-a, a] from a 64-bit LCG (the same draws every run).
static void fill_uniform(float *x, int64_t n, float a, uint64_t *s) {
  for (int64_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = a * (2.0f * (float)((*s >> 40) & 0xffffff) / 16777216.0f - 1.0f);
  }
}

// Largest error of got against want over n values, in units of the tolerance: a bf16 result may be one unit in
// the last place off (2^-7 relative: a value on a rounding boundary rounds either way after sums in another
// order), an fp32 one 1e-4 relative; both with 1e-6 of the array's largest magnitude for values near zero.
static double worst_err(const float *got, const float *want, int64_t n, int bf16) {
  double mx = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    double tol = (bf16 ? 0x1p-7 : 1e-4) * fabs(want[i]) + 1e-6 * mx;
    double err = fabs((double)got[i] - want[i]) / (tol > 0 ? tol : 1e-30);
    if (!(err <= worst)) worst = err;  // NaN counts as worst
  }
  return worst;
}

static int report(const char *what, int bf16, double err, int *bad) {
  int ok = err <= 1.0;
  printf("  kernel %-16s %s operands: worst error %.3f of its tolerance %s\n", what, bf16 ? "bf16" : "fp32", err,
         ok ? "ok" : "FAIL");
  *bad |= !ok;
  return SR_OK;
}

// Each fused kernel on random inputs of a small odd shape, in both operand dtypes, against its reference.
static int check_kernels(sr_error *e) {
  enum { T = 37, C = 96, Hq = 4, Hkv = 2, D = 16, I = 40, V = 300 };
  enum { QD = Hq * D, KD = Hkv * D, W = QD + 2 * KD, N = T * (W > 2 * I ? W : 2 * I) + T * V };
  float *a = malloc(sizeof(float) * N * 12);
  if (!a) return sr_internal_error(e, 0, "out of memory");
  float *x = a, *w = a + N, *g1 = a + 2 * N, *g2 = a + 3 * N, *r1 = a + 4 * N, *r2 = a + 5 * N, *in = a + 6 * N,
        *in2 = a + 7 * N, *g3 = a + 8 * N, *r3 = a + 9 * N, *cs = a + 10 * N, *sn = a + 11 * N;
  int64_t pos[T];
  int32_t tgt[T], am_g[T], am_r[T];
  double inv[D / 2];
  for (int i = 0; i < T; i++) pos[i] = 3 * i + 1, tgt[i] = i % 5 == 4 ? -1 : (i * 37) % V;
  for (int i = 0; i < D / 2; i++) inv[i] = pow(10000.0, -2.0 * i / D);
  model_ref_rope_table(pos, inv, 1.0, T, D / 2, cs, sn);
  printf("train-gpu-check: the fused kernels against their CPU references (%d rows)\n", T);
  int bad = 0, rc = SR_OK;
  for (int bf16 = 1; bf16 >= 0 && !rc; bf16--) {
    uint64_t s = 7 + (uint64_t)bf16;
    // RMSNorm forward and backward at C = 96 (the row kernels) and C = 90 (one block a row, the column sums)
    for (int c = 96; c >= 90 && !rc; c -= 6) {
      fill_uniform(x, T * c, 2.0f, &s), fill_uniform(w, c, 1.5f, &s);
      if ((rc = model_cuda_op_rmsnorm_fwd(bf16, x, w, T, c, 1e-6f, g1, g2, e))) break;
      model_ref_rmsnorm_fwd(bf16, x, w, T, c, 1e-6f, r1, r2);
      report(c == C ? "rmsnorm" : "rmsnorm (C 90)", bf16, fmax(worst_err(g1, r1, T * c, bf16), worst_err(g2, r2, T, 0)),
             &bad);
      // backward: dx accumulated (fp32), dx as operand, the weight gradient added onto dw (fp32)
      fill_uniform(in, T * c, 1.0f, &s), fill_uniform(g1, T * c, 0.5f, &s), fill_uniform(g3, c, 0.25f, &s);
      memcpy(r1, g1, sizeof(float) * T * c);
      double dw_ref[C];
      for (int j = 0; j < c; j++) dw_ref[j] = g3[j];
      if ((rc = model_cuda_op_rmsnorm_bwd(bf16, g1, g2, g3, in, x, w, r2, T, c, e))) break;
      model_ref_rmsnorm_bwd(bf16, r1, in2, r3, in, x, w, r2, T, c);
      for (int t = 0; t < T; t++)
        for (int j = 0; j < c; j++) dw_ref[j] += r3[(int64_t)t * c + j];
      for (int j = 0; j < c; j++) r3[j] = (float)dw_ref[j];
      report(c == C ? "rmsnorm_bwd" : "rmsnorm_bwd (C 90)", bf16,
             fmax(fmax(worst_err(g1, r1, T * c, 0), worst_err(g2, in2, T * c, bf16)), worst_err(g3, r3, c, 0)), &bad);
    }
    if (rc) break;
    // q|k|v epilogue (bf16 out whatever the operands; run once) with logn past position 40
    if (bf16) {
      fill_uniform(in, T * W, 3.0f, &s), fill_uniform(w, W, 0.5f, &s);
      if ((rc = model_cuda_op_qkv_post(in, w, w + QD, w + QD + KD, cs, sn, pos, 40, T, Hq, Hkv, D, g1, g2, g3, e))) break;
      model_ref_qkv_post(in, w, w + QD, w + QD + KD, cs, sn, pos, 40, T, Hq, Hkv, D, r1, r2, r3);
      report("qkv_post", 1,
             fmax(fmax(worst_err(g1, r1, T * QD, 1), worst_err(g2, r2, T * KD, 1)), worst_err(g3, r3, T * KD, 1)), &bad);
    }
    // its backward: dq, dk rotated back (fp32), dq|dk|dv as operands
    fill_uniform(g1, T * QD, 1.0f, &s), fill_uniform(g2, T * KD, 1.0f, &s), fill_uniform(in2, T * KD, 1.0f, &s);
    memcpy(r1, g1, sizeof(float) * T * QD), memcpy(r2, g2, sizeof(float) * T * KD);
    if ((rc = model_cuda_op_qkv_bwd_post(bf16, g1, g2, in2, cs, sn, pos, 40, T, Hq, Hkv, D, g3, e))) break;
    model_ref_qkv_bwd_post(bf16, r1, r2, in2, cs, sn, pos, 40, T, Hq, Hkv, D, r3);
    report("qkv_bwd_post", bf16,
           fmax(fmax(worst_err(g1, r1, T * QD, 0), worst_err(g2, r2, T * KD, 0)), worst_err(g3, r3, T * W, bf16)), &bad);
    // SwiGLU forward and backward over gate|up rows, the operands as the device holds them: I = 40 (16-byte vectors)
    // and I = 38 (element by element)
    for (int i2 = I; i2 >= I - 2 && !rc; i2 -= 2) {
      fill_uniform(in, T * 2 * i2, 4.0f, &s), fill_uniform(in2, T * i2, 1.0f, &s);
      for (int64_t i = 0; bf16 && i < T * 2 * i2; i++) in[i] = model_bf16_round(in[i]);
      for (int64_t i = 0; bf16 && i < T * i2; i++) in2[i] = model_bf16_round(in2[i]);
      if ((rc = model_cuda_op_swiglu_fwd(bf16, in, T, i2, g1, e)) || (rc = model_cuda_op_swiglu_bwd(bf16, in2, in, T, i2, g2, e)))
        break;
      model_ref_swiglu_fwd(bf16, in, T, i2, r1);
      model_ref_swiglu_bwd(bf16, in2, in, T, i2, r2);
      report(i2 == I ? "swiglu" : "swiglu (I 38)", bf16, worst_err(g1, r1, T * i2, bf16), &bad);
      report(i2 == I ? "swiglu_bwd" : "swiglu_bwd (I 38)", bf16, worst_err(g2, r2, T * 2 * i2, bf16), &bad);
    }
    if (rc) break;
    // cross-entropy: losses, argmax (exact), dlogits in place
    fill_uniform(in, T * V, 6.0f, &s);
    for (int64_t i = 0; bf16 && i < T * V; i++) in[i] = model_bf16_round(in[i]);
    memcpy(r1, in, sizeof(float) * T * V);
    if ((rc = model_cuda_op_cross_entropy(bf16, in, T, V, tgt, 0.125f, 1, g2, am_g, e))) break;
    model_ref_cross_entropy(bf16, r1, T, V, tgt, 0.125f, 1, r2, am_r);
    int am_diff = 0;
    for (int i = 0; i < T; i++) am_diff += am_g[i] != am_r[i];
    report("cross_entropy", bf16, fmax(fmax(worst_err(in, r1, T * V, bf16), worst_err(g2, r2, T, 0)), am_diff ? 1e9 : 0),
           &bad);
  }
  free(a);
  if (!rc && bad) rc = sr_internal_error(e, 0, "train-gpu-check: a fused kernel disagrees with its CPU reference");
  return rc;
}

// Median step time of forward + backward + AdamW of a model on the GPU (naive attention).
static int time_steps(const char *model_name, int64_t T, int steps, int bf16, int64_t mlp_chunk, sr_error *e) {
  model_config cfg;
  int rc = model_load(model_name, &cfg, e);
  if (rc) return rc;
  model_cpu h;
  if ((rc = model_cpu_create(&h, &cfg, MODEL_F32, 1, T, 1, e))) return rc;  // weights drawn on the device
  model_cuda *d = NULL;
  adamw_state s;
  memset(&s, 0, sizeof s);
  int32_t *tok = malloc((size_t)T * 4), *tgt = malloc((size_t)T * 4);
  int64_t *pos = malloc((size_t)T * 8);
  if (!tok || !tgt || !pos) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  sample_tokens(T, cfg.vocab_size, tok, tgt, pos);
  for (int64_t i = 0; i < T; i++) pos[i] = i;
  uint64_t seed = 3;
  if ((rc = model_cuda_create(&d, &h, T, h.num_params, &seed, 0, h.num_params, NULL, e)) ||
      (rc = model_cuda_set_precision(d, bf16 ? MODEL_CUDA_BF16 : MODEL_CUDA_TF32, e)) ||
      (rc = model_cuda_set_mlp_chunk(d, model_exec_mlp_rows(T, mlp_chunk), e)) ||
      (rc = adamw_create(&s, 0, h.num_params, 1e-4, 0, e)))
    goto done;
  double flops = 3.0 * ((double)cfg.num_layers * model_layer_gemm_flops_per_token(&cfg) +
                        model_lm_head_flops_per_token(&cfg)) * (double)T;
  for (int i = 0; i < steps; i++) {
    double loss = 0, attn = 0, t0 = sr_now();
    if ((rc = model_cuda_zero_grad(d, e)) ||
        (rc = model_cuda_forward_backward(d, T, tok, pos, tgt, 1, 1.0 / (double)T, &loss, NULL, &attn, e)) ||
        (rc = model_cuda_adamw(d, &s, 1.0, e)) || (rc = model_cuda_attn_time(d, &attn, e)) || (rc = model_cuda_sync(d, e)))
      goto done;
    double dt = sr_now() - t0, other = dt - attn;
    printf("  %s seq %lld %s MLP chunk %lld step %d: %.3fs (naive attention %.3fs, rest %.3fs = %.1f TFLOP/s on GEMM "
           "FLOPs), loss %.4f\n", model_name, (long long)T, bf16 ? "bf16" : "tf32",
           (long long)model_exec_mlp_rows(T, mlp_chunk), i + 1, dt, attn, other, flops / other / 1e12, loss / (double)T);
  }
done:
  model_cuda_free(d);
  model_cpu_free(&h);
  adamw_free(&s);
  free(tok);
  free(tgt);
  free(pos);
  return rc;
}

static const cli_flag check_flags[] = {
    {"model", "NAME|PATH", "tiny-test", "the model checked against the CPU one"},
    {"seq", "N", "256", "tokens of the checked step"},
    {"precision", "NAME", "bf16", "the GPU GEMMs' precision: bf16 or tf32"},
    {"time-model", "NAME|PATH", "tiny-25m", "the model whose GPU step is then timed"},
    {"time-seq", "N", "4096", "tokens of the timed steps (0: no timing)"},
    {"time-steps", "N", "3", "timed steps (0: no timing)"},
    {"time-mlp-chunk", "N|auto", "auto", "the timed steps' MLP chunk in tokens (0: the whole sequence; train's --mlp-chunk)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage check_usage = {NULL, "sparsering-exec train-gpu-check --model tiny-25m --seq 128 --precision tf32",
                                      {check_flags, NULL}};

static int cmd_train_gpu_check(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  int64_t seq, tseq, tsteps;
  if (cli_parse(argc, argv, &check_usage, &a, &e) || cli_get_int(&a, "seq", 256, 2, 1 << 20, &seq, &e) ||
      cli_get_int(&a, "time-seq", 4096, 0, 1 << 24, &tseq, &e) ||
      cli_get_int(&a, "time-steps", 3, 0, 1000, &tsteps, &e))
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  const char *prec = cli_get(&a, "precision", "bf16");
  if (strcmp(prec, "bf16") != 0 && strcmp(prec, "tf32") != 0) {
    sr_input_error(&e, NULL, "--precision", "'%s' is not one of bf16, tf32", prec);
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  }
  int bf16 = strcmp(prec, "bf16") == 0;
  int64_t tchunk = MODEL_EXEC_MLP_AUTO;
  const char *tc = cli_get(&a, "time-mlp-chunk", NULL);
  if ((tc && plan_mlp_chunk_parse(tc, "--time-mlp-chunk", &tchunk, &e)) || check_kernels(&e) ||
      check(cli_get(&a, "model", "tiny-test"), seq, bf16, &e))
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  if (tseq > 0 && tsteps > 0 &&
      time_steps(cli_get(&a, "time-model", "tiny-25m"), tseq, (int)tsteps, bf16, tchunk, &e))
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  return 0;
}

EXEC_COMMAND("train-gpu-check", cmd_train_gpu_check, "check the GPU transformer against the CPU one, then time it",
             &check_usage)
#else
typedef int train_gpu_check_needs_cuda;  // without nvcc there is no GPU model to check
#endif

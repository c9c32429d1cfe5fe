// train_gpu_check.c — `sparsering-exec train-gpu-check`: the GPU model (model_cuda.cu) against the CPU
// model (model_cpu.c) on the same weights and tokens: loss, every parameter tensor's gradient and one
// AdamW update; then the GPU step time of a larger model. Exit 0 when every error is within tolerance.
//
//   sparsering-exec train-gpu-check [--model tiny-test] [--seq 256] [--precision bf16|tf32]
//                                   [--time-model tiny-25m] [--time-seq 4096] [--time-steps 3]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "train/model_cpu.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include "train/model_cuda.h"

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

// Median step time of forward + backward + AdamW of a model on the GPU (naive attention).
static int time_steps(const char *model_name, int64_t T, int steps, int bf16, sr_error *e) {
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
    printf("  %s seq %lld %s step %d: %.3fs (naive attention %.3fs, rest %.3fs = %.1f TFLOP/s on GEMM FLOPs), "
           "loss %.4f\n", model_name, (long long)T, bf16 ? "bf16" : "tf32", i + 1, dt, attn, other, flops / other / 1e12,
           loss / (double)T);
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
  if (check(cli_get(&a, "model", "tiny-test"), seq, bf16, &e))
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  if (tseq > 0 && tsteps > 0 && time_steps(cli_get(&a, "time-model", "tiny-25m"), tseq, (int)tsteps, bf16, &e))
    return sr_error_report(&e, "sparsering-exec train-gpu-check");
  return 0;
}

EXEC_COMMAND("train-gpu-check", cmd_train_gpu_check, "check the GPU transformer against the CPU one, then time it",
             &check_usage)
#else
typedef int train_gpu_check_needs_cuda;  // without nvcc there is no GPU model to check
#endif

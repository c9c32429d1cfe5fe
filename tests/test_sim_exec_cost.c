// test_sim_exec_cost.c — the exec trainer's non-attention work (sim/exec_cost.c, step.c with plan spec trainer
// "exec"): each term's bytes for tiny-test counted by hand from the kernels train/model_cuda_step.cu runs, and
// the simulated step charging them at the cluster's rates; and the ring attention call's own passes around its
// kernels (exec/dist_attn_cuda.c).
//
// tiny-test (models/tiny-test.json): hidden C = 64, intermediate I = 128, 4 heads and 2 KV heads of d = 16
// (q 64 columns, k and v 32 each: q|k|v 128), q/k/v biases, vocabulary 256, 2 layers, tied embeddings.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/exec_cost.h"
#include "sim/step_ctx.h"
#include "sim/strategy.h"
#include "tests/test.h"

static model_config tiny(void) {
  model_config m;
  sr_error e;
  CHECK_EQ_INT(model_load("tiny-test", &m, &e), SR_OK);
  return m;
}

TEST(exec_cost_forward_layer_bytes_are_the_norm_the_qkv_epilogue_the_residual_gemms_and_swiglu) {
  model_config m = tiny();
  exec_layer_bytes b;
  exec_cost_layer(&m, &b);
  // Up to attention: RMSNorm reads x (64 x 4), writes ln1 (64 x 2) and the residual copy (64 x 4), rstd (4):
  // 644; the q, k, v GEMMs store fp32 where the calibration stored bf16: 128 x 2 = 256; the q|k|v epilogue
  // reads 128 fp32 (512), writes 128 bf16 (256), reads cos and sin (8 + 8 floats: 64) and the position (8): 840.
  CHECK_NEAR(b.fwd_pre, 644 + 256 + 840, 0);
  // After attention: O and down accumulate onto fp32 (read 4 + write 4 - the calibrated 2 = 6 a column: 384
  // each), the second RMSNorm 644, SwiGLU reads gate|up (256 bf16: 512) and writes h (128 bf16: 256).
  CHECK_NEAR(b.fwd_post, 384 + 384 + 644 + 768, 0);
}

TEST(exec_cost_backward_layer_bytes_are_swiglu_the_input_gradient_epilogues_the_rotations_and_the_norms) {
  model_config m = tiny();
  exec_layer_bytes b;
  exec_cost_layer(&m, &b);
  // RMSNorm's backward: reads dx, dout, x (3 x 256) and rstd (4), writes dx (256) and its bf16 copy (128); C = 64
  // is a multiple of 4, so the row kernel sums the weight gradient itself (no rows written and read again): 1156.
  double norm = 768 + 4 + 256 + 128;
  // MLP half: SwiGLU's backward reads gate|up (512) and dh (256), writes dgate|dup (512); the gate and up input
  // gradients store fp32 dln (beta 0: +2 a column, 128; beta 1: +6, 384).
  CHECK_NEAR(b.bwd_post, 1280 + 128 + 384 + norm, 0);
  // Attention half: the rotation back reads dq, dk, dv (128 fp32: 512), cos/sin (64), the position (8), writes
  // dq and dk (96 fp32: 384) and dq|dk|dv in bf16 (256); the bias sums read dq, dk, dv again (512); the q, k, v
  // input gradients into fp32 dln (beta 0, 1, 1: 128 + 384 + 384); the first norm's backward.
  CHECK_NEAR(b.bwd_pre, 512 + 64 + 8 + 384 + 256 + 512 + 896 + norm, 0);
}

TEST(exec_cost_norm_backward_writes_and_sums_weight_rows_where_the_row_kernel_does_not_run) {
  // bwd_post holds one norm's backward beside 8 C of input-gradient epilogues and SwiGLU's 10 I: the row kernel
  // (C a multiple of 4 and at most 4096, train/model_cuda_kernels.cu) moves 18 C + 4, the other form 26 C + 4.
  model_config m = tiny();
  exec_layer_bytes b96, b94, b4096, b4100;
  m.hidden_size = 96, exec_cost_layer(&m, &b96);
  m.hidden_size = 94, exec_cost_layer(&m, &b94);
  m.hidden_size = 4096, exec_cost_layer(&m, &b4096);
  m.hidden_size = 4100, exec_cost_layer(&m, &b4100);
  CHECK_NEAR(b94.bwd_post - b96.bwd_post, 8.0 * (94 - 96) + (26.0 * 94 + 4) - (18.0 * 96 + 4), 0);
  CHECK_NEAR(b4100.bwd_post - b4096.bwd_post, 8.0 * 4 + (26.0 * 4100 + 4) - (18.0 * 4096 + 4), 0);
}

TEST(exec_cost_weight_gradients_accumulate_six_bytes_a_weight_beyond_the_calibrated_gemm) {
  model_config m = tiny();
  // q 64 x 64, k and v 32 x 64, o 64 x 64, gate, up, down 128 x 64 each: 36,864 weights a layer, read and
  // written in fp32 (8 bytes) where the calibration wrote bf16 (2).
  CHECK_NEAR(exec_cost_weight_grads(&m), 6.0 * 36864, 0);
}

TEST(exec_cost_loss_bytes_are_the_embedding_the_final_norm_and_three_reads_and_a_write_of_bf16_logits) {
  model_config m = tiny();
  // Embedding forward: row read and x[0] written (2 x 256) and the id (4); rotary table: position (8), cos and
  // sin (64); final RMSNorm forward without a copy: 256 + 128 + 4; cross-entropy over 256 bf16 logits read three
  // times and written once (2048), target, loss, argmax (12); the LM head's input gradient into fp32 (+128); dx
  // cleared (256); the final norm's backward (1156, the row kernel's); embedding backward: dx read, id, the gradient row read and
  // written (256 + 4 + 512).
  double want = 512 + 4 + 8 + 64 + 388 + 2048 + 12 + 128 + 256 + 1156 + 772;
  CHECK_NEAR(exec_cost_loss_token(&m), want, 0);
}

TEST(exec_cost_lm_head_gradient_is_accumulated_once_a_2048_token_logits_chunk) {
  model_config m = tiny();
  double per_chunk = 6.0 * 256 * 64;  // the [V, C] fp32 gradient read and written beyond the bf16 store
  CHECK_NEAR(exec_cost_lm_head_grads(&m, 2048), per_chunk, 0);
  CHECK_NEAR(exec_cost_lm_head_grads(&m, 4096), 2 * per_chunk, 0);
  CHECK_NEAR(exec_cost_lm_head_grads(&m, 4097), 3 * per_chunk, 0);
  CHECK_NEAR(exec_cost_lm_head_grads(&m, 0), 0, 0);
}

TEST(exec_cost_adamw_and_the_norm_read_32_bytes_a_parameter_and_the_weights_pass_10) {
  // sumsq reads the fp32 gradient (4); AdamW reads weight, gradient, m, v (16) and writes weight, m, v (12).
  CHECK_NEAR(exec_cost_optimizer(1000), 32000, 0);
  // The bf16 mirror: fp32 read (4), bf16 written (2); the gradients cleared (4).
  CHECK_NEAR(exec_cost_weights(1000), 10000, 0);
}

// ---- the simulated step ------------------------------------------------------------------------

// One node of `gpus` GPUs: 100 TFLOP/s at GEMM efficiency 0.5, 1000 GB/s HBM at 0.8, NVLink 100 GB/s, 2 us.
static const char *cluster(int gpus) {
  static char path[700];
  snprintf(path, sizeof path, "%s/exec-cost-%d.json", test_tmpdir(), gpus);
  char text[1500];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": %d,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, \"mem_gib\": 40,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_fwd_bar\": 0.5,\n"
           "     \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8},\n"
           "   \"comm_slowdown\": 1.0},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 512}}\n",
           gpus);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

// tiny-test, dense striped ring, 4096 tokens on `gpus` ranks, the exec trainer, selective recomputation.
static int exec_step(int gpus, sim_timeline *tl) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster(gpus));
  snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = 4096;
  sr_error e;
  plan p;
  if (plan_build(&s, &p, &e)) return -1;
  sim_options o = {0, 1, 0, 1, 1, 0, 0, 0};
  sim_result r;
  int rc = sim_plan(&p, &o, &r, tl, &e);
  plan_free(&p);
  return rc;
}

// Seconds of rank 0's events of phase ph on stream st in layer `layer` (-1: outside the layers).
static double phase_s(const sim_timeline *tl, int ph, int st, int layer) {
  double s = 0;
  for (int64_t i = 0; i < tl->n; i++)
    if (tl->ev[i].rank == 0 && tl->ev[i].phase == ph && tl->ev[i].stream == st && tl->ev[i].layer == layer)
      s += tl->ev[i].dur;
  return s;
}

// a training step's GEMMs run at COST_GEMM_SUSTAINED of the calibrated rate (sim/cost.c)
static const double mem_rate = 1000e9 * 0.8, gemm_rate = 100e12 * 0.5 * 0.81, tile_rate = 100e12 * 0.5;

TEST(sim_exec_trainer_charges_its_layer_kernels_at_the_memory_rate_beside_the_gemms) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(exec_step(1, &tl), 0);
  double n = 4096;
  // The q|k|v projection: 2 x 64 x 128 FLOPs a token; the forward's bytes before attention (1740 a token).
  CHECK_REL(phase_s(&tl, PHASE_QKV, STREAM_COMPUTE, 0), 2.0 * 64 * 128 * n / gemm_rate + 1740 * n / mem_rate, 1e-9);
  // The MLP half's backward: 2x its forward GEMMs (O 64 x 64 and the MLP 3 x 64 x 128, 2 FLOPs a MAC a token)
  // and its backward bytes (2948 a token: the norm's backward sums its weight gradient in the row kernel).
  double post_flops = 2.0 * (64 * 64 + 3 * 64 * 128) * n;
  CHECK_REL(phase_s(&tl, PHASE_POST_BWD, STREAM_COMPUTE, 0), 2 * post_flops / gemm_rate + 2948 * n / mem_rate, 1e-9);
  // The q|k|v half's backward, with the layer's fp32 weight-gradient accumulation once (6 x 36,864 bytes).
  CHECK_REL(phase_s(&tl, PHASE_QKV_BWD, STREAM_COMPUTE, 0),
            2 * 2.0 * 64 * 128 * n / gemm_rate + (3788 * n + 6.0 * 36864) / mem_rate, 1e-9);
  sim_timeline_free(&tl);
}

TEST(sim_exec_trainer_loss_is_the_lm_head_gemms_and_its_bytes) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(exec_step(1, &tl), 0);
  double n = 4096;
  // LM head forward and backward: 3 x 2 x 64 x 256 FLOPs a token; 5348 bytes a token and two chunks' fp32 LM head
  // gradient (2 x 6 x 256 x 64).
  CHECK_REL(phase_s(&tl, PHASE_LOSS, STREAM_COMPUTE, -1),
            3 * 2.0 * 64 * 256 * n / gemm_rate + (5348 * n + 2 * 6.0 * 256 * 64) / mem_rate, 1e-9);
  sim_timeline_free(&tl);
}

TEST(sim_exec_trainer_optimizer_passes_42_bytes_a_parameter_on_one_gpu) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(exec_step(1, &tl), 0);
  // tiny-test's parameters: embedding 256 x 64 (tied), per layer q 4096 + 64, k 2048 + 32, v 2048 + 32, o 4096,
  // MLP 24,576, two norms 128, then the final norm 64.
  double P = 16384 + 2 * (4160 + 2080 + 2080 + 4096 + 24576 + 128) + 64;
  model_config m = tiny();
  CHECK_NEAR((double)model_param_count(&m), P, 0);
  CHECK_REL(phase_s(&tl, PHASE_OPTIMIZER, STREAM_COMPUTE, -1), 42 * P / mem_rate, 1e-9);
  sim_timeline_free(&tl);
}

TEST(sim_exec_trainer_all_reduces_fp32_gradients_whole_after_the_backward_and_gathers_fp32_slices) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(exec_step(2, &tl), 0);
  model_config m = tiny();
  double P = (double)model_param_count(&m), slice = ceil(P / 2);
  // No per-layer reduction: every gradient collective comes after the backward.
  for (int l = 0; l < 2; l++) CHECK_NEAR(phase_s(&tl, PHASE_GRAD_REDUCE, STREAM_COLL, l), 0, 0);
  // Ring all-reduce over 2 ranks (2 latencies + bytes / bandwidth) of 4P bytes, the loss sums (24 bytes) and the
  // squared norm (8); then the all-gather (1 latency + half the bytes) of two fp32 slices.
  double ar = 3 * 2 * 2e-6 + (4 * P + 24 + 8) / 100e9, ag = 2e-6 + 0.5 * 4 * slice * 2 / 100e9;
  CHECK_REL(phase_s(&tl, PHASE_GRAD_REDUCE, STREAM_COLL, -1), ar, 1e-9);
  CHECK_REL(phase_s(&tl, PHASE_OPTIMIZER, STREAM_COLL, -1), ag, 1e-9);
  // The optimizer's compute: the norm and AdamW over the slice, the mirror and the clearing over all.
  CHECK_REL(phase_s(&tl, PHASE_OPTIMIZER, STREAM_COMPUTE, -1), (32 * slice + 10 * P) / mem_rate, 1e-9);
  sim_timeline_free(&tl);
}

// ---- the ring attention call's own passes ----------------------------------------------------------

TEST(exec_cost_ring_attention_call_bytes_are_its_copies_clears_conversion_and_partial_sums) {
  model_config m = tiny();  // q 64 columns, k and v 32 each, 4 heads
  exec_attn_call_bytes b;
  exec_cost_attn_call(&m, &b);
  // Forward, a query token: its k and v rows (bf16) read and written into the ring buffer (2 x 2 x 32 x 2 = 256),
  // the fp32 running output cleared (64 x 4 = 256), the LSE of 4 heads set (16); after the ring the fp32 output
  // read (256) and written as bf16 (128).
  CHECK_NEAR(b.fwd_pre, 256 + 256 + 16, 0);
  CHECK_NEAR(b.fwd_post, 256 + 128, 0);
  // Backward, a query token: k and v packed again (256), o and dout read as bf16 (2 x 128) and one float a head
  // written (16), dQ (64 fp32) and dK, dV (32 fp32 each) cleared (256 + 256).
  CHECK_NEAR(b.bwd_pre, 256 + 256 + 16 + 256 + 256, 0);
  // A key of a step's source: its fp32 dK|dV partial (2 x 32 x 4 = 256) cleared, then added to another partial
  // (two read, one written: 768).
  CHECK_NEAR(b.bwd_step, 256 + 768, 0);
}

TEST(sim_ring_attention_charges_the_calls_passes_beside_the_kernels_on_one_gpu) {
  sim_timeline tl = {0};
  CHECK_EQ_INT(exec_step(1, &tl), 0);
  // Dense causal attention over 4096 tokens on one rank: 32 query tiles of 128, per head 32 x 31 / 2 whole tiles
  // below the diagonal and 32 masked ones on it, 4 heads; a tile is 4 x 128 x 128 x 16 FLOPs, at 0.5 of 100
  // TFLOP/s, the backward 2.5 times the forward's; one ring step (its fixed costs uncalibrated: 0).
  double n = 4096, tiles = 4 * (32 * 31 / 2 + 32), flops = tiles * 4.0 * 128 * 128 * 16;
  double fwd = flops / tile_rate, bwd = 2.5 * flops / tile_rate;
  // The call's passes (bytes above): the forward's 528 + 384 a token; the backward's 1040 a token and 1024 a key
  // of its one source (all 4096 tokens). The simulator keeps a step's seconds as a float: 1e-7.
  CHECK_REL(phase_s(&tl, PHASE_ATTN, STREAM_COMPUTE, 0), fwd + (528 + 384) * n / mem_rate, 1e-7);
  CHECK_REL(phase_s(&tl, PHASE_ATTN_BWD, STREAM_COMPUTE, 0), bwd + (1040 + 1024) * n / mem_rate, 1e-7);
  sim_timeline_free(&tl);
}

// The exec trainer's recomputed forward stops at the second RMSNorm (train/model_cuda_step.cu): without the down
// projection's GEMM (2 I C FLOPs a token) and its fp32 epilogue (6 C bytes), and the norm writes no residual copy
// (4 C bytes); the other trainer reruns the whole forward.
TEST(sim_exec_trainer_recomputes_the_forward_without_the_down_projection) {
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("qwen2.5-3b", &m, &e), SR_OK);
  cluster_desc c;
  CHECK_EQ_INT(cluster_load("h200-1x2-calibrated", &c, &e), SR_OK);
  plan p;
  memset(&p, 0, sizeof p);
  snprintf(p.spec.trainer, sizeof p.spec.trainer, "exec");
  sim_ctx x;
  memset(&x, 0, sizeof x);
  x.m = &m, x.c = &c, x.p = &p;
  double n = 65536, C = (double)m.hidden_size, I = (double)m.intermediate_size;
  double full = ctx_post(&x, n, 0), rerun = ctx_post(&x, n, 1);
  double want = cost_gemm_step(&c.gpu, 2 * I * C * n) + cost_mem(&c.gpu, 10 * C * n);
  CHECK(fabs((full - rerun) - want) <= 1e-12 * full);
  snprintf(p.spec.trainer, sizeof p.spec.trainer, "mixed");
  CHECK(ctx_post(&x, n, 1) == ctx_post(&x, n, 0));
}

// test_sim_memory.c — the memory model's ZeRO stages and offloads against their closed forms (sim/memory.h), and
// an 8B model on 40 GB GPUs: out of memory as a ZeRO-1 step, fitting with ZeRO-3 and offload, as DeepSpeed runs it;
// the Qwen2.5-3B shape at 512K tokens on one H200 under sparsering-exec train, fitting once its MLP runs in chunks.
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/memory.h"
#include "sim/strategy.h"
#include "tests/test.h"

// tiny-25m (8 layers) on 8 ranks, 4 a node, of 80 GiB GPUs with 100 GiB hosts, 1024 tokens a rank.
static void fixture(model_config *m, cluster_desc *c, mem_inputs *in) {
  sr_error e;
  CHECK_EQ_INT(model_load("tiny-25m", m, &e), SR_OK);
  memset(c, 0, sizeof *c);
  c->gpus_per_node = 4;
  c->gpu.mem_gib = 80;
  c->host_mem_gib = 100;
  mem_inputs x = {.world = 8, .seq = 8192, .tokens_per_rank = 1024, .recompute = 1, .zero = 1, .kv_bytes_per_elem = 2,
                  .grad_bytes_per_elem = 4};
  *in = x;
}

TEST(sim_memory_zero_stages_shard_optimizer_then_gradients_then_weights) {
  model_config m;
  cluster_desc c;
  mem_inputs in;
  fixture(&m, &c, &in);
  double P = (double)model_param_count(&m), Pl = (double)model_layer_param_count(&m);
  double Pe = (double)(m.vocab_size * m.hidden_size);
  sim_memory z[4];
  for (int s = 0; s < 4; s++) {
    in.zero = s;
    sim_memory_estimate(&m, &c, &in, &z[s]);
  }
  CHECK_REL(z[0].optim, 12 * P, 1e-12);  // fp32 master, momentum, variance (ZeRO paper)
  CHECK_REL(z[1].optim, 12 * P / 8, 1e-12);
  CHECK_REL(z[1].grads, 2 * P, 1e-12);
  CHECK_REL(z[2].grads, 2 * (P / 8 + Pl), 1e-12);  // the shard, and one layer's before its reduce-scatter
  CHECK_REL(z[2].weights, 2 * P, 1e-12);
  CHECK_REL(z[3].weights, 2 * (P / 8 + 2 * (Pl > Pe ? Pl : Pe)), 1e-12);  // the shard and two gathered modules
  CHECK(z[3].total < z[2].total && z[2].total < z[1].total && z[1].total < z[0].total);
}

TEST(sim_memory_offloads_move_optimizer_and_checkpoints_to_the_node_host) {
  model_config m;
  cluster_desc c;
  mem_inputs in;
  fixture(&m, &c, &in);
  sim_memory base, off;
  sim_memory_estimate(&m, &c, &in, &base);
  in.offload_optimizer = 1, in.offload_activations = 1;
  sim_memory_estimate(&m, &c, &in, &off);
  double P = (double)model_param_count(&m), L = (double)m.num_layers, ckpt = 1024 * 2.0 * m.hidden_size;  // bf16 input
  CHECK_REL(off.optim, 0, 1e-12);
  CHECK_REL(off.host_optim, 4 * (12 + 4) * P / 8, 1e-12);  // 4 ranks a node: their shards and fp32 gradients
  CHECK_REL(off.host_activations, 4 * L * ckpt, 1e-12);
  CHECK_REL(base.activations - off.activations, (L - 2) * ckpt, 1e-9);  // two layers' checkpoints stay
  CHECK_REL(off.host_bytes, off.host_optim + off.host_activations + off.host_attn, 1e-12);
  CHECK(off.fits);
  c.host_mem_gib = 1e-6;
  sim_memory_estimate(&m, &c, &in, &off);
  CHECK(!off.fits);  // the host must hold what is offloaded
}

TEST(sim_memory_fpdt_host_holds_one_layer_with_recomputation_and_every_layer_without) {
  model_config m;
  cluster_desc c;
  mem_inputs in;
  fixture(&m, &c, &in);
  in.fpdt_chunk = 2048, in.fpdt_offload = 1;
  sim_memory rc, full;
  sim_memory_estimate(&m, &c, &in, &rc);
  in.recompute = 0;
  sim_memory_estimate(&m, &c, &in, &full);
  double H = (double)m.num_heads, KV = (double)m.num_kv_heads, d = (double)m.head_dim;
  double qkvo = (H + 2 * KV) * d * 2 + H * d * 2 + H * 4;
  CHECK_REL(rc.host_attn, 4 * 1024 * qkvo, 1e-12);
  CHECK_REL(full.host_attn, m.num_layers * rc.host_attn, 1e-12);
}

TEST(sim_memory_exec_trainer_offloads_its_layer_inputs) {
  // train --offload-activations: x[0..L-1] (fp32) share three device slots, x[0..L-4] wait in pinned host memory
  model_config m;
  cluster_desc c;
  mem_inputs in;
  fixture(&m, &c, &in);
  in.exec_trainer = 1;
  sim_memory base, off;
  sim_memory_estimate(&m, &c, &in, &base);
  in.offload_activations = 1;
  sim_memory_estimate(&m, &c, &in, &off);
  double L = (double)m.num_layers, C = (double)m.hidden_size, slots = L < 3 ? L : 3;
  CHECK_REL(base.activations - off.activations, 1024 * (L - slots) * C * 4, 1e-12);
  CHECK_REL(off.host_activations, 4 * 1024 * (L - slots) * C * 4, 1e-12);  // the last inputs stay in their slots
}

// Llama-3.1-8B, FPDT over 4 A100-40GB of one node at 256K tokens.
static void llama8b_fpdt(int zero, int offload, sim_result *r) {
  char cluster[700];
  snprintf(cluster, sizeof cluster, "%s/a100-1x4.json", test_tmpdir());
  const char *text =
      "{\"nodes\": 1, \"gpus_per_node\": 4,\n"
      " \"gpu\": {\"name\": \"A100-SXM4-40GB\", \"peak_tflops\": 312, \"hbm_gbps\": 1555, \"mem_gib\": 40,\n"
      "   \"efficiency\": {\"gemm\": 0.75, \"attn_fwd_full\": 0.7, \"attn_fwd_partial\": 0.55, \"attn_fwd_bar\": 0.3,\n"
      "     \"attn_bwd_full\": 0.55, \"attn_bwd_partial\": 0.45, \"attn_bwd_bar\": 0.25, \"mem\": 0.8},\n"
      "   \"comm_slowdown\": 1.05},\n"
      " \"intra_node\": {\"gbps\": 300, \"latency_us\": 3},\n"
      " \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 1024}}\n";
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(cluster, text, strlen(text), &e), SR_OK);
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "fpdt", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "llama-3.1-8b");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = 256 * 1024, s.zero = zero, s.offload_optimizer = s.offload_activations = offload;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(sim_plan(&p, NULL, r, NULL, &e), SR_OK);
  plan_free(&p);
}

TEST(sim_eight_b_model_on_40gb_gpus_fits_with_zero3_and_offload_not_with_zero1) {
  sim_result z1, z3;
  llama8b_fpdt(1, 0, &z1);
  llama8b_fpdt(3, 1, &z3);
  CHECK(!z1.mem.fits);  // 16 GB of bf16 weights, 16 of gradients and 24 of optimizer shard before any activation
  CHECK(z3.mem.fits);
  CHECK(z3.mem.total < 40.0 * 1073741824.0 && z3.mem.host_bytes > 0);
  CHECK_REL(z3.mem.optim, 0, 1e-12);
}

// The Qwen2.5-3B shape at 512K tokens on one H200 (models/clusters/h200-1x1-calibrated.json), sparsering-exec train's
// memory (--trainer exec) with activation offload, the MLP by `mlp_chunk`.
static sim_memory qwen3b_512k_one_h200(const char *strategy, int64_t mlp_chunk) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e = {0};
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, strategy, &e), SR_OK);
  snprintf(s.model, sizeof s.model, "qwen2.5-3b");
  snprintf(s.cluster, sizeof s.cluster, "h200-1x1-calibrated");
  snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = 512 * 1024, s.offload_activations = 1, s.mlp_chunk = mlp_chunk;
  plan p;
  sim_result r;
  memset(&r, 0, sizeof r);
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(sim_plan(&p, NULL, &r, NULL, &e), SR_OK);
  plan_free(&p);
  return r.mem;
}

TEST(sim_exec_trainer_fits_512k_tokens_of_qwen3b_on_one_h200_with_fpdt_and_offload_once_the_mlp_is_chunked) {
  // the whole sequence's MLP buffers, 8 x 11008 bytes a token (gate|up, h, dh in bf16), are 43 GiB at 512K: without
  // chunks the step does not fit 139.8 GiB; the default (auto: 32K-token chunks past 64K) holds them for 32K rows
  const double G = 1073741824.0, I = 11008, n = 512 * 1024;
  sim_memory whole = qwen3b_512k_one_h200("fpdt", 0), chunked = qwen3b_512k_one_h200("fpdt", MODEL_EXEC_MLP_AUTO);
  CHECK(!whole.fits);
  CHECK(chunked.fits);
  CHECK(chunked.total <= 139.8 * G);
  CHECK_REL(whole.activations - chunked.activations, 8 * I * (n - 32768), 1e-9);
  CHECK(whole.capacity > 139 * G && whole.capacity < 141 * G);  // the cluster is the H200 meant
}

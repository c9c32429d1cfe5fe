// cmd_model.c — `sparsering model --model M [--seq N]`: what the planner derives from a model config
// (parameters, FLOPs per token, bytes per parameter and per token), for checking a config by eye.
#include <stdio.h>

#include "cli/cli.h"
#include "plan/model.h"
#include "plan/util.h"

static void print_count(const char *label, double v, const char *unit) {
  const char *sfx = "";
  double s = v;
  if (v >= 1e12) s = v / 1e12, sfx = "T";
  else if (v >= 1e9) s = v / 1e9, sfx = "G";
  else if (v >= 1e6) s = v / 1e6, sfx = "M";
  else if (v >= 1e3) s = v / 1e3, sfx = "K";
  printf("  %-34s %10.4g %s%s  (%.0f)\n", label, s, sfx, unit, v);
}

static const cli_flag model_flags[] = {
    {"model", "NAME|PATH", "required", "the model: a shipped name (models/NAME.json) or a config file"},
    {"seq", "N", NULL, "also the quantities of one sequence of N tokens"},
    {"world", "W", "1", "with --seq: the executor trainer's memory per GPU on W GPUs"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage model_usage = {NULL, "sparsering model --model qwen2.5-3b --seq 32K --world 2", {model_flags, NULL}};

static int cmd_model(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  const char *name = NULL, *seq_text = NULL;
  int64_t seq = 0, world = 1;
  model_config m;
  // every flag is checked before the report starts, used or not (--world means nothing without --seq)
  if (cli_parse(argc, argv, &model_usage, &a, &e) || cli_require(&a, "model", &name, &e) ||
      ((seq_text = cli_get(&a, "seq", NULL)) && sr_parse_tokens(seq_text, "--seq", &seq, &e)) ||
      cli_get_int(&a, "world", 1, 1, 1 << 20, &world, &e) || model_load(name, &m, &e))
    return sr_error_report(&e, "sparsering model");
  if (cli_has(&a, "world") && !seq_text) {
    sr_input_error(&e, NULL, "--world", "gives the memory per GPU of one sequence: give --seq too");
    return sr_error_report(&e, "sparsering model");
  }

  printf("model %s (%s)\n", m.name, m.path);
  printf("  architecture                       %s%s%s\n", m.architecture[0] ? m.architecture : "(none)",
         m.model_type[0] ? ", model_type " : "", m.model_type);
  printf("  layers                             %lld\n", (long long)m.num_layers);
  printf("  hidden size                        %lld\n", (long long)m.hidden_size);
  printf("  heads                              %lld query, %lld KV (%lld query heads per KV head), head_dim %lld\n",
         (long long)m.num_heads, (long long)m.num_kv_heads, (long long)(m.num_heads / m.num_kv_heads),
         (long long)m.head_dim);
  printf("  MLP (SwiGLU) width                 %lld\n", (long long)m.intermediate_size);
  printf("  vocabulary                         %lld (%s)\n", (long long)m.vocab_size,
         m.tie_word_embeddings ? "LM head tied to the embedding" : "separate LM head");
  printf("  biases                             q/k/v %s, o %s, MLP %s\n", m.attention_bias ? "yes" : "no",
         m.o_proj_bias ? "yes" : "no", m.mlp_bias ? "yes" : "no");
  printf("  rope                               theta %g, scaling %s", m.rope_theta,
         m.rope_scaling_type[0] ? m.rope_scaling_type : "none");
  if (m.rope_scaling_type[0]) printf(" x%g from %lld", m.rope_scaling_factor, (long long)m.rope_original_max_position);
  printf("\n  max positions                      %lld\n", (long long)m.max_position_embeddings);

  printf("parameters\n");
  print_count("total", (double)model_param_count(&m), "");
  print_count("per layer", (double)model_layer_param_count(&m), "");
  print_count("embedding", (double)(m.vocab_size * m.hidden_size), "");
  printf("forward FLOPs per token\n");
  print_count("one layer's GEMMs", model_layer_gemm_flops_per_token(&m), "FLOP");
  print_count("all layers' GEMMs", model_layer_gemm_flops_per_token(&m) * (double)m.num_layers, "FLOP");
  print_count("LM head", model_lm_head_flops_per_token(&m), "FLOP");
  print_count("attention per (query, key) pair", model_attn_flops(&m, 1.0), "FLOP");
  printf("  (backward = %.1fx forward for GEMMs, %.1fx for attention)\n", MODEL_GEMM_BWD_RATIO, MODEL_ATTN_BWD_RATIO);
  printf("bytes\n");
  printf("  %-34s weights %.0f + grads %.0f + optimizer %.0f = %.0f (mixed-precision AdamW)\n", "per parameter",
         MODEL_BYTES_WEIGHT, MODEL_BYTES_GRAD, MODEL_BYTES_OPTIM, MODEL_BYTES_WEIGHT + MODEL_BYTES_GRAD + MODEL_BYTES_OPTIM);
  print_count("model state (unsharded)",
              (double)model_param_count(&m) * (MODEL_BYTES_WEIGHT + MODEL_BYTES_GRAD + MODEL_BYTES_OPTIM), "B");
  print_count("K+V per token per layer (bf16)", model_kv_bytes(&m, 1, 2), "B");
  print_count("activations per token per layer", model_act_bytes_per_token_layer(&m, 0), "B");
  print_count("  with full recomputation", model_act_bytes_per_token_layer(&m, 1), "B");
  if (seq > 0) {
    char buf[32], buf2[32];
    printf("at %s tokens (one sequence, causal)\n", sr_format_tokens(seq, buf, sizeof buf));
    print_count("attention FLOPs per layer (fwd)", model_attn_flops(&m, model_causal_pairs(seq)), "FLOP");
    print_count("GEMM FLOPs per layer (fwd)", model_layer_gemm_flops_per_token(&m) * (double)seq, "FLOP");
    print_count("K+V bytes per layer", model_kv_bytes(&m, seq, 2), "B");
    print_count("activations, all layers", model_act_bytes_per_token_layer(&m, 0) * (double)seq * (double)m.num_layers, "B");
    int64_t local = (seq + world - 1) / world, rows = model_exec_mlp_rows(local, MODEL_EXEC_MLP_AUTO);
    double state = model_exec_state_bytes(&m, (int)world);
    printf("sparsering-exec train --backend cuda on %lld GPU(s), %s local tokens each (bf16 GEMMs, train/model_cuda.cu; "
           "the MLP in chunks of %s tokens, --mlp-chunk auto)\n", (long long)world, sr_format_tokens(local, buf, sizeof buf),
           sr_format_tokens(rows, buf2, sizeof buf2));
    print_count("model state per GPU (ZeRO-1)", state, "B");
    print_count("buffers per local token, recompute", model_exec_bytes_per_token(&m, 1, local, MODEL_EXEC_MLP_AUTO), "B");
    print_count("per GPU, state + buffers, recompute",
                state + model_exec_bytes_per_token(&m, 1, local, MODEL_EXEC_MLP_AUTO) * (double)local, "B");
    // selective recomputation: every layer's attention output and LSE kept besides
    print_count("per GPU, selective recompute",
                state + model_exec_bytes_per_token(&m, 2, local, MODEL_EXEC_MLP_AUTO) * (double)local, "B");
  }
  return 0;
}

CLI_COMMAND("model", cmd_model, "print a model's derived quantities",
            &model_usage)

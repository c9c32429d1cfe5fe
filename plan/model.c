// model.c — reading Hugging Face config.json files and deriving what the planner, simulator and
// executor need from them: parameter counts, FLOPs of every GEMM and of attention, bytes of KV,
// model state and activations. All models here are decoder-only with RMSNorm, rotary embeddings,
// grouped-query attention and a SwiGLU MLP (Llama / Qwen2 family).
#include "plan/model.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan/json.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// loading and validation

// Rotary scaling kinds transformers knows (ROPE_INIT_FUNCTIONS) plus "mrope" of Qwen2-VL;
// anything else is most likely a typo, so it is rejected rather than silently treated as none.
static const char *const rope_types[] = {"default", "linear", "dynamic", "yarn", "longrope", "llama3", "mrope", NULL};

static int rope_type_needs_factor(const char *t) {
  return strcmp(t, "linear") == 0 || strcmp(t, "dynamic") == 0 || strcmp(t, "yarn") == 0 ||
         strcmp(t, "llama3") == 0;
}

static int parse_rope_scaling(const cJSON *root, const char *file, model_config *m, sr_error *e) {
  m->rope_scaling_type[0] = '\0';
  m->rope_scaling_factor = 1.0;
  m->rope_original_max_position = 0;
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  if (!rs || cJSON_IsNull(rs)) return SR_OK;
  if (!cJSON_IsObject(rs)) return sr_input_error(e, file, "rope_scaling", "expected an object or null");
  // transformers renamed "type" to "rope_type"; older configs carry only "type".
  char type[32] = "";
  int rc = json_get_str(rs, "rope_type", 0, type, sizeof type, file, "rope_scaling", e);
  if (rc) return rc;
  const char *type_field = "rope_scaling.rope_type";
  if (!type[0]) {
    rc = json_get_str(rs, "type", 0, type, sizeof type, file, "rope_scaling", e);
    if (rc) return rc;
    type_field = "rope_scaling.type";
  }
  if (!type[0]) return sr_input_error(e, file, "rope_scaling.rope_type", "missing (a string such as \"llama3\" or \"yarn\")");
  int known = 0;
  for (const char *const *t = rope_types; *t; t++) known |= strcmp(*t, type) == 0;
  if (!known)
    return sr_input_error(e, file, type_field,
                          "unknown rotary scaling '%s' (expected default, linear, dynamic, yarn, longrope, llama3 or mrope)",
                          type);
  snprintf(m->rope_scaling_type, sizeof m->rope_scaling_type, "%s", type);
  rc = json_get_num(rs, "factor", rope_type_needs_factor(type), 1e-6, 1e6, &m->rope_scaling_factor, file,
                    "rope_scaling", e);
  if (rc) return rc;
  rc = json_get_int(rs, "original_max_position_embeddings", 0, 1, (int64_t)1 << 40, &m->rope_original_max_position,
                    file, "rope_scaling", e);
  if (rc) return rc;
  // Llama 3's frequency bands: checked for type so that a quoted number is caught, otherwise unused here.
  double unused;
  if ((rc = json_get_num(rs, "low_freq_factor", 0, 1e-9, 1e9, &unused, file, "rope_scaling", e))) return rc;
  if ((rc = json_get_num(rs, "high_freq_factor", 0, 1e-9, 1e9, &unused, file, "rope_scaling", e))) return rc;
  return SR_OK;
}

// Model name for messages and reports: the shipped name, the file's base name without ".json",
// or, for a file literally called config.json (a checkpoint folder), the folder's name.
static void model_name_from_path(const char *path, char *out, size_t size) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strcmp(base, "config.json") == 0 && base != path) {
    const char *end = base - 1;  // the slash before config.json
    const char *start = end;
    while (start > path && start[-1] != '/') start--;
    if (end > start) {
      snprintf(out, size, "%.*s", (int)(end - start), start);
      return;
    }
  }
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
  snprintf(out, size, "%.*s", (int)n, base);
}

// The counts are int64: every field may sit at its maximum and a layer still fits (under 2^51), but the
// layers, embeddings and LM head together may not. Refuse a model past 2^53 parameters (the largest
// count a double, and so every report, holds exactly) before any count is taken.
static int check_param_count(const model_config *m, const char *file, sr_error *e) {
  double layer = (double)model_layer_param_count(m), embed = (double)m->vocab_size * (double)m->hidden_size;
  double total = embed * (m->tie_word_embeddings ? 1 : 2) + (double)m->num_layers * layer + (double)m->hidden_size;
  if (total > 9007199254740992.0)
    return sr_input_error(e, file, "num_hidden_layers",
                          "%lld layers of %.4g parameters make %.4g parameters, more than the 2^53 (9.007e15) counted exactly",
                          (long long)m->num_layers, layer, total);
  return SR_OK;
}

static int model_from_json(const cJSON *root, const char *file, model_config *m, sr_error *e) {
  if (!cJSON_IsObject(root)) return sr_input_error(e, file, NULL, "expected a JSON object (a Hugging Face config.json)");
  int rc;
  // Hugging Face configs carry many fields this planner does not use (token ids, dtype, versions):
  // unknown fields are accepted; the ones below are checked for type and range.
  if ((rc = json_get_int(root, "hidden_size", 1, 1, 1 << 20, &m->hidden_size, file, NULL, e))) return rc;
  if ((rc = json_get_int(root, "num_attention_heads", 1, 1, 1 << 14, &m->num_heads, file, NULL, e))) return rc;
  m->num_kv_heads = m->num_heads;
  if ((rc = json_get_int(root, "num_key_value_heads", 0, 1, 1 << 14, &m->num_kv_heads, file, NULL, e))) return rc;
  if ((rc = json_get_int(root, "num_hidden_layers", 1, 1, MODEL_MAX_LAYERS, &m->num_layers, file, NULL, e))) return rc;
  if ((rc = json_get_int(root, "intermediate_size", 1, 1, 1 << 22, &m->intermediate_size, file, NULL, e))) return rc;
  if ((rc = json_get_int(root, "vocab_size", 1, 1, 1 << 26, &m->vocab_size, file, NULL, e))) return rc;
  if ((rc = json_get_int(root, "max_position_embeddings", 1, 1, (int64_t)1 << 40, &m->max_position_embeddings, file,
                         NULL, e)))
    return rc;

  // GQA: each KV head serves num_heads / num_kv_heads query heads, so the split must be exact.
  if (m->num_kv_heads > m->num_heads)
    return sr_input_error(e, file, "num_key_value_heads", "%lld exceeds num_attention_heads %lld",
                          (long long)m->num_kv_heads, (long long)m->num_heads);
  if (m->num_heads % m->num_kv_heads != 0)
    return sr_input_error(e, file, "num_key_value_heads",
                          "num_attention_heads %lld is not a multiple of num_key_value_heads %lld (GQA groups must be equal)",
                          (long long)m->num_heads, (long long)m->num_kv_heads);

  // head_dim is explicit in newer configs (it may differ from hidden/heads, as in Qwen3); older
  // ones imply hidden_size / num_attention_heads, which transformers requires to be exact.
  m->head_dim = 0;
  if ((rc = json_get_int(root, "head_dim", 0, 1, 1 << 14, &m->head_dim, file, NULL, e))) return rc;
  if (m->head_dim == 0) {
    if (m->hidden_size % m->num_heads != 0)
      return sr_input_error(e, file, "head_dim",
                            "missing, and hidden_size %lld is not a multiple of num_attention_heads %lld to imply it",
                            (long long)m->hidden_size, (long long)m->num_heads);
    m->head_dim = m->hidden_size / m->num_heads;
  }
  if (m->head_dim % 2 != 0)
    return sr_input_error(e, file, "head_dim", "%lld is odd; rotary embeddings rotate pairs of dimensions",
                          (long long)m->head_dim);

  m->architecture[0] = '\0';
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
  if (arch && !cJSON_IsNull(arch)) {
    const cJSON *first = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (!cJSON_IsArray(arch) || (first && !cJSON_IsString(first)))
      return sr_input_error(e, file, "architectures", "expected an array of strings");
    if (first) snprintf(m->architecture, sizeof m->architecture, "%s", first->valuestring);
  }
  m->model_type[0] = '\0';
  if ((rc = json_get_str(root, "model_type", 0, m->model_type, sizeof m->model_type, file, NULL, e))) return rc;
  char act[32] = "silu";
  if ((rc = json_get_str(root, "hidden_act", 0, act, sizeof act, file, NULL, e))) return rc;

  // Both LlamaConfig and Qwen2Config default tie_word_embeddings to false.
  m->tie_word_embeddings = 0;
  if ((rc = json_get_bool(root, "tie_word_embeddings", 0, &m->tie_word_embeddings, file, NULL, e))) return rc;

  // Qwen2's attention always has q/k/v biases and no o_proj bias (transformers' Qwen2Attention
  // hard-codes them); Llama applies attention_bias to all four projections.
  int is_qwen2 = strcmp(m->model_type, "qwen2") == 0 || strncmp(m->architecture, "Qwen2", 5) == 0;
  int attn_bias = 0;
  if ((rc = json_get_bool(root, "attention_bias", 0, &attn_bias, file, NULL, e))) return rc;
  m->attention_bias = is_qwen2 || attn_bias;
  m->o_proj_bias = !is_qwen2 && attn_bias;
  m->mlp_bias = 0;
  if ((rc = json_get_bool(root, "mlp_bias", 0, &m->mlp_bias, file, NULL, e))) return rc;

  m->rope_theta = 10000.0;  // transformers' default when a config omits it
  if ((rc = json_get_num(root, "rope_theta", 0, 1e-9, 1e15, &m->rope_theta, file, NULL, e))) return rc;
  m->rms_norm_eps = 1e-6;
  if ((rc = json_get_num(root, "rms_norm_eps", 0, 0, 1, &m->rms_norm_eps, file, NULL, e))) return rc;
  if (m->rms_norm_eps <= 0) return sr_input_error(e, file, "rms_norm_eps", "must be positive");
  m->use_logn_attn = 0;
  if ((rc = json_get_bool(root, "use_logn_attn", 0, &m->use_logn_attn, file, NULL, e))) return rc;
  m->logn_seq_length = 0;
  if (m->use_logn_attn &&
      (rc = json_get_int(root, "seq_length", 1, 2, INT64_MAX, &m->logn_seq_length, file, NULL, e)))
    return rc;
  if ((rc = parse_rope_scaling(root, file, m, e))) return rc;
  return check_param_count(m, file, e);
}

double model_logn_factor(int64_t pos, int64_t seq_length) {
  if (seq_length <= 1 || pos + 1 <= seq_length) return 1.0;
  return log((double)(pos + 1)) / log((double)seq_length);
}

int model_from_json_text(const char *text, const char *file, model_config *m, sr_error *e) {
  memset(m, 0, sizeof *m);
  cJSON *root = NULL;
  int rc = json_parse_text(text, file, &root, e);
  if (rc) return rc;
  rc = model_from_json(root, file, m, e);
  cJSON_Delete(root);
  if (rc) return rc;
  snprintf(m->path, sizeof m->path, "%s", file);
  model_name_from_path(file, m->name, sizeof m->name);
  return SR_OK;
}

int model_load(const char *name_or_path, model_config *m, sr_error *e) {
  memset(m, 0, sizeof *m);
  char path[512];
  int rc = sr_find_data_file(name_or_path, "models", path, sizeof path, e);
  if (rc) return rc;
  char *text = NULL;
  if ((rc = sr_read_file(path, &text, NULL, e))) return rc;
  rc = model_from_json_text(text, path, m, e);
  free(text);
  if (rc) return rc;
  // A shipped name keeps its short form; a path keeps its base name (set above).
  if (strcmp(path, name_or_path) != 0) snprintf(m->name, sizeof m->name, "%s", name_or_path);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// parameters

// Weights of the attention projections: q (h x H*d), k and v (h x Hkv*d each), o (H*d x h).
static int64_t attn_weight_params(const model_config *m) {
  int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
  return m->hidden_size * q + 2 * m->hidden_size * kv + q * m->hidden_size;
}

// SwiGLU MLP: gate and up (h x I) and down (I x h).
static int64_t mlp_weight_params(const model_config *m) { return 3 * m->hidden_size * m->intermediate_size; }

int64_t model_layer_param_count(const model_config *m) {
  int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
  int64_t n = attn_weight_params(m) + mlp_weight_params(m);
  if (m->attention_bias) n += q + 2 * kv;
  if (m->o_proj_bias) n += m->hidden_size;
  if (m->mlp_bias) n += 2 * m->intermediate_size + m->hidden_size;
  n += 2 * m->hidden_size;  // input_layernorm and post_attention_layernorm (RMSNorm: a scale, no bias)
  return n;
}

int64_t model_param_count(const model_config *m) {
  int64_t embed = m->vocab_size * m->hidden_size;
  int64_t n = embed + m->num_layers * model_layer_param_count(m) + m->hidden_size;  // + final norm
  if (!m->tie_word_embeddings) n += embed;  // separate lm_head
  return n;
}

// ---------------------------------------------------------------------------------------------
// FLOPs (2 per multiply-accumulate; Kaplan et al. 2020 / Narayanan et al. 2021 count)

double model_layer_gemm_flops_per_token(const model_config *m) {
  // Each weight is used once per token in one multiply-accumulate; biases and norms are
  // element-wise (not GEMM work) and left out.
  return 2.0 * (double)(attn_weight_params(m) + mlp_weight_params(m));
}

double model_lm_head_flops_per_token(const model_config *m) { return 2.0 * (double)m->hidden_size * (double)m->vocab_size; }

double model_attn_flops(const model_config *m, double pairs) {
  // S = QK^T and O = PV: d MACs each per (query, key) pair and query head (FlashAttention-2, Sec. 4.1).
  return 4.0 * pairs * (double)m->head_dim * (double)m->num_heads;
}

double model_causal_pairs(int64_t n) { return (double)n * ((double)n + 1.0) / 2.0; }

// ---------------------------------------------------------------------------------------------
// bytes

double model_kv_bytes(const model_config *m, int64_t n, int bytes_per_elem) {
  return 2.0 * (double)n * (double)m->num_kv_heads * (double)m->head_dim * (double)bytes_per_elem;
}

// Activation memory, adapted from Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models" (Sec. 4.1): per layer and token they count 34h bytes (+5as/h for the
// materialised softmax) for a GPT layer with LayerNorm, dropout and a 4h GELU MLP. Here, in bf16
// (2 bytes per element), without dropout, with flash attention (no s x s tensor is stored) and
// with GQA and a SwiGLU MLP of width I:
//   norms: input of each RMSNorm and its output (the GEMM input)   4 x 2h       =  8h
//   attention: Q (H*d), K and V (Hkv*d each) kept by flash attention 2(Hd + 2Hkv d)
//              output O (also the o_proj input)                       2Hd
//              row log-sum-exp, fp32 per query head                   4H
//   MLP: gate and up outputs (SiLU backward needs both), and the
//        down_proj input silu(gate)*up                              3 x 2I       =  6I
// Check: with Hkv = H, Hd = h, a 4h GELU MLP (2 x 8h instead of 6I) and no LSE this gives
// 8h + 6h + 2h + 16h = 32h = the paper's 34h less its two 1-byte dropout masks (2h).
// With full per-layer recomputation only the layer input (2h bytes) is kept (the paper's 2sbh); with selective
// recomputation (recompute 2) also attention's output O and its LSE, so the rerun skips attention.
double model_act_bytes_per_token_layer(const model_config *m, int recompute) {
  double h = (double)m->hidden_size, I = (double)m->intermediate_size;
  double q = (double)(m->num_heads * m->head_dim), kv = (double)(m->num_kv_heads * m->head_dim);
  if (recompute == 2) return 2.0 * h + 2.0 * q + 4.0 * (double)m->num_heads;
  if (recompute) return 2.0 * h;
  return 8.0 * h + 2.0 * (q + 2.0 * kv) + 2.0 * q + 4.0 * (double)m->num_heads + 6.0 * I;
}

// ---- sparsering-exec train's own buffers --------------------------------------------------------

double model_exec_state_bytes(const model_config *m, int world) {
  double P = (double)model_param_count(m);
  // params + grads (fp32) + the bf16 copy, and m, v (fp32) of this rank's ZeRO-1 slice
  return P * (4 + 4 + 2) + 2 * 4 * P / (world > 0 ? world : 1);
}

int64_t model_exec_mlp_rows(int64_t n_local, int64_t mlp_chunk) {
  int64_t n = n_local > 0 ? n_local : 1;
  if (mlp_chunk == MODEL_EXEC_MLP_AUTO) mlp_chunk = n <= MODEL_EXEC_MLP_WHOLE_MAX ? 0 : MODEL_EXEC_MLP_AUTO_CHUNK;
  return mlp_chunk > 0 && mlp_chunk < n ? mlp_chunk : n;
}

double model_exec_mlp_bytes_per_row(const model_config *m, int recompute) {
  double I = (double)m->intermediate_size;
  return recompute ? 2 * 2 * I + 2 * I + 2 * I : 2 * I;  // gate|up, h, dh (bf16); without recomputation dh only
}

double model_exec_bytes_per_token(const model_config *m, int recompute, int64_t n_local, int64_t mlp_chunk) {
  double C = (double)m->hidden_size, QD = (double)(m->num_heads * m->head_dim),
         KD = (double)(m->num_kv_heads * m->head_dim), I = (double)m->intermediate_size, H = (double)m->num_heads,
         L = (double)m->num_layers, half = (double)(m->head_dim / 2), W = QD + 2 * KD;
  double inputs = (L + 1) * C * 4;  // x[0..L], fp32
  // one layer's set: ln1, ln2 (bf16), rstd1, rstd2, q, k, v, o (bf16), lse, x2 (fp32); without recomputation also
  // its gate|up and h (bf16), which the backward reads (with recomputation they are remade a chunk at a time)
  double layer = 2 * C + 2 * C + 8 + 2 * W + 2 * QD + 4 * H + 4 * C + (recompute ? 0 : 4 * I + 2 * I);
  // selective recomputation: every other layer's o (bf16) and lse too
  double kept = recompute == 2 ? model_exec_kept_attn_bytes_per_token(m, (int)m->num_layers) : 0;
  // q|k|v GEMM output (fp32; the norms' weight rows in the backward), lnf (bf16), rstdf, dx, dln (fp32),
  // dq, dk, dv (fp32), dq|dk|dv, dob, dxb (bf16)
  double scratch = 4 * (W > C ? W : C) + 2 * C + 4 + 4 * C + 4 * C + 4 * QD + 8 * KD + 2 * W + 2 * QD + 2 * C;
  double misc = 2 * half * 4 + 8 + 4 * 3 + 4;  // cos, sin; pos (int64); tok, tgt, argmax; losses
  double share = n_local > 0 ? (double)model_exec_mlp_rows(n_local, mlp_chunk) / (double)n_local : 1;
  return inputs + layer * (recompute ? 1 : L) + kept + scratch + misc + model_exec_mlp_bytes_per_row(m, recompute) * share;
}

double model_exec_kept_attn_bytes_per_token(const model_config *m, int keep_layers) {
  double QD = (double)(m->num_heads * m->head_dim), H = (double)m->num_heads, L = (double)m->num_layers;
  // every layer keeping: layer 0's in the set the recomputation shares (train/model_cpu.h's model_attn_own_buffers)
  double own = keep_layers >= m->num_layers ? L - 1 : (double)(keep_layers > 0 ? keep_layers : 0);
  return own * (2 * QD + 4 * H);
}

double model_exec_kept_whole_bytes_per_token(const model_config *m, int keep_all, int64_t n_local, int64_t mlp_chunk,
                                             int act_bytes) {
  double C = (double)m->hidden_size, QD = (double)(m->num_heads * m->head_dim),
         KD = (double)(m->num_kv_heads * m->head_dim), I = (double)m->intermediate_size, es = (double)act_bytes;
  if (keep_all <= 0) return 0;
  // ln1, ln2 (act), rstd1, rstd2, q, k, v (bf16), x2 (fp32): the set every layer has, once, under recomputation
  double set = 2 * es * C + 8 + 2 * (QD + 2 * KD) + 4 * C;
  double whole = set + 3 * es * I;  // and the MLP's gate|up and h for every token
  if (keep_all < m->num_layers) return keep_all * whole;
  double share = n_local > 0 ? (double)model_exec_mlp_rows(n_local, mlp_chunk) / (double)n_local : 1;
  return (double)m->num_layers * whole - (set + 3 * es * I * share);  // no shared set: its chunk's gate|up and h go too
}

double model_exec_offload_saved_per_token(const model_config *m) {
  int64_t L = m->num_layers, slots = L < MODEL_EXEC_OFFLOAD_SLOTS ? L : MODEL_EXEC_OFFLOAD_SLOTS;
  return (double)(L - slots) * (double)m->hidden_size * 4;  // of x[0..L]: the slots and x[L] stay
}

double model_exec_offload_host_per_token(const model_config *m) {
  int64_t L = m->num_layers, slots = L < MODEL_EXEC_OFFLOAD_SLOTS ? L : MODEL_EXEC_OFFLOAD_SLOTS;
  return (double)(L - slots) * (double)m->hidden_size * 4;  // x[0..L-slots-1]: the last ones stay in their slots
}

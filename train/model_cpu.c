// model_cpu.c — the CPU transformer: parameter table with Hugging Face names, activation memory,
// rotary frequencies (linear / dynamic / YaRN / llama3 scaling), random init, AdamW with ZeRO-1 slices.
// The numeric kernels live in model_ops.inc, compiled here once for float and once for double.
#include "train/model_cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---- the numeric kernels, float and double ----------------------------------------------------

// Add the seconds since t0 to class `phase` of the step's times (the rerun's class while the backward reruns a
// forward: train_phase_rerun) and return now, where the next piece starts.
static double phase_lap(model_cpu *m, int phase, double t0) {
  double now = sr_now();
  m->phase_s[m->phase_rerun ? train_phase_rerun(phase) : phase] += now - t0;
  return now;
}

#define R float
#define F(name) name##_f32
#define MODEL_OPS_CALLBACK 1
#include "train/model_ops.inc"
#undef R
#undef F
#undef MODEL_OPS_CALLBACK

#define R double
#define F(name) name##_f64
#define MODEL_OPS_CALLBACK 0
#include "train/model_ops.inc"
#undef R
#undef F
#undef MODEL_OPS_CALLBACK

// ---- parameter table --------------------------------------------------------------------------

static int add_tensor(model_cpu *m, const char *name, int layer, int ndim, int64_t s0, int64_t s1) {
  model_tensor *t = &m->tensors[m->num_tensors];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->layer = layer;
  t->ndim = ndim;
  t->shape[0] = s0;
  t->shape[1] = ndim == 2 ? s1 : 1;
  t->numel = s0 * t->shape[1];
  t->offset = m->num_params;
  m->num_params += t->numel;
  return m->num_tensors++;
}

static void build_tensor_table(model_cpu *m) {
  const model_config *c = &m->cfg;
  int64_t C = c->hidden_size, QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim,
          I = c->intermediate_size, V = c->vocab_size;
  char nm[96];
  m->t_embed = add_tensor(m, "model.embed_tokens.weight", -1, 2, V, C);
  for (int l = 0; l < (int)c->num_layers; l++) {
    int *t = m->t_layer[l];
    for (int j = 0; j < MODEL_LAYER_TENSORS; j++) t[j] = -1;
#define LAYER_TENSOR(which, suffix, nd, a, b)                              \
  snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);               \
  t[which] = add_tensor(m, nm, l, nd, a, b)
    LAYER_TENSOR(MODEL_T_LN1, "input_layernorm.weight", 1, C, 1);
    LAYER_TENSOR(MODEL_T_Q, "self_attn.q_proj.weight", 2, QD, C);
    if (c->attention_bias) { LAYER_TENSOR(MODEL_T_QB, "self_attn.q_proj.bias", 1, QD, 1); }
    LAYER_TENSOR(MODEL_T_K, "self_attn.k_proj.weight", 2, KD, C);
    if (c->attention_bias) { LAYER_TENSOR(MODEL_T_KB, "self_attn.k_proj.bias", 1, KD, 1); }
    LAYER_TENSOR(MODEL_T_V, "self_attn.v_proj.weight", 2, KD, C);
    if (c->attention_bias) { LAYER_TENSOR(MODEL_T_VB, "self_attn.v_proj.bias", 1, KD, 1); }
    LAYER_TENSOR(MODEL_T_O, "self_attn.o_proj.weight", 2, C, QD);
    LAYER_TENSOR(MODEL_T_LN2, "post_attention_layernorm.weight", 1, C, 1);
    LAYER_TENSOR(MODEL_T_GATE, "mlp.gate_proj.weight", 2, I, C);
    LAYER_TENSOR(MODEL_T_UP, "mlp.up_proj.weight", 2, I, C);
    LAYER_TENSOR(MODEL_T_DOWN, "mlp.down_proj.weight", 2, C, I);
#undef LAYER_TENSOR
  }
  m->t_norm = add_tensor(m, "model.norm.weight", -1, 1, C, 1);
  m->t_lm_head = c->tie_word_embeddings ? m->t_embed : add_tensor(m, "lm_head.weight", -1, 2, V, C);
}

const model_tensor *model_find_tensor(const model_cpu *m, const char *name) {
  for (int i = 0; i < m->num_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

// ---- rotary frequencies -----------------------------------------------------------------------

// YaRN helpers, after the reference implementation in Hugging Face transformers
// (modeling_rope_utils._compute_yarn_parameters; Peng et al. 2023, "YaRN", eqs. 17-20).
static double yarn_correction_dim(double rotations, double dim, double base, double max_pos) {
  return dim * log(max_pos / (rotations * 2.0 * M_PI)) / (2.0 * log(base));
}

void model_rope_inv_freq(const model_config *cfg, int64_t seq_len, double *inv_freq, double *mscale) {
  int64_t D = cfg->head_dim, half = D / 2;
  double base = cfg->rope_theta, factor = cfg->rope_scaling_factor > 0 ? cfg->rope_scaling_factor : 1.0;
  const char *type = cfg->rope_scaling_type;
  double orig = cfg->rope_original_max_position > 0 ? (double)cfg->rope_original_max_position
                                                    : (double)cfg->max_position_embeddings;
  *mscale = 1.0;
  if (strcmp(type, "dynamic") == 0 && seq_len > cfg->max_position_embeddings && cfg->max_position_embeddings > 0) {
    // Dynamic NTK (transformers _compute_dynamic_ntk_parameters): grow the base with the length.
    double mp = (double)cfg->max_position_embeddings;
    base *= pow(factor * (double)seq_len / mp - (factor - 1.0), (double)D / (double)(D - 2));
  }
  for (int64_t i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / (double)D);
  if (strcmp(type, "linear") == 0) {
    for (int64_t i = 0; i < half; i++) inv_freq[i] /= factor;  // position interpolation: pos / factor
  } else if (strcmp(type, "yarn") == 0 && factor > 1.0) {
    double low = floor(yarn_correction_dim(32.0, (double)D, base, orig));   // beta_fast = 32
    double high = ceil(yarn_correction_dim(1.0, (double)D, base, orig));    // beta_slow = 1
    if (low < 0) low = 0;
    if (high > (double)(D - 1)) high = (double)(D - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; i++) {
      double ramp = ((double)i - low) / (high - low);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      double extrap = 1.0 - ramp;  // 1: keep the original frequency (high-frequency dims)
      inv_freq[i] = inv_freq[i] / factor * (1.0 - extrap) + inv_freq[i] * extrap;
    }
    *mscale = 0.1 * log(factor) + 1.0;  // YaRN's attention temperature, applied to cos and sin
  } else if (strcmp(type, "llama3") == 0 && factor > 1.0) {
    // Llama 3.1 (transformers _compute_llama3_parameters) with its shipped low/high factors 1 and 4.
    double lowf = 1.0, highf = 4.0, low_wl = orig / lowf, high_wl = orig / highf;
    for (int64_t i = 0; i < half; i++) {
      double wl = 2.0 * M_PI / inv_freq[i];
      if (wl > low_wl) {
        inv_freq[i] /= factor;
      } else if (wl >= high_wl) {
        double smooth = (orig / wl - lowf) / (highf - lowf);
        inv_freq[i] = (1.0 - smooth) * inv_freq[i] / factor + smooth * inv_freq[i];
      }
    }
  }
}

// ---- create / free ----------------------------------------------------------------------------

int model_cpu_create(model_cpu *m, const model_config *cfg, int dtype, int64_t max_tokens, int64_t seq_len,
                     int recompute, sr_error *e) {
  memset(m, 0, sizeof *m);
  const model_config *c = cfg;
  if (dtype != MODEL_F32 && dtype != MODEL_F64) return sr_input_error(e, NULL, "dtype", "must be 4 or 8 bytes");
  if (c->hidden_size <= 0 || c->num_heads <= 0 || c->num_kv_heads <= 0 || c->head_dim <= 0 ||
      c->num_layers <= 0 || c->intermediate_size <= 0 || c->vocab_size <= 0)
    return sr_input_error(e, c->path, "model", "sizes must be positive");
  if (c->num_heads % c->num_kv_heads != 0)
    return sr_input_error(e, c->path, "num_key_value_heads", "%lld does not divide num_attention_heads %lld",
                          (long long)c->num_kv_heads, (long long)c->num_heads);
  if (c->head_dim % 2 != 0) return sr_input_error(e, c->path, "head_dim", "rotary embeddings need an even head_dim");
  if (max_tokens <= 0) return sr_input_error(e, NULL, "tokens", "need at least one token");
  m->cfg = *cfg;
  m->dtype = dtype;
  m->recompute = recompute;
  m->max_tokens = max_tokens;
  m->ce_chunk = sr_min64(512, max_tokens);
  int L = (int)c->num_layers;
  int64_t C = c->hidden_size, QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim,
          I = c->intermediate_size, N = max_tokens, H = c->num_heads;
  m->tensors = calloc((size_t)(L * MODEL_LAYER_TENSORS + 4), sizeof *m->tensors);
  m->t_layer = calloc((size_t)L, sizeof *m->t_layer);
  m->inv_freq = calloc((size_t)(c->head_dim / 2), sizeof(double));
  m->x = calloc((size_t)(L + 1), sizeof *m->x);
  m->acts = calloc((size_t)L, sizeof *m->acts);
  if (!m->tensors || !m->t_layer || !m->inv_freq || !m->x || !m->acts) goto oom;
  build_tensor_table(m);
  model_rope_inv_freq(c, seq_len, m->inv_freq, &m->rope_mscale);
  m->params = calloc((size_t)m->num_params, (size_t)dtype);
  m->grads = calloc((size_t)m->num_params, (size_t)dtype);
  if (!m->params || !m->grads) goto oom;
  if (recompute < MODEL_RECOMPUTE_OFF || recompute > MODEL_RECOMPUTE_KEEP_ATTN) {
    model_cpu_free(m);
    return sr_input_error(e, NULL, "recompute", "%d is not a recomputation mode (0, 1 or 2)", recompute);
  }
  // gate, up and h are every layer's kept activations without recomputation, else the MLP's chunk buffers
  int64_t per_layer = N * (C + 1 + QD + KD + KD + QD + C + C + 1 + (recompute ? 0 : 3 * I)) + H * N;
  int64_t layer_sets = recompute ? 1 : L;
  int64_t scratch = N * (3 * C + 2 * QD + 2 * KD) + N;
  int64_t total = (L + 1) * N * C + layer_sets * per_layer + N * C + N + m->ce_chunk * c->vocab_size + scratch;
  m->act_mem = calloc((size_t)total, (size_t)dtype);
  if (!m->act_mem) goto oom;
  char *p = m->act_mem;
#define CARVE(dst, count) (dst = p, p += (size_t)(count) * (size_t)dtype)
  for (int l = 0; l <= L; l++) CARVE(m->x[l], N * C);
  for (int l = 0; l < (recompute ? 1 : L); l++) {
    model_layer_acts *a = recompute ? &m->rec : &m->acts[l];  // under recomputation: the set the layers share
    CARVE(a->ln1, N * C); CARVE(a->rstd1, N); CARVE(a->q, N * QD); CARVE(a->k, N * KD); CARVE(a->v, N * KD);
    CARVE(a->o, N * QD); CARVE(a->lse, H * N); CARVE(a->x2, N * C); CARVE(a->ln2, N * C); CARVE(a->rstd2, N);
    if (!recompute) {
      CARVE(a->gate, N * I); CARVE(a->up, N * I); CARVE(a->h, N * I);
    }
  }
  CARVE(m->lnf, N * C);
  CARVE(m->rstdf, N);
  CARVE(m->logits, m->ce_chunk * c->vocab_size);
  CARVE(m->scratch, scratch);
#undef CARVE
  int rc = model_cpu_set_mlp_chunk(m, N, e);
  if (!rc && recompute == MODEL_RECOMPUTE_KEEP_ATTN) rc = model_cpu_set_keep_layers(m, L, e);
  if (rc) model_cpu_free(m);
  return rc;
oom:
  model_cpu_free(m);
  return sr_internal_error(e, 0, "model: out of memory for %lld local tokens", (long long)max_tokens);
}

void model_cpu_free(model_cpu *m) {
  free(m->tensors);
  free(m->t_layer);
  free(m->inv_freq);
  free(m->params);
  free(m->grads);
  free(m->act_mem);
  free(m->kept_mem);
  free(m->whole_mem);
  free(m->mlp_mem);
  free(m->ckpt_host);
  free(m->x);
  free(m->acts);
  memset(m, 0, sizeof *m);
}

// ---- where each layer's activations live under recomputation ----------------------------------------

// Layers 0..keep_all-1 have their whole sets (whole_mem); the others share the recomputation's set (rec), but for the
// o and lse of those that keep their own (kept_mem): every layer that keeps has its own, but for the first layer
// that reruns when all keep (layer 0 without whole-layer keeping): no other layer then writes the shared set, which
// its forward filled (and when some rerun, that set is theirs, so it keeps its own like the others that keep:
// 0 < K < L costs K buffers, L costs L - 1).
static void place_layers(model_cpu *m) {
  int L = (int)m->cfg.num_layers, K = m->recompute == MODEL_RECOMPUTE_KEEP_ATTN ? m->keep_layers : 0;
  if (!m->recompute) return;  // every layer's own set, carved at create
  int64_t N = m->max_tokens, C = m->cfg.hidden_size, QD = m->cfg.num_heads * m->cfg.head_dim,
          KD = m->cfg.num_kv_heads * m->cfg.head_dim, I = m->cfg.intermediate_size, H = m->cfg.num_heads;
  size_t es = (size_t)m->dtype;
  char *w = m->whole_mem, *k = m->kept_mem;
  for (int l = 0; l < L; l++) {
    model_layer_acts *a = &m->acts[l];
    if (l < m->keep_all) {
#define CARVE(dst, count) (a->dst = w, w += (size_t)(count) * es)
      CARVE(ln1, N * C); CARVE(rstd1, N); CARVE(q, N * QD); CARVE(k, N * KD); CARVE(v, N * KD); CARVE(o, N * QD);
      CARVE(lse, H * N); CARVE(x2, N * C); CARVE(ln2, N * C); CARVE(rstd2, N); CARVE(gate, N * I); CARVE(up, N * I);
      CARVE(h, N * I);
#undef CARVE
      continue;
    }
    *a = m->rec;
    if (l < K && !(l == m->keep_all && K == L)) {
      a->o = k, k += (size_t)(N * QD) * es;
      a->lse = k, k += (size_t)(H * N) * es;
    }
  }
}

// Bytes of one layer's whole set (place_layers' carve).
static size_t whole_set_bytes(const model_cpu *m) {
  int64_t N = m->max_tokens, C = m->cfg.hidden_size, QD = m->cfg.num_heads * m->cfg.head_dim,
          KD = m->cfg.num_kv_heads * m->cfg.head_dim, I = m->cfg.intermediate_size, H = m->cfg.num_heads;
  return (size_t)(N * (3 * C + 2 + 2 * QD + 2 * KD + 3 * I) + H * N) * (size_t)m->dtype;
}

// ---- the MLP's chunk buffers --------------------------------------------------------------------

int model_cpu_set_mlp_chunk(model_cpu *m, int64_t rows, sr_error *e) {
  int64_t I = m->cfg.intermediate_size;
  rows = rows <= 0 || rows > m->max_tokens ? m->max_tokens : rows;
  int bufs = m->recompute ? 6 : 3;  // dh, dgate, dup, and under recomputation the shared gate, up, h
  char *p = calloc((size_t)(bufs * rows * I), (size_t)m->dtype);
  if (!p) return sr_internal_error(e, 0, "model: out of memory for the MLP's chunks of %lld tokens", (long long)rows);
  free(m->mlp_mem);
  m->mlp_mem = p;
  m->mlp_rows = rows;
  size_t sz = (size_t)(rows * I) * (size_t)m->dtype;
  m->dh = p, m->dgate = p + sz, m->dup = p + 2 * sz;
  if (m->recompute) m->rec.gate = p + 3 * sz, m->rec.up = p + 4 * sz, m->rec.h = p + 5 * sz;
  place_layers(m);
  return SR_OK;
}

// ---- selective recomputation's kept attention outputs and whole layers ---------------------------------

int model_attn_own_buffers(int layers, int keep_layers) {
  return keep_layers >= layers ? layers - 1 : keep_layers;
}

int model_cpu_set_keep_layers(model_cpu *m, int layers, sr_error *e) {
  int L = (int)m->cfg.num_layers;
  if (m->recompute != MODEL_RECOMPUTE_KEEP_ATTN)
    return sr_input_error(e, NULL, "keep_layers", "only selective recomputation keeps attention's output");
  if (layers < 0 || layers > L)
    return sr_input_error(e, NULL, "keep_layers", "%d is not a layer count of 0 .. %d", layers, L);
  if (layers < m->keep_all)
    return sr_input_error(e, NULL, "keep_layers", "%d layers keeping attention's output, but %d are kept whole", layers,
                          m->keep_all);
  int64_t N = m->max_tokens, QD = m->cfg.num_heads * m->cfg.head_dim, H = m->cfg.num_heads;
  int own = model_attn_own_buffers(L, layers);
  char *p = calloc((size_t)sr_max64(own, 1) * (size_t)(N * QD + H * N), (size_t)m->dtype);
  if (!p) return sr_internal_error(e, 0, "model: out of memory for %d layers' attention outputs", own);
  free(m->kept_mem);
  m->kept_mem = p;
  m->keep_layers = layers;
  place_layers(m);
  return SR_OK;
}

int model_cpu_keeps_attn(const model_cpu *m, int layer) {
  return m->recompute == MODEL_RECOMPUTE_KEEP_ATTN && layer < m->keep_layers;
}

int model_cpu_set_keep_all(model_cpu *m, int layers, sr_error *e) {
  if (m->recompute != MODEL_RECOMPUTE_KEEP_ATTN && layers != 0)
    return sr_input_error(e, NULL, "keep_all", "only selective recomputation keeps whole layers");
  if (layers < 0 || layers > m->keep_layers)
    return sr_input_error(e, NULL, "keep_all", "%d is not a layer count of 0 .. %d (the layers keeping attention's "
                          "output)", layers, m->keep_layers);
  char *p = NULL;
  if (layers > 0 && !(p = calloc((size_t)layers, whole_set_bytes(m))))
    return sr_internal_error(e, 0, "model: out of memory for %d whole layers' activations", layers);
  free(m->whole_mem);
  m->whole_mem = p;
  m->keep_all = layers;
  place_layers(m);
  return SR_OK;
}

int model_cpu_keeps_all(const model_cpu *m, int layer) { return !m->recompute || layer < m->keep_all; }

// ---- activation offload ----------------------------------------------------------------------

int model_cpu_set_offload(model_cpu *m, sr_error *e) {
  int L = (int)m->cfg.num_layers;
  m->slots = L < MODEL_EXEC_OFFLOAD_SLOTS ? L : MODEL_EXEC_OFFLOAD_SLOTS;
  size_t per = (size_t)m->max_tokens * (size_t)m->cfg.hidden_size * (size_t)m->dtype;
  if (L > m->slots && !(m->ckpt_host = malloc(per * (size_t)(L - m->slots))))
    return sr_internal_error(e, 0, "model: out of memory for %d offloaded layer inputs", L - m->slots);
  for (int l = m->slots; l < L; l++) m->x[l] = m->x[l % m->slots];  // x[slots..L-1] keep their memory unused
  m->offload = 1;
  return SR_OK;
}

// x[i] leaves its slot before x[i + slots] is written there; the last `slots` inputs stay for the backward.
void model_offload_out(model_cpu *m, int i, int64_t T) {
  int L = (int)m->cfg.num_layers;
  if (!m->offload || i >= L - m->slots) return;
  size_t row = (size_t)m->cfg.hidden_size * (size_t)m->dtype;
  memcpy((char *)m->ckpt_host + (size_t)i * (size_t)m->max_tokens * row, m->x[i], (size_t)T * row);
}

void model_offload_in(model_cpu *m, int l, int64_t T) {
  int L = (int)m->cfg.num_layers;
  if (!m->offload || l >= L - m->slots) return;
  size_t row = (size_t)m->cfg.hidden_size * (size_t)m->dtype;
  memcpy(m->x[l], (char *)m->ckpt_host + (size_t)l * (size_t)m->max_tokens * row, (size_t)T * row);
}

// ---- initialisation ---------------------------------------------------------------------------

// splitmix64 (Steele et al. 2014): a tiny, well-mixed generator so init is reproducible everywhere.
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double normal_draw(uint64_t *s) {  // Box-Muller
  double u1 = ((double)(splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(splitmix64(s) >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void model_init_random(model_cpu *m, uint64_t seed) {
  uint64_t s = seed;
  // GPT-2 / llm.c: std 0.02, residual projections scaled by 1/sqrt(2 L) so the residual stream's
  // variance does not grow with depth.
  double resid_std = 0.02 / sqrt(2.0 * (double)m->cfg.num_layers);
  for (int i = 0; i < m->num_tensors; i++) {
    const model_tensor *t = &m->tensors[i];
    int is_norm = strstr(t->name, "norm.weight") != NULL, is_bias = strstr(t->name, ".bias") != NULL;
    int resid = strstr(t->name, "o_proj") != NULL || strstr(t->name, "down_proj") != NULL;
    for (int64_t j = 0; j < t->numel; j++) {
      double v = is_norm ? 1.0 : is_bias ? 0.0 : normal_draw(&s) * (resid ? resid_std : 0.02);
      if (m->dtype == MODEL_F32) ((float *)m->params)[t->offset + j] = (float)v;
      else ((double *)m->params)[t->offset + j] = v;
    }
  }
}

// ---- forward / backward -----------------------------------------------------------------------

int model_forward_backward(model_cpu *m, int64_t T, const int32_t *tokens, const int64_t *pos,
                           const int32_t *targets, int grads, double loss_scale, double *loss_sum,
                           int32_t *argmax, sr_error *e) {
  if (T < 0 || T > m->max_tokens)
    return sr_input_error(e, NULL, "tokens", "%lld local tokens, the model holds room for 0..%lld", (long long)T,
                          (long long)m->max_tokens);
  for (int64_t t = 0; t < T; t++) {
    if (tokens[t] < 0 || tokens[t] >= m->cfg.vocab_size)
      return sr_input_error(e, NULL, "tokens", "token %d at %lld outside the vocabulary (%lld)", tokens[t],
                            (long long)t, (long long)m->cfg.vocab_size);
    if (targets[t] >= m->cfg.vocab_size)
      return sr_input_error(e, NULL, "targets", "target %d at %lld outside the vocabulary", targets[t], (long long)t);
  }
  double t0 = sr_now();
  m->time_attn = 0;
  m->phase_rerun = 0;
  int rc = m->dtype == MODEL_F32
               ? forward_backward_f32(m, T, tokens, pos, targets, grads, loss_scale, loss_sum, argmax, e)
               : forward_backward_f64(m, T, tokens, pos, targets, grads, loss_scale, loss_sum, argmax, e);
  m->time_other = sr_now() - t0 - m->time_attn;
  return rc;
}

void model_zero_grad(model_cpu *m) { memset(m->grads, 0, (size_t)m->num_params * (size_t)m->dtype); }

// ---- AdamW ------------------------------------------------------------------------------------

int adamw_create(adamw_state *s, int64_t lo, int64_t hi, double lr, double weight_decay, sr_error *e) {
  memset(s, 0, sizeof *s);
  s->lr = lr;
  s->beta1 = 0.9;
  s->beta2 = 0.95;
  s->eps = 1e-8;
  s->weight_decay = weight_decay;
  s->grad_clip = 1.0;
  s->lo = lo;
  s->hi = hi;
  size_t n = (size_t)(hi > lo ? hi - lo : 0);
  s->m = calloc(n ? n : 1, sizeof(float));
  s->v = calloc(n ? n : 1, sizeof(float));
  if (!s->m || !s->v) {
    adamw_free(s);
    return sr_internal_error(e, 0, "adamw: out of memory for %zu moments", n);
  }
  return SR_OK;
}

void adamw_free(adamw_state *s) {
  free(s->m);
  free(s->v);
  s->m = s->v = NULL;
}

double model_grad_sumsq(const model_cpu *m, int64_t lo, int64_t hi) {
  double ss = 0;
  for (int64_t i = lo; i < hi; i++) {
    double g = m->dtype == MODEL_F32 ? ((const float *)m->grads)[i] : ((const double *)m->grads)[i];
    ss += g * g;
  }
  return ss;
}

double adamw_clip_scale(const adamw_state *s, double grad_norm) {
  return s->grad_clip > 0 && grad_norm > s->grad_clip ? s->grad_clip / grad_norm : 1.0;
}

void adamw_update(adamw_state *s, model_cpu *m, double grad_scale) {
  if (m->dtype != MODEL_F32) return;  // float64 exists for gradient checks only
  s->step++;
  // Loshchilov & Hutter 2019 (decoupled weight decay), bias-corrected moments as in Kingma & Ba 2015.
  double bc1 = 1.0 - pow(s->beta1, (double)s->step), bc2 = 1.0 - pow(s->beta2, (double)s->step);
  float *w = m->params, *g = m->grads;
  for (int ti = 0; ti < m->num_tensors; ti++) {
    const model_tensor *t = &m->tensors[ti];
    int64_t a = sr_max64(t->offset, s->lo), b = sr_min64(t->offset + t->numel, s->hi);
    double wd = t->ndim == 2 ? s->weight_decay : 0.0;
    for (int64_t i = a; i < b; i++) {
      float gi = (float)(g[i] * grad_scale);
      float *mi = &s->m[i - s->lo], *vi = &s->v[i - s->lo];
      *mi = (float)(s->beta1 * *mi + (1.0 - s->beta1) * gi);
      *vi = (float)(s->beta2 * *vi + (1.0 - s->beta2) * gi * gi);
      double mhat = *mi / bc1, vhat = *vi / bc2;
      w[i] = (float)(w[i] - s->lr * (mhat / (sqrt(vhat) + s->eps) + wd * w[i]));
    }
  }
}

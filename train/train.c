// train.c — the context-parallel training step, ZeRO-1 AdamW and evaluation (checkpoints: train_ckpt.c).
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#endif

// ---- options, create, free --------------------------------------------------------------------

void train_options_defaults(train_options *o) {
  memset(o, 0, sizeof *o);
  o->seq = 1024;
  o->steps = 100;
  o->lr = 3e-4;
  o->clip = 1.0;
  o->seed = 1;
  o->passkey_depth = -1;
  o->passkey_digits = 5;
  o->mlp_chunk = MODEL_EXEC_MLP_AUTO;
  o->keep_layers = -1;
}

double train_keep_layers_bytes(int layers, double all_bytes, int keep_layers) {
  if (keep_layers >= layers) return all_bytes;
  int own = model_attn_own_buffers(layers, layers);  // the buffers every layer keeping takes
  return own > 0 ? all_bytes / own * model_attn_own_buffers(layers, keep_layers) : 0;
}

int train_keep_layers_fit(int layers, double all_bytes, double free_bytes) {
  if (all_bytes <= free_bytes) return layers;
  // keeping layers - 1 takes what keeping all does (model_attn_own_buffers): the next count down is layers - 2
  for (int k = layers - 2; k > 0; k--)
    if (train_keep_layers_bytes(layers, all_bytes, k) <= free_bytes) return k;
  return 0;
}

int train_keep_all_fit(const model_config *m, int keep_layers, int64_t n_local, int64_t mlp_chunk, int act_bytes,
                       double free_bytes) {
  for (int k = keep_layers; k > 0; k--)
    if ((double)n_local * model_exec_kept_whole_bytes_per_token(m, k, n_local, mlp_chunk, act_bytes) <= free_bytes)
      return k;
  return 0;
}

int64_t train_default_warmup(int64_t steps) { return sr_min64(100, sr_max64(10, steps / 10)); }

int trainer_create(trainer *t, const model_config *cfg, const train_options *o, const train_comm *comm,
                   int64_t n_local, const int64_t *pos, sr_error *e) {
  memset(t, 0, sizeof *t);
  t->opt = *o;
  if (comm) t->comm = *comm;
  else t->comm.world = 1;
  if (t->comm.world < 1 || t->comm.rank < 0 || t->comm.rank >= t->comm.world)
    return sr_input_error(e, NULL, "world", "rank %d of %d", t->comm.rank, t->comm.world);
  if (o->seq < 2) return sr_input_error(e, NULL, "seq", "%lld tokens: need at least 2", (long long)o->seq);
  if (o->mlp_chunk < MODEL_EXEC_MLP_AUTO)
    return sr_input_error(e, NULL, "mlp_chunk", "%lld is not a chunk (tokens, 0: whole, or auto)", (long long)o->mlp_chunk);
  int64_t mlp_rows = model_exec_mlp_rows(n_local, o->mlp_chunk);  // the simulator's rule (plan/model.h)
  if (o->data && o->data->max_token >= cfg->vocab_size)
    return sr_input_error(e, o->data->path, "tokens", "holds token %lld, beyond the model's vocabulary of %lld",
                          (long long)o->data->max_token, (long long)cfg->vocab_size);
  int64_t pack = o->pack > 1 ? o->pack : 1, min_len = data_passkey_min_seq(o->passkey_digits > 0 ? o->passkey_digits : 5);
  if (pack > 1 && (o->data || o->seq % pack != 0 || o->seq / pack < min_len))
    return sr_input_error(e, NULL, "pack", "%lld passkey samples in %lld tokens: need passkey data, a divisor of the "
                          "sequence and at least %lld tokens a sample", (long long)pack, (long long)o->seq,
                          (long long)min_len);
  if (!o->data && cfg->vocab_size < 256)
    return sr_input_error(e, cfg->path, "vocab_size", "passkey samples are bytes: need 256, have %lld",
                          (long long)cfg->vocab_size);
  for (int64_t i = 0; i < n_local; i++)
    if (pos[i] < 0 || pos[i] >= o->seq)
      return sr_input_error(e, NULL, "positions", "position %lld outside the sequence of %lld", (long long)pos[i],
                            (long long)o->seq);
  // a rank may hold no token when the layout leaves it empty; it still takes part in the collectives.
  // On the GPU the host model keeps only the tensor table (and the weights of saves and loads): its
  // activations are sized for one token, and the weights are drawn on the device.
  int rc = model_cpu_create(&t->model, cfg, MODEL_F32, o->cuda ? 1 : sr_max64(n_local, 1), o->seq, o->recompute, e);
  if (rc) return rc;
  if (!o->cuda) model_init_random(&t->model, o->seed);
  // on the GPU the host model's count reaches the device model (model_cuda_create)
  if (o->recompute == MODEL_RECOMPUTE_KEEP_ATTN && o->keep_layers >= 0 && o->keep_layers < cfg->num_layers &&
      (rc = model_cpu_set_keep_layers(&t->model, (int)o->keep_layers, e))) {
    model_cpu_free(&t->model);
    return rc;
  }
  if (o->keep_all != 0 && (o->keep_all < 0 || o->keep_all > cfg->num_layers ||
                           (rc = model_cpu_set_keep_all(&t->model, (int)o->keep_all, e)))) {
    model_cpu_free(&t->model);
    return rc ? rc
              : sr_input_error(e, NULL, "keep_all", "%lld is not a layer count of 0 .. %lld", (long long)o->keep_all,
                               (long long)cfg->num_layers);
  }
  if (!o->cuda && ((rc = model_cpu_set_mlp_chunk(&t->model, mlp_rows, e)) ||
                   (o->offload_activations && (rc = model_cpu_set_offload(&t->model, e))))) {
    model_cpu_free(&t->model);
    return rc;
  }
  int64_t P = t->model.num_params, W = t->comm.world;
  t->slice = sr_cdiv(P, W);
  int64_t lo = sr_min64(P, t->comm.rank * t->slice), hi = sr_min64(P, lo + t->slice);
  rc = adamw_create(&t->adam, lo, hi, o->lr, o->weight_decay, e);
  if (rc) {
    model_cpu_free(&t->model);
    return rc;
  }
  t->adam.grad_clip = o->clip;
  t->n_local = n_local;
  size_t nl = (size_t)sr_max64(n_local, 1), ns = (size_t)o->seq;
  t->pos = malloc(nl * sizeof *t->pos);
  t->rope_pos = malloc(nl * sizeof *t->rope_pos);
  t->seq_tok = malloc(ns * sizeof(int32_t));
  t->seq_tgt = malloc(ns * sizeof(int32_t));
  t->tok = malloc(nl * sizeof(int32_t));
  t->tgt = malloc(nl * sizeof(int32_t));
  t->argmax = malloc(nl * sizeof(int32_t));
  t->gather = W > 1 && !o->cuda ? malloc((size_t)(W * t->slice) * sizeof(float)) : NULL;
  if (!t->pos || !t->rope_pos || !t->seq_tok || !t->seq_tgt || !t->tok || !t->tgt || !t->argmax ||
      (W > 1 && !o->cuda && !t->gather)) {
    trainer_free(t);
    return sr_internal_error(e, 0, "trainer: out of memory for %lld tokens", (long long)o->seq);
  }
  if (n_local > 0) memcpy(t->pos, pos, (size_t)n_local * sizeof *pos);
  // A packed sample starts at position 0, as it would alone: RoPE alone would not care (scores depend on
  // relative positions), but logn attention scales queries by their absolute position.
  trainer_rope_positions(t, 0, 1, t->rope_pos);
  if (o->cuda) {
#if SR_HAVE_CUDA
    // parameters padded to W slices: the ZeRO-1 all-gather runs in place, with no staging copies
    model_cuda *d = NULL;
    rc = model_cuda_create(&d, &t->model, sr_max64(n_local, 1), W * t->slice, &o->seed, lo, hi, o->cuda_stream, e);
    t->dev = d;
    if (!rc) rc = model_cuda_set_mlp_chunk(d, mlp_rows, e);
    if (!rc && o->phase_times) rc = model_cuda_set_phase_times(d, e);
    if (!rc && o->offload_activations) rc = model_cuda_set_offload(d, e);
    if (rc) {
      trainer_free(t);
      return rc;
    }
#else
    trainer_free(t);
    return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (nvcc was not found at build time)");
#endif
  }
  return SR_OK;
}

void trainer_free(trainer *t) {
#if SR_HAVE_CUDA
  if (t->dev) {
    model_cuda_free(t->dev);
  }
#endif
  model_cpu_free(&t->model);
  adamw_free(&t->adam);
  free(t->pos);
  free(t->rope_pos);
  free(t->seq_tok);
  free(t->seq_tgt);
  free(t->tok);
  free(t->tgt);
  free(t->argmax);
  free(t->gather);
  memset(t, 0, sizeof *t);
}

// ---- samples ----------------------------------------------------------------------------------

static uint64_t mix64(uint64_t z) {  // splitmix64 finaliser: decorrelates (seed, index) pairs
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int trainer_sample(const trainer *t, int64_t index, int held_out, int32_t *tokens, int32_t *targets,
                   int64_t *answer_start, sr_error *e) {
  const train_options *o = &t->opt;
  *answer_start = -1;
  if (o->data)  // held-out windows come from the stream's end, which training never reads
    return held_out ? data_heldout_sequence(o->data, index, o->seq, o->seed, tokens, targets, e)
                    : data_train_sequence(o->data, index, o->seq, tokens, targets, e);
  // a packed sequence holds samples index * pack .. index * pack + pack - 1, each seq / pack tokens
  int64_t pack = o->pack > 1 ? o->pack : 1, len = o->seq / pack;
  for (int64_t k = 0; k < pack; k++) {
    int64_t j = index * pack + k, ans = -1;
    uint64_t s = mix64(o->seed * 0x100000001B3ull + (uint64_t)j + (held_out ? 0x8000000000000000ull : 0));
    double depth = o->passkey_depth >= 0 ? o->passkey_depth : (double)(mix64(s) >> 11) / 9007199254740992.0;
    int digits = o->passkey_digits > 0 ? o->passkey_digits : 5;
    // held-out samples are scored on the answer alone, whatever the training loss
    passkey_loss loss = held_out ? PASSKEY_LOSS_ANSWER : o->passkey_loss;
    if (loss == PASSKEY_LOSS_MIX) loss = j % 2 ? PASSKEY_LOSS_ALL : PASSKEY_LOSS_KEYS;
    int rc = data_passkey(len, depth, digits, s, loss, tokens + k * len, targets + k * len, &ans, e);
    if (rc) return rc;
    if (k == 0) *answer_start = ans;
  }
  return SR_OK;
}

int train_samples_write(const train_options *o, int64_t steps, const char *path, sr_error *e) {
  trainer t;  // trainer_sample reads the options only
  memset(&t, 0, sizeof t);
  t.opt = *o;
  int64_t B = o->batch > 1 ? o->batch : 1, seq = o->seq, n = steps * B, ans;
  if (seq < 2 || steps < 0) return sr_input_error(e, NULL, "seq", "%lld tokens, %lld steps", (long long)seq, (long long)steps);
  int32_t *buf = malloc((size_t)sr_max64(1, n) * 2 * (size_t)seq * sizeof(int32_t));
  if (!buf) return sr_internal_error(e, 0, "train: out of memory for %lld samples of %lld tokens", (long long)n, (long long)seq);
  int rc = SR_OK;
  for (int64_t i = 0; i < n && rc == SR_OK; i++)
    rc = trainer_sample(&t, i, 0, buf + 2 * i * seq, buf + (2 * i + 1) * seq, &ans, e);
  // int32 in memory is the file's little-endian layout on every machine this builds for (x86-64, aarch64)
  if (rc == SR_OK) rc = sr_write_atomic(path, buf, (size_t)n * 2 * (size_t)seq * sizeof(int32_t), e);
  free(buf);
  return rc;
}

// PoSE (Zhu et al. 2023, "PoSE: Efficient Context Window Extension of LLMs via Positional Skip-wise
// Training", two chunks): sample j of len tokens keeps positions 0 .. c-1 and continues at c + u, with the
// split c uniform in [1, len - 1] and the skip u uniform in [0, span - len], both drawn from (seed, j) so
// every rank agrees. Inside each chunk distances stay those of real text; across the split they reach
// span - 1. Held-out samples rotate contiguously, as at inference.
void trainer_rope_positions(const trainer *t, int64_t index, int held_out, int64_t *out) {
  const train_options *o = &t->opt;
  int64_t pack = o->pack > 1 ? o->pack : 1, len = o->seq / pack;
  int pose = !held_out && o->pose_span > len && len > 1;
  for (int64_t i = 0; i < t->n_local; i++) {
    int64_t k = t->pos[i] / len, off = t->pos[i] % len;
    out[i] = off;
    if (!pose) continue;
    uint64_t s = mix64(o->seed * 0x9E3779B97F4A7C15ull + (uint64_t)(index * pack + k) + 0x5105E);
    int64_t c = 1 + (int64_t)(s % (uint64_t)(len - 1)), u = (int64_t)(mix64(s) % (uint64_t)(o->pose_span - len + 1));
    if (off >= c) out[i] += u;
  }
}

// ---- the step ---------------------------------------------------------------------------------

// Forward (and with grads the backward, accumulated) of sample `index`; loss_weight scales its mean loss
// in the gradient (1 / samples per step). Adds its mean loss, mispredictions, targets and times into st.
static int forward_sample(trainer *t, int64_t index, int held_out, int grads, double loss_weight,
                          train_step_stats *st, sr_error *e) {
  int64_t ans;
  int rc = trainer_sample(t, index, held_out, t->seq_tok, t->seq_tgt, &ans, e);
  if (rc) return rc;
  int64_t count = 0;
  for (int64_t i = 0; i < t->opt.seq; i++) count += t->seq_tgt[i] >= 0;
  for (int64_t i = 0; i < t->n_local; i++) {
    t->tok[i] = t->seq_tok[t->pos[i]];
    t->tgt[i] = t->seq_tgt[t->pos[i]];
  }
  trainer_rope_positions(t, index, held_out, t->rope_pos);
  double loss = 0, scale = count ? loss_weight / (double)count : 0;
  // a rank holding no token still runs the model: its attention takes part in the ring
#if SR_HAVE_CUDA
  if (t->dev) {
    rc = model_cuda_forward_backward(t->dev, t->n_local, t->tok, t->rope_pos, t->tgt, grads, scale, &loss, t->argmax,
                                     &t->model.time_attn, e);
    if (!rc) rc = model_cuda_attn_time(t->dev, &t->model.time_attn, e);  // waits for this sample's backward
  } else
#endif
    rc = model_forward_backward(&t->model, t->n_local, t->tok, t->rope_pos, t->tgt, grads, scale, &loss, t->argmax, e);
  if (rc) return rc;
  // mispredictions by packed sample (segment seq / pack of the global positions), summed over ranks
  int64_t pack = t->opt.pack > 1 ? t->opt.pack : 1, len = t->opt.seq / pack;
  double *sums = calloc((size_t)(2 + pack), sizeof *sums);
  if (!sums) return sr_internal_error(e, 0, "trainer: out of memory");
  sums[0] = loss;
  for (int64_t i = 0; i < t->n_local; i++)
    if (t->tgt[i] >= 0 && t->argmax[i] != t->tgt[i]) sums[1] += 1, sums[2 + t->pos[i] / len] += 1;
  double c0 = sr_now();
  if (t->comm.world > 1 && (rc = t->comm.allreduce_f64(t->comm.ctx, sums, 2 + pack, e))) {
    free(sums);
    return rc;
  }
  double comm_dt = sr_now() - c0;
  st->comm_s += comm_dt;
  st->phase_s[TRAIN_PHASE_COMM] += comm_dt;
  st->loss += count ? sums[0] / (double)count : 0;
  st->mispredicted += (int64_t)sums[1];
  st->samples += pack;
  for (int64_t k = 0; k < pack; k++) st->exact += sums[2 + k] == 0;
  free(sums);
  st->targets += count;
  st->attn_s += t->model.time_attn;
  return SR_OK;
}

// Every sample of step `step` (batch of them, gradients accumulated); st->loss is their mean loss.
static int forward_batch(trainer *t, int64_t step, train_step_stats *st, sr_error *e) {
  int64_t B = t->opt.batch > 1 ? t->opt.batch : 1;
  for (int64_t b = 0; b < B; b++) {
    if (t->opt.sample_begin) t->opt.sample_begin(t->opt.sample_ctx, step, b);
    int rc = forward_sample(t, step * B + b, 0, 1, 1.0 / (double)B, st, e);
    if (rc) return rc;
  }
  st->loss /= (double)B;
  return SR_OK;
}

// A step whose loss or gradient norm is not finite would put NaN into every weight: the run stops before
// the update, so the weights (and every checkpoint) stay those of the last good step.
static int check_finite(const trainer *t, const train_step_stats *st, sr_error *e) {
  if (isfinite(st->loss) && isfinite(st->grad_norm)) return SR_OK;
  return sr_internal_error(e, 0, "step %lld: loss %g, gradient norm %g: not finite; stopped before its update (the "
                           "weights and the last checkpoint are those of step %lld)", (long long)t->step + 1, st->loss,
                           st->grad_norm, (long long)t->step);
}

static double lr_at(const train_options *o, int64_t step) {
  if (o->warmup > 0 && step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
  if (o->cosine && o->steps > o->warmup + 1) {
    // SGDR's half cosine (Loshchilov & Hutter 2017) down to a tenth of the peak, as GPT-3 / llm.c do
    double f = (double)(step - o->warmup) / (double)(o->steps - 1 - o->warmup);
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    return o->lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(M_PI * f)));
  }
  return o->lr;
}

// Add the seconds since *t to class `phase` of the step (train/phases.h) and move *t to now.
static void step_lap(train_step_stats *st, int phase, double *t) {
  double now = sr_now();
  st->phase_s[phase] += now - *t;
  *t = now;
}

#if SR_HAVE_CUDA
// The step on the GPU: the same sequence as trainer_step, with device gradients and parameters. The model's phases
// are timed on the device (model_cuda_set_phase_times), the collectives here: the device is idle during them.
static int trainer_step_cuda(trainer *t, train_step_stats *st, sr_error *e) {
  double t0 = sr_now();
  int rc = model_cuda_zero_grad(t->dev, e);
  if (rc || (rc = forward_batch(t, t->step, st, e))) return rc;
  int64_t P = t->model.num_params, W = t->comm.world;
  if ((rc = model_cuda_sync(t->dev, e))) return rc;  // the backward is queued: finish it before the all-reduce
  double c0 = sr_now(), ss = 0, tp = c0;
  if (W > 1 && (rc = t->comm.allreduce_f32(t->comm.ctx, model_cuda_grads(t->dev), P, e))) return rc;
  step_lap(st, TRAIN_PHASE_COMM, &tp);
  if ((rc = model_cuda_grad_sumsq(t->dev, t->adam.lo, t->adam.hi, &ss, e))) return rc;
  tp = sr_now();
  if (W > 1 && (rc = t->comm.allreduce_f64(t->comm.ctx, &ss, 1, e))) return rc;
  step_lap(st, TRAIN_PHASE_COMM, &tp);
  st->comm_s += sr_now() - c0;
  st->grad_norm = sqrt(ss);
  if ((rc = check_finite(t, st, e))) return rc;
  st->lr = t->adam.lr = lr_at(&t->opt, t->step);
  if ((rc = model_cuda_adamw(t->dev, &t->adam, adamw_clip_scale(&t->adam, st->grad_norm), e))) return rc;
  if (W > 1) {
    // in place: rank r's slice starts at r * slice of the padded parameter buffer (NCCL's in-place form)
    float *w = model_cuda_params(t->dev);
    if ((rc = model_cuda_sync(t->dev, e))) return rc;
    c0 = sr_now();
    rc = t->comm.allgather_f32(t->comm.ctx, w + (int64_t)t->comm.rank * t->slice, w, t->slice, e);
    double dt = sr_now() - c0;
    st->comm_s += dt;
    st->phase_s[TRAIN_PHASE_COMM] += dt;
    if (rc) return rc;
  }
  if ((rc = model_cuda_sync(t->dev, e))) return rc;
  t->step++;
  st->step = t->step;
  st->time_s = sr_now() - t0;
  // the step's events, read once it is done (outside its time)
  return t->opt.phase_times ? model_cuda_phase_times(t->dev, st->phase_s, e) : SR_OK;
}
#endif

int trainer_step(trainer *t, train_step_stats *st, sr_error *e) {
  memset(st, 0, sizeof *st);
#if SR_HAVE_CUDA
  if (t->dev) return trainer_step_cuda(t, st, e);
#endif
  double t0 = sr_now(), tp = t0;
  memset(t->model.phase_s, 0, sizeof t->model.phase_s);  // the model's classes of this step's samples
  model_zero_grad(&t->model);
  step_lap(st, TRAIN_PHASE_COPIES, &tp);
  int rc = forward_batch(t, t->step, st, e);
  if (rc) return rc;
  int64_t P = t->model.num_params, W = t->comm.world;
  float *g = t->model.grads, *w = t->model.params;
  double c0 = sr_now();
  tp = c0;
  if (W > 1 && (rc = t->comm.allreduce_f32(t->comm.ctx, g, P, e))) return rc;
  step_lap(st, TRAIN_PHASE_COMM, &tp);
  double ss = model_grad_sumsq(&t->model, t->adam.lo, t->adam.hi);
  step_lap(st, TRAIN_PHASE_GRAD_NORM, &tp);
  if (W > 1 && (rc = t->comm.allreduce_f64(t->comm.ctx, &ss, 1, e))) return rc;
  step_lap(st, TRAIN_PHASE_COMM, &tp);
  st->comm_s += sr_now() - c0;
  st->grad_norm = sqrt(ss);
  if ((rc = check_finite(t, st, e))) return rc;
  st->lr = t->adam.lr = lr_at(&t->opt, t->step);
  tp = sr_now();
  adamw_update(&t->adam, &t->model, adamw_clip_scale(&t->adam, st->grad_norm));
  step_lap(st, TRAIN_PHASE_ADAMW, &tp);
  if (W > 1) {
    // ZeRO-1: every rank's updated slice goes to every rank (the last slice may be short: padded)
    float *mine = malloc((size_t)t->slice * sizeof(float));
    if (!mine) return sr_internal_error(e, 0, "trainer: out of memory");
    int64_t n = t->adam.hi - t->adam.lo;
    memcpy(mine, w + t->adam.lo, (size_t)sr_max64(n, 0) * sizeof(float));
    memset(mine + sr_max64(n, 0), 0, (size_t)(t->slice - sr_max64(n, 0)) * sizeof(float));
    step_lap(st, TRAIN_PHASE_COPIES, &tp);
    c0 = tp;
    rc = t->comm.allgather_f32(t->comm.ctx, mine, t->gather, t->slice, e);
    st->comm_s += sr_now() - c0;
    step_lap(st, TRAIN_PHASE_COMM, &tp);
    free(mine);
    if (rc) return rc;
    memcpy(w, t->gather, (size_t)P * sizeof(float));
    step_lap(st, TRAIN_PHASE_COPIES, &tp);
  }
  t->step++;
  st->step = t->step;
  st->time_s = sr_now() - t0;
  for (int p = 0; p < TRAIN_PHASES; p++) st->phase_s[p] += t->model.phase_s[p];
  return SR_OK;
}

int trainer_eval(trainer *t, int64_t index, train_step_stats *st, sr_error *e) {
  memset(st, 0, sizeof *st);
  memset(t->model.phase_s, 0, sizeof t->model.phase_s);
  double t0 = sr_now();
  int rc = forward_sample(t, index, 1, 0, 1.0, st, e);
  st->step = t->step;
  st->time_s = sr_now() - t0;
  for (int p = 0; p < TRAIN_PHASES; p++) st->phase_s[p] += t->model.phase_s[p];
#if SR_HAVE_CUDA
  if (!rc && t->dev && t->opt.phase_times) rc = model_cuda_phase_times(t->dev, st->phase_s, e);
#endif
  return rc;
}

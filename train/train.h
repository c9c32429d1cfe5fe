// train.h — the training step with context parallelism: every rank holds its layout's tokens of the
// one training sequence for every layer; gradients are summed over ranks; AdamW state is sharded
// (ZeRO-1: rank r updates its slice of the flat parameter vector, then the slices are all-gathered).
//
// The trainer talks to other ranks only through train_comm (three collectives), so the same code runs
// single-process (world 1, no callbacks) and under MPI / NCCL (train/train_cmd.c adapts exec/comm.h).
// Library code: it never prints; the command prints progress from the returned step statistics.
#ifndef SR_TRAIN_H
#define SR_TRAIN_H

#include <stdint.h>

#include "train/data.h"
#include "train/model_cpu.h"
#include "plan/error.h"

// The collectives the trainer needs (all sums are in place; world 1 needs none of them).
typedef struct {
  void *ctx;
  int rank, world;
  // Sum n float32 values over ranks, in place.
  int (*allreduce_f32)(void *ctx, float *buf, int64_t n, sr_error *e);
  // Sum n float64 values over ranks, in place (scalars: loss, gradient norm, counts).
  int (*allreduce_f64)(void *ctx, double *buf, int64_t n, sr_error *e);
  // Gather n float32 values from every rank: recv holds world blocks of n, block r from rank r.
  int (*allgather_f32)(void *ctx, const float *send, float *recv, int64_t n, sr_error *e);
} train_comm;

// What to train on and how.
typedef struct {
  int64_t seq;              // tokens of the global sequence per step
  int64_t steps;            // optimizer steps of the run
  double lr, weight_decay;  // AdamW (β 0.9 / 0.95)
  double clip;              // global gradient-norm clip (0: none; default 1.0, MTraining's recipe)
  int64_t warmup;           // linear learning-rate warm-up steps (0: none; the command's default: train_default_warmup)
  int cosine;               // after warm-up, cosine decay from lr to lr / 10 at the last step (else constant)
  uint64_t seed;            // weights and passkey samples
  int recompute;            // per-layer activation recomputation: MODEL_RECOMPUTE_* (model_cpu.h)
  int64_t keep_layers;      // MODEL_RECOMPUTE_KEEP_ATTN: layers 0..keep_layers-1 keep attention's output and LSE
                            // (model_cpu_set_keep_layers; negative, the default: every layer)
  int64_t keep_all;         // MODEL_RECOMPUTE_KEEP_ATTN: layers 0..keep_all-1 keep every activation, so their backward
                            // reruns nothing (model_cpu_set_keep_all; 0, the default: none; at most keep_layers)
  int offload_activations;  // the layer inputs wait in (pinned) host memory between forward and backward
  int64_t mlp_chunk;        // the MLP in chunks of this many local tokens (0: whole; MODEL_EXEC_MLP_AUTO, the
                            // default: plan/model.h's model_exec_mlp_rows rule)
  const data_tokens *data;  // token stream; NULL trains on passkey samples
  double passkey_depth;     // key depth in [0, 1]; < 0 draws it uniformly per sample
  int passkey_digits;       // digits of the key (default 5)
  passkey_loss passkey_loss;  // which passkey positions take loss (held-out scoring: the answer only)
  int64_t batch;            // samples per optimizer step (gradient accumulation; 0 or 1: one)
  int64_t pack;             // passkey samples packed in one sequence, seq / pack tokens each (0 or 1: one);
                            // attention must then be block-diagonal by sample (train --pack builds that
                            // pattern), so a packed sequence trains exactly like a batch of its samples
  int64_t pose_span;        // PoSE (positional skip-wise training; 0: off): a training sample of len tokens
                            // rotates by positions that jump once, at a random token, by a random skip in
                            // [0, pose_span - len], so short samples teach distances up to pose_span
  int cuda;                 // run the model on this rank's GPU (model_cuda.h; needs SR_HAVE_CUDA)
  int phase_times;          // time the GPU step's phases with CUDA events (train_step_stats.phase_s; the CPU's always)
  void *cuda_stream;        // cudaStream_t the model runs on (the comm backend's compute stream)
  // called before each sample's forward of a step (a batch: several), e.g. so that a searched pattern knows the
  // sample is new inputs (NULL: none)
  void (*sample_begin)(void *ctx, int64_t step, int64_t sample);
  void *sample_ctx;
} train_options;

// Measurements of one step (seconds are wall time on this rank).
typedef struct {
  int64_t step;             // 1-based index of the step just taken
  double loss;              // mean cross-entropy over the sequence's targets (nats)
  double grad_norm;         // global L2 norm before clipping
  double lr;
  int64_t targets;          // scored tokens in the whole sequence
  int64_t mispredicted;     // scored tokens whose argmax is wrong (0: an exact match)
  int64_t samples, exact;   // samples scored (pack per sequence) and those without a misprediction
  double time_s, attn_s, comm_s;  // whole step; attention callback; gradient / parameter collectives
  // seconds of each class of work (train/phases.h): on the CPU always, on the GPU with train_options.phase_times
  // (CUDA events on the compute stream, read after time_s is taken); their sum is at most time_s
  double phase_s[TRAIN_PHASES];
} train_step_stats;

typedef struct {
  train_options opt;
  train_comm comm;
  model_cpu model;
  adamw_state adam;
  int64_t n_local;          // tokens this rank holds
  int64_t *pos;             // their global positions (layout order)
  int64_t *rope_pos;        // the positions the model rotates by: pos, or pos within its sample when packed
  int32_t *seq_tok, *seq_tgt;     // the whole sequence of the current sample
  int32_t *tok, *tgt, *argmax;    // this rank's tokens, targets, predictions
  int64_t step;             // steps taken
  int64_t slice;            // ZeRO-1 slice length: ceil(num_params / world)
  float *gather;            // world * slice floats for the CPU all-gathers (the GPU gathers in place)
  void *dev;                // model_cuda when opt.cuda: the host model then keeps only the tensor table and
                            // the weights of the last save/load
} trainer;

// Set defaults: lr 3e-4, wd 0, clip 1.0, no warm-up, seed 1, recompute off (every layer keeping under selective
// recomputation), the MLP chunked by the auto rule, passkey with 5 digits at random depth.
void train_options_defaults(train_options *o);
// Device bytes of selective recomputation's kept attention outputs and LSEs when layers 0..keep_layers-1 of `layers`
// keep them, all_bytes being what every layer keeping takes: all_bytes shared evenly by its buffers
// (model_attn_own_buffers: keep_layers of them, layers - 1 when every layer keeps).
double train_keep_layers_bytes(int layers, double all_bytes, int keep_layers);
// The layers that keep under selective recomputation (the trainer's choice on the GPU): the largest count whose
// bytes (train_keep_layers_bytes) are at most free_bytes; 0 (full recomputation) when not even one layer's fit.
int train_keep_layers_fit(int layers, double all_bytes, double free_bytes);
// Whole-layer keeping on the GPU beside selective recomputation in layers 0..keep_layers-1 (the trainer's choice,
// after train_keep_layers_fit): the most layers, at most keep_layers, whose extra device bytes
// (plan/model.h's model_exec_kept_whole_bytes_per_token for n_local tokens, GEMM operands of act_bytes bytes) are at
// most free_bytes.
int train_keep_all_fit(const model_config *m, int keep_layers, int64_t n_local, int64_t mlp_chunk, int act_bytes,
                       double free_bytes);
// The warm-up a run of `steps` steps gets unless told otherwise: 10% of its steps, at least 10 and at most 100
// (a short run still starts at a tenth of its learning rate: Adam's first updates move every weight by about
// lr, which at 3e-4 on a random 3B model drove the loss from 9.6 to 14.7 in one step).
int64_t train_default_warmup(int64_t steps);
// Build the model (random init from opt->seed), the optimizer slice and buffers for n_local tokens at
// positions pos (copied). comm may be NULL for a single process holding every token. With opt->cuda the
// model is mirrored on the GPU and the comm callbacks receive device buffers for the float32 collectives.
int trainer_create(trainer *t, const model_config *cfg, const train_options *o, const train_comm *comm,
                   int64_t n_local, const int64_t *pos, sr_error *e);
// Free everything trainer_create allocated.
void trainer_free(trainer *t);
// One optimizer step on sample number t->step (every rank builds the same sample and keeps its tokens).
int trainer_step(trainer *t, train_step_stats *st, sr_error *e);
// Forward only on held-out sample `index` (passkey seeds disjoint from training): loss and mispredictions.
int trainer_eval(trainer *t, int64_t index, train_step_stats *st, sr_error *e);
// The sample of a step: whole-sequence tokens and targets (passkey: answer_start too, else -1).
int trainer_sample(const trainer *t, int64_t index, int held_out, int32_t *tokens, int32_t *targets,
                   int64_t *answer_start, sr_error *e);
// Write the samples of steps [0, steps) (batch of them a step) as a PyTorch peer reads them: for each sample, seq
// int32 tokens then seq int32 targets (-1: no loss), little-endian, nothing else; written atomically. The
// same sequences trainer_step trains on, so another trainer can run on exactly this token stream.
int train_samples_write(const train_options *o, int64_t steps, const char *path, sr_error *e);
// The rotary positions of this rank's tokens for sample `index` into out[n_local]: each position within its
// packed sample, plus under PoSE (training samples only) the sample's skip past its split token.
void trainer_rope_positions(const trainer *t, int64_t index, int held_out, int64_t *out);
// Save a checkpoint into root as root/step-N (train/ckpt.h: the weights under Hugging Face names, every
// rank's optimizer slice, a manifest of sizes and CRC32Cs, committed by one rename; the previous checkpoint
// is removed only after). Every rank calls; all return the same status.
int trainer_save(trainer *t, const char *root, sr_error *e);
// Start from weights in a safetensors file with Hugging Face names (a real checkpoint, or a
// model.safetensors of ours; F32, BF16, F16 and F64 tensors load), or from the weights of a checkpoint
// directory of trainer_save (its root: the newest), verified by its manifest. Optimizer state starts fresh.
int trainer_init_weights(trainer *t, const char *path, sr_error *e);
// Restore what trainer_save wrote (any world size; path: the root, whose newest checkpoint is taken, or a
// checkpoint directory), the next step continuing bit for bit. Every field and tensor is validated first
// (train/ckpt.h): a damaged or foreign checkpoint is an input error naming what is wrong, and leaves the
// trainer untouched. Every rank calls; all return the same status.
int trainer_resume(trainer *t, const char *path, sr_error *e);

#endif

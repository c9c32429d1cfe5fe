// train_run.h — the state of one `sparsering-exec train` run (train_cmd.c) and what decides, on the device, where
// its tensors live (train_memory.c): internal to the command, not part of the trainer's API (train.h).
#ifndef SR_TRAIN_RUN_H
#define SR_TRAIN_RUN_H

#include "exec/comm.h"
#include "exec/dist_attn.h"
#include "plan/args.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "traces/trace.h"
#include "train/data.h"
#include "train/train.h"
#include "train/train_attn.h"
#include "train/train_recall.h"

// Everything one run of the command holds, from its flags to its closing summary.
typedef struct {
  cli_args *a;
  int cuda, bf16;             // --backend cuda; --precision bf16 (the CUDA model's GEMMs)
  comm c;
  int R;                      // this rank
  plan p;
  pattern pat;
  data_tokens data;
  trainer t;
  train_attn ta;
  int64_t *pos;               // this rank's token positions
  attn_recall rec;
  recall_tally tally;
  sr_buf csv;
  trace_writer tw;
  int tw_open, traced;
  // options
  int64_t recall_n, steps, eval_n, ckpt_every, warmup, digits, seed, batch, attn_cache, pack, build_threads, prefetch;
  int64_t pose, mlp_chunk;    // --pose; --mlp-chunk, when given (mlp_given)
  double lr, wd, clip, depth, peak, host_gib;
  train_options o;
  const char *loss_mode, *ckpt, *trace_path, *trace_steps;
  int quiet, mlp_given;
  int phase_times;            // --phase-times: a phase line after each step line, phase columns in the CSV
  int search_recall;          // --search-recall
  char label[256], csv_path[600];
  // the plan's attention and its plans built before the first step
  double pairs, density, flops, prebuild_s;
  int64_t prebuilt;
  // measurements: the run's start, the first step and the best after it, with the plans the best step built
  // when their layer came (and their build seconds): CPU work on the step's critical path that the simulated
  // step does not hold
  double run_t0, best_s, first_s, meas_build_s;
  int64_t first, meas_built;
  int64_t waits;              // plan waits over the run's steps, and the seconds their layers spent getting plans
  double wait_s;
  int keep_wanted;            // selective recomputation asked for on the GPU (decided by train_run_keep_decide)
  double keep_bytes, keep_free;  // what it takes on this rank (every layer keeping), and what was free beside the plans
  int keep_layers;               // the layers that keep (0 .. L: layers 0..keep_layers-1, the same on every rank)
  int keep_all_wanted;           // --keep-activations: -1 auto (as many as fit on the GPU, none on the CPU), 0 off, N
  int keep_all;                  // the layers kept whole (0 .. keep_layers: layers 0..keep_all-1, the same on every
                                 // rank)
  double keep_all_free;          // the GPU: bytes free for them beside the plans and the kept attention outputs
  int offload_auto;              // the activation offload turned on by train_run_inputs_decide (the inputs did not fit)
  double inputs_bytes;           // the layer inputs' device bytes as train_run_inputs_decide found them
  dist_index_build index_build;  // --index-build
  int moba_gate;                 // --moba-gate: EXEC_GATE_HOST, _GPU or _AUTO
  // memory after the first step: device memory in use on the fullest GPU, pinned host memory of rank 0's node
  // (offloaded layer inputs and attention chunks; the CPU backend: the offloaded layer inputs' stand-in)
  double gpu_used, host_pinned;
  int mem_measured;
} train_run;

// The layer inputs placed on the GPU, offloaded to pinned host memory by every rank when they do not fit on some rank
// and the run did not ask for it (r->offload_auto).
int train_run_inputs_decide(train_run *r, sr_error *e);
// The selective recomputation's layers that keep attention's output and LSE (r->keep_layers), and of those the layers
// kept whole (r->keep_all), the same on every rank.
int train_run_keep_decide(train_run *r, sr_error *e);
// The recomputation in words, for the opening line.
void train_run_recompute_text(const train_run *r, char *out, size_t size);
// Memory after the first step: each GPU's use (printed per rank), the fullest GPU and rank 0's node's pinned memory.
int train_run_memory_measure(train_run *r, sr_error *e);

#endif

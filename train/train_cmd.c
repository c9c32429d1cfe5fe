// train_cmd.c — `sparsering-exec train`: real training with context parallelism under a plan.
//
//   mpirun -np W sparsering-exec train --model tiny-test --seq 4K --steps 50 --data passkey
//       [--plan FILE | --cluster C --layout L --schedule S --pattern P | --strategy NAME]
//       [--backend cpu|cuda] [--precision bf16|tf32] [--lr 3e-4] [--ckpt DIR --ckpt-every K] [--resume DIR]
//       [--csv PATH] [--trace PATH --trace-steps 1,10,100] [--init WEIGHTS.safetensors]
//
// Every rank holds its layout's tokens for every layer; attention runs through the executor's
// distributed attention (dist_attn.h) for the plan's schedule and pattern; gradients are summed over
// the comm backend and AdamW is sharded (ZeRO-1). Rank 0 prints a log line per step (loss, tokens/s,
// MFU, attention density, time split) and a progress bar, and with --csv writes the CSV atomically every step.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/calibrate.h"
#include "exec/comm.h"
#include "exec/dist_attn.h"
#include "exec/exec.h"
#include "train/phases.h"
#include "train/train.h"
#include "train/train_attn.h"
#include "train/train_run.h"
#include "exec/exec_plan.h"
#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/report.h"
#include "sim/sim.h"
#include "traces/trace.h"
#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#endif

// ---- the bridges: comm.h collectives and dist_attn.h behind the trainer's interfaces ----------

// NCCL collectives are queued on the comm stream: comm_sync makes their results visible to the host and
// to the compute stream before the trainer goes on (a no-op on the CPU backend).
static int bridge_allreduce_f32(void *ctx, float *buf, int64_t n, sr_error *e) {
  // test hook: SR_TRAIN_HANG=R makes rank R stuck (alive, never answering) before its first all-reduce
  const char *hang = getenv("SR_TRAIN_HANG");
  if (hang && *hang && atoi(hang) == ((comm *)ctx)->rank)
    for (;;) pause();
  int rc = comm_allreduce(ctx, buf, buf, n, COMM_F32, COMM_SUM, e);
  return rc ? rc : comm_sync(ctx, e);
}

static int bridge_allreduce_f64(void *ctx, double *buf, int64_t n, sr_error *e) {
  return comm_host_allreduce(ctx, buf, (int)n, MPI_DOUBLE, MPI_SUM, e);
}

static int bridge_allgather_f32(void *ctx, const float *send, float *recv, int64_t n, sr_error *e) {
  int rc = comm_allgather(ctx, send, recv, n, COMM_F32, e);
  return rc ? rc : comm_sync(ctx, e);
}

// ---- output -----------------------------------------------------------------------------------

static void progress_bar(int64_t done, int64_t total, double loss, double eta_s) {
  int width = 30, fill = total > 0 ? (int)(width * done / total) : width;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r[%s] %lld/%lld loss %.4f eta %.0fs ", bar, (long long)done, (long long)total, loss, eta_s);
  if (done == total) fprintf(stderr, "\n");
  fflush(stderr);
}

// FLOPs of one training step (forward + backward, recomputation not counted, as MFU is defined in
// PaLM appendix B): GEMMs 3x forward (MODEL_GEMM_BWD_RATIO 2), attention 1 + MODEL_ATTN_BWD_RATIO.
static double step_flops(const model_config *m, int64_t seq, double attn_pairs_per_layer) {
  double gemm = ((double)m->num_layers * model_layer_gemm_flops_per_token(m) + model_lm_head_flops_per_token(m)) *
                (double)seq * (1.0 + MODEL_GEMM_BWD_RATIO);
  double attn = (double)m->num_layers * model_attn_flops(m, attn_pairs_per_layer) * (1.0 + MODEL_ATTN_BWD_RATIO);
  return gemm + attn;
}

// Kept (query, key) pairs of the plan's pattern, summed over layers and averaged over heads (what
// model_attn_flops takes), and their fraction of dense causal attention. Exact: the planner's tile
// accounting, never an N x N mask.
static int plan_attention_pairs(const plan *p, const pattern *pat, double *pairs, double *density, sr_error *e) {
  int W = p->layout.world, H = pat->heads;
  work_count *wc = malloc((size_t)H * (size_t)W * (size_t)W * sizeof *wc);
  if (!wc) return sr_internal_error(e, 0, "train: out of memory");
  double total = 0;
  for (int l = 0; l < pat->layers; l++) {
    int rc = tiles_account_layer(pat, l, &p->layout, wc, e);
    if (rc) {
      free(wc);
      return rc;
    }
    for (int64_t i = 0; i < (int64_t)H * W * W; i++) total += wc[i].pairs;
  }
  free(wc);
  *pairs = total / (double)H;
  *density = *pairs / ((double)pat->layers * model_causal_pairs(p->spec.seq));
  return SR_OK;
}

// Packed samples (--pack P): causal attention inside each sample of seq / P tokens and none across them,
// as BLOCK heads of 128-token blocks (the sample length must be a multiple of 128), replacing the plan's
// dense pattern; RoPE scores depend on relative positions only, so each sample trains as if alone.
static int pack_pattern(const plan *p, pattern *pat, int64_t pack, sr_error *e) {
  int64_t seq = p->spec.seq, len = seq / pack, B = 128;
  if (strcmp(p->spec.pattern, "dense") != 0)
    return sr_input_error(e, NULL, "--pack", "packs samples under the dense pattern, not '%s'", p->spec.pattern);
  if (seq % pack != 0 || len % B != 0)
    return sr_input_error(e, NULL, "--pack", "%lld samples in %lld tokens: each sample must be a multiple of %lld tokens",
                          (long long)pack, (long long)seq, (long long)B);
  int64_t nb = seq / B, words = sr_cdiv(nb, 64), per = len / B;
  for (int64_t i = 0; i < (int64_t)pat->layers * pat->heads; i++) {
    head_pattern *h = &pat->h[i];
    free(h->vertical);
    free(h->slash);
    free(h->mask);
    memset(h, 0, sizeof *h);
    h->kind = PATTERN_BLOCK;
    h->block = (int32_t)B;
    h->n_blocks = nb;
    h->row_words = words;
    h->mask = calloc((size_t)(nb * words), sizeof *h->mask);
    if (!h->mask) return sr_internal_error(e, 0, "train: out of memory for the packing mask");
    for (int64_t r = 0; r < nb; r++)
      for (int64_t c = (r / per) * per; c <= r; c++) h->mask[r * words + c / 64] |= 1ull << (c % 64);
  }
  return SR_OK;
}

// Is step (1-based) in the comma-separated list? An empty list records the first step only.
static int step_listed(const char *list, int64_t step) {
  if (!list || !*list) return step == 1;
  for (const char *p = list; *p;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return 0;
    if (v == step) return 1;
    p = *end == ',' ? end + 1 : end;
  }
  return 0;
}

// ---- the recall probe (--eval-recall) -----------------------------------------------------------

// The probe reads every key next to the answer rows of one passkey sample: one rank, one sample a sequence.
static int recall_check(int64_t eval_n, int64_t pack, int world, const char *data, sr_error *e) {
  if (eval_n == 0) return sr_input_error(e, NULL, "--eval-recall", "probes the --eval samples: give --eval");
  if (strcmp(data, "passkey") != 0)
    return sr_input_error(e, NULL, "--eval-recall", "probes the answer rows of passkey samples (--data is %s)", data);
  if (pack > 1)
    return sr_input_error(e, NULL, "--eval-recall", "needs one sample a sequence (--pack is %lld)", (long long)pack);
  if (world != 1)
    return sr_input_error(e, NULL, "--eval-recall", "needs every key on one rank (the job has %d)", world);
  return SR_OK;
}

static void print_recall(const recall_tally *t) {
  printf("eval recall: the pattern's share of the dense attention at the answer rows, %lld samples (%lld right, "
         "%lld wrong); per layer: heads' mean | lowest head, right / wrong\n",
         (long long)(t->n[0] + t->n[1]), (long long)t->n[1], (long long)t->n[0]);
  for (int l = 0; l < t->layers; l++) {
    char r[64] = "-", w[64] = "-";
    if (t->n[1]) snprintf(r, sizeof r, "%.4f | %.4f", t->mean[1][l] / (double)t->n[1], t->min[1][l] / (double)t->n[1]);
    if (t->n[0]) snprintf(w, sizeof w, "%.4f | %.4f", t->mean[0][l] / (double)t->n[0], t->min[0][l] / (double)t->n[0]);
    printf("eval recall: layer %2d  right %s  wrong %s\n", l, r, w);
  }
}

// ---- the command ------------------------------------------------------------------------------

// --seed here also seeds the weights and the data (this table's row refines plan_spec_flags' row).
static const cli_flag train_flags[] = {
    {"backend", "NAME", "cpu", "cpu (float32 reference model, MPI) or cuda (one GPU a rank, NCCL)"},
    {"precision", "NAME", "bf16", "the CUDA backend's GEMMs: bf16 or tf32"},
    EXEC_MOBA_GATE_FLAG,
    {"steps", "N", "20", "optimizer steps"},
    {"seed", "X", "1 (the plan's patterns: 0)", "seed of the weights and the data, and of the plan's synthetic patterns, 0 to 2^53"},
    {"data", "SRC", "passkey", "passkey (the retrieval task), corpus (build/corpus/debian-docs.txt), or a token/text file"},
    {"data-format", "FMT", "auto", "the --data file's format: u16, u32 or text (auto: from its extension)"},
    {"loss", "WHICH", "answer", "passkey positions scored: answer, keys, all, mix"},
    {"loss-all", NULL, NULL, "the same as --loss all"},
    {"depth", "D", "uniform", "passkey depth in the sequence, 0 to 1 (-1: uniform per sample)"},
    {"digits", "N", "5", "passkey digits"},
    {"lr", "X", "3e-4", "learning rate (AdamW)"},
    {"wd", "X", "0", "weight decay"},
    {"warmup", "N", "10% of the steps, 10 to 100", "steps of linear learning-rate warm-up (0: none)"},
    {"clip", "X", "1.0", "clip the global gradient norm to X (0: no clipping)"},
    {"cosine", NULL, NULL, "decay the learning rate after the warm-up to a tenth at the last step"},
    {"batch", "B", "1", "samples whose gradients a step accumulates"},
    {"pack", "P", "1", "P samples of seq/P tokens in one sequence (block-diagonal pattern)"},
    {"pose", "SPAN", NULL, "PoSE: a training sample's positions skip ahead to cover SPAN tokens"},
    {"recompute", NULL, NULL, "per-layer activation recomputation (on already when the plan's recompute is 1, the default)"},
    {"recompute-attn", NULL, NULL, "rerun each layer's attention forward in the backward (default: its output and LSE are "
     "kept in as many layers as memory allows)"},
    {"keep-activations", "auto|off|N", "auto",
     "layers kept whole: the first N layers keep every activation their backward reads, so it reruns nothing of "
     "their forward (auto: as many as fit the GPU beside the kept attention outputs and the plans; none on the CPU "
     "backend; needs selective recomputation)"},
    {"offload-activations", NULL, NULL,
     "the layer inputs wait in pinned host memory between forward and backward (copies overlapped with compute); "
     "on by default on the GPU when they do not fit the device beside the model"},
    PLAN_MLP_CHUNK_FLAG,
    {"eval", "N", "0", "score N held-out passkey samples by exact match after training"},
    {"eval-recall", "M", "0", "probe the first M --eval samples: the dense attention mass the pattern keeps"},
    {"search-recall", NULL, NULL, "adaspa-online: a dense pass in the steps that reuse a mask, to report its recall"},
    {"attn-cache", "K", "as memory allows", "attention plans kept (the others are rebuilt when their layer comes)"},
    {"attn-prefetch", "D", "0 (cuda: 2 when not every plan is kept)", "build the plans of the next D layers ahead of use"},
    {"attn-host-cache", NULL, NULL,
     "hold dropped plans in host memory and restore them by upload (the default with --backend cuda unless "
     "--offload-activations, whose layer inputs take the host memory)"},
    {"no-attn-host-cache", NULL, NULL, "rebuild dropped plans when their layer comes instead of holding them in host memory"},
    {"attn-host-gib", "G", "half of MemAvailable", "the host cache's cap a rank, GiB (needs the host cache on)"},
    {"build-threads", "N", "cores / ranks", "threads building attention plans"},
    {"init", "FILE|DIR", NULL, "start from the weights of a safetensors file (Hugging Face names) or of a checkpoint"},
    {"ckpt", cli_out_dir, NULL, "write model and optimizer checkpoints to DIR"},
    {"ckpt-every", "K", "0 (at the end only)", "checkpoint every K steps"},
    {"resume", "DIR", NULL, "continue from a checkpoint (any world size)"},
    {"csv", cli_out_file, NULL, "the per-step log as CSV (none without it)"},
    {"label", "NAME", "MODEL-STRATEGY-SEQ", "the run's name in the log and the CSV"},
    {"peak-tflops", "P", "the cluster GPU's (cuda)", "peak TFLOP/s a rank, for MFU"},
    {"predict", NULL, NULL, "after the steps, simulate the same plan and print simulated vs measured step time"},
    {"trace", cli_out_file, NULL, "record the attention patterns of --trace-steps as a trace"},
    {"trace-steps", "A,B,...", NULL, "the steps --trace records"},
    {"quiet", NULL, NULL, "no per-step log lines (a --csv file is still written)"},
    {"phase-times", NULL, NULL,
     "after each step line, the step's seconds by class of work (norms, GEMMs, attention, optimizer, ...) and the rest "
     "(CUDA: events on the compute stream); with --csv, a column each"},
    {"write-samples", "FILE", NULL, "write the steps' token sequences (int32 tokens then targets a sample) to FILE and stop"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage train_usage = {
    NULL,
    "mpirun -np 2 sparsering-exec train --backend cpu --model tiny-test --cluster h200-1x2 --strategy dense-ring "
    "--seq 256 --steps 50 --data passkey",
    {plan_spec_flags, exec_plan_flags, train_flags, NULL}};


// --backend and --precision (checked before the comm backend starts).
static int backend_read(cli_args *a, int *cuda, int *bf16, sr_error *e) {
  const char *backend = cli_get(a, "backend", "cpu");
  *cuda = strcmp(backend, "cuda") == 0;
  if (!*cuda && strcmp(backend, "cpu") != 0) return sr_input_error(e, NULL, "--backend", "'%s' is not one of cpu, cuda", backend);
  // GEMM precision of the CUDA model; the CPU model computes in float32 and takes no --precision
  const char *precision = cli_get(a, "precision", NULL);
  if (precision && strcmp(precision, "bf16") != 0 && strcmp(precision, "tf32") != 0)
    return sr_input_error(e, NULL, "--precision", "'%s' is not one of bf16, tf32", precision);
  if (precision && !*cuda)
    return sr_input_error(e, NULL, "--precision", "%s selects the CUDA backend's GEMMs; the CPU backend computes in float32",
                          precision);
  *bf16 = !precision || strcmp(precision, "bf16") == 0;
#if !SR_HAVE_CUDA
  if (*cuda) return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (nvcc was not found at build time)");
#endif
  return SR_OK;
}

// The numeric options.
static int options_read(train_run *r, sr_error *e) {
  cli_args *a = r->a;
  if (cli_get_int(a, "steps", 20, 0, INT64_MAX, &r->steps, e) || cli_get_int(a, "eval", 0, 0, 1000000, &r->eval_n, e) ||
      cli_get_int(a, "ckpt-every", 0, 0, INT64_MAX, &r->ckpt_every, e) ||
      cli_get_int(a, "warmup", -1, 0, INT64_MAX, &r->warmup, e) || cli_get_num(a, "clip", 1.0, 0, 1e9, &r->clip, e) || cli_get_int(a, "digits", 5, 1, 30, &r->digits, e) ||
      cli_get_int(a, "seed", 1, 0, (int64_t)1 << 53, &r->seed, e) || cli_get_int(a, "batch", 1, 1, 1 << 20, &r->batch, e) ||
      cli_get_int(a, "attn-cache", 0, 0, 1 << 20, &r->attn_cache, e) || cli_get_int(a, "pack", 1, 1, 1 << 16, &r->pack, e) ||
      cli_get_int(a, "build-threads", 0, 0, 256, &r->build_threads, e) ||
      cli_get_int(a, "attn-prefetch", 0, 0, 1024, &r->prefetch, e) || cli_get_num(a, "lr", 3e-4, 0, 10, &r->lr, e) ||
      cli_get_num(a, "wd", 0, 0, 10, &r->wd, e) || cli_get_num(a, "depth", -1, -1, 1, &r->depth, e) ||
      cli_get_num(a, "peak-tflops", 0, 0, 1e9, &r->peak, e) || cli_get_num(a, "attn-host-gib", -1, -1, 1e6, &r->host_gib, e) ||
      cli_get_int(a, "eval-recall", 0, 0, 1000000, &r->recall_n, e))
    return e->code;
  if (r->warmup < 0) r->warmup = train_default_warmup(r->steps);
  if (cli_has(a, "attn-host-cache") && cli_has(a, "no-attn-host-cache"))
    return sr_input_error(e, NULL, "--no-attn-host-cache", "contradicts --attn-host-cache");
  if (cli_get(a, "attn-host-gib", NULL) && cli_has(a, "no-attn-host-cache"))
    return sr_input_error(e, NULL, "--attn-host-gib", "sets the cap of the host cache, which --no-attn-host-cache turns off");
  const char *ka = cli_get(a, "keep-activations", "auto");
  char *end = NULL;
  if (strcmp(ka, "auto") == 0) r->keep_all_wanted = -1;
  else if (strcmp(ka, "off") == 0) r->keep_all_wanted = 0;
  else {
    long long v = strtoll(ka, &end, 10);
    if (!*ka || *end || v < 0 || v > 1 << 20)
      return sr_input_error(e, NULL, "--keep-activations", "'%s' is not auto, off or a layer count", ka);
    r->keep_all_wanted = (int)v;
  }
  const char *mc = cli_get(a, "mlp-chunk", NULL);
  if ((r->mlp_given = mc != NULL) && plan_mlp_chunk_parse(mc, "--mlp-chunk", &r->mlp_chunk, e)) return e->code;
  return SR_OK;
}

// The plan and its pattern (packed with --pack), the --pose span, this rank's positions and the
// distributed attention behind the trainer.
static int plan_setup(train_run *r, sr_error *e) {
  cli_args *a = r->a;
  if (exec_plan_load(a, NULL, NULL, NULL, &r->p, &r->pat, e)) return e->code;
  if (r->pack > 1 && pack_pattern(&r->p, &r->pat, r->pack, e)) return e->code;
  if (cli_get(a, "pose", NULL)) {
    if (sr_parse_tokens(cli_get(a, "pose", NULL), "--pose", &r->pose, e)) return e->code;
    if (r->pose <= r->p.spec.seq / r->pack)
      return sr_input_error(e, NULL, "--pose", "a span of %lld tokens does not reach past the %lld-token sample",
                            (long long)r->pose, (long long)(r->p.spec.seq / r->pack));
  }
  if (r->p.layout.world != r->c.world)
    return sr_input_error(e, r->p.cluster.path, "world", "the plan spreads the sequence over %d ranks, the job has %d",
                          r->p.layout.world, r->c.world);
  if (dist_attn_check_plan(&r->p, e)) return e->code;  // what the attention cannot run (FPDT's layout, ...)
  int64_t n_local = r->p.layout.rank_count[r->R];
  r->density = 1;
  if (plan_attention_pairs(&r->p, &r->pat, &r->pairs, &r->density, e)) return e->code;
  r->pos = malloc((size_t)sr_max64(n_local, 1) * sizeof *r->pos);
  if (!r->pos) return sr_internal_error(e, 0, "train: out of memory");
  layout_positions(&r->p.layout, r->R, r->pos);
  // plan-building threads: by default the node's cores shared by its ranks (the GPU machines: one node)
  if (r->build_threads == 0) r->build_threads = sr_max64(1, sysconf(_SC_NPROCESSORS_ONLN) / r->c.world);
  if (exec_index_build(a, &r->index_build, e) || exec_moba_gate(a, r->cuda, &r->moba_gate, e) ||
      train_attn_init(&r->ta, &r->p, &r->pat, &r->c, r->cuda, (int)r->attn_cache, (int)r->prefetch,
                      (int)r->build_threads, r->pos, e))
    return e->code;
  r->ta.index_build = r->index_build;
  r->ta.moba_gate = r->moba_gate;
  // The host cache by default on the GPU: restoring a dropped plan by upload takes milliseconds where rebuilding
  // it takes seconds (MTraining at 128K on one H200: 4 plan waits a step, 7 s of a 13 s step). Not beside
  // --offload-activations by default: the offloaded layer inputs take the host memory.
  int offload = cli_has(a, "offload-activations") || r->p.spec.offload_activations;
  int host_cache = cli_has(a, "attn-host-cache") || (r->cuda && !offload && !cli_has(a, "no-attn-host-cache"));
  if (cli_get(a, "attn-host-gib", NULL) && !host_cache)
    return sr_input_error(e, NULL, "--attn-host-gib", "sets the cap of the host cache, which is off (give --attn-host-cache)");
  if (host_cache && train_attn_host_cache(&r->ta, r->host_gib, e)) return e->code;
  return SR_OK;
}

// adaspa-online: every sample of a step brings new inputs; a search for each at every plan.spec.search_every-th
// step (with --batch B, B masks a searching step: one sample's mask would miss another's keys).
static void search_sample_begin(void *ctx, int64_t step, int64_t sample) {
  train_run *r = ctx;
  train_attn_search_sample_at(&r->ta, step, sample,
                              DIST_SEARCH_NEW_INPUTS | (r->search_recall ? DIST_SEARCH_MEASURE_REUSE : 0));
}

// The data and the training options.
static int options_set(train_run *r, sr_error *e) {
  cli_args *a = r->a;
  const char *dsrc = cli_get(a, "data", "passkey");
  if (strcmp(dsrc, "corpus") == 0) dsrc = "build/corpus/debian-docs.txt";
  if (r->recall_n > 0 && recall_check(r->eval_n, r->pack, r->c.world, dsrc, e)) return e->code;
  if (strcmp(dsrc, "passkey") != 0 && data_load(dsrc, cli_get(a, "data-format", "auto"), &r->data, e)) return e->code;
  train_options *o = &r->o;
  train_options_defaults(o);
  o->seq = r->p.spec.seq;
  o->steps = r->steps;
  o->lr = r->lr;
  o->weight_decay = r->wd;
  o->warmup = r->warmup;
  o->clip = r->clip;
  o->cosine = cli_has(a, "cosine");
  o->seed = (uint64_t)r->seed;
  // Selective recomputation unless --recompute-attn: on the CPU always; on the GPU the memory decides once the
  // model and the first attention plan are on the device (train_run_keep_decide), so the device model starts full.
  int rec = cli_has(a, "recompute") || r->p.spec.recompute, keep = rec && !cli_has(a, "recompute-attn");
  o->recompute = !rec ? MODEL_RECOMPUTE_OFF : keep && !r->cuda ? MODEL_RECOMPUTE_KEEP_ATTN : MODEL_RECOMPUTE_FULL;
  r->keep_wanted = keep && r->cuda;
  // --keep-activations N: layers kept whole keep attention's output with the rest (selective recomputation); auto on
  // the GPU is decided with the attention outputs (train_run_keep_decide), on the CPU it keeps none
  if (r->keep_all_wanted > 0) {
    if (!rec)
      return sr_input_error(e, NULL, "--keep-activations", "%d layers kept whole, but recomputation is off (the plan's "
                            "recompute is 0: every layer keeps every activation already)", r->keep_all_wanted);
    if (!keep)
      return sr_input_error(e, NULL, "--keep-activations", "%d layers kept whole keep attention's output, which "
                            "--recompute-attn reruns", r->keep_all_wanted);
    if (r->keep_all_wanted > r->p.model.num_layers)
      return sr_input_error(e, NULL, "--keep-activations", "%d layers kept whole, but %s has %lld", r->keep_all_wanted,
                            r->p.model.name, (long long)r->p.model.num_layers);
  }
  o->keep_all = !r->cuda && r->keep_all_wanted > 0 ? r->keep_all_wanted : 0;
  o->offload_activations = cli_has(a, "offload-activations") || r->p.spec.offload_activations;
  r->p.spec.offload_activations = o->offload_activations;  // what --predict simulates
  if (r->mlp_given) r->p.spec.mlp_chunk = r->mlp_chunk;  // else the plan's (auto unless its file says)
  o->mlp_chunk = r->p.spec.mlp_chunk;                     // and --predict counts the same chunk
  o->data = r->data.tokens ? &r->data : NULL;
  o->passkey_depth = r->depth;
  o->passkey_digits = (int)r->digits;
  r->loss_mode = cli_get(a, "loss", cli_has(a, "loss-all") ? "all" : "answer");
  if (strcmp(r->loss_mode, "answer") == 0) o->passkey_loss = PASSKEY_LOSS_ANSWER;
  else if (strcmp(r->loss_mode, "keys") == 0) o->passkey_loss = PASSKEY_LOSS_KEYS;
  else if (strcmp(r->loss_mode, "all") == 0) o->passkey_loss = PASSKEY_LOSS_ALL;
  else if (strcmp(r->loss_mode, "mix") == 0) o->passkey_loss = PASSKEY_LOSS_MIX;
  else return sr_input_error(e, NULL, "--loss", "'%s' is not one of answer, keys, all, mix", r->loss_mode);
  o->batch = r->batch;
  o->pack = r->pack;
  o->pose_span = r->pose;
  o->cuda = r->cuda;
  o->phase_times = r->phase_times = cli_has(a, "phase-times");
  o->cuda_stream = r->c.compute_stream;
  o->sample_begin = search_sample_begin, o->sample_ctx = r;
  return SR_OK;
}

// The trainer with its attention, the recall probe, the plans built before the first step, and the
// weights (--init, --resume).
static int trainer_setup(train_run *r, sr_error *e) {
  const model_config *m = &r->p.model;
  int64_t n_local = r->p.layout.rank_count[r->R];
  train_comm tc = {&r->c, r->R, r->c.world, bridge_allreduce_f32, bridge_allreduce_f64, bridge_allgather_f32};
  if (trainer_create(&r->t, m, &r->o, &tc, n_local, r->pos, e)) return e->code;
  train_attn *ta = &r->ta;
  r->t.model.attn = (model_attention){ta, train_attn_fwd, train_attn_bwd, ta->online_cpu ? train_attn_estimate : NULL};
#if SR_HAVE_CUDA
  if (r->cuda) model_cuda_set_attention(r->t.dev, &(model_cuda_attention){ta, train_attn_fwd_dev, train_attn_bwd_dev});
  // before the plans are built: their cache is sized from the memory left
  if (r->cuda && model_cuda_set_precision(r->t.dev, r->bf16 ? MODEL_CUDA_BF16 : MODEL_CUDA_TF32, e)) return e->code;
#endif
  if (r->recall_n > 0) {
    if (attn_recall_init(&r->rec, (int)m->num_layers, (int)m->num_heads, (int)m->num_kv_heads, (int)m->head_dim,
                         r->cuda, n_local, r->pos, e) ||
        recall_tally_init(&r->tally, (int)m->num_layers, e))
      return e->code;
    ta->recall = &r->rec;
  }
  // the attention plans that will be kept are built before the first step, so step times hold no build
  // (the CPU's online pattern is estimated per sample: its plans are built as the samples come)
  double prebuild_t0 = sr_now();
  if (train_attn_prebuild_first(ta, e) || train_run_inputs_decide(r, e) || train_run_keep_decide(r, e) || train_attn_prebuild(ta, e))
    return e->code;
  // on the GPU a plan takes milliseconds to build (its tile index is built there): when not every plan is kept,
  // the next two layers' are built ahead by default, so their layers do not wait for them
  if (r->cuda && !cli_get(r->a, "attn-prefetch", NULL) && train_attn_prefetch_auto(ta, 2, e)) return e->code;
  r->prebuild_s = sr_now() - prebuild_t0;
  r->prebuilt = ta->built;
  const char *init = cli_get(r->a, "init", NULL), *resume = cli_get(r->a, "resume", NULL);
  if (init && trainer_init_weights(&r->t, init, e)) return e->code;
  if (resume && trainer_resume(&r->t, resume, e)) return e->code;
  return SR_OK;
}

// The label, the CSV path and header, the opening lines (rank 0) and the trace writer.
static int outputs_open(train_run *r, sr_error *e) {
  cli_args *a = r->a;
  const model_config *m = &r->p.model;
  const plan *p = &r->p;
  int64_t seq = p->spec.seq;
  snprintf(r->label, sizeof r->label, "%s", cli_get(a, "label", ""));
  double gpu_peak = r->cuda ? p->cluster.gpu.peak_tflops : 0;  // MFU against the plan's GPU when on GPUs
  if (r->peak <= 0) r->peak = gpu_peak;
  if (!r->label[0])
    snprintf(r->label, sizeof r->label, "%s-%s-%lld", m->name, p->spec.strategy[0] ? p->spec.strategy : "custom", (long long)seq);
  snprintf(r->csv_path, sizeof r->csv_path, "%s", cli_get(a, "csv", ""));  // empty: no CSV (only where asked)
  r->ckpt = cli_get(a, "ckpt", NULL);
  r->quiet = cli_has(a, "quiet");
  r->search_recall = cli_has(a, "search-recall");
  r->flops = (double)r->batch * step_flops(m, seq, r->pairs / (double)m->num_layers);
  const train_attn *ta = &r->ta;
  if (r->R == 0) {
    char sched[128], tok[32];  // FPDT runs in place of the schedule: say so
    if (p->spec.fpdt_chunk > 0)
      snprintf(sched, sizeof sched, "FPDT in %s-token chunks%s", sr_format_tokens(p->spec.fpdt_chunk, tok, sizeof tok),
               p->spec.fpdt_offload ? " offloaded" : "");
    else
      snprintf(sched, sizeof sched, "%s schedule", p->spec.schedule);
    printf("train: %s, %lld params, seq %lld on %d rank(s) (%s layout, %s, pattern %s, density %.4f)\n", m->name,
           (long long)r->t.model.num_params, (long long)seq, r->c.world, layout_kind_name(p->layout.kind), sched,
           p->spec.pattern, r->density);
    printf("train: %lld attention plan(s) built before the first step in %.2fs (%lld threads%s; tile indices of %lld "
           "built on the GPU)", (long long)r->prebuilt, r->prebuild_s, (long long)r->build_threads,
           ta->prefetch ? ", building ahead" : "", (long long)ta->built_gpu);
    if (r->cuda)  // what each kept plan holds for itself, and the scratch all plans share (exec/dist_workspace.h)
      printf("; device memory %.1f MiB per plan (largest), %.2f GiB in the %d kept of %lld layers, %.2f GiB shared "
             "workspace", (double)ta->plan_bytes_max / (1 << 20), (double)train_attn_kept_bytes(&r->ta) / (1 << 30),
             ta->cap, (long long)m->num_layers, (double)ta->shared_bytes / (1 << 30));
    printf("\n");
    char rec[640];
    train_run_recompute_text(r, rec, sizeof rec);
    char mlp[32], offload[120];
    if (r->offload_auto)
      snprintf(offload, sizeof offload, "on (the layer inputs' %.2f GiB did not fit the device: offloaded by default)",
               r->inputs_bytes / (1 << 30));
    else snprintf(offload, sizeof offload, "%s", r->o.offload_activations ? "on" : "off");
    int64_t rows = model_exec_mlp_rows(r->p.layout.rank_count[0], r->o.mlp_chunk);
    printf("train: data %s (loss %s), batch %lld, lr %g, wd %g, warmup %lld, clip %g, recompute %s, activation offload "
           "%s, MLP chunk %s tokens (--mlp-chunk), ZeRO-1 slice %lld\n", r->o.data ? r->o.data->path : "passkey",
           r->o.data ? "all" : r->loss_mode, (long long)r->batch, r->lr, r->wd, (long long)r->warmup, r->clip, rec,
           offload, sr_format_tokens(rows, mlp, sizeof mlp), (long long)r->t.slice);
#if SR_HAVE_CUDA
    if (r->cuda)
      printf("train: GEMMs %s; activations and scratch %.2f GiB\n",
             r->bf16 ? "bf16 operands and activations, fp32 accumulation, residual stream and weight gradients "
                       "(--precision bf16)"
                     : "fp32 operands on TF32 tensor cores (--precision tf32)",
             (double)model_cuda_act_bytes(r->t.dev) / (1 << 30));
#endif
    sr_buf_printf(&r->csv, "run,step,loss,grad_norm,lr,tokens_per_s,mfu,density,attn_s,gemm_s,comm_s,step_s,plan_wait_s");
    if (r->phase_times) train_phases_csv_header(&r->csv);  // --phase-times: a column a class, then the rest
    sr_buf_printf(&r->csv, "\n");
  }
  // attention patterns of chosen steps, as a trace (traces/trace.h) the simulator can replay
  r->trace_path = cli_get(a, "trace", NULL), r->trace_steps = cli_get(a, "trace-steps", "");
  if (r->trace_path && strncmp(p->spec.pattern, "token-topk:", 11) == 0)
    return sr_input_error(e, NULL, "--trace", "token top-k selections (each row its own keys) have no trace kind");
  if (r->trace_path && r->R == 0) {
    trace_info ti;
    memset(&ti, 0, sizeof ti);
    trace_info_set_model(&ti, m);
    ti.seq_len = seq;
    ti.layers = r->pat.layers;
    ti.heads = r->pat.heads;
    snprintf(ti.source, sizeof ti.source, "executor");
    snprintf(ti.origin, sizeof ti.origin, "sparsering-exec train %s (%s)", r->label, p->spec.pattern);
    ti.seed = p->spec.seed;
    if (trace_writer_begin(&r->tw, &ti, e)) return e->code;
    r->tw_open = 1;
  }
  return SR_OK;
}

// Rank 0's log line, CSV row (rewritten every step) and progress bar of one step; waits and wait_s: the step's
// plan waits and the seconds its layers spent getting their plans (train_attn_waits).
static int step_log(train_run *r, const train_step_stats *st, int64_t waits, double wait_s, sr_error *e) {
  int64_t seq = r->p.spec.seq;
  // MFU over the job's GPUs: the step's FLOPs are the whole sequence's, spread over c.world of them
  double tps = (double)(seq * r->batch) / st->time_s,
         mfu = r->peak > 0 ? r->flops / st->time_s / (r->peak * 1e12 * (double)r->c.world) : NAN;
  double gemm_s = st->time_s - st->attn_s - st->comm_s;
  if (r->R != 0) return SR_OK;
  char mfu_text[32] = "-";
  if (r->peak > 0) snprintf(mfu_text, sizeof mfu_text, "%.2f%%", 100 * mfu);
  if (!r->quiet)
    printf("step %5lld | loss %.4f | %9.0f tok/s | MFU %s | density %.4f | attn %.3fs gemm %.3fs comm %.3fs | "
           "plan-wait %.3fs (%lld) | lr %.2e | gnorm %.3f\n",
           (long long)st->step, st->loss, tps, mfu_text, r->density, st->attn_s, gemm_s, st->comm_s, wait_s,
           (long long)waits, st->lr, st->grad_norm);
  if (r->phase_times && !r->quiet) {
    sr_buf line = {0};
    train_phases_line(st->step, st->phase_s, st->time_s, &line);
    printf("%s\n", line.data ? line.data : "");
    sr_buf_free(&line);
  }
  sr_buf_printf(&r->csv, "%s,%lld,%.17g,%.6f,%.6g,%.1f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f", r->label,
                (long long)st->step, st->loss, st->grad_norm, st->lr, tps, r->peak > 0 ? mfu : 0.0, r->density,
                st->attn_s, gemm_s, st->comm_s, st->time_s, wait_s);
  if (r->phase_times) train_phases_csv_row(st->phase_s, st->time_s, &r->csv);
  sr_buf_printf(&r->csv, "\n");
  // rewritten every step, at once: the log of a long run shows its progress (and what a failed run did)
  if (r->csv_path[0] && sr_write_atomic_now(r->csv_path, r->csv.data, r->csv.len, e)) return e->code;
  double per = (sr_now() - r->run_t0) / (double)(r->t.step - r->first);
  if (isatty(2)) progress_bar(r->t.step, r->steps, st->loss, per * (double)(r->steps - r->t.step));
  return SR_OK;
}

// The training steps, with their logs, traced steps and checkpoints.
static int train_loop(train_run *r, sr_error *e) {
  trainer *t = &r->t;
  const model_config *m = &r->p.model;
  r->run_t0 = sr_now(), r->best_s = INFINITY, r->first_s = 0;
  r->first = t->step;
  while (t->step < r->steps) {
    train_step_stats st;
    int64_t od0, od1;
    double bs0, bs1;
    int64_t w0, w1;
    double ws0, ws1;
    train_attn_on_demand(&r->ta, &od0, &bs0);
    train_attn_waits(&r->ta, &w0, &ws0);
    if (trainer_step(t, &st, e)) return e->code;
    train_attn_on_demand(&r->ta, &od1, &bs1);
    train_attn_waits(&r->ta, &w1, &ws1);
    r->waits += w1 - w0, r->wait_s += ws1 - ws0;
    if (r->ta.online) {  // the step ran the patterns estimated from its (last) sample
      if (train_attn_read_patterns(&r->ta, e)) return e->code;  // CUDA: read them back from the executor
      if (plan_attention_pairs(&r->p, &r->pat, &r->pairs, &r->density, e)) return e->code;
      r->flops = (double)r->batch * step_flops(m, r->p.spec.seq, r->pairs / (double)m->num_layers);
    }
    if ((t->step > r->first + 1 || r->steps - r->first == 1) && !(st.time_s >= r->best_s))
      r->best_s = st.time_s, r->meas_built = od1 - od0, r->meas_build_s = bs1 - bs0;
    if (t->step == r->first + 1) r->first_s = st.time_s;
    if (step_log(r, &st, w1 - w0, ws1 - ws0, e)) return e->code;
    if (t->step == r->first + 1 && train_run_memory_measure(r, e)) return e->code;  // every buffer exists after step 1
    if (r->tw_open && step_listed(r->trace_steps, st.step)) {
      // the plan's pattern is what every layer computed this step (patterns are built per plan)
      if (trace_writer_add_step(&r->tw, &r->pat, NULL, e)) return e->code;
      r->traced++;
    }
    if (r->ckpt && ((r->ckpt_every > 0 && t->step % r->ckpt_every == 0) || t->step == r->steps) &&
        trainer_save(t, r->ckpt, e))
      return e->code;
  }
  return SR_OK;
}

// --eval: held-out sequences of `pack` samples each until eval_n samples are scored (and the recall probe).
static int run_eval(train_run *r, sr_error *e) {
  if (r->eval_n <= 0) return SR_OK;
  int64_t exact = 0, scored = 0, nseq = sr_cdiv(r->eval_n, r->pack), seq = r->p.spec.seq;
  double loss = 0;
  for (int64_t i = 0; i < nseq; i++) {
    train_step_stats st;
    // the probe: the rows whose next token is an answer digit, at the end of the one sample
    if (i < r->recall_n) attn_recall_arm(&r->rec, seq - r->digits - 1, seq - 2);
    else if (r->recall_n > 0) attn_recall_arm(&r->rec, 1, 0);
    // adaspa-online searches every held-out sequence (a mask searched on another sample would miss its passkey)
    train_attn_search_at(&r->ta, -1 - i, DIST_SEARCH_FORCE | DIST_SEARCH_NEW_INPUTS);
    if (trainer_eval(&r->t, i, &st, e)) return e->code;
    if (i < r->recall_n) recall_tally_add(&r->tally, &r->rec, st.exact == st.samples);
    exact += st.exact;
    scored += st.samples;
    loss += st.loss;
  }
  if (r->R == 0)
    printf("eval: %lld held-out samples, exact match %lld/%lld (%.1f%%), mean loss %.4f\n", (long long)scored,
           (long long)exact, (long long)scored, 100.0 * (double)exact / (double)scored, loss / (double)nseq);
  if (r->recall_n > 0 && r->R == 0) print_recall(&r->tally);
  return SR_OK;
}

// --predict: the simulator on the same plan and pattern (its cluster file: the plan's), next to the measurement.
static int run_predict(train_run *r, sr_error *e) {
  if (!cli_has(r->a, "predict") || r->R != 0 || r->t.step <= r->first) return SR_OK;
  plan *p = &r->p;
  const model_config *m = &p->model;
  int64_t seq = p->spec.seq;
  // a synthetic VS pattern is built before the step here, so the simulator adds no estimation for it; the step's
  // recomputation keeps attention's output in the layers the run's did (selective), and with every layer's plan kept no
  // index is built in the step
  const train_attn *ta = &r->ta;
  sim_options so = {0, 0, !pattern_spec_at_run_time(p->spec.pattern),
                    r->o.recompute == MODEL_RECOMPUTE_KEEP_ATTN && r->keep_layers > 0,
                    ta->shared || ta->cap >= ta->layers, ta->shared ? 0 : ta->cap, r->keep_layers, r->keep_all};
  sim_result sr;
  snprintf(p->spec.trainer, sizeof p->spec.trainer, "exec");  // memory: this trainer's own (plan/model.h)
  // how its plans come back when they do not all fit (sim/plan_cache.h)
  p->spec.index_build = ta->index_build == DIST_INDEX_CPU ? 1 : ta->index_build == DIST_INDEX_GPU ? 2 : 0;
  p->spec.attn_host_cache = ta->host_cache, p->spec.attn_prefetch = ta->prefetch;
  if (sim_run(p, &r->pat, &so, &sr, NULL, e)) return e->code;
  double meas = isfinite(r->best_s) ? r->best_s : r->first_s;
  printf("predict: %s %s seq %lld W %d | simulated step %.3fs %.0f tok/s MFU %.2f%% | measured step %.3fs (best after the "
         "first; first %.3fs) %.0f tok/s MFU %.2f%% | measured/simulated %.2f\n",
         m->name, p->spec.strategy[0] ? p->spec.strategy : "custom", (long long)seq, r->c.world, sr.step_s,
         sr.tokens_per_s, 100 * sr.mfu_sparse, meas, r->first_s, (double)seq / meas,
         r->peak > 0 ? 100 * r->flops / (double)r->batch / meas / (r->peak * 1e12 * (double)r->c.world) : 0.0,
         meas / sr.step_s);
  char plans[512];
  if (sim_plans_text(&sr, plans, sizeof plans)) printf("predict: %s\n", plans);
  char bars[600];
  if (r->cuda && calib_bars_note(&p->cluster, calib_bar_walk_parts(), calib_bar_walk_ws(), calib_bar_walk_pairs(), bars,
                                 sizeof bars))
    printf("predict: %s\n", bars);
  if (r->meas_built > 0) {
    // The measured step built plans when their layer came (a first step does): simulated with that building.
    plan q = *p;  // shares the arrays; only the spec differs
    q.spec.first_step_plans = (int)r->meas_built;
    sim_result fr;
    if (sim_run(&q, &r->pat, &so, &fr, NULL, e)) return e->code;
    printf("predict: the measured step built %lld attention plan(s) when their layer came (%.2fs of plan building on "
           "the CPU); simulated with that building %.3fs | measured %.3fs | measured/simulated %.2f\n",
           (long long)r->meas_built, r->meas_build_s, fr.step_s, meas, meas / fr.step_s);
  }
  const double G = 1073741824.0;
  if (r->cuda)  // next to "GPU memory in use after step 1"; the kept plans' indices beyond one layer are extra
    printf("predict: memory per GPU %.1f GiB simulated, %.1f measured (the fullest GPU after step 1; --trainer exec: "
           "state %.1f, buffers %.1f, KV buffers %.1f, one layer's index %.1f, workspace and reserve %.1f, GPU index "
           "builder %.1f)\n",
           sr.mem.total / G, r->gpu_used, (sr.mem.weights + sr.mem.grads + sr.mem.optim) / G, sr.mem.activations / G,
           sr.mem.kv_buffers / G, sr.mem.index_bytes / G, sr.mem.workspace / G, sr.mem.builder / G);
  if (sr.mem.host_bytes > 0 || r->host_pinned > 0)
    printf("predict: host memory of a node %.2f GiB simulated (offloaded layer inputs %.2f, attention chunks %.2f), "
           "%.2f GiB pinned measured%s\n", sr.mem.host_bytes / G, sr.mem.host_activations / G, sr.mem.host_attn / G,
           r->host_pinned / G, r->cuda ? "" : " (the CPU backend's fp32 stand-in, no attention chunks)");
  return SR_OK;
}

// The trace file and rank 0's closing lines.
static int run_finish(train_run *r, sr_error *e) {
  if (r->tw_open) {
    if (trace_writer_finish(&r->tw, r->trace_path, e)) return e->code;
    printf("train: trace of %d step(s) written to %s\n", r->traced, r->trace_path);
  }
  if (r->R != 0) return SR_OK;
  const train_attn *ta = &r->ta;
  printf("train: plan waits in the steps: %lld (%.3fs getting plans); tile indices built on the GPU: %lld of %lld\n",
         (long long)r->waits, r->wait_s, (long long)ta->built_gpu, (long long)ta->built);
  printf("train: attention plans: %lld built (%.2fs; %lld when their layer came), %d kept of %lld layers%s",
         (long long)ta->built, ta->build_s, (long long)ta->on_demand, ta->cap, (long long)r->p.model.num_layers,
         ta->shared ? " (one pattern: shared)" : "");
  if (ta->fit) printf(" (as many as fit: the first took %.2f GiB)", ta->plan_gib);
  if (ta->host_cache)  // plans dropped from the device wait in host memory (--attn-host-cache)
    printf("; %lld restored from host memory (%.2fs), %d held (%.2f GiB, cap %.2f GiB of MemAvailable %.1f GiB), "
           "%lld freed over the cap",
           (long long)ta->restored, ta->restore_s, train_attn_held(ta), (double)ta->host_bytes / (1 << 30),
           (double)ta->host_cap / (1 << 30), (double)ta->mem_available / (1 << 30), (long long)ta->host_dropped);
  if (r->cuda)
    printf("; device memory %.1f MiB per plan (largest), %.2f GiB shared workspace", (double)ta->plan_bytes_max / (1 << 20),
           (double)ta->shared_bytes / (1 << 30));
  printf("\n");
  if (ta->online_cpu)
    printf("train: %s: %lld (%.2fs), last density %.4f\n",
           ta->gated ? "gated selections (moba / token-topk)" : "online vertical-slash estimates", (long long)ta->estimates,
           ta->estimate_s, r->density);
  dist_search_stats ss;
  if (pattern_spec_estimation(r->p.spec.pattern) == PATTERN_SEARCHED) {
    if (train_attn_search_stats(ta, &ss, e)) return e->code;
    printf("train: adaspa-online block search (every %lld steps): %lld searches, %lld reuses, %lld dense passes; "
           "recall %.4f at the last searches (mean sparsity %.4f), last density %.4f", (long long)r->p.spec.search_every,
           (long long)ss.searches, (long long)ss.reuses, (long long)ss.dense_passes, ss.recall_search, ss.sparsity_mean,
           r->density);
    if (ss.reused_measured > 0) printf("; reused masks %.4f (%lld forwards)", ss.recall_reused, (long long)ss.reused_measured);
    if (ss.table_searches > 0) printf("; %lld searches with the masses from their dense pass", (long long)ss.table_searches);
    printf("\n");
  }
  printf("train: done, %lld steps in %.2fs%s%s\n", (long long)(r->t.step - r->first), sr_now() - r->run_t0,
         r->csv_path[0] ? "; csv " : "", r->csv_path);
  return SR_OK;
}

// --write-samples: the token stream of the run's steps, for a peer trainer to run on (scripts/gpu/train_peer.py).
static int write_samples(train_run *r, const char *path, sr_error *e) {
  if (r->R != 0) return SR_OK;
  if (train_samples_write(&r->o, r->steps, path, e)) return e->code;
  printf("train: the samples of %lld step(s) (%lld a step, %lld tokens each) written to %s\n", (long long)r->steps,
         (long long)r->batch, (long long)r->p.spec.seq, path);
  return SR_OK;
}

static void run_free(train_run *r) {
  train_attn_free(&r->ta);
  attn_recall_free(&r->rec);
  recall_tally_free(&r->tally);
  trainer_free(&r->t);
  data_free(&r->data);
  free(r->pos);
  sr_buf_free(&r->csv);
  if (r->tw_open) trace_writer_free(&r->tw);
  pattern_free(&r->pat);
  plan_free(&r->p);
  comm_free(&r->c);
}

static int cmd_train(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  int cuda = 0, bf16 = 1;
  if (cli_parse(argc, argv, &train_usage, &a, &e) || backend_read(&a, &cuda, &bf16, &e))
    return sr_error_report(&e, "sparsering-exec train");
  train_run *r = calloc(1, sizeof *r);  // large (the trainer, the plan): on the heap
  if (!r) {
    sr_internal_error(&e, 0, "train: out of memory");
    return sr_error_report(&e, "sparsering-exec train");
  }
  r->a = &a, r->cuda = cuda, r->bf16 = bf16;
  if (comm_init(&r->c, cuda ? COMM_NCCL : COMM_CPU, &argc, &argv, &e)) {
    free(r);
    return sr_error_report(&e, "sparsering-exec train");
  }
  r->R = r->c.rank;
  int status = 0;
  const char *samples = cli_get(&a, "write-samples", NULL);
  if (options_read(r, &e) || plan_setup(r, &e) || options_set(r, &e) ||
      (samples ? write_samples(r, samples, &e)
               : trainer_setup(r, &e) || outputs_open(r, &e) || train_loop(r, &e) || run_eval(r, &e) ||
                     run_predict(r, &e) || run_finish(r, &e))) {
    status = sr_error_report(&e, "sparsering-exec train");
    if (r->c.world > 1) comm_abort(&r->c, r->R, e.msg, status);  // the error's status (2: bad input), as without MPI
  }
  run_free(r);
  free(r);
  return status;
}

EXEC_COMMAND("train", cmd_train, "train a model with context parallelism under a plan (CPU or CUDA backend)",
             &train_usage)

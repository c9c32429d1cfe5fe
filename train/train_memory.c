// train_memory.c — where a training run's tensors live on the device (train_run.h): the layer inputs resident or
// offloaded, the layers whose attention output and LSE the selective recomputation keeps, and the memory measured
// after the first step.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train_run.h"
#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#endif

// The layer inputs on the GPU, placed before the recomputation's choice so that it counts them (they came at the
// first forward, after it, and a run that chose to keep attention's outputs could then fail there). When they do not
// fit beside the state, the activations, the plans and the 3 GiB kept free on some rank, and the run did not ask for
// the offload, every rank offloads them to pinned host memory (bit-identical results; the opening line says so)
// rather than failing at the first forward.
int train_run_inputs_decide(train_run *r, sr_error *e) {
#if SR_HAVE_CUDA
  if (!r->cuda) return SR_OK;
  r->inputs_bytes = (double)model_cuda_input_bytes(r->t.dev);
  if (!r->o.offload_activations) {
    double used = 0, total = 0;
    if (model_cuda_memory(&used, &total, e)) return e->code;
    double room = (total - used - 3.0) * (double)(1 << 30) - train_attn_plans_need(&r->ta);
    int fits = r->inputs_bytes <= room;
    if (r->c.world > 1 && MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, r->c.mpi) != MPI_SUCCESS)
      return sr_internal_error(e, 0, "MPI_Allreduce of the layer inputs' placement failed");
    if (!fits) {
      if (model_cuda_set_offload(r->t.dev, e)) return e->code;
      r->o.offload_activations = r->t.opt.offload_activations = r->p.spec.offload_activations = 1;
      r->offload_auto = 1;
    }
  }
  return model_cuda_place_inputs(r->t.dev, e);
#else
  return SR_OK;
#endif
}

// The recomputation on the GPU: the attention output (bf16) and LSE (fp32) kept by as many layers as fit beside the
// plans of every layer (by the first plan's measure) and 3 GiB kept free (train_keep_layers_fit), the fewest of any
// rank (the ranks' attention calls are collective, so each layer's forward is skipped or rerun on all of them); then,
// of those layers, as many kept whole as fit in what is left (train_keep_all_fit; --keep-activations auto), or the
// count asked for (which keeps attention's output in at least as many); the cache is sized again after.
int train_run_keep_decide(train_run *r, sr_error *e) {
  const model_config *m = &r->p.model;
  int64_t n = r->p.layout.rank_count[r->R];
  r->keep_layers = r->o.recompute == MODEL_RECOMPUTE_KEEP_ATTN ? (int)m->num_layers : 0;
  r->keep_all = r->o.recompute == MODEL_RECOMPUTE_KEEP_ATTN ? (int)r->o.keep_all : 0;
  // the CPU model keeps fp32 o and lse (model_cpu.c), the GPU model bf16 o and fp32 lse (plan/model.h)
  r->keep_bytes = r->cuda ? (model_exec_bytes_per_token(m, MODEL_RECOMPUTE_KEEP_ATTN, n, r->o.mlp_chunk) -
                             model_exec_bytes_per_token(m, MODEL_RECOMPUTE_FULL, n, r->o.mlp_chunk)) * (double)n
                          : (double)(m->num_layers - 1) * (double)n * (double)(m->num_heads * (m->head_dim + 1)) * 4;
  if (!r->keep_wanted) return SR_OK;
#if SR_HAVE_CUDA
  double used = 0, total = 0;
  if (model_cuda_memory(&used, &total, e)) return e->code;
  r->keep_free = (total - used - 3.0) * (double)(1 << 30) - train_attn_plans_need(&r->ta);
  int k = train_keep_layers_fit((int)m->num_layers, r->keep_bytes, r->keep_free), kall = 0;
  if (r->c.world > 1 && MPI_Allreduce(MPI_IN_PLACE, &k, 1, MPI_INT, MPI_MIN, r->c.mpi) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "MPI_Allreduce of the recomputation's choice failed");
  // what is left beside the kept attention outputs; the layers kept whole among those that keep them
  r->keep_all_free = r->keep_free - train_keep_layers_bytes((int)m->num_layers, r->keep_bytes, k);
  if (r->keep_all_wanted > 0) {
    kall = r->keep_all_wanted;
    if (k < kall) k = kall;  // a layer kept whole keeps attention's output with the rest
  } else if (r->keep_all_wanted < 0 && k > 0) {
    kall = train_keep_all_fit(m, k, n, r->o.mlp_chunk, r->bf16 ? 2 : 4, r->keep_all_free);
    if (r->c.world > 1 && MPI_Allreduce(MPI_IN_PLACE, &kall, 1, MPI_INT, MPI_MIN, r->c.mpi) != MPI_SUCCESS)
      return sr_internal_error(e, 0, "MPI_Allreduce of the layers kept whole failed");
  }
  if (k == 0) return SR_OK;
  if (model_cuda_set_recompute(r->t.dev, MODEL_RECOMPUTE_KEEP_ATTN, k, kall, e)) return e->code;
  r->o.recompute = r->t.opt.recompute = MODEL_RECOMPUTE_KEEP_ATTN;
  r->keep_layers = k;
  r->o.keep_layers = r->t.opt.keep_layers = k;
  r->keep_all = kall;
  r->o.keep_all = r->t.opt.keep_all = kall;
  return train_attn_refit(&r->ta, e);
#else
  return SR_OK;
#endif
}

// The layers kept whole in words (after the recomputation's text), for the opening line: how many, what they take
// on this rank (the GPU's bytes; the CPU's whole sets are fp32), and on the GPU what was free for them.
static void keep_all_text(const train_run *r, char *out, size_t size) {
  const model_config *m = &r->p.model;
  int L = (int)m->num_layers;
  int64_t n = r->p.layout.rank_count[r->R];
  const double G = (double)(1 << 30);
  double one = (double)n * model_exec_kept_whole_bytes_per_token(m, 1, n, r->o.mlp_chunk, r->bf16 ? 2 : 4);
  out[0] = 0;
  if (r->o.recompute != MODEL_RECOMPUTE_KEEP_ATTN || (!r->keep_all && !r->cuda) || r->keep_all_wanted == 0) return;
  if (!r->cuda) {  // model_cpu.c's whole sets: fp32, 3 C + 2 + 2 QD + 2 KD + 3 I + H a token
    double per = (double)(3 * m->hidden_size + 2 + 2 * m->num_heads * m->head_dim + 2 * m->num_kv_heads * m->head_dim +
                          3 * m->intermediate_size + m->num_heads) * 4;
    snprintf(out, size,
             "; kept whole in %d of %d layers (every activation kept, no rerun: %.2f GiB, --keep-activations)",
             r->keep_all, L, (double)r->keep_all * (double)n * per / G);
    return;
  }
  double took = (double)n * model_exec_kept_whole_bytes_per_token(m, r->keep_all, n, r->o.mlp_chunk, r->bf16 ? 2 : 4);
  if (r->keep_all > 0)
    snprintf(out, size, "; kept whole in %d of %d layers (every activation kept, no rerun: %.2f GiB, %.2f GiB free "
             "beside the plans and the kept attention outputs; --keep-activations)", r->keep_all, L, took / G,
             r->keep_all_free / G);
  else
    snprintf(out, size, "; no layer kept whole (one would take %.2f GiB, %.2f GiB free beside the plans and the kept "
             "attention outputs)", one / G, r->keep_all_free / G);
}

// The recomputation in words, for the opening line.
void train_run_recompute_text(const train_run *r, char *out, size_t size) {
  double gib = r->keep_bytes / (double)(1 << 30);
  int L = (int)r->p.model.num_layers;
  char whole[256];
  keep_all_text(r, whole, sizeof whole);
  if (r->o.recompute == MODEL_RECOMPUTE_OFF) snprintf(out, size, "off");
  else if (r->o.recompute == MODEL_RECOMPUTE_KEEP_ATTN && r->keep_layers < L)
    snprintf(out, size, "selective in %d of %d layers (their attention output and LSE kept: %.2f GiB; all %d would "
             "take %.2f GiB, %.2f GiB free beside the plans)%s", r->keep_layers, L,
             train_keep_layers_bytes(L, r->keep_bytes, r->keep_layers) / (double)(1 << 30), L, gib,
             r->keep_free / (double)(1 << 30), whole);
  else if (r->o.recompute == MODEL_RECOMPUTE_KEEP_ATTN)
    snprintf(out, size, "selective (each layer's attention output and LSE kept: %.2f GiB)%s", gib, whole);
  else if (r->keep_wanted)
    snprintf(out, size, "full (keeping attention's output and LSE would take %.2f GiB, %.2f GiB free beside the plans)",
             gib, r->keep_free / (double)(1 << 30));
  else snprintf(out, size, "full (--recompute-attn)");
}

// Memory after the first step: each GPU's use (printed per rank), the largest over the ranks, and the pinned host
// memory of rank 0's node (the ranks' offloaded layer inputs and FPDT chunks).
int train_run_memory_measure(train_run *r, sr_error *e) {
  double used = 0, total = 0, pinned = 0;
#if SR_HAVE_CUDA
  if (r->cuda) {
    if (model_cuda_memory(&used, &total, e)) return e->code;
    printf("train: rank %d GPU memory in use after step %lld: %.1f of %.1f GiB\n", r->R, (long long)r->t.step, used, total);
    pinned = (double)(model_cuda_pinned_bytes(r->t.dev) + dist_attn_shared_pinned_bytes());
  }
#endif
  (void)total;  // read only by the CUDA backend's line
  if (!r->cuda && r->t.model.ckpt_host)
    pinned = (double)((r->t.model.cfg.num_layers - r->t.model.slots) * r->t.model.max_tokens * r->t.model.cfg.hidden_size * 4);
  double *all = malloc(sizeof(double) * 2 * (size_t)r->c.world);
  if (!all) return sr_internal_error(e, 0, "train: out of memory");
  double mine[2] = {used, pinned};
  if (comm_host_allgather(&r->c, mine, 2, MPI_DOUBLE, all, e)) {
    free(all);
    return e->code;
  }
  r->gpu_used = r->host_pinned = 0;
  for (int k = 0; k < r->c.world; k++) {
    r->gpu_used = fmax(r->gpu_used, all[2 * k]);
    if (comm_node_of(&r->c, k) == comm_node_of(&r->c, 0)) r->host_pinned += all[2 * k + 1];
  }
  free(all);
  r->mem_measured = 1;
  return SR_OK;
}

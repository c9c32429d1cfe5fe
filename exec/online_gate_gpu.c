// online_gate_gpu.c — MoBA (moba:B:K) on the CUDA backend with its gate on the GPU (`--moba-gate gpu`, and
// `auto` wherever it applies): the selection is the host gate's (online_gate_cuda.c, online_gate_cpu.c) bit for bit
// (the contract in kernels/moba_gpu.h).
// One process a sequence (tokens in global order): every forward computes the block means, the rows' top K - 1
// and the groups' union on the device, builds the execution form there and runs it; the backward transposes
// that form on the GPU too (kernels/transpose_gpu.h). Nothing crosses to the host but the entry count of the form.
// Several ranks (ring and double ring, any layout): each rank sums its own keys per block in 128-bit fixed point
// on the device, the ranks' partial sums are all-gathered over NCCL and added on the device (integers: exact, the
// host's all-reduced sums), each rank scores its own rows against the means, and the ranks' group bit sets are
// all-gathered and ORed, so every rank holds the whole selection, as the host gate's two all-reduces leave it.
// Only the bit sets (H x groups x blocks / 8 bytes) come to the host, where the form is built and uploaded as the
// host gate does it (gate_cpu_form_from_bits, gate_cuda_upload): Q and K stay on the device and nothing is scored
// on the host. Ulysses (U > 1) is refused, as for every gated pattern on the CUDA backend.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "kernels/moba_gpu.h"
#include "kernels/transpose_gpu.h"

typedef struct {
  gating_opts g;
  int multi;               // several ranks (or rows out of global order): combined sums and bits, the form on the host
  int64_t n;               // tokens of the sequence
  uint64_t *sums;          // device [n_blocks, Hkv, d][2]: the fixed-point sums (multi: this rank's, then the total)
  double *means;           // device [n_blocks, Hkv, d]
  uint64_t *bits;          // device [H, n_groups, words]
  int64_t *pos;            // multi: device [n_q], this rank's rows' global positions
  uint64_t *gather;        // multi: device [world * the larger of 2 x sums and bits]: every rank's, all-gathered
  moba_gpu_form form;      // one process: the form built on the device
  sa_gpu_transposer *tr;
  sa_gpu_index_t ixt;      // the backward's index of the last forward (a view of tr's result)
  int ixt_valid, selected;
} gate_gpu;

void gate_gpu_release(struct dist_attn *a) {
  gate_gpu *o = a->gate_gpu;
  if (!o) return;
  cudaDeviceSynchronize();
  cudaFree(o->sums), cudaFree(o->means), cudaFree(o->bits), cudaFree(o->pos), cudaFree(o->gather);
  moba_gpu_form_free(&o->form);
  if (o->tr) sa_gpu_transposer_free(o->tr);
  free(o);
  a->gate_gpu = NULL;
}

#define GATE_STR_(x) #x
#define GATE_STR(x) GATE_STR_(x)
// Why the GPU gate cannot serve this rank's pattern (NULL: it can).
static const char *gate_gpu_refusal(const dist_attn *a, const gating_opts *g) {
  if (a->U != 1) return "Ulysses degrees above 1 (gated patterns run with ring and double-ring schedules)";
  if (g->topk > MOBA_GPU_MAX_TOPK) return "top-k above the GPU gate's " GATE_STR(MOBA_GPU_MAX_TOPK);
  return NULL;
}

// Values of the block sums and of the bit sets.
static int64_t sums_count(const dist_attn *a, const gate_gpu *o) { return sr_cdiv(o->n, o->g.block) * a->Hkv * a->d; }
static int64_t bits_count(const dist_attn *a, const gate_gpu *o) {
  return (int64_t)a->H * gating_n_groups(o->n) * sr_cdiv(sr_cdiv(o->n, o->g.block), 64);
}

int dist_attn_moba_gate_gpu(dist_attn *a, int required, sr_error *e) {
  gating_opts g;
  if (a->be != DIST_CUDA) {
    if (!required) return SR_OK;
    return sr_input_error(e, NULL, "--moba-gate", "gpu: the CPU backend gates on the host; use --backend cuda");
  }
  if (pattern_spec_estimation(a->p->spec.pattern) != PATTERN_GATED) return SR_OK;  // nothing to gate
  if (pattern_spec_gating_opts(a->p->spec.pattern, &g, e)) return e->code;
  if (g.kind != PATTERN_MOBA) return SR_OK;  // token top-k: refused on CUDA by its own set-up
  const char *why = gate_gpu_refusal(a, &g);
  if (why) return required ? sr_input_error(e, NULL, "--moba-gate", "gpu: %s", why) : SR_OK;  // auto: the host gate
  gate_gpu *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  a->gate_gpu = o;
  o->g = g, o->n = a->glay->n_tokens;
  o->multi = a->c->world > 1 || a->n_q != o->n;
  for (int64_t i = 0; i < a->n_q && !o->multi; i++) o->multi = a->qpos[i] != i;
  int64_t ns = sums_count(a, o), nbits = bits_count(a, o), W = a->c->world;
  if (cudaMalloc((void **)&o->sums, sizeof(uint64_t) * 2 * (size_t)(ns + 1)) != cudaSuccess ||
      cudaMalloc((void **)&o->means, sizeof(double) * (size_t)(ns + 1)) != cudaSuccess ||
      cudaMalloc((void **)&o->bits, sizeof(uint64_t) * (size_t)(nbits + 1)) != cudaSuccess)
    return sr_internal_error(e, 0, "moba gate: out of device memory");
  if (o->multi) {
    if (cudaMalloc((void **)&o->pos, sizeof(int64_t) * (size_t)(a->n_q + 1)) != cudaSuccess ||
        cudaMalloc((void **)&o->gather, sizeof(uint64_t) * (size_t)(W * sr_max64(2 * ns, nbits) + 1)) != cudaSuccess ||
        cudaMemcpy(o->pos, a->qpos, sizeof(int64_t) * (size_t)a->n_q, cudaMemcpyHostToDevice) != cudaSuccess)
      return sr_internal_error(e, 0, "rank %d: moba gate: out of device memory", a->c->rank);
    return SR_OK;  // the form is built on the host (gate_cpu_form_from_bits)
  }
  if (moba_gpu_form_init(&o->form, a->H, o->n, g.block, e) || sa_gpu_transposer_new(1, &o->tr, e)) return e->code;
  return SR_OK;
}

// Several ranks: this rank's partial sums and rows on the device, the ranks' sums and bit sets all-gathered and
// combined there (moba_gpu.h), then the bit sets to the host, which builds and uploads the form as the host gate.
static int forward_ranks(struct dist_attn *a, gate_gpu *o, const void *q, const void *k, const sa_gpu_index **ix,
                         const head_mask **masks, sr_error *e) {
  void *st = CS(a);
  cuda_state *s = a->cuda;
  int W = a->c->world;
  int64_t ns = sums_count(a, o), nbits = bits_count(a, o);
  if (moba_gpu_partial_sums(k, o->pos, a->n_q, o->n, a->Hkv, a->d, o->g.block, o->sums, st, e) ||
      comm_allgather(a->c, o->sums, o->gather, 16 * ns, COMM_BYTE, e) ||
      moba_gpu_sums_combine(o->gather, W, ns, o->sums, st, e) || moba_gpu_means(o->sums, ns, o->g.block, o->means, st, e) ||
      moba_gpu_select_rows(q, o->pos, a->n_q, o->n, a->H, a->Hkv, a->d, o->g.block, o->g.topk, o->means, o->bits, st,
                           e) ||
      comm_allgather(a->c, o->bits, o->gather, 8 * nbits, COMM_BYTE, e) ||
      moba_gpu_bits_combine(o->gather, W, nbits, o->bits, st, e))
    return e->code ? e->code : SR_EINTERNAL;
  o->selected = 1;
  if (gate_gpu_bits_to_host(a, e) || gate_cpu_form_from_bits(a, e) || gate_cuda_upload(a, e)) return e->code;
  *ix = s->ix_fwd.cells ? &s->ix_fwd : &s->ix, *masks = s->masks + a->h_lo[a->gidx];  // the uploaded copies
  return SR_OK;
}

int gate_gpu_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                     const head_mask **masks, sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  if (o->multi) return forward_ranks(a, o, q, k, ix, masks, e);
  void *st = CS(a);
  if (moba_gpu_block_means(k, a->n_q, a->Hkv, a->d, o->g.block, o->sums, o->means, st, e) ||
      moba_gpu_select(q, a->n_q, a->H, a->Hkv, a->d, o->g.block, o->g.topk, o->means, o->bits, st, e) ||
      moba_gpu_form_build(&o->form, o->bits, st, e))
    return e->code;
  o->ixt_valid = 0, o->selected = 1;
  *ix = &o->form.ix, *masks = o->form.masks;
  return SR_OK;
}

int gate_gpu_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt, const head_mask **masks,
                      sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  if (o->multi) return SR_OK;  // the caller's ix, ixt and masks are the forward's uploads (gate_cuda_upload)
  *ix = &o->form.ix, *masks = o->form.masks;
  if (!o->ixt_valid) {
    const sa_gpu_index_t *t;
    if (sa_gpu_transpose(o->tr, &o->form.ix.d, 0, a->n_q, a->H, a->Hkv, CS(a), &t, e)) return e->code;
    o->ixt = *t, o->ixt_valid = 1;
  }
  *ixt = &o->ixt;
  return SR_OK;
}

int gate_gpu_bits_to_host(struct dist_attn *a, sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  if (!o || !o->selected) return SR_OK;
  if (cudaStreamSynchronize(CS(a)) != cudaSuccess ||
      cudaMemcpy(gate_cpu_moba_bits(a), o->bits, sizeof(uint64_t) * (size_t)bits_count(a, o), cudaMemcpyDeviceToHost) !=
          cudaSuccess)
    return sr_internal_error(e, 0, "moba gate: copying the selection to the host failed");
  gate_cpu_mark_selected(a);
  return SR_OK;
}

#else

void gate_gpu_release(struct dist_attn *a) { (void)a; }

int dist_attn_moba_gate_gpu(dist_attn *a, int required, sr_error *e) {
  if (!required) return SR_OK;
  if (a->be != DIST_CUDA)
    return sr_input_error(e, NULL, "--moba-gate", "gpu: the CPU backend gates on the host; use --backend cuda");
  return sr_input_error(e, NULL, "--moba-gate", "gpu: this build has no CUDA");
}

int gate_gpu_bits_to_host(struct dist_attn *a, sr_error *e) {
  (void)a, (void)e;
  return SR_OK;
}

#endif

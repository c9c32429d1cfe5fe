// online_adaspa_cuda.c — pattern "adaspa-online:S[:B]" on the CUDA backend (online_adaspa.h): AdaSpa's block
// search on the GPU with kernels/vs_gpu.h's adaspa_gpu_block_mass and adaspa_gpu_select.
//
// A search, in the forward that searches, on the compute stream: the dense pass is the attention forward
// kernel over a dense index (one head's, for every head), run only for the LSE it leaves (cached; skipped when
// the cached LSE is of the same inputs); the block masses sum exp(q.k scale - LSE) per B x B block; the
// selection at the base sparsity gives every head's kept and total mass (its recall), from which the host
// sets the head-adaptive budgets (adaspa_head_sparsity) for the second selection. The mask comes to the host,
// where its execution form is built (tiles_build: BLOCK heads have no GPU conversion, kernels/vs_gpu.h's is
// for vertical-slash bit sets) and uploaded; the backward transposes it on first use. Reuse forwards run the
// uploaded index until the next search.
// A search that runs its own dense pass (the trainer's, every search: each step brings a new sample) takes the
// masses from that pass instead where the kernels allow (Hopper, B = 64 or 128; sa_fwd_block_lse): the pass, which
// has no attention output to make (the dense pass's is never used), writes each row's LSE and log-sum-exp over every
// key block, adaspa_gpu_mass_from_table sums them with that LSE, and the masses kernel does not run. SR_ADASPA_FUSED=0
// turns this off. The table (sa_block_lse_floats floats) is allocated for the pass and freed after it; where it does
// not fit, the search runs as before (attn's search line says which ran).
// One rank a sequence (R = 1, U = 1): the mass kernel reads the whole sequence, queries and keys in global
// order, from one device. The CPU backend's search rides the ring over any number of ranks (online_adaspa_cpu.c).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/online_adaspa.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "exec/dist_cuda.h"
#include "kernels/vs_gpu.h"

typedef struct {
  adaspa_common c;          // first: the shared part
  int64_t n, nb, rw;        // tokens, block rows, 64-bit words a block row
  float *lse;               // device [H, n]: the cached LSE of the last dense pass
  float *mass;              // device [H, nb, nb]
  uint64_t *mask;           // device [H, nb, rw]
  double *kt;               // device [2 H]: kept, total
  uint64_t *mask_h;         // host [H, nb, rw]
  tile_index dense_ti;      // the dense pass's execution form (one head serves every head)
  sa_gpu_index dense_ix;
  tile_index ti;            // the mask's execution form (host), and its device copies
  head_mask *hmasks;        // host [H]
  sa_gpu_index ix;
  head_mask *masks;         // device [H]
  tile_index_t tt;          // host transpose (backward), built on first use after a search
  sa_gpu_index_t ixt;
  int have_ix, have_ixt;
  double *recall, *sparsity, *kt_h;  // host [H], [H], [2 H]
  int mass_ready;           // o->mass holds the masses of the coming search (from its dense pass's table)
} adaspa_cuda;

#define AS_CUDA(call)                                                                                      \
  do {                                                                                                     \
    cudaError_t r_ = (call);                                                                               \
    if (r_ != cudaSuccess)                                                                                 \
      return sr_internal_error(e, 0, "rank %d: adaspa-online: CUDA error %s at %s:%d", a->c->rank,         \
                               cudaGetErrorString(r_), __FILE__, __LINE__);                               \
  } while (0)

// The mask's execution form: device copies freed (after the device is done with them) and the host form too.
static void form_free(adaspa_cuda *o) {
  if (o->have_ixt) sa_gpu_index_t_free(&o->ixt), tiles_transpose_free(&o->tt);
  if (o->have_ix) sa_gpu_index_free(&o->ix), sa_gpu_masks_free(o->masks, o->c.est.heads);
  if (o->hmasks) tiles_masks_free(o->hmasks, o->c.est.heads);
  if (o->ti.tile_cnt || o->ti.bar_cnt) tiles_free(&o->ti);
  memset(&o->ti, 0, sizeof o->ti);
  o->hmasks = NULL, o->masks = NULL, o->have_ix = 0, o->have_ixt = 0;
}

void adaspa_cuda_release(struct dist_attn *a) {
  adaspa_cuda *o = a->be == DIST_CUDA ? a->adaspa : NULL;
  if (!o) return;
  cudaDeviceSynchronize();
  form_free(o);
  if (o->dense_ix.cells) sa_gpu_index_free(&o->dense_ix);
  if (o->dense_ti.tile_cnt) tiles_free(&o->dense_ti);
  cudaFree(o->lse), cudaFree(o->mass), cudaFree(o->mask), cudaFree(o->kt);
  pattern_free(&o->c.est);
  free(o->mask_h), free(o->recall), free(o->sparsity), free(o->kt_h), free(o);
  a->adaspa = NULL;
}

int adaspa_cuda_setup(struct dist_attn *a, sr_error *e) {
  if (a->skipping)
    return sr_input_error(e, NULL, "--skip-empty-sends", "adaspa-online searches its mask at run time, so the shards "
                                                         "it needs are not known at plan time; run without skipping");
  if (a->R != 1 || a->U != 1)
    return sr_input_error(e, NULL, "pattern", "adaspa-online on the CUDA backend runs on one GPU a sequence (the GPU "
                                              "block-mass kernel reads the whole sequence; the job has %d ranks); the "
                                              "CPU backend searches over the ring", a->c->world);
  for (int64_t i = 0; i < a->n_q; i++)
    if (a->qpos[i] != i) return sr_input_error(e, NULL, "layout", "adaspa-online on the CUDA backend needs the tokens in order");
  adaspa_cuda *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  a->adaspa = o;
  if (adaspa_common_init(&o->c, a, e)) return e->code;
  int H = a->H;
  o->n = a->n_q, o->nb = sr_cdiv(o->n, o->c.opts.block), o->rw = sr_cdiv(o->nb, 64);
  int B = o->c.opts.block;
  if (B < 16 || B > 128 || B % 16 || o->nb > 8192)
    return sr_input_error(e, NULL, "pattern", "adaspa-online on the GPU takes blocks of 16 to 128 tokens in steps of 16 "
                                              "and at most 8192 block rows (block %d, %lld rows)", B, (long long)o->nb);
  o->mask_h = malloc(sizeof(uint64_t) * (size_t)(H * o->nb * o->rw));
  o->recall = malloc(sizeof(double) * (size_t)H), o->sparsity = malloc(sizeof(double) * (size_t)H);
  o->kt_h = malloc(sizeof(double) * (size_t)(2 * H));
  if (!o->mask_h || !o->recall || !o->sparsity || !o->kt_h) return sr_internal_error(e, 0, "out of memory");
  AS_CUDA(cudaMalloc((void **)&o->lse, sizeof(float) * (size_t)(H * o->n)));
  AS_CUDA(cudaMalloc((void **)&o->mass, sizeof(float) * (size_t)(H * o->nb * o->nb)));
  AS_CUDA(cudaMalloc((void **)&o->mask, sizeof(uint64_t) * (size_t)(H * o->nb * o->rw)));
  AS_CUDA(cudaMalloc((void **)&o->kt, sizeof(double) * (size_t)(2 * H)));
  // the dense pass's index: one dense head's (every head runs it; the causal mask alone, masks NULL)
  pattern dense;
  if (pattern_alloc(&dense, a->glay->n_tokens, 1, 1, e)) return e->code;
  int rc = tiles_build(&dense, 0, a->glay, a->group, &o->dense_ti, e);
  pattern_free(&dense);
  if (rc || sa_gpu_index_upload(&o->dense_ti, &o->dense_ix, e)) return e->code;
  return SR_OK;
}

// The dense pass: the forward kernel over the dense index into the scratch running output, for the LSE (cached).
static int dense_pass(struct dist_attn *a, adaspa_cuda *o, const void *q, const void *k, sr_error *e) {
  cuda_state *st = a->cuda;
  double t0 = sr_now();
  AS_CUDA((cudaError_t)dist_cuda_fill(st->o_run, 0.0f, a->n_q * a->nh * a->d, CS(a)));
  AS_CUDA((cudaError_t)dist_cuda_fill(o->lse, -INFINITY, a->n_q * a->nh, CS(a)));
  const void *v = (const char *)k + 2 * (size_t)(a->n_q * a->nkv * a->d);  // kv_own: K then V
  sa_shape sh = {a->n_q, a->n_q, a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
  if (sa_fwd(&sh, q, k, v, st->qpos, st->kpos[0], &o->dense_ix, 0, NULL, NULL, NULL, st->o_run, o->lse, CS(a), e))
    return e->code;
  AS_CUDA((cudaError_t)dist_cuda_fill(st->o_run, 0.0f, a->n_q * a->nh * a->d, CS(a)));  // the ring's start again
  AS_CUDA(cudaStreamSynchronize(CS(a)));
  o->c.lse_valid = 1;
  o->c.st.dense_passes++;
  o->c.st.dense_s = sr_now() - t0;
  return SR_OK;
}

// The dense pass for the LSE that also leaves the search's masses (o->mass, from its block table; no attention
// output, no P V product): 1 when it ran, 0 when it does not apply here (off Hopper, a block other than 64 or 128,
// SR_ADASPA_FUSED=0, or no memory for the table: the caller runs dense_pass and the masses kernel), -1 on an error.
static int dense_pass_masses(struct dist_attn *a, adaspa_cuda *o, const void *q, const void *k, sr_error *e) {
  sa_shape sh = {a->n_q, a->n_q, a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
  const char *env = getenv("SR_ADASPA_FUSED");
  if ((env && strcmp(env, "0") == 0) || !sa_block_lse_applies(&sh, o->c.opts.block)) return 0;
  float *blk = NULL;
  size_t bytes = sizeof(float) * (size_t)sa_block_lse_floats(a->n_q, a->nh, o->c.opts.block);
  cudaError_t r = cudaMalloc((void **)&blk, bytes);
  if (r == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // out of memory (not sticky): the search without the table
    return 0;
  }
  if (r != cudaSuccess) {
    sr_internal_error(e, 0, "rank %d: adaspa-online: CUDA error %s", a->c->rank, cudaGetErrorString(r));
    return -1;
  }
  cuda_state *st = a->cuda;
  double t0 = sr_now();
  const void *v = (const char *)k + 2 * (size_t)(a->n_q * a->nkv * a->d);  // kv_own: K then V
  // the pass without its output (nothing uses it): the rows' LSE and the table
  if (sa_fwd_block_lse(&sh, q, k, v, st->qpos, &o->dense_ix, NULL, o->lse, o->c.opts.block, blk, CS(a), e) ||
      adaspa_gpu_mass_from_table(blk, o->lse, a->n_q, a->nh, o->c.opts.block, o->mass, CS(a), e)) {
    cudaFree(blk);
    return -1;
  }
  r = cudaStreamSynchronize(CS(a));
  cudaFree(blk);
  if (r != cudaSuccess) {
    sr_internal_error(e, 0, "rank %d: adaspa-online: CUDA error %s", a->c->rank, cudaGetErrorString(r));
    return -1;
  }
  o->c.lse_valid = 1, o->mass_ready = 1;
  o->c.st.dense_passes++, o->c.st.table_searches++;
  o->c.st.dense_s = sr_now() - t0;
  return 1;
}

// Select at the given sparsities [H]: the mask on the device, kept and total on the host (kt_h).
static int select_blocks(struct dist_attn *a, adaspa_cuda *o, const double *sparsity, sr_error *e) {
  int H = a->H;
  if (adaspa_gpu_select(o->mass, H, o->nb, sparsity, o->rw, o->mask, o->kt, o->kt + H, CS(a), e)) return e->code;
  AS_CUDA(cudaMemcpy(o->kt_h, o->kt, sizeof(double) * (size_t)(2 * H), cudaMemcpyDeviceToHost));
  return SR_OK;
}

// The search: masses, the selection at the base sparsity, the budgets, the selection at them; the mask to the
// host, its execution form built and uploaded.
static int search(struct dist_attn *a, adaspa_cuda *o, const void *q, const void *k, sr_error *e) {
  int H = a->H;
  double t0 = sr_now();
  o->c.st.last_from_table = o->mass_ready;
  if (!o->mass_ready &&
      adaspa_gpu_block_mass(q, k, o->n, H, a->Hkv, a->d, a->scale, o->c.opts.block, o->lse, o->mass, CS(a), e))
    return e->code;
  o->mass_ready = 0;
  for (int h = 0; h < H; h++) o->sparsity[h] = o->c.opts.sparsity;
  if (select_blocks(a, o, o->sparsity, e)) return e->code;
  for (int h = 0; h < H; h++) o->recall[h] = o->kt_h[H + h] > 0 ? o->kt_h[h] / o->kt_h[H + h] : 1;
  double *base = o->recall;  // adaspa_head_sparsity reads recall, writes sparsity
  adaspa_head_sparsity(base, H, o->c.opts.sparsity, o->c.opts.threshold, o->sparsity);
  if (select_blocks(a, o, o->sparsity, e)) return e->code;
  for (int h = 0; h < H; h++) o->recall[h] = o->kt_h[H + h] > 0 ? o->kt_h[h] / o->kt_h[H + h] : 1;
  AS_CUDA(cudaMemcpy(o->mask_h, o->mask, sizeof(uint64_t) * (size_t)(H * o->nb * o->rw), cudaMemcpyDeviceToHost));
  double t1 = sr_now();
  for (int h = 0; h < H; h++) {
    head_pattern *hp = pattern_head(&o->c.est, 0, h);
    free(hp->vertical), free(hp->slash), free(hp->mask);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_BLOCK, hp->block = o->c.opts.block, hp->n_blocks = o->nb, hp->row_words = o->rw;
    if (!(hp->mask = malloc(sizeof(uint64_t) * (size_t)(o->nb * o->rw) + 8))) return sr_internal_error(e, 0, "out of memory");
    memcpy(hp->mask, o->mask_h + (int64_t)h * o->nb * o->rw, sizeof(uint64_t) * (size_t)(o->nb * o->rw));
  }
  form_free(o);  // the device is idle here (the selection synchronised the stream)
  // masks for this index: a head whose partial tiles keep their causal elements (B = 128) gets the causal mask,
  // the kernels' cheaper partial path, and nothing to upload
  if (tiles_build(&o->c.est, 0, a->glay, a->group, &o->ti, e) ||
      tiles_masks_build_for(&o->c.est, 0, a->glay, a->group, &o->hmasks, e) || sa_gpu_index_upload(&o->ti, &o->ix, e))
    return e->code;
  o->have_ix = 1;
  if (sa_gpu_masks_upload(o->hmasks, H, &o->masks, e)) return e->code;
  adaspa_common_searched(&o->c, H, o->recall, o->sparsity);
  o->c.st.search_s = t1 - t0, o->c.st.index_s = sr_now() - t1;
  return SR_OK;
}

int adaspa_cuda_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                        const head_mask **masks, sr_error *e) {
  adaspa_cuda *o = a->adaspa;
  if (adaspa_wants_search(&o->c)) {
    int fused = o->c.lse_valid ? 0 : dense_pass_masses(a, o, q, k, e);
    if (fused < 0) return e->code;
    if ((!o->c.lse_valid && dense_pass(a, o, q, k, e)) || search(a, o, q, k, e)) return e->code;
  } else if (adaspa_measure_dense(&o->c) && dense_pass(a, o, q, k, e)) {
    return e->code;
  }
  *ix = &o->ix;
  *masks = o->masks;
  return SR_OK;
}

int adaspa_cuda_after(struct dist_attn *a, const float *lse, sr_error *e) {
  adaspa_cuda *o = a->adaspa;
  if (!adaspa_measure_recall(&o->c)) return SR_OK;
  int64_t rows = (int64_t)a->H * o->n;
  float *h = malloc(sizeof(float) * (size_t)(2 * rows));
  if (!h) return sr_internal_error(e, 0, "out of memory");
  cudaError_t r = cudaStreamSynchronize(CS(a));
  if (r == cudaSuccess) r = cudaMemcpy(h, lse, sizeof(float) * (size_t)rows, cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) r = cudaMemcpy(h + rows, o->lse, sizeof(float) * (size_t)rows, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (int64_t i = 0; r == cudaSuccess && i < rows; i++) sum += exp((double)h[i] - (double)h[rows + i]);
  free(h);
  if (r != cudaSuccess) return sr_internal_error(e, 0, "adaspa-online: %s", cudaGetErrorString(r));
  o->c.measured_step = o->c.step, o->c.measured_sample = o->c.sample;
  o->c.reused_sum += rows > 0 ? sum / (double)rows : 1;
  o->c.st.reused_measured++;
  o->c.st.recall_reused = o->c.reused_sum / (double)o->c.st.reused_measured;
  return SR_OK;
}

int adaspa_cuda_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                         const head_mask **masks, sr_error *e) {
  adaspa_cuda *o = a->adaspa;
  if (!o->have_ix) return sr_internal_error(e, 0, "adaspa-online: a backward before any forward");
  if (!o->have_ixt) {
    if (tiles_transpose(&o->ti, 0, a->glay->rank_count[0], &o->tt, e)) return e->code;
    if (sa_gpu_index_t_upload(&o->tt, a->nh, a->nkv, &o->ixt, e)) {
      tiles_transpose_free(&o->tt);
      return e->code;
    }
    o->have_ixt = 1;
  }
  *ix = &o->ix, *ixt = &o->ixt, *masks = o->masks;
  return SR_OK;
}

#else  // no CUDA in this build: the CUDA backend is refused before any of these is reached

int adaspa_cuda_setup(struct dist_attn *a, sr_error *e) { return SR_OK; }
void adaspa_cuda_release(struct dist_attn *a) {}
int adaspa_cuda_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                        const head_mask **masks, sr_error *e) {
  return SR_OK;
}
int adaspa_cuda_after(struct dist_attn *a, const float *lse, sr_error *e) { return SR_OK; }
int adaspa_cuda_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                         const head_mask **masks, sr_error *e) {
  return SR_OK;
}

#endif

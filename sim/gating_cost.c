// gating_cost.c — the cost of a gated pattern's selection in every forward pass (moba, token-topk;
// plan/gating.h), as the executor runs it: the selection happens before the ring, after the QKV projection;
// the tile index is then built as for any sparse pattern.
//
// MoBA (Lu et al. 2025; MoBA's reference code, moba_efficient.py: key_gate_weight = mean of each chunk's
// keys, gate = einsum(q, key_gate_weight), topk over the chunks), as our GPU gate runs it (kernels/moba_gate.cu,
// exec/online_gate_gpu.c, docs/patterns.md "The gate on the GPU"; `--moba-gate auto` takes it), per rank with
// n tokens and per layer:
//   1. block sums of the local keys: one read of K, n x Hkv x d bf16 (memory bound);
//   2. (several ranks) all-gather of the ranks' partial block sums, nb x Hkv x d 128-bit fixed-point values a rank
//      (nb = N / B blocks; a rank's keys of a block are summed locally, so under striped layouts the "all-gather of
//      block means" is this one), added on the device;
//   3. scores (moba_gate.cu select_kernel: one thread a (row, head)): a row whose own block c = floor(pos / B)
//      is at most K - 1 keeps every earlier block unscored; every other row scores its c earlier blocks,
//      S = the sum of c over those rows, H x d x S multiply-adds (scored_blocks below). Two bounds, the
//      larger taken (roofline, Williams et al. 2009):
//      - FP64: each multiply-add is a separately rounded multiply and add (__dmul_rn, __dadd_rn, the host's
//        arithmetic bit for bit: no FMA), two FP64 instructions, i.e. 4 FLOPs of the FP64 peak (which counts an
//        FMA as 2), at the rate our float64 scorer sustains (estimate_fp64_rate);
//      - loads: each multiply-add loads one bf16 element of the row's query, and the 32 lanes of a warp are 32
//        rows H x d x 2 bytes apart, so every load instruction touches 32 distinct sectors: 32 L1 wavefronts, one
//        a cycle an SM (CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory": a warp's access costs
//        as many transactions as the 32-byte sectors it touches; Nsight Compute Kernel Profiling Guide, "L1TEX":
//        a wavefront is the unit processed in one cycle), i.e. one wavefront a (row, head, block, dimension).
//        A Hopper SM issues 64 FP64 FMAs a cycle (NVIDIA H100 Tensor Core GPU Architecture whitepaper), so the
//        GPU's wavefronts a second, SMs x clock, are its FP64 peak / 128 (our GPU gate is built for sm_90a
//        only). This bound is 128 / (4 / 0.44) = 14 times the FP64 one: the gate is load bound.
//      The fp64 scores stay in registers (a thread's running top K - 1), so no score is written;
//   4. (several ranks) the groups' bit sets all-gathered, H x groups x nb / 8 bytes a rank, and ORed on the device
//      (every rank then holds the whole selection, as the host gate's OR all-reduce leaves it).
// The execution form the gate's bit sets make (FULL tiles, the diagonal PARTIAL, BLOCK masks): on one rank built on
// the GPU like any index (estimate_index_build, 16 bytes an entry) and transposed on the GPU by every backward
// (gating_transpose below); on several ranks the bit sets go to the host, which builds the rank's form with its
// transposes and uploads them as the host gate does (online_gate_gpu.c: estimate_plan_build's rate an entry), and
// the backward reuses those transposes (gating_form, gating_form_on_gpu below).
// Token top-k (DeepSeek-V3.2, "DeepSeek Sparse Attention": a lightning indexer of IH heads of dimension ID in
// FP8, I(t, s) = sum_j w_j ReLU(q_j(t) . k(s)); DeepGEMM's fp8_mqa_logits writes the fp32 logits
// [rows, keys] that the top-k reads), per rank and layer:
//   1. the indexer's projections: a GEMM of 2 x n x hidden x (IH ID + ID + IH) FLOPs (queries, the one key,
//      the head weights; DSA projects from the query latent, here from the hidden state);
//   2. all-gather of every token's indexer key, N x ID bytes in FP8;
//   3. logits: 2 x IH x ID FLOPs a causal (row, key) pair at the FP8 tensor rate, P = sum over the rank's
//      rows of (pos + 1) pairs, and the fp32 logits written and read once by the top-k (memory bound).
// The indexer's own training (DSA's KL loss on its logits) is not charged: the executor's indexer has no
// weights to train.
#include <math.h>
#include <stdlib.h>

#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/step_ctx.h"

// sum over p in [0, n) of floor(p / B)
static double floor_prefix(int64_t n, int64_t B) {
  int64_t m = n / B;
  return (double)B * (double)m * (double)(m - 1) / 2 + (double)m * (double)(n - m * B);
}

// Per rank: its rows' candidate blocks (sum of floor(pos / B)) and causal keys (sum of pos + 1).
static void rank_sums(const layout *l, int r, int64_t B, double *blocks, double *keys) {
  *blocks = 0, *keys = 0;
  for (int64_t x = l->rank_run_begin[r]; x < l->rank_run_begin[r + 1]; x++) {
    int64_t g = l->runs[x].global, n = l->runs[x].len;
    if (B > 0) *blocks += floor_prefix(g + n, B) - floor_prefix(g, B);
    *keys += (double)n * (double)(2 * g + n + 1) / 2;
  }
}

// Per rank: the blocks its rows score, the sum of floor(pos / B) over its rows with floor(pos / B) > K - 1
// (a row of an earlier block keeps every earlier block unscored: moba_gate.cu select_kernel, gating_select.c).
static double scored_blocks(const layout *l, int r, int64_t B, int32_t topk) {
  int64_t from = (int64_t)(topk > 1 ? topk : 1) * B;  // the first position whose own block exceeds K - 1
  double s = 0;
  for (int64_t x = l->rank_run_begin[r]; x < l->rank_run_begin[r + 1]; x++) {
    int64_t g = l->runs[x].global, n = l->runs[x].len, a = g > from ? g : from;
    if (g + n > a) s += floor_prefix(g + n, B) - floor_prefix(a, B);
  }
  return topk > 1 ? s : 0;
}

int gating_layer(sim_ctx *x, int layer, const int32_t *qkv, int32_t *out, sr_error *e) {
  gating_opts g;
  if (pattern_spec_gating_opts(x->p->spec.pattern, &g, e)) return e->code;
  const layout *l = &x->p->layout;
  const model_config *m = x->m;
  const gpu_desc *gpu = &x->c->gpu;
  int W = x->W;
  double H = (double)m->num_heads, Hkv = (double)m->num_kv_heads, d = (double)m->head_dim, N = (double)l->n_tokens;
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  double *dur = malloc((size_t)W * sizeof *dur);
  if (!dur) return sr_internal_error(e, 0, "sim: out of memory");
  int rc;
  if (g.kind == PATTERN_MOBA) {
    double nb = ceil(N / g.block), sums = nb * Hkv * d * 16;
    for (int r = 0; r < W; r++) dur[r] = cost_mem(gpu, (double)l->rank_count[r] * Hkv * d * 2);
    if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, qkv, out, e))) goto done;
    ctx_add_comm(x, sums * W * (W - 1));  // every rank receives the others' partial sums
    if ((rc = ctx_collective(x, W > 1 ? cost_allgather(W, W * sums, gbps, lat) : 0, PHASE_COLLECTIVE, layer, out, x->c2, e)))
      goto done;
    double fp64 = estimate_fp64_rate(x), wavefronts = gpu->fp64_tflops * 1e12 / 128;  // (3) above
    for (int r = 0; r < W; r++) {
      double madds = H * d * scored_blocks(l, r, g.block, g.topk);
      dur[r] = fmax(fp64 > 0 ? 4 * madds / fp64 : 0, wavefronts > 0 ? madds / wavefronts : 0);
    }
    if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e))) goto done;
    if (W > 1) {
      double bits = H * ceil(N / TILE) * ceil(nb / 64) * 8;
      ctx_add_comm(x, bits * W * (W - 1));
      rc = ctx_collective(x, cost_allgather(W, W * bits, gbps, lat), PHASE_COLLECTIVE, layer, out, out, e);
    }
    goto done;
  }
  double ih = g.ih, id = g.id, fp8 = gpu->fp8_tflops * 1e12 * (gpu->eff_gemm > 0 ? gpu->eff_gemm : 1);
  for (int r = 0; r < W; r++)
    dur[r] = cost_gemm(gpu, 2 * (double)l->rank_count[r] * (double)m->hidden_size * (ih * id + id + ih));
  if ((rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, qkv, out, e))) goto done;
  ctx_add_comm(x, N * id * (W - 1));  // every rank receives the keys of the others
  if ((rc = ctx_collective(x, cost_allgather(W, N * id, gbps, lat), PHASE_COLLECTIVE, layer, out, x->c2, e))) goto done;
  for (int r = 0; r < W; r++) {
    double cand, pairs;
    rank_sums(l, r, 0, &cand, &pairs);
    dur[r] = (fp8 > 0 ? 2 * ih * id * pairs / fp8 : 0) + cost_mem(gpu, 2 * pairs * 4);
  }
  rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_ESTIMATE, layer, -1, x->c2, out, e);
done:
  free(dur);
  return rc;
}

// The backward's transposed index of the gate's form, built on the GPU every pass (online_gate_gpu.c
// gate_gpu_backward, kernels/transpose_gpu.cu): each entry's (head, KV tile, query tile) key and its value
// gathered, sorted by a radix sort of pairs, then split into the arrays the backward reads: memory passes of 16
// bytes an entry as an index build (estimate_index_build) and the sort (estimate_sort_pairs).
double gating_transpose(const sim_ctx *x, double entries) {
  return estimate_index_build(x, entries) + estimate_sort_pairs(x, entries);
}

int gating_form_on_gpu(const sim_ctx *x) { return x->W == 1; }

double gating_form(const sim_ctx *x, double entries) {
  return gating_form_on_gpu(x) ? estimate_index_build(x, entries) : estimate_plan_build(x, entries);
}

// online_gate_cpu.c — gated patterns on the CPU backend (plan/gating.h): MoBA's block gating (moba:B:K) and
// token top-k (token-topk:K[:IH:ID]) selected from this forward's Q and K, then run as tiles and bars through
// the CPU reference kernels; the backward reuses the forward's selection (the gate is not differentiated,
// as in MoBA's and DSA's training: top-k passes no gradient).
//
// Per forward, MoBA: each rank sums its keys per (block, KV head) in exact fixed point and the sums are
// all-reduced (the "small all-gather" of block means: n_blocks x kv_heads x head_dim values, whichever ranks
// hold a block's keys), then each rank scores its own rows against the means, keeps each row's top K - 1
// earlier blocks and ORs them into its groups' bit sets, which a bitwise-OR all-reduce unites (under
// striped layouts a group's rows sit on several ranks). Every rank then holds the whole selection, the one a
// single process computes, bit for bit. Token top-k: each rank computes its tokens' indexer keys, an all-gather
// (a sum all-reduce of a zeroed buffer: x + 0 is exact) gives every rank all of them, and each rank selects its
// own rows' top K keys; a rank's tiles need only its own rows, so the rows are gathered only when the whole
// pattern is asked for (dist_attn_pattern_used). Ring and double ring only (U == 1), no skipping (the shards a
// selection needs are known only at run time).
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

typedef struct {
  gating_opts g;
  moba_shape ms;
  tokens_shape ts;
  vs_acc *sums;            // MoBA: [n_blocks * Hkv * d]
  uint64_t *bits;          // MoBA: [H * n_groups * words]
  float *ki, *ki_all;      // token top-k: this rank's indexer keys [n_q * id], every token's [N * id]
  int32_t *keys, *cnt;     // token top-k: this rank's rows' selections [n_q * topk], [n_q]
  pattern est;             // one layer: the last forward's selection (token top-k: this rank's rows)
  int estimated;
  MPI_Datatype acc_type;
  MPI_Op acc_add;
} gate_cpu;

// Element-wise 128-bit addition (two's complement: the same bits as a signed sum), exact and associative.
static void acc_add_fn(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  vs_acc x, y;
  for (int i = 0; i < *len; i++) {
    memcpy(&x, (char *)in + 16 * (size_t)i, 16);
    memcpy(&y, (char *)inout + 16 * (size_t)i, 16);
    y += x;
    memcpy((char *)inout + 16 * (size_t)i, &y, 16);
  }
}

void gate_cpu_release(struct dist_attn *a) {
  gate_cpu *o = a->gate_cpu;
  if (!o) return;
  if (o->acc_add != MPI_OP_NULL) MPI_Op_free(&o->acc_add);
  if (o->acc_type != MPI_DATATYPE_NULL) MPI_Type_free(&o->acc_type);
  pattern_free(&o->est);
  free(o->sums), free(o->bits), free(o->ki), free(o->ki_all), free(o->keys), free(o->cnt), free(o);
  a->gate_cpu = NULL;
}

static int too_big(const char *what, int64_t n, sr_error *e) {
  return sr_input_error(e, NULL, "--seq", "%s on the CPU backend combines %lld values in one MPI call: at most %d",
                        what, (long long)n, INT_MAX);
}

int gate_cpu_setup(struct dist_attn *a, sr_error *e) {
  if (a->skipping)
    return sr_input_error(e, NULL, "--skip-empty-sends", "a gated pattern is selected at run time, so the shards it "
                                                         "needs are not known at plan time; run without skipping");
  if (a->U > 1) return sr_input_error(e, NULL, "pattern", "gated patterns run with ring and double-ring schedules");
  gate_cpu *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  o->acc_type = MPI_DATATYPE_NULL, o->acc_add = MPI_OP_NULL;
  a->gate_cpu = o;
  if (pattern_spec_gating_opts(a->p->spec.pattern, &o->g, e)) return e->code;
  int64_t N = a->glay->n_tokens, ng = gating_n_groups(N);
  if (pattern_alloc(&o->est, N, 1, a->H, e)) return e->code;
  if (o->g.kind == PATTERN_MOBA) {
    o->ms = (moba_shape){a->H, a->Hkv, a->d, N, o->g.block, o->g.topk};
    int64_t nsum = sr_cdiv(N, o->g.block) * a->Hkv * a->d, nbits = (int64_t)a->H * ng * moba_bits_words(&o->ms);
    if (nsum > INT_MAX || nbits > INT_MAX) return too_big("moba", sr_max64(nsum, nbits), e);
    o->sums = malloc(sizeof(vs_acc) * (size_t)(nsum + 1));
    o->bits = malloc(sizeof(uint64_t) * (size_t)(nbits + 1));
    if (!o->sums || !o->bits) return sr_internal_error(e, 0, "out of memory");
    if (MPI_Type_contiguous(16, MPI_BYTE, &o->acc_type) != MPI_SUCCESS || MPI_Type_commit(&o->acc_type) != MPI_SUCCESS ||
        MPI_Op_create(acc_add_fn, 1, &o->acc_add) != MPI_SUCCESS)
      return sr_internal_error(e, 0, "rank %d: moba: cannot create the MPI fixed-point sum", a->c->rank);
    return SR_OK;
  }
  o->ts = (tokens_shape){a->H, a->Hkv, a->d, N, o->g.topk, o->g.ih, o->g.id};
  if (N * o->g.id > INT_MAX) return too_big("token top-k", N * o->g.id, e);
  o->ki = malloc(sizeof(float) * (size_t)(a->n_q * o->g.id + 1));
  o->ki_all = malloc(sizeof(float) * (size_t)(N * o->g.id + 1));
  o->keys = malloc(sizeof(int32_t) * (size_t)(a->n_q * o->g.topk + 1));
  o->cnt = malloc(sizeof(int32_t) * (size_t)(a->n_q + 1));
  if (!o->ki || !o->ki_all || !o->keys || !o->cnt) return sr_internal_error(e, 0, "out of memory");
  return SR_OK;
}

static int moba_forward(struct dist_attn *a, gate_cpu *o, const float *q, const float *k, sr_error *e) {
  int64_t N = a->glay->n_tokens, nsum = sr_cdiv(N, o->g.block) * a->Hkv * a->d;
  int64_t nbits = (int64_t)a->H * gating_n_groups(N) * moba_bits_words(&o->ms);
  MPI_Comm mc = a->c->mpi;
  memset(o->sums, 0, sizeof(vs_acc) * (size_t)nsum);
  memset(o->bits, 0, sizeof(uint64_t) * (size_t)nbits);
  moba_block_sums(&o->ms, k, a->qpos, a->n_q, o->sums);
  if (MPI_Allreduce(MPI_IN_PLACE, o->sums, (int)nsum, o->acc_type, o->acc_add, mc) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: moba: combining the block sums failed", a->c->rank);
  moba_select_rows(&o->ms, o->sums, q, a->qpos, a->n_q, o->bits);
  if (MPI_Allreduce(MPI_IN_PLACE, o->bits, (int)nbits, MPI_UINT64_T, MPI_BOR, mc) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: moba: uniting the groups' selections failed", a->c->rank);
  return moba_heads_from_bits(&o->ms, o->bits, &o->est, 0, e);
}

static int tokens_forward(struct dist_attn *a, gate_cpu *o, const float *q, const float *k, sr_error *e) {
  int64_t N = a->glay->n_tokens, id = o->g.id;
  tokens_indexer_keys(&o->ts, k, a->n_q, o->ki);
  memset(o->ki_all, 0, sizeof(float) * (size_t)(N * id));
  for (int64_t i = 0; i < a->n_q; i++) memcpy(o->ki_all + a->qpos[i] * id, o->ki + i * id, sizeof(float) * (size_t)id);
  if (MPI_Allreduce(MPI_IN_PLACE, o->ki_all, (int)(N * id), MPI_FLOAT, MPI_SUM, a->c->mpi) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: token top-k: gathering the indexer keys failed", a->c->rank);
  if (tokens_select_rows(&o->ts, o->ki_all, q, a->qpos, a->n_q, o->keys, o->cnt, e)) return e->code;
  return tokens_heads_from_rows(&o->ts, o->keys, o->cnt, a->qpos, a->n_q, &o->est, 0, e);
}

// This forward's execution form from o->est (the backward reuses it).
static int form_build(struct dist_attn *a, gate_cpu *o, sr_error *e) {
  o->estimated = 1;
  if (a->masks) tiles_masks_free(a->masks, a->H);
  a->masks = NULL;
  if (a->ti.tile_cnt || a->ti.bar_cnt) tiles_free(&a->ti);
  memset(&a->ti, 0, sizeof a->ti);
  if (tiles_build(&o->est, 0, a->glay, a->group, &a->ti, e) || tiles_masks_build(&o->est, 0, &a->masks, e)) return e->code;
  a->ti_view = a->ti;  // U == 1: this rank computes every head
  return SR_OK;
}

int gate_cpu_forward(struct dist_attn *a, const float *q, const float *k, sr_error *e) {
  gate_cpu *o = a->gate_cpu;
  int rc = o->g.kind == PATTERN_MOBA ? moba_forward(a, o, q, k, e) : tokens_forward(a, o, q, k, e);
  return rc ? rc : form_build(a, o, e);
}

int gate_cpu_form_from_bits(struct dist_attn *a, sr_error *e) {
  gate_cpu *o = a->gate_cpu;
  if (moba_heads_from_bits(&o->ms, o->bits, &o->est, 0, e)) return e->code;
  return form_build(a, o, e);
}

uint64_t *gate_cpu_moba_bits(struct dist_attn *a) { return ((gate_cpu *)a->gate_cpu)->bits; }

void gate_cpu_mark_selected(struct dist_attn *a) { ((gate_cpu *)a->gate_cpu)->estimated = 1; }

// Every rank's rows of the last token top-k selection, gathered: the whole layer's selection into pat.
static int tokens_gather(struct dist_attn *a, gate_cpu *o, pattern *pat, sr_error *e) {
  int W = a->c->world, K = o->g.topk;
  int *n_of = malloc(sizeof(int) * (size_t)W), *at = malloc(sizeof(int) * (size_t)W);
  int *kn = malloc(sizeof(int) * (size_t)W), *kat = malloc(sizeof(int) * (size_t)W);
  int64_t N = a->glay->n_tokens;
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(N + 1));
  int32_t *cnt = malloc(sizeof(int32_t) * (size_t)(N + 1)), *keys = malloc(sizeof(int32_t) * (size_t)(N * K + 1));
  int mine = (int)a->n_q, rc = SR_OK;
  if (!n_of || !at || !kn || !kat || !pos || !cnt || !keys) rc = sr_internal_error(e, 0, "out of memory");
  if (!rc && N * K > INT_MAX) rc = too_big("token top-k's gathered selection", N * K, e);
  if (!rc && MPI_Allgather(&mine, 1, MPI_INT, n_of, 1, MPI_INT, a->c->mpi) != MPI_SUCCESS) rc = SR_EINTERNAL;
  for (int r = 0, x = 0; !rc && r < W; x += n_of[r], r++) at[r] = x, kn[r] = n_of[r] * K, kat[r] = x * K;
  if (!rc && (MPI_Allgatherv(a->qpos, mine, MPI_INT64_T, pos, n_of, at, MPI_INT64_T, a->c->mpi) != MPI_SUCCESS ||
              MPI_Allgatherv(o->cnt, mine, MPI_INT32_T, cnt, n_of, at, MPI_INT32_T, a->c->mpi) != MPI_SUCCESS ||
              MPI_Allgatherv(o->keys, mine * K, MPI_INT32_T, keys, kn, kat, MPI_INT32_T, a->c->mpi) != MPI_SUCCESS))
    rc = sr_internal_error(e, 0, "rank %d: token top-k: gathering the selection failed", a->c->rank);
  if (!rc) rc = tokens_heads_from_rows(&o->ts, keys, cnt, pos, N, pat, a->layer, e);
  free(n_of), free(at), free(kn), free(kat), free(pos), free(cnt), free(keys);
  return rc;
}

int gate_cpu_pattern_used(struct dist_attn *a, pattern *pat, sr_error *e) {
  gate_cpu *o = a->gate_cpu;
  if (pat->heads != a->H || pat->n_tokens != o->est.n_tokens || a->layer >= pat->layers)
    return sr_input_error(e, NULL, "pattern", "shape does not match the gated selection");
  if (!o->estimated) return SR_OK;  // no forward yet: the plan's stand-in is what would run
  if (o->g.kind == PATTERN_TOKENS) return tokens_gather(a, o, pat, e);
  moba_shape s = o->ms;
  return moba_heads_from_bits(&s, o->bits, pat, a->layer, e);
}

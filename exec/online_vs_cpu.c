// online_vs_cpu.c — pattern "vs-online:P" on the CPU backend: MTraining's vertical-slash estimation from the
// current Q and K in every forward pass, with the CUDA path's settings (online_vs_cuda.c: the last 64 queries
// of the whole sequence, then pattern_spec_online_opts: top-p P with cap 4096, or the fixed budget of
// vs-online:topk:V:S; no forced sinks or window), through the float64 reference passes
// of plan/pattern_estimate.h distributed over the ranks' keys.
//
// Per forward: the estimation queries are gathered to every rank (each rank writes the rows it holds into a
// zeroed buffer, then a float sum all-reduce: x + 0 is exact); each rank runs the three passes over its own
// keys, combining after each (row maxima: max; row sums, column and diagonal sums: 128-bit fixed-point add,
// exact), so every rank selects the same pattern, bit for bit what one process gets over all keys. The
// selection becomes this rank's tile index and element masks for the ring; the backward reuses them.
// Ring and double ring only (U == 1, as on CUDA); skipping empty sends is refused (decided at plan time).
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/online_adaspa.h"
#include "exec/online_vs_cuda.h"
#include "plan/pattern_estimate.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

typedef struct {
  vs_est_opts opts;
  int32_t n_est;           // estimation queries: min(64, N)
  float *q_est;            // [n_est, H, d]
  int64_t *qpos_est;       // [n_est] the last n_est positions
  double *row_max;         // [H * n_est]
  vs_acc *row_sum;         // [H * n_est]
  vs_acc *scores;          // [2 * H * N]: column sums, then diagonal sums
  pattern est;             // one layer: the last forward's estimate
  int estimated;           // est holds an estimate
  MPI_Datatype acc_type;   // one vs_acc (16 bytes)
  MPI_Op acc_add;          // exact 128-bit addition
} online_cpu;

#define ONLINE_CPU_QUERIES 64  // MTraining / MInference estimate from the last 64 queries (VS_GPU_MAX_QUERIES)

// MPI reduction: element-wise 128-bit fixed-point addition (exact and associative, so the sum is the
// same for any number of ranks and any order).
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

void online_cpu_release(struct dist_attn *a) {
  online_cpu *o = a->online_cpu;
  if (!o) return;
  if (o->acc_add != MPI_OP_NULL) MPI_Op_free(&o->acc_add);
  if (o->acc_type != MPI_DATATYPE_NULL) MPI_Type_free(&o->acc_type);
  pattern_free(&o->est);
  free(o->q_est), free(o->qpos_est), free(o->row_max), free(o->row_sum), free(o->scores), free(o);
  a->online_cpu = NULL;
}

int dist_attn_estimate_online(dist_attn *a, sr_error *e) {
  if (a->be == DIST_CPU && pattern_spec_estimation(a->p->spec.pattern) == PATTERN_GATED && !a->gate_cpu)
    return gate_cpu_setup(a, e);
  if (a->be != DIST_CPU || pattern_spec_estimation(a->p->spec.pattern) != PATTERN_ONLINE || a->online_cpu) return SR_OK;
  if (a->skipping)
    return sr_input_error(e, NULL, "--skip-empty-sends", "vs-online estimates the pattern at run time, so the shards "
                                                         "it needs are not known at plan time; run without skipping");
  if (a->U > 1)
    return sr_input_error(e, NULL, "pattern", "vs-online runs with ring and double-ring schedules on the CPU backend");
  if (2 * (int64_t)a->H * a->glay->n_tokens > INT_MAX)  // MPI counts are int; the CPU backend runs small shapes
    return sr_input_error(e, NULL, "--seq", "vs-online on the CPU backend combines 2 x heads x seq scores in one "
                                            "MPI call: at most %d, asked for %lld", INT_MAX,
                          (long long)(2 * (int64_t)a->H * a->glay->n_tokens));
  online_cpu *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  o->acc_type = MPI_DATATYPE_NULL, o->acc_add = MPI_OP_NULL;
  a->online_cpu = o;
  int64_t N = a->glay->n_tokens, H = a->H;
  if (pattern_spec_online_opts(a->p->spec.pattern, &o->opts, e)) return e->code;
  o->n_est = (int32_t)sr_min64(ONLINE_CPU_QUERIES, N);
  o->q_est = malloc(sizeof(float) * (size_t)(o->n_est * H * a->d + 1));
  o->qpos_est = malloc(sizeof(int64_t) * (size_t)(o->n_est + 1));
  o->row_max = malloc(sizeof(double) * (size_t)(H * o->n_est + 1));
  o->row_sum = malloc(sizeof(vs_acc) * (size_t)(H * o->n_est + 1));
  o->scores = malloc(sizeof(vs_acc) * (size_t)(2 * H * N + 1));
  if (!o->q_est || !o->qpos_est || !o->row_max || !o->row_sum || !o->scores) return sr_internal_error(e, 0, "out of memory");
  for (int32_t i = 0; i < o->n_est; i++) o->qpos_est[i] = N - o->n_est + i;
  if (pattern_alloc(&o->est, N, 1, a->H, e)) return e->code;
  if (MPI_Type_contiguous(16, MPI_BYTE, &o->acc_type) != MPI_SUCCESS || MPI_Type_commit(&o->acc_type) != MPI_SUCCESS ||
      MPI_Op_create(acc_add_fn, 1, &o->acc_add) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: online VS: cannot create the MPI fixed-point sum", a->c->rank);
  return SR_OK;
}

int online_cpu_forward(struct dist_attn *a, const float *q, const float *k, sr_error *e) {
  online_cpu *o = a->online_cpu;
  int64_t N = a->glay->n_tokens, H = a->H, first = N - o->n_est, row = H * a->d;
  memset(o->q_est, 0, sizeof(float) * (size_t)(o->n_est * row));
  for (int64_t i = 0; i < a->n_q; i++)
    if (a->qpos[i] >= first) memcpy(o->q_est + (a->qpos[i] - first) * row, q + i * row, sizeof(float) * (size_t)row);
  vs_est_query qs = {a->H, a->Hkv, a->d, o->n_est, N, a->scale, o->q_est, o->qpos_est};
  for (int64_t i = 0; i < H * o->n_est; i++) o->row_max[i] = -INFINITY;
  memset(o->row_sum, 0, sizeof(vs_acc) * (size_t)(H * o->n_est));
  memset(o->scores, 0, sizeof(vs_acc) * (size_t)(2 * H * N));
  int cnt_q = (int)(o->n_est * row), cnt_r = (int)(H * o->n_est), cnt_s = (int)(2 * H * N);
  if (comm_host_allreduce(a->c, o->q_est, cnt_q, MPI_FLOAT, MPI_SUM, e)) return e->code;  // the estimation queries
  vs_est_rowmax(&qs, k, a->qpos, a->n_q, o->row_max);
  if (comm_host_allreduce(a->c, o->row_max, cnt_r, MPI_DOUBLE, MPI_MAX, e)) return e->code;
  vs_est_rowsum(&qs, k, a->qpos, a->n_q, o->row_max, o->row_sum);
  if (comm_host_allreduce(a->c, o->row_sum, cnt_r, o->acc_type, o->acc_add, e)) return e->code;
  vs_est_scores(&qs, k, a->qpos, a->n_q, o->row_max, o->row_sum, o->scores, o->scores + H * N);
  if (comm_host_allreduce(a->c, o->scores, cnt_s, o->acc_type, o->acc_add, e)) return e->code;
  if (vs_est_select(o->scores, o->scores + H * N, &qs, &o->opts, &o->est, 0, e)) return e->code;
  o->estimated = 1;
  // this forward's execution form (the backward reuses it)
  if (a->masks) tiles_masks_free(a->masks, a->H);
  a->masks = NULL;
  if (a->ti.tile_cnt || a->ti.bar_cnt) tiles_free(&a->ti);
  memset(&a->ti, 0, sizeof a->ti);
  if (tiles_build(&o->est, 0, a->glay, a->group, &a->ti, e) || tiles_masks_build(&o->est, 0, &a->masks, e)) return e->code;
  a->ti_view = a->ti;  // U == 1: this rank computes every head
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// the pattern the last forward ran

// Copy head src into dst (dst's arrays released first).
static int head_copy(head_pattern *dst, const head_pattern *src, sr_error *e) {
  free(dst->vertical), free(dst->slash), free(dst->mask);
  *dst = *src;
  dst->vertical = NULL, dst->slash = NULL, dst->mask = NULL;
  if (src->vertical && !(dst->vertical = malloc(sizeof(int32_t) * (size_t)src->n_vertical + 4))) goto oom;
  if (src->slash && !(dst->slash = malloc(sizeof(int32_t) * (size_t)src->n_slash + 4))) goto oom;
  if (src->mask && !(dst->mask = malloc(sizeof(uint64_t) * (size_t)(src->n_blocks * src->row_words) + 8))) goto oom;
  if (src->vertical) memcpy(dst->vertical, src->vertical, sizeof(int32_t) * (size_t)src->n_vertical);
  if (src->slash) memcpy(dst->slash, src->slash, sizeof(int32_t) * (size_t)src->n_slash);
  if (src->mask) memcpy(dst->mask, src->mask, sizeof(uint64_t) * (size_t)(src->n_blocks * src->row_words));
  return SR_OK;
oom:
  free(dst->vertical), free(dst->slash), free(dst->mask);
  memset(dst, 0, sizeof *dst);
  return sr_internal_error(e, 0, "out of memory");
}

int dist_attn_pattern_used(dist_attn *a, pattern *pat, sr_error *e) {
  if (a->adaspa) return adaspa_pattern_used(a, pat, e);  // adaspa-online, either backend: the mask in use
  if (a->gate_cpu) return gate_gpu_bits_to_host(a, e) ? e->code : gate_cpu_pattern_used(a, pat, e);
  online_cpu *o = a->online_cpu;
  if (!o) return online_vs_pattern_used(a, pat, e);  // CUDA: downloaded from the device
  if (pat->heads != a->H || pat->n_tokens != o->est.n_tokens || a->layer >= pat->layers)
    return sr_input_error(e, NULL, "pattern", "shape does not match the online estimation");
  if (!o->estimated) return SR_OK;  // no forward yet: the plan's pattern is what would run
  for (int h = 0; h < a->H; h++)
    if (head_copy(pattern_head(pat, a->layer, h), pattern_head(&o->est, 0, h), e)) return e->code;
  return SR_OK;
}

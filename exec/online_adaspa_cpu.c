// online_adaspa_cpu.c — pattern "adaspa-online:S[:B]" on the CPU backend (online_adaspa.h): AdaSpa's block search
// riding the ring, exact, through the float64 passes of plan/pattern_estimate.h ("AdaSpa block search over ranks").
//
// A search walks the forward's ring (ring_walk: the same transfers as the attention, shard by shard): the dense
// pass is two walks (row maxima, then fixed-point row sums: this rank's rows see every key, so their LSE needs no
// combining), the search one more (this rank's rows' fixed-point masses against each shard). The masses are
// summed over the ranks (a block row may hold rows of several ranks), exact in 128-bit fixed point; each rank
// selects its share of the block rows at the base sparsity, and an all-reduce of every head's kept and total
// mass gives each head's recall, so every rank computes the same budgets and the same masks, bit for bit what one
// process selects over all keys. The mask in use is one BLOCK layer; it becomes this rank's tile index and
// element masks (tiles_build), which the forward and backward run until the next search.
// Ring and double ring only (U == 1); skipping empty sends is refused (decided at plan time, before any mask).
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/online_adaspa.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// what both backends share

int adaspa_common_init(adaspa_common *c, const struct dist_attn *a, sr_error *e) {
  if (pattern_spec_adaspa_opts(a->p->spec.pattern, &c->opts, e)) return e->code;
  c->every = a->p->spec.search_every > 0 ? a->p->spec.search_every : 1;
  c->searched_step = c->measured_step = INT64_MIN;
  c->st.recall_reused = -1;
  return pattern_alloc(&c->est, a->glay->n_tokens, 1, a->H, e);
}

int adaspa_wants_search(adaspa_common *c) {
  if (c->flags & DIST_SEARCH_NEW_INPUTS) c->lse_valid = 0;
  int searched = c->searched_step == c->step && c->searched_sample == c->sample;  // this sample's forwards did
  int want = !c->has_mask || (!searched && ((c->flags & DIST_SEARCH_FORCE) || c->step % c->every == 0));
  c->reusing = !want;
  if (!want) c->st.reuses++;
  return want;
}

// Is this the first forward of its (step, sample) since the last search, and since the last measure?
static int new_since_search(const adaspa_common *c) {
  return !(c->step == c->searched_step && c->sample == c->searched_sample);
}
static int new_since_measure(const adaspa_common *c) {
  return !(c->step == c->measured_step && c->sample == c->measured_sample);
}

int adaspa_measure_dense(const adaspa_common *c) {
  return c->reusing && !c->lse_valid && (c->flags & DIST_SEARCH_MEASURE_REUSE) && new_since_search(c) &&
         new_since_measure(c);
}

int adaspa_measure_recall(const adaspa_common *c) {
  return c->reusing && c->lse_valid && new_since_search(c) && new_since_measure(c);
}

void adaspa_common_searched(adaspa_common *c, int heads, const double *recall, const double *sparsity) {
  double r = 0, s = 0;
  for (int h = 0; h < heads; h++) r += recall[h], s += sparsity[h];
  c->st.recall_search = r / heads, c->st.sparsity_mean = s / heads;
  c->st.searches++;
  c->has_mask = 1, c->searched_step = c->step, c->searched_sample = c->sample;
}

void dist_attn_search_sample(dist_attn *a, int64_t step, int64_t sample, int flags) {
  adaspa_common *c = a->adaspa;
  if (!c || (step == c->step && sample == c->sample && flags == c->flags)) return;  // again: a recomputation
  c->step = step, c->sample = sample, c->flags = flags;
  if (flags & DIST_SEARCH_FORCE) c->searched_step = INT64_MIN;
}

void dist_attn_search_step(dist_attn *a, int64_t step, int flags) { dist_attn_search_sample(a, step, 0, flags); }

int dist_attn_search_stats(const dist_attn *a, dist_search_stats *out, sr_error *e) {
  const adaspa_common *c = a->adaspa;
  if (!c) return sr_input_error(e, NULL, "pattern", "'%s' is not searched (adaspa-online:S[:B])", a->p->spec.pattern);
  *out = c->st;
  return SR_OK;
}

int adaspa_pattern_used(struct dist_attn *a, pattern *pat, sr_error *e) {
  adaspa_common *c = a->adaspa;
  if (pat->heads != a->H || pat->n_tokens != c->est.n_tokens || a->layer >= pat->layers)
    return sr_input_error(e, NULL, "pattern", "shape does not match the block search");
  if (!c->has_mask) return SR_OK;  // no forward yet: the plan's stand-in is what would run
  for (int h = 0; h < a->H; h++) {
    const head_pattern *s = pattern_head(&c->est, 0, h);
    head_pattern *d = pattern_head(pat, a->layer, h);
    free(d->vertical), free(d->slash), free(d->mask);
    *d = *s;
    d->vertical = d->slash = NULL;
    size_t bytes = sizeof(uint64_t) * (size_t)(s->n_blocks * s->row_words);
    if (!(d->mask = malloc(bytes + 8))) {
      memset(d, 0, sizeof *d);
      return sr_internal_error(e, 0, "out of memory");
    }
    memcpy(d->mask, s->mask, bytes);
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// the CPU search

typedef struct {
  adaspa_common c;          // first: the shared part
  adaspa_query qs;          // this rank's rows (q set per search)
  int64_t nb;
  double *row_max, *lse;    // [H * n_q]; lse: the cached LSE of the last dense pass
  vs_acc *row_sum;          // [H * n_q]
  vs_acc *mass;             // [H, nb, nb]
  vs_acc *kt;               // [2 H] kept, then total mass at the base sparsity
  double *recall, *sparsity;  // [H]
  MPI_Datatype acc_type;    // one vs_acc (16 bytes)
  MPI_Op acc_add;           // exact 128-bit addition
} adaspa_cpu;

// MPI reduction: element-wise 128-bit fixed-point addition (exact and associative).
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

void adaspa_cpu_release(struct dist_attn *a) {
  adaspa_cpu *o = a->be == DIST_CPU ? a->adaspa : NULL;
  if (!o) return;
  if (o->acc_add != MPI_OP_NULL) MPI_Op_free(&o->acc_add);
  if (o->acc_type != MPI_DATATYPE_NULL) MPI_Type_free(&o->acc_type);
  pattern_free(&o->c.est);
  free(o->row_max), free(o->lse), free(o->row_sum), free(o->mass), free(o->kt), free(o->recall), free(o->sparsity);
  free(o);
  a->adaspa = NULL;
}

int adaspa_cpu_setup(struct dist_attn *a, sr_error *e) {
  if (a->skipping)
    return sr_input_error(e, NULL, "--skip-empty-sends", "adaspa-online searches its mask at run time, so the shards "
                                                         "it needs are not known at plan time; run without skipping");
  if (a->U > 1)
    return sr_input_error(e, NULL, "pattern", "adaspa-online runs with ring and double-ring schedules");
  adaspa_cpu *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  o->acc_type = MPI_DATATYPE_NULL, o->acc_add = MPI_OP_NULL;
  a->adaspa = o;
  if (adaspa_common_init(&o->c, a, e)) return e->code;
  int64_t H = a->H, rows = H * a->n_q;
  o->nb = sr_cdiv(a->glay->n_tokens, o->c.opts.block);
  if (H * o->nb * o->nb > INT_MAX)  // one MPI call sums the masses; the CPU backend runs small shapes
    return sr_input_error(e, NULL, "--seq", "adaspa-online on the CPU backend sums heads x blocks^2 = %lld masses in one "
                                            "MPI call: at most %d (a larger block B, or a shorter sequence)",
                          (long long)(H * o->nb * o->nb), INT_MAX);
  o->qs = (adaspa_query){a->H, a->Hkv, a->d, o->c.opts.block, a->n_q, a->glay->n_tokens, a->scale, NULL, a->qpos};
  o->row_max = malloc(sizeof(double) * (size_t)(rows + 1));
  o->lse = malloc(sizeof(double) * (size_t)(rows + 1));
  o->row_sum = malloc(sizeof(vs_acc) * (size_t)(rows + 1));
  o->mass = malloc(sizeof(vs_acc) * (size_t)(H * o->nb * o->nb + 1));
  o->kt = malloc(sizeof(vs_acc) * (size_t)(2 * H));
  o->recall = malloc(sizeof(double) * (size_t)H);
  o->sparsity = malloc(sizeof(double) * (size_t)H);
  if (!o->row_max || !o->lse || !o->row_sum || !o->mass || !o->kt || !o->recall || !o->sparsity)
    return sr_internal_error(e, 0, "out of memory for %lld x %lld block masses", (long long)o->nb, (long long)o->nb);
  if (MPI_Type_contiguous(16, MPI_BYTE, &o->acc_type) != MPI_SUCCESS || MPI_Type_commit(&o->acc_type) != MPI_SUCCESS ||
      MPI_Op_create(acc_add_fn, 1, &o->acc_add) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: adaspa-online: cannot create the MPI fixed-point sum", a->c->rank);
  return SR_OK;
}

// The three passes over one shard: K is the first plane of the shard's K|V.
static int visit_rowmax(struct dist_attn *a, int s, int src, const float *kv, void *ctx, sr_error *e) {
  adaspa_cpu *o = ctx;
  adaspa_rowmax(&o->qs, kv, a->kpos[src], a->glay->rank_count[src], o->row_max);
  return SR_OK;
}
static int visit_rowsum(struct dist_attn *a, int s, int src, const float *kv, void *ctx, sr_error *e) {
  adaspa_cpu *o = ctx;
  adaspa_rowsum(&o->qs, kv, a->kpos[src], a->glay->rank_count[src], o->row_max, o->row_sum);
  return SR_OK;
}
static int visit_mass(struct dist_attn *a, int s, int src, const float *kv, void *ctx, sr_error *e) {
  adaspa_cpu *o = ctx;
  adaspa_mass_add(&o->qs, kv, a->kpos[src], a->glay->rank_count[src], o->lse, o->mass);
  return SR_OK;
}

// The dense pass: every row's LSE over every key, cached.
static int dense_pass(struct dist_attn *a, adaspa_cpu *o, sr_error *e) {
  double t0 = sr_now();
  int64_t rows = (int64_t)a->H * a->n_q;
  for (int64_t r = 0; r < rows; r++) o->row_max[r] = -INFINITY;
  memset(o->row_sum, 0, sizeof(vs_acc) * (size_t)rows);
  if (ring_walk(a, PHASE_ESTIMATE, visit_rowmax, o, e) || ring_walk(a, PHASE_ESTIMATE, visit_rowsum, o, e)) return e->code;
  adaspa_lse(&o->qs, o->row_max, o->row_sum, o->lse);
  o->c.lse_valid = 1;
  o->c.st.dense_passes++;
  o->c.st.dense_s = sr_now() - t0;
  return SR_OK;
}

// The search: masses over the ring, summed over the ranks; recall at the base sparsity of this rank's share of
// the block rows, summed over the ranks; the budgets and masks (the same on every rank).
static int search(struct dist_attn *a, adaspa_cpu *o, sr_error *e) {
  double t0 = sr_now();
  int H = a->H;
  int64_t nb = o->nb, R = a->R;
  memset(o->mass, 0, sizeof(vs_acc) * (size_t)(H * nb * nb));
  if (ring_walk(a, PHASE_ESTIMATE, visit_mass, o, e)) return e->code;
  MPI_Comm mc = a->c->mpi;
  if (MPI_Allreduce(MPI_IN_PLACE, o->mass, (int)(H * nb * nb), o->acc_type, o->acc_add, mc) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: adaspa-online: summing the block masses failed", a->c->rank);
  memset(o->kt, 0, sizeof(vs_acc) * (size_t)(2 * H));
  int64_t lo = nb * a->group / R, hi = nb * (a->group + 1) / R;
  for (int h = 0; h < H; h++)
    adaspa_select_rows(o->mass + (int64_t)h * nb * nb, nb, o->c.opts.sparsity, lo, hi, 0, NULL, &o->kt[h], &o->kt[H + h]);
  if (MPI_Allreduce(MPI_IN_PLACE, o->kt, 2 * H, o->acc_type, o->acc_add, mc) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: adaspa-online: summing the heads' recall failed", a->c->rank);
  if (adaspa_masks_build(o->mass, o->kt, o->kt + H, &o->c.opts, &o->c.est, 0, o->sparsity, o->recall, e)) return e->code;
  double t1 = sr_now();
  // the execution form of the new mask (the backward reuses it)
  if (a->masks) tiles_masks_free(a->masks, a->H);
  a->masks = NULL;
  if (a->ti.tile_cnt || a->ti.bar_cnt) tiles_free(&a->ti);
  memset(&a->ti, 0, sizeof a->ti);
  if (tiles_build(&o->c.est, 0, a->glay, a->group, &a->ti, e) ||
      tiles_masks_build_for(&o->c.est, 0, a->glay, a->group, &a->masks, e))
    return e->code;
  a->ti_view = a->ti;  // U == 1: this rank computes every head
  adaspa_common_searched(&o->c, H, o->recall, o->sparsity);
  o->c.st.search_s = t1 - t0, o->c.st.index_s = sr_now() - t1;
  return SR_OK;
}

int adaspa_cpu_before(struct dist_attn *a, const float *q, sr_error *e) {
  adaspa_cpu *o = a->adaspa;
  o->qs.q = q;
  if (adaspa_wants_search(&o->c)) {
    if (!o->c.lse_valid && dense_pass(a, o, e)) return e->code;
    return search(a, o, e);
  }
  // a reuse forward: on new inputs the dense pass only when asked to measure the kept mask's recall
  if (adaspa_measure_dense(&o->c) && dense_pass(a, o, e)) return e->code;
  return SR_OK;
}

int adaspa_cpu_after(struct dist_attn *a, const float *lse, sr_error *e) {
  adaspa_cpu *o = a->adaspa;
  if (!adaspa_measure_recall(&o->c)) return SR_OK;
  // a row keeps exp(LSE_sparse - LSE_dense) of its softmax mass
  double sum[2] = {0, (double)((int64_t)a->H * a->n_q)};
  for (int64_t r = 0; r < (int64_t)a->H * a->n_q; r++) sum[0] += exp((double)lse[r] - o->lse[r]);
  if (MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, a->c->mpi) != MPI_SUCCESS)
    return sr_internal_error(e, 0, "rank %d: adaspa-online: summing the reused mask's recall failed", a->c->rank);
  o->c.measured_step = o->c.step, o->c.measured_sample = o->c.sample;
  o->c.reused_sum += sum[1] > 0 ? sum[0] / sum[1] : 1;
  o->c.st.reused_measured++;
  o->c.st.recall_reused = o->c.reused_sum / (double)o->c.st.reused_measured;
  return SR_OK;
}

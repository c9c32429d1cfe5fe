// pattern_adaspa.c — AdaSpa's block search over ranks, exact (pattern_estimate.h, "AdaSpa block search over
// ranks"): the dense pass (row maxima, fixed-point row sums, LSE), the fixed-point block masses, the selection
// on them and the head-adaptive masks. Plain float64 loops: the CPU backend runs these, and the tests hold the
// GPU path and the executor to them.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_estimate.h"
#include "plan/util.h"
#include "plan/vs_fixed.h"

adaspa_opts adaspa_defaults(void) {
  adaspa_opts o = {.sparsity = 0.8, .block = 128, .threshold = 0.8};
  return o;
}

// Scaled score of query row i, head h against key j: float64 products summed in dimension order (as the VS
// estimate's), so every rank computes the same bits for the same pair.
static double score(const adaspa_query *qs, const float *k, int64_t i, int32_t h, int64_t j) {
  const float *qv = qs->q + (i * qs->heads + h) * qs->head_dim;
  const float *kv = k + (j * qs->kv_heads + h / (qs->heads / qs->kv_heads)) * qs->head_dim;
  double s = 0;
  for (int32_t x = 0; x < qs->head_dim; x++) s += (double)qv[x] * (double)kv[x];
  return s * (double)qs->scale;
}

void adaspa_rowmax(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, double *row_max) {
  for (int32_t h = 0; h < qs->heads; h++)
    for (int64_t i = 0; i < qs->n_q; i++) {
      double *m = &row_max[h * qs->n_q + i];
      for (int64_t j = 0; j < n_k; j++)
        if (kpos[j] <= qs->qpos[i]) {
          double s = score(qs, k, i, h, j);
          if (s > *m) *m = s;
        }
    }
}

void adaspa_rowsum(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   vs_acc *row_sum) {
  for (int32_t h = 0; h < qs->heads; h++)
    for (int64_t i = 0; i < qs->n_q; i++) {
      int64_t r = h * qs->n_q + i;
      for (int64_t j = 0; j < n_k; j++)
        if (kpos[j] <= qs->qpos[i]) row_sum[r] += vs_to_fixed(vs_exp_neg(score(qs, k, i, h, j) - row_max[r]));
    }
}

void adaspa_lse(const adaspa_query *qs, const double *row_max, const vs_acc *row_sum, double *lse) {
  for (int64_t r = 0; r < (int64_t)qs->heads * qs->n_q; r++) {
    double z = vs_fixed_to_double(row_sum[r]);  // >= 1: the row's maximum contributes exp(0)
    lse[r] = z > 0 ? row_max[r] + log(z) : -INFINITY;
  }
}

void adaspa_mass_add(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *lse,
                     vs_acc *mass) {
  int64_t nb = sr_cdiv(qs->n_tokens, qs->block);
  for (int32_t h = 0; h < qs->heads; h++)
    for (int64_t i = 0; i < qs->n_q; i++) {
      double l = lse[h * qs->n_q + i];
      if (!(l > -INFINITY)) continue;
      vs_acc *row = mass + ((int64_t)h * nb + qs->qpos[i] / qs->block) * nb;
      for (int64_t j = 0; j < n_k; j++)
        if (kpos[j] <= qs->qpos[i]) row[kpos[j] / qs->block] += vs_to_fixed(vs_exp_neg(score(qs, k, i, h, j) - l));
    }
}

typedef struct {
  vs_acc m;
  int64_t c;
} block_col;

static int by_mass(const void *a, const void *b) {
  const block_col *x = a, *y = b;
  if (x->m != y->m) return x->m > y->m ? -1 : 1;
  return (x->c > y->c) - (x->c < y->c);
}

void adaspa_select_rows(const vs_acc *mass, int64_t nb, double sparsity, int64_t row_lo, int64_t row_hi,
                        int64_t row_words, uint64_t *mask, vs_acc *kept, vs_acc *total) {
  block_col *cols = malloc(sizeof *cols * (size_t)(nb + 1));
  if (!cols) return;  // callers size nb from a pattern they allocated; a failure here keeps nothing
  for (int64_t pb = row_lo; pb < row_hi; pb++) {
    if (mask) memset(mask + pb * row_words, 0, sizeof(uint64_t) * (size_t)row_words);
    for (int64_t c = 0; c <= pb; c++) {
      cols[c] = (block_col){mass[pb * nb + c], c};
      *total += cols[c].m;
    }
    qsort(cols, (size_t)(pb + 1), sizeof *cols, by_mass);
    // adaspa_select's quota, rounded the same way
    int64_t quota = (int64_t)ceil((1 - sparsity) * (double)(pb + 1) - 1e-9);
    quota = sr_max64(1, sr_min64(pb + 1, quota));
    for (int64_t x = 0; x < quota; x++) {
      if (mask) mask[pb * row_words + cols[x].c / 64] |= 1ull << (cols[x].c % 64);
      *kept += cols[x].m;
    }
  }
  free(cols);
}

static double ratio(vs_acc kept, vs_acc total) {
  return total > 0 ? vs_fixed_to_double(kept) / vs_fixed_to_double(total) : 1.0;
}

int adaspa_masks_build(const vs_acc *mass, const vs_acc *kept, const vs_acc *total, const adaspa_opts *o, pattern *p,
                       int layer, double *sparsity, double *recall, sr_error *e) {
  int heads = p->heads;
  if (layer < 0 || layer >= p->layers || o->block < 1 || heads < 1)
    return sr_input_error(e, NULL, "estimate", "AdaSpa masks for layer %d of %d (block %d)", layer, p->layers, o->block);
  int64_t nb = sr_cdiv(p->n_tokens, o->block), rw = sr_cdiv(nb, 64);
  double *base = calloc((size_t)heads, sizeof(double)), *sp = calloc((size_t)heads, sizeof(double));
  if (!base || !sp) {
    free(base), free(sp);
    return sr_internal_error(e, 0, "estimate: out of memory");
  }
  for (int h = 0; h < heads; h++) base[h] = ratio(kept[h], total[h]);
  adaspa_head_sparsity(base, heads, o->sparsity, o->threshold, sp);
  int rc = SR_OK;
  for (int h = 0; h < heads && !rc; h++) {
    head_pattern *hp = pattern_head(p, layer, h);
    free(hp->vertical), free(hp->slash), free(hp->mask);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_BLOCK, hp->block = o->block, hp->n_blocks = nb, hp->row_words = rw;
    if (!(hp->mask = malloc(sizeof(uint64_t) * (size_t)(nb * rw) + 8))) {
      rc = sr_internal_error(e, 0, "estimate: out of memory for %lld block rows", (long long)nb);
      break;
    }
    vs_acc k = 0, t = 0;
    adaspa_select_rows(mass + (int64_t)h * nb * nb, nb, sp[h], 0, nb, rw, hp->mask, &k, &t);
    recall[h] = ratio(k, t);
    if (sparsity) sparsity[h] = sp[h];
  }
  free(base), free(sp);
  return rc;
}

int adaspa_search_exact(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *lse,
                        const adaspa_opts *o, pattern *p, int layer, double *recall, sr_error *e) {
  if (qs->block != o->block || p->heads != qs->heads || p->n_tokens != qs->n_tokens || qs->block < 1 ||
      qs->kv_heads < 1 || qs->heads % qs->kv_heads)
    return sr_input_error(e, NULL, "estimate", "AdaSpa search: shape does not match (block %d/%d, heads %d/%d/%d)",
                          qs->block, o->block, qs->heads, qs->kv_heads, p->heads);
  int64_t rows = (int64_t)qs->heads * qs->n_q, nb = sr_cdiv(qs->n_tokens, qs->block);
  double *row_max = malloc(sizeof(double) * (size_t)(rows + 1)), *own = malloc(sizeof(double) * (size_t)(rows + 1));
  vs_acc *row_sum = calloc((size_t)rows + 1, sizeof(vs_acc));
  vs_acc *mass = calloc((size_t)(qs->heads * nb * nb) + 1, sizeof(vs_acc));
  vs_acc *kt = calloc(2 * (size_t)qs->heads + 1, sizeof(vs_acc));
  int rc = SR_OK;
  if (!row_max || !own || !row_sum || !mass || !kt) {
    rc = sr_internal_error(e, 0, "estimate: out of memory for %lld x %lld block masses", (long long)nb, (long long)nb);
  } else {
    if (!lse) {  // the dense pass
      for (int64_t r = 0; r < rows; r++) row_max[r] = -INFINITY;
      adaspa_rowmax(qs, k, kpos, n_k, row_max);
      adaspa_rowsum(qs, k, kpos, n_k, row_max, row_sum);
      adaspa_lse(qs, row_max, row_sum, own);
      lse = own;
    }
    adaspa_mass_add(qs, k, kpos, n_k, lse, mass);
    for (int h = 0; h < qs->heads; h++)
      adaspa_select_rows(mass + (int64_t)h * nb * nb, nb, o->sparsity, 0, nb, 0, NULL, &kt[h], &kt[qs->heads + h]);
    rc = adaspa_masks_build(mass, kt, kt + qs->heads, o, p, layer, NULL, recall, e);
  }
  free(row_max), free(own), free(row_sum), free(mass), free(kt);
  return rc;
}

// balance_steps.c — the balanced dealing refined ring step by ring step (see balance_internal.h).
//
// Dealing by per-rank totals leaves each rank's work even, but at ring step t rank r computes against the
// shard of rank (r - t) mod W, and the step waits for its slowest rank. With two to four tiles a rank the
// totals are even while single (rank, shard) cells are not (a sink column's tile, a heavy diagonal), and the
// step figure stays above the worker figure. The refinement swaps two blocks of different ranks (block
// counts stay floor or ceil of blocks / W) when the sum over layers and steps of the slowest rank's work goes
// down and the heaviest rank's load does not go up.
//
// Per layer it keeps C[r][s] (rank r's queries against rank s's keys), A_row[q][s] (query tile q against
// rank s's keys), A_col[c][r] (rank r's queries against key tile c) and each step's K largest cells. A swap
// of a (rank ra) and b (rank rb) changes rows ra, rb and columns ra, rb of C: at most four cells of a step,
// so the step's new maximum is the largest of those and of its largest unchanged cell among the K kept
// (K = 5 > 4). An evaluation costs O(layers x W).
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/balance_internal.h"

#define TOP_K 5
// Swap evaluations at most this many over layers x W (about a billion cell reads, a second or two at most;
// the shipped traces converge well within it).
#define EVAL_BUDGET 100000000.0

typedef struct {
  int L, W;
  int64_t nb, cap;
  const double *P;   // [L][nb][nb]
  int32_t *R;        // block -> rank
  int64_t *member;   // [W][cap] blocks of each rank
  int64_t *count;    // [W]
  double *C;         // [L][W][W]
  double *Arow;      // [L][nb][W]
  double *Acol;      // [L][nb][W]
  double *top;       // [L][W steps][TOP_K] values, largest first
  int32_t *top_rank; // [L][W][TOP_K] their ranks (-1: none)
  double *load, *bw; // [W] per-rank work over layers; [nb] per-block (query tile) work over layers
} steps_search;

static double pw(const steps_search *s, int l, int64_t q, int64_t c) { return s->P[((int64_t)l * s->nb + q) * s->nb + c]; }

static void rebuild_tables(steps_search *s, int l) {
  const int W = s->W;
  const int64_t nb = s->nb;
  double *Ar = s->Arow + (int64_t)l * nb * W, *Ac = s->Acol + (int64_t)l * nb * W, *C = s->C + (int64_t)l * W * W;
  memset(Ar, 0, (size_t)nb * W * sizeof *Ar);
  memset(Ac, 0, (size_t)nb * W * sizeof *Ac);
  memset(C, 0, (size_t)W * W * sizeof *C);
  for (int64_t q = 0; q < nb; q++)
    for (int64_t c = 0; c < nb; c++) {
      const double w = pw(s, l, q, c);
      Ar[q * W + s->R[c]] += w;
      Ac[c * W + s->R[q]] += w;
      C[(int64_t)s->R[q] * W + s->R[c]] += w;
    }
}

// Each step's TOP_K largest cells (ties: lower rank first).
static void rebuild_top(steps_search *s, int l) {
  const int W = s->W;
  const double *C = s->C + (int64_t)l * W * W;
  for (int t = 0; t < W; t++) {
    double *v = s->top + ((int64_t)l * W + t) * TOP_K;
    int32_t *rk = s->top_rank + ((int64_t)l * W + t) * TOP_K;
    int n = 0;
    for (int r = 0; r < W; r++) {
      const double x = C[(int64_t)r * W + (r - t + W) % W];
      if (n == TOP_K && !(x > v[n - 1])) continue;
      int i = n < TOP_K ? n++ : n - 1;
      while (i > 0 && x > v[i - 1]) v[i] = v[i - 1], rk[i] = rk[i - 1], i--;
      v[i] = x, rk[i] = r;
    }
    for (int i = n; i < TOP_K; i++) v[i] = 0, rk[i] = -1;
  }
}

// Cell (r, src) of layer l after swapping a (on ra) and b (on rb); the closed forms of the two sets' change.
static double cell_after(const steps_search *s, int l, int r, int src, int64_t a, int ra, int64_t b, int rb) {
  const int W = s->W;
  const double *Ar = s->Arow + (int64_t)l * s->nb * W, *Ac = s->Acol + (int64_t)l * s->nb * W;
  const double C = s->C[((int64_t)l * W + r) * W + src];
  const double Paa = pw(s, l, a, a), Pab = pw(s, l, a, b), Pba = pw(s, l, b, a), Pbb = pw(s, l, b, b);
  const int row = r == ra ? 1 : r == rb ? 2 : 0, col = src == ra ? 1 : src == rb ? 2 : 0;
  // Query sets: ra loses a and gains b, rb the reverse; key sets likewise.
  if (!row && !col) return C;
  if (!col) return row == 1 ? C - Ar[a * W + src] + Ar[b * W + src] : C - Ar[b * W + src] + Ar[a * W + src];
  if (!row) return col == 1 ? C - Ac[a * W + r] + Ac[b * W + r] : C - Ac[b * W + r] + Ac[a * W + r];
  if (row == 1 && col == 1)
    return C - Ar[a * W + ra] - Ac[a * W + ra] + Paa + Ar[b * W + ra] - Pba + Ac[b * W + ra] - Pab + Pbb;
  if (row == 2 && col == 2)
    return C - Ar[b * W + rb] - Ac[b * W + rb] + Pbb + Ar[a * W + rb] - Pab + Ac[a * W + rb] - Pba + Paa;
  if (row == 1)  // (ra, rb): queries (ra \ a) + b against keys (rb \ b) + a
    return C - Ar[a * W + rb] - Ac[b * W + ra] + Pab + Ac[a * W + ra] - Paa + Ar[b * W + rb] - Pbb + Pba;
  return C - Ar[b * W + ra] - Ac[a * W + rb] + Pba + Ac[b * W + rb] - Pbb + Ar[a * W + ra] - Paa + Pab;
}

// The slowest rank's work at step t of layer l among the ranks a move leaves alone (not in rows[4]):
// the first of the kept top entries that is none of them (0 when all are).
static double top_excluding(const steps_search *s, int l, int t, const int rows[4]) {
  const double *v = s->top + ((int64_t)l * s->W + t) * TOP_K;
  const int32_t *rk = s->top_rank + ((int64_t)l * s->W + t) * TOP_K;
  for (int i = 0; i < TOP_K && rk[i] >= 0; i++)
    if (rk[i] != rows[0] && rk[i] != rows[1] && rk[i] != rows[2] && rk[i] != rows[3]) return v[i];
  return 0;
}

// Change of the sum over layers and steps of the slowest rank's work if a and b swapped.
static double swap_gain(const steps_search *s, int64_t a, int64_t b) {
  const int W = s->W, ra = s->R[a], rb = s->R[b];
  double delta = 0;
  for (int l = 0; l < s->L; l++)
    for (int t = 0; t < W; t++) {
      const int rows[4] = {ra, rb, (ra + t) % W, (rb + t) % W};
      double mx = top_excluding(s, l, t, rows);
      for (int i = 0; i < 4; i++) {
        const double x = cell_after(s, l, rows[i], (rows[i] - t + W) % W, a, ra, b, rb);
        if (x > mx) mx = x;
      }
      delta += mx - s->top[((int64_t)l * W + t) * TOP_K];  // the step's slowest rank now
    }
  return delta;
}

// Change of the sum of squares of every rank-pair cell (all layers) if a and b swapped: the tie-break that
// moves the search along a plateau of the step sum (a swap that evens out cells below a step's maximum
// changes no maximum but makes room for a later swap that does).
static double swap_spread(const steps_search *s, int64_t a, int64_t b) {
  const int W = s->W, ra = s->R[a], rb = s->R[b];
  double delta = 0;
  for (int l = 0; l < s->L; l++) {
    const double *C = s->C + (int64_t)l * W * W;
    for (int r = 0; r < W; r++)
      for (int src = 0; src < W; src++) {
        if (r != ra && r != rb && src != ra && src != rb) continue;
        const double x = cell_after(s, l, r, src, a, ra, b, rb), y = C[(int64_t)r * W + src];
        delta += x * x - y * y;
      }
  }
  return delta;
}

static void apply_swap(steps_search *s, int64_t a, int64_t b) {
  const int W = s->W, ra = s->R[a], rb = s->R[b];
  for (int64_t i = 0; i < s->count[ra]; i++)
    if (s->member[ra * s->cap + i] == a) s->member[ra * s->cap + i] = b;
  for (int64_t i = 0; i < s->count[rb]; i++)
    if (s->member[rb * s->cap + i] == b) s->member[rb * s->cap + i] = a;
  s->R[a] = rb, s->R[b] = ra;
  s->load[ra] += s->bw[b] - s->bw[a], s->load[rb] += s->bw[a] - s->bw[b];
  for (int l = 0; l < s->L; l++) {
    double *Ar = s->Arow + (int64_t)l * s->nb * W, *Ac = s->Acol + (int64_t)l * s->nb * W;
    double *C = s->C + (int64_t)l * W * W;
    for (int64_t q = 0; q < s->nb; q++) {
      const double d = pw(s, l, q, b) - pw(s, l, q, a);  // keys: ra gains b, rb gains a
      Ar[q * W + ra] += d, Ar[q * W + rb] -= d;
      const double f = pw(s, l, b, q) - pw(s, l, a, q);  // queries likewise
      Ac[q * W + ra] += f, Ac[q * W + rb] -= f;
    }
    for (int r = 0; r < W; r++)  // rows ra, rb and columns ra, rb from the new A_row
      for (int src = 0; src < W; src++) {
        if (r != ra && r != rb && src != ra && src != rb) continue;
        double x = 0;
        for (int64_t i = 0; i < s->count[r]; i++) x += Ar[s->member[r * s->cap + i] * W + src];
        C[(int64_t)r * W + src] = x;
      }
    rebuild_top(s, l);
  }
}

// Change of the step sum if ranks ra and rb exchanged all their blocks (a renumbering: loads stay).
static double relabel_gain(const steps_search *s, int ra, int rb) {
  const int W = s->W;
  double delta = 0;
  for (int l = 0; l < s->L; l++) {
    const double *C = s->C + (int64_t)l * W * W;
    for (int t = 0; t < W; t++) {
      const int rows[4] = {ra, rb, (ra + t) % W, (rb + t) % W};
      double mx = top_excluding(s, l, t, rows);
      for (int i = 0; i < 4; i++) {
        const int r = rows[i], src = (r - t + W) % W;
        const int pr = r == ra ? rb : r == rb ? ra : r, ps = src == ra ? rb : src == rb ? ra : src;
        if (C[(int64_t)pr * W + ps] > mx) mx = C[(int64_t)pr * W + ps];
      }
      delta += mx - s->top[((int64_t)l * W + t) * TOP_K];  // the step's slowest rank now
    }
  }
  return delta;
}

static void apply_relabel(steps_search *s, int ra, int rb) {
  for (int64_t b = 0; b < s->nb; b++)
    if (s->R[b] == ra || s->R[b] == rb) s->R[b] = s->R[b] == ra ? rb : ra;
  for (int64_t i = 0; i < s->cap; i++) {
    int64_t x = s->member[ra * s->cap + i];
    s->member[ra * s->cap + i] = s->member[rb * s->cap + i], s->member[rb * s->cap + i] = x;
  }
  int64_t c = s->count[ra];
  s->count[ra] = s->count[rb], s->count[rb] = c;
  double x = s->load[ra];
  s->load[ra] = s->load[rb], s->load[rb] = x;
  for (int l = 0; l < s->L; l++) {
    rebuild_tables(s, l);
    rebuild_top(s, l);
  }
}

int balance_refine_steps(const double *P, int layers, int64_t nb, int world, int spread, int32_t *block_rank,
                         int64_t *swaps, sr_error *e) {
  *swaps = 0;
  if (world < 2 || nb < 2 || layers < 1) return SR_OK;
  const int W = world;
  steps_search s = {.L = layers, .W = W, .nb = nb, .cap = nb / W + 1, .P = P, .R = block_rank};
  s.member = malloc((size_t)W * s.cap * sizeof *s.member);
  s.count = calloc((size_t)W, sizeof *s.count);
  s.C = malloc((size_t)layers * W * W * sizeof *s.C);
  s.Arow = malloc((size_t)layers * nb * W * sizeof *s.Arow);
  s.Acol = malloc((size_t)layers * nb * W * sizeof *s.Acol);
  s.top = malloc((size_t)layers * W * TOP_K * sizeof *s.top);
  s.top_rank = malloc((size_t)layers * W * TOP_K * sizeof *s.top_rank);
  s.load = calloc((size_t)W, sizeof *s.load);
  s.bw = calloc((size_t)nb, sizeof *s.bw);
  int rc = SR_OK;
  if (!s.member || !s.count || !s.C || !s.Arow || !s.Acol || !s.top || !s.top_rank || !s.load || !s.bw)
    rc = sr_internal_error(e, ENOMEM, "balance: step refinement of %lld blocks over %d ranks", (long long)nb, W);
  for (int64_t b = 0; b < nb && !rc; b++) {
    if (s.count[block_rank[b]] == s.cap) {
      rc = sr_internal_error(e, EINVAL, "balance: rank %d holds more than %lld blocks", block_rank[b], (long long)s.cap);
      break;
    }
    s.member[block_rank[b] * s.cap + s.count[block_rank[b]]++] = b;
  }
  for (int l = 0; l < layers && !rc; l++) {
    rebuild_tables(&s, l);
    rebuild_top(&s, l);
    for (int64_t q = 0; q < nb; q++)
      for (int64_t c = 0; c < nb; c++) s.bw[q] += pw(&s, l, q, c);
  }
  for (int64_t b = 0; b < nb && !rc; b++) s.load[block_rank[b]] += s.bw[b];
  double total = 0;
  for (int r = 0; r < W; r++) total += s.load[r];
  const double eps = 1e-12 * (total > 0 ? total : 1), eps2 = 1e-9 * eps * (total > 0 ? total : 1);
  const double cap_load = (1 + BALANCE_WORKER_SLACK) * total / W;
  int64_t budget = (int64_t)(EVAL_BUDGET / ((double)layers * W));
  for (int improved = 1; improved && budget > 0 && !rc;) {
    improved = 0;
    for (int64_t a = 0; a < nb && budget > 0; a++)
      for (int64_t b = a + 1; b < nb && budget > 0; b++) {
        const int ra = s.R[a], rb = s.R[b];
        if (ra == rb || (s.bw[a] == 0 && s.bw[b] == 0)) continue;
        double heaviest = cap_load;
        for (int r = 0; r < W; r++) heaviest = s.load[r] > heaviest ? s.load[r] : heaviest;
        const double la = s.load[ra] + s.bw[b] - s.bw[a], lb = s.load[rb] + s.bw[a] - s.bw[b];
        if (la > heaviest + eps || lb > heaviest + eps) continue;
        budget--;
        const double gain = swap_gain(&s, a, b);
        if (gain < -eps || (spread && gain <= eps && swap_spread(&s, a, b) < -eps2)) {
          apply_swap(&s, a, b);
          ++*swaps;
          improved = 1;
        }
      }
    for (int ra = 0; ra < W && budget > 0; ra++)
      for (int rb = ra + 1; rb < W && budget > 0; rb++) {
        budget--;
        if (relabel_gain(&s, ra, rb) < -eps) {
          apply_relabel(&s, ra, rb);
          ++*swaps;
          improved = 1;
        }
      }
  }
  free(s.member), free(s.count), free(s.C), free(s.Arow), free(s.Acol), free(s.top), free(s.top_rank);
  free(s.load), free(s.bw);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// striped with turned rounds
//
// On striped (block b on rank b mod W) a slash at tile offset Delta = m W + j meets, at ring step j, one tile
// pair on each rank whose round reaches Delta: m + 1 rounds back for the ranks below j, m for the others, so
// every rank at or above j computes one pair more of each of the step's slashes (and of its columns), and the
// last rank, whose block comes last in every round, carries the most causal work. Turning round k by k d ranks
// keeps every slash's pairs within a round on one step (rank difference j) and moves the pairs that reach one
// round further back to step j + d, where they join slash Delta - W's: each rank then computes one pair of
// either, every round, and which ranks come late in a round changes from round to round. With few blocks a
// rank (8 at 32 ranks on 32K tokens) that evens out both figures where no swap of two blocks does (moving one
// block breaks its slashes' steps); the turn is chosen on the pair work.

int balance_pair_figures(const double *P, int layers, int64_t nb, int world, const int32_t *block_rank,
                         double *heaviest, double *step_sum, sr_error *e) {
  const int W = world;
  double *C = malloc((size_t)W * W * sizeof *C), *load = calloc((size_t)W, sizeof *load);
  if (!C || !load) {
    free(C), free(load);
    return sr_internal_error(e, ENOMEM, "balance: figures over %d ranks", W);
  }
  *step_sum = 0;
  for (int l = 0; l < layers; l++) {
    memset(C, 0, (size_t)W * W * sizeof *C);
    for (int64_t q = 0; q < nb; q++) {
      const double *row = P + ((int64_t)l * nb + q) * nb;
      double *Cq = C + (int64_t)block_rank[q] * W;
      for (int64_t c = 0; c <= q; c++) Cq[block_rank[c]] += row[c];  // causal: no key tile after the query tile
    }
    for (int t = 0; t < W; t++) {
      double mx = 0;
      for (int r = 0; r < W; r++) mx = C[(int64_t)r * W + (r - t + W) % W] > mx ? C[(int64_t)r * W + (r - t + W) % W] : mx;
      *step_sum += mx;
    }
    for (int r = 0; r < W; r++)
      for (int s = 0; s < W; s++) load[r] += C[(int64_t)r * W + s];
  }
  *heaviest = 0;
  for (int r = 0; r < W; r++) *heaviest = load[r] > *heaviest ? load[r] : *heaviest;
  free(C), free(load);
  return SR_OK;
}

void balance_rotated(int64_t nb, int world, int d, int32_t *block_rank) {
  for (int64_t b = 0; b < nb; b++) block_rank[b] = (int32_t)((b + (b / world) % world * d) % world);
}

int balance_best_rotation(const double *P, int layers, int64_t nb, int world, int *d, sr_error *e) {
  *d = 0;
  int32_t *R = malloc((size_t)nb * sizeof *R);
  if (!R) return sr_internal_error(e, ENOMEM, "balance: %lld blocks", (long long)nb);
  double best_sum = 0, best_heaviest = 0;
  int rc = SR_OK;
  for (int k = 0; k < world && !rc; k++) {
    double heaviest, sum;
    balance_rotated(nb, world, k, R);
    if ((rc = balance_pair_figures(P, layers, nb, world, R, &heaviest, &sum, e))) break;
    const double tol = 1e-12 * (best_sum > 0 ? best_sum : 1);
    if (k == 0 || sum < best_sum - tol || (sum <= best_sum + tol && heaviest < best_heaviest * (1 - 1e-12)))
      *d = k, best_sum = sum, best_heaviest = heaviest;
  }
  free(R);
  return rc;
}

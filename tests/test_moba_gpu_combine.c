// test_moba_gpu_combine.c — the GPU gate's combination of several ranks (kernels/moba_gpu.h): the partial block
// sums all-gathered into [ranks][count][2] words and added by moba_sums_combine_at (what moba_gpu_sums_combine
// runs a thread), and the ranks' bit sets ORed by moba_bits_combine_at, against the host gate's arithmetic
// (plan/gating.h: the sums of one process holding every key, the selection of one process scoring every row).
// The per-rank parts are the host's moba_block_sums / moba_select_rows over the rows a real layout gives a rank,
// so these check the combination's word order and carries, not the device's scoring (the GPU scripts do).
#include <stdlib.h>
#include <string.h>

#include "kernels/moba_gpu.h"
#include "plan/gating.h"
#include "plan/layout.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

TEST(moba_sums_combine_carries_the_low_word_into_the_high_word_and_adds_in_twos_complement) {
  // three ranks, two values each: [rank][value][lo, hi]
  uint64_t parts[3][2][2] = {
      {{~0ull, 0}, {~0ull, ~0ull}},  // 2^64 - 1, and -1
      {{1, 0}, {1, 0}},              // 1, and 1
      {{5, 2}, {0, 0}},              // 2 * 2^64 + 5, and 0
  };
  uint64_t sums[2][2];
  for (int64_t i = 0; i < 2; i++) moba_sums_combine_at(&parts[0][0][0], 3, 2, i, &sums[0][0]);
  // (2^64 - 1) + 1 + (2 * 2^64 + 5) = 3 * 2^64 + 5; -1 + 1 + 0 = 0
  CHECK(sums[0][0] == 5 && sums[0][1] == 3);
  CHECK(sums[1][0] == 0 && sums[1][1] == 0);
}

TEST(moba_bits_combine_ors_each_word_over_the_ranks) {
  uint64_t parts[2][3] = {{1, 0, 1ull << 63}, {2, 0, 1}}, bits[3];
  for (int64_t i = 0; i < 3; i++) moba_bits_combine_at(&parts[0][0], 2, 3, i, bits);
  CHECK(bits[0] == 3 && bits[1] == 0 && bits[2] == ((1ull << 63) | 1));
}

// A small sequence split over W ranks by a layout, keys and queries in global order and gathered per rank.
typedef struct {
  moba_shape s;
  int W;
  float *q, *k;                // global order [N, H, d], [N, Hkv, d]
  int64_t *pos[4], n[4];       // rank r's rows: global positions in local order
  float *qr[4], *kr[4];        // and their queries and keys
} split_case;

static void split_open(split_case *c, layout_kind kind, int64_t g, uint64_t seed) {
  memset(c, 0, sizeof *c);
  int H = 4, Hkv = 2, d = 8, W = 3;
  int64_t N = 1000;  // 7 blocks of 128 and a partial one, 8 groups
  c->s = (moba_shape){H, Hkv, d, N, 128, 3};
  c->W = W;
  c->q = malloc(sizeof(float) * (size_t)(N * H * d));
  c->k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  for (int64_t i = 0; i < N * H * d; i++) c->q[i] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1);
  // keys of both signs and up to 8 in magnitude: sums whose high words are all ones, and carries between the words
  for (int64_t i = 0; i < N * Hkv * d; i++) c->k[i] = (float)((double)fx_rand(&seed) / 268435456.0 - 8);
  layout l;
  sr_error e;
  CHECK_EQ_INT(layout_build(kind, N, W, g, NULL, &l, &e), SR_OK);
  for (int r = 0; r < W; r++) {
    int64_t n = l.rank_count[r];
    c->n[r] = n, c->pos[r] = malloc(sizeof(int64_t) * (size_t)(n + 1));
    c->qr[r] = malloc(sizeof(float) * (size_t)(n * H * d + 1)), c->kr[r] = malloc(sizeof(float) * (size_t)(n * Hkv * d + 1));
    layout_positions(&l, r, c->pos[r]);
    for (int64_t i = 0; i < n; i++) {
      memcpy(c->qr[r] + i * H * d, c->q + c->pos[r][i] * H * d, sizeof(float) * (size_t)(H * d));
      memcpy(c->kr[r] + i * Hkv * d, c->k + c->pos[r][i] * Hkv * d, sizeof(float) * (size_t)(Hkv * d));
    }
  }
  layout_free(&l);
}

static void split_close(split_case *c) {
  free(c->q), free(c->k);
  for (int r = 0; r < c->W; r++) free(c->pos[r]), free(c->qr[r]), free(c->kr[r]);
}

static int64_t sums_count(const moba_shape *s) { return (s->n_tokens + s->block - 1) / s->block * s->kv_heads * s->head_dim; }

// The ranks' partial sums laid out as the all-gather leaves them (rank r's at r * count) and combined.
static vs_acc *combined_sums(const split_case *c) {
  int64_t ns = sums_count(&c->s);
  vs_acc *parts = calloc((size_t)(c->W * ns), sizeof *parts), *sums = calloc((size_t)ns, sizeof *sums);
  for (int r = 0; r < c->W; r++) moba_block_sums(&c->s, c->kr[r], c->pos[r], c->n[r], parts + r * ns);
  for (int64_t i = 0; i < ns; i++) moba_sums_combine_at((const uint64_t *)parts, c->W, ns, i, (uint64_t *)sums);
  free(parts);
  return sums;
}

static const struct {
  layout_kind kind;
  int64_t g;
} layouts[] = {{LAYOUT_CONTIGUOUS, 1}, {LAYOUT_ZIGZAG, 1}, {LAYOUT_STRIPED, 128}, {LAYOUT_STRIPED, 32}};

TEST(moba_partial_sums_of_every_layout_s_ranks_combined_equal_one_process_s_sums) {
  for (size_t x = 0; x < sizeof layouts / sizeof layouts[0]; x++) {
    split_case c;
    split_open(&c, layouts[x].kind, layouts[x].g, 11 + x);
    int64_t ns = sums_count(&c.s), *all = malloc(sizeof(int64_t) * (size_t)c.s.n_tokens);
    for (int64_t i = 0; i < c.s.n_tokens; i++) all[i] = i;
    vs_acc *one = calloc((size_t)ns, sizeof *one), *sums = combined_sums(&c);
    moba_block_sums(&c.s, c.k, all, c.s.n_tokens, one);
    CHECK(memcmp(one, sums, sizeof(vs_acc) * (size_t)ns) == 0);
    int negative = 0;
    for (int64_t i = 0; i < ns; i++) negative += (int)(one[i] >> 127);  // the sign bit of the two's complement
    CHECK(negative > 0);  // the high words' two's complement was exercised
    free(all), free(one), free(sums);
    split_close(&c);
  }
}

TEST(moba_rows_of_every_layout_s_ranks_scored_and_ored_equal_one_process_s_selection) {
  for (size_t x = 0; x < sizeof layouts / sizeof layouts[0]; x++) {
    split_case c;
    split_open(&c, layouts[x].kind, layouts[x].g, 31 + x);
    const moba_shape *s = &c.s;
    int64_t nbits = (int64_t)s->heads * gating_n_groups(s->n_tokens) * moba_bits_words(s);
    int64_t *all = malloc(sizeof(int64_t) * (size_t)s->n_tokens);
    for (int64_t i = 0; i < s->n_tokens; i++) all[i] = i;
    vs_acc *sums = combined_sums(&c);
    uint64_t *one = calloc((size_t)nbits, 8), *parts = calloc((size_t)(c.W * nbits), 8), *bits = calloc((size_t)nbits, 8);
    moba_select_rows(s, sums, c.q, all, s->n_tokens, one);
    for (int r = 0; r < c.W; r++) moba_select_rows(s, sums, c.qr[r], c.pos[r], c.n[r], parts + r * nbits);
    for (int64_t i = 0; i < nbits; i++) moba_bits_combine_at(parts, c.W, nbits, i, bits);
    CHECK(memcmp(one, bits, 8 * (size_t)nbits) == 0);
    int kept = 0;
    for (int64_t i = 0; i < nbits; i++) kept += one[i] != 0;
    CHECK(kept > 0);
    free(all), free(sums), free(one), free(parts), free(bits);
    split_close(&c);
  }
}

// test_layout.c — layouts: every map is a bijection, counts follow the remainder rule, dense causal
// work is balanced by zigzag and striped, contiguous shows its (2W-1)-fold spread, names and files parse.
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/util.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------------------------
// helpers

// A deterministic shuffled order of 0..n-1 (xorshift Fisher-Yates).
static int64_t *shuffled(int64_t n, uint64_t seed) {
  int64_t *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  uint64_t x = seed * 2654435761u + 1;
  for (int64_t i = n - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int64_t j = (int64_t)(x % (uint64_t)(i + 1)), t = p[i];
    p[i] = p[j], p[j] = t;
  }
  return p;
}

// Checks that the layout is a bijection between tokens and (rank, local) slots, in all three lookups,
// and that the runs are well formed (sorted by (rank, local), maximal). Returns failures found.
static int check_bijection(const layout *l) {
  int bad = 0;
  int64_t n = l->n_tokens, total = 0;
  for (int r = 0; r < l->world; r++) total += l->rank_count[r];
  if (total != n) bad++;
  unsigned char *seen = calloc((size_t)n, 1);
  for (int r = 0; r < l->world; r++) {
    int64_t *pos = malloc((size_t)(l->rank_count[r] + 1) * sizeof *pos);
    layout_positions(l, r, pos);
    for (int64_t k = 0; k < l->rank_count[r]; k++) {
      int64_t t = pos[k];
      if (t < 0 || t >= n || seen[t]++) { bad++; continue; }
      if (layout_global(l, r, k) != t) bad++;
      int32_t rr = -1;
      int64_t kk = -1;
      if (layout_locate(l, t, &rr, &kk) != 0 || rr != r || kk != k) bad++;
    }
    free(pos);
  }
  for (int64_t t = 0; t < n; t++) bad += !seen[t];
  for (int64_t i = 1; i < l->n_runs; i++) {
    const layout_run *a = &l->runs[i - 1], *b = &l->runs[i];
    if (a->rank > b->rank) bad++;
    if (a->rank == b->rank && (a->local + a->len != b->local || a->global + a->len == b->global)) bad++;
  }
  for (int64_t i = 0; i < l->n_runs; i++) bad += l->runs[i].len < 1;
  free(seen);
  return bad;
}

static int64_t max_count(const layout *l) {
  int64_t m = 0;
  for (int r = 0; r < l->world; r++) m = sr_max64(m, l->rank_count[r]);
  return m;
}
static int64_t min_count(const layout *l) {
  int64_t m = l->n_tokens;
  for (int r = 0; r < l->world; r++) m = sr_min64(m, l->rank_count[r]);
  return m;
}

// Dense causal work of each rank, by brute force: query t attends keys 0..t, so it costs t+1 pairs.
static void causal_work(const layout *l, int64_t *work) {
  for (int r = 0; r < l->world; r++) work[r] = 0;
  for (int64_t t = 0; t < l->n_tokens; t++) {
    int32_t r;
    int64_t k;
    layout_locate(l, t, &r, &k);
    work[r] += t + 1;
  }
}

static const int worlds[] = {1, 2, 3, 4, 5, 7, 8, 13, 16};
static const int64_t grans[] = {1, 2, 3, 7, 16, 128};

// ---------------------------------------------------------------------------------------------
// bijections and the remainder rule

TEST(layout_every_kind_is_a_bijection_for_many_sizes) {
  sr_error e;
  int cases = 0;
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
    for (int64_t n = 1; n <= 300; n += (n < 40 ? 1 : 37)) {
      int w = worlds[wi];
      layout l;
      CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, n, w, 1, NULL, &l, &e), SR_OK);
      CHECK_EQ_INT(check_bijection(&l), 0);
      layout_free(&l);
      CHECK_EQ_INT(layout_build(LAYOUT_ZIGZAG, n, w, 1, NULL, &l, &e), SR_OK);
      CHECK_EQ_INT(check_bijection(&l), 0);
      layout_free(&l);
      for (size_t gi = 0; gi < sizeof grans / sizeof *grans; gi++) {
        CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, w, grans[gi], NULL, &l, &e), SR_OK);
        CHECK_EQ_INT(check_bijection(&l), 0);
        layout_free(&l);
      }
      int64_t *p = shuffled(n, (uint64_t)(n * 31 + w));
      CHECK_EQ_INT(layout_build(LAYOUT_PERMUTATION, n, w, 1, p, &l, &e), SR_OK);
      CHECK_EQ_INT(check_bijection(&l), 0);
      layout_free(&l);
      free(p);
      cases++;
    }
  CHECK(cases > 100);
}

TEST(layout_large_prime_lengths_are_bijections) {
  sr_error e;
  const int64_t primes[] = {65521, 131071};
  for (int i = 0; i < 2; i++) {
    layout l;
    CHECK_EQ_INT(layout_build(LAYOUT_ZIGZAG, primes[i], 32, 1, NULL, &l, &e), SR_OK);
    CHECK_EQ_INT(check_bijection(&l), 0);
    layout_free(&l);
    CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, primes[i], 32, 128, NULL, &l, &e), SR_OK);
    CHECK_EQ_INT(check_bijection(&l), 0);
    CHECK_EQ_INT(l.n_runs, sr_cdiv(primes[i], 128));
    layout_free(&l);
  }
}

TEST(layout_token_counts_differ_by_at_most_one_unit) {
  sr_error e;
  for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
    for (int64_t n = 1; n <= 500; n += 7) {
      int w = worlds[wi];
      layout l;
      for (int kind = LAYOUT_CONTIGUOUS; kind <= LAYOUT_ZIGZAG; kind++) {
        CHECK_EQ_INT(layout_build((layout_kind)kind, n, w, 1, NULL, &l, &e), SR_OK);
        CHECK(max_count(&l) - min_count(&l) <= 1);
        layout_free(&l);
      }
      for (size_t gi = 0; gi < sizeof grans / sizeof *grans; gi++) {
        CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, w, grans[gi], NULL, &l, &e), SR_OK);
        CHECK(max_count(&l) - min_count(&l) <= l.granularity);
        layout_free(&l);
      }
    }
}

TEST(layout_ranks_are_empty_only_when_tokens_are_fewer_than_ranks) {
  sr_error e;
  for (int w = 1; w <= 9; w++)
    for (int64_t n = 1; n <= 40; n++)
      for (int kind = LAYOUT_CONTIGUOUS; kind <= LAYOUT_STRIPED; kind++) {
        layout l;
        CHECK_EQ_INT(layout_build((layout_kind)kind, n, w, 16, NULL, &l, &e), SR_OK);
        int empty = 0;
        for (int r = 0; r < w; r++) empty += l.rank_count[r] == 0;
        CHECK_EQ_INT(empty, n < w ? w - n : 0);
        layout_free(&l);
      }
}

TEST(layout_striped_shrinks_granularity_only_below_w_times_g) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, 1000, 8, 128, NULL, &l, &e), SR_OK);
  CHECK_EQ_INT(l.granularity, 1000 / 8);
  CHECK_EQ_INT(l.granularity_asked, 128);
  layout_free(&l);
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, 1024, 8, 128, NULL, &l, &e), SR_OK);
  CHECK_EQ_INT(l.granularity, 128);
  layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// the maps themselves, against their textbook definitions on divisible sizes

TEST(layout_striped_puts_block_b_on_rank_b_mod_w) {
  sr_error e;
  const int w = 4;
  const int64_t g = 3, n = 4 * 3 * 5 + 2;  // 20 full blocks and a partial one
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, w, g, NULL, &l, &e), SR_OK);
  for (int64_t t = 0; t < n; t++) {
    int32_t r;
    int64_t k;
    CHECK_EQ_INT(layout_locate(&l, t, &r, &k), 0);
    int64_t b = t / g;
    CHECK_EQ_INT(r, b % w);
    CHECK_EQ_INT(k, (b / w) * g + t % g);  // blocks before it on that rank, then the offset in the block
  }
  layout_free(&l);
}

TEST(layout_zigzag_rank_r_holds_chunks_r_and_2w_minus_1_minus_r) {
  sr_error e;
  const int w = 5;
  const int64_t c = 6, n = 2 * w * c;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_ZIGZAG, n, w, 1, NULL, &l, &e), SR_OK);
  for (int64_t t = 0; t < n; t++) {
    int32_t r;
    int64_t k;
    layout_locate(&l, t, &r, &k);
    int64_t chunk = t / c;
    CHECK_EQ_INT(r, chunk < w ? chunk : 2 * w - 1 - chunk);
    CHECK_EQ_INT(k, chunk < w ? t % c : c + t % c);
  }
  // Two runs a rank, except rank W-1 whose chunks W-1 and W touch and merge into one.
  for (int r = 0; r < w; r++) CHECK_EQ_INT(l.rank_run_begin[r + 1] - l.rank_run_begin[r], r == w - 1 ? 1 : 2);
  layout_free(&l);
}

TEST(layout_zigzag_on_one_rank_is_one_run) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_ZIGZAG, 17, 1, 1, NULL, &l, &e), SR_OK);
  CHECK_EQ_INT(l.n_runs, 1);
  CHECK_EQ_INT(l.rank_count[0], 17);
  layout_free(&l);
}

TEST(layout_contiguous_gives_the_first_ranks_the_remainder) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, 10, 4, 1, NULL, &l, &e), SR_OK);
  const int64_t want[4] = {3, 3, 2, 2};
  for (int r = 0; r < 4; r++) CHECK_EQ_INT(l.rank_count[r], want[r]);
  CHECK_EQ_INT(layout_global(&l, 2, 0), 6);
  CHECK_EQ_INT(layout_global(&l, 3, 1), 9);
  CHECK_EQ_INT(layout_global(&l, 3, 2), -1);
  int32_t r;
  int64_t k;
  CHECK_EQ_INT(layout_locate(&l, 10, &r, &k), -1);
  CHECK_EQ_INT(layout_locate(&l, -1, &r, &k), -1);
  layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// dense causal work per rank

TEST(layout_zigzag_balances_dense_causal_work_within_one_row) {
  sr_error e;
  int64_t work[32];
  for (int w = 1; w <= 16; w++)
    for (int64_t n = 1; n <= 400; n += 3) {
      layout l;
      CHECK_EQ_INT(layout_build(LAYOUT_ZIGZAG, n, w, 1, NULL, &l, &e), SR_OK);
      causal_work(&l, work);
      int64_t lo = work[0], hi = work[0];
      for (int r = 1; r < w; r++) lo = sr_min64(lo, work[r]), hi = sr_max64(hi, work[r]);
      CHECK(hi - lo <= n);  // one query row attends at most n keys
      layout_free(&l);
    }
}

TEST(layout_striped_balances_dense_causal_work_within_one_block_row) {
  sr_error e;
  int64_t work[32];
  for (int w = 1; w <= 13; w += 2)
    for (size_t gi = 0; gi < sizeof grans / sizeof *grans; gi++)
      for (int64_t n = 1; n <= 600; n += 11) {
        layout l;
        CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, w, grans[gi], NULL, &l, &e), SR_OK);
        causal_work(&l, work);
        int64_t lo = work[0], hi = work[0];
        for (int r = 1; r < w; r++) lo = sr_min64(lo, work[r]), hi = sr_max64(hi, work[r]);
        CHECK(hi - lo <= l.granularity * n);  // one block row: G queries of at most n keys
        layout_free(&l);
      }
}

TEST(layout_contiguous_dense_causal_work_follows_the_closed_form) {
  // With c = N/W tokens a rank, rank r's queries are rc..rc+c-1: work_r = c*c*r + c(c+1)/2, so
  // last/first = 1 + 2(W-1)c/(c+1), which tends to 2W-1 as c grows.
  sr_error e;
  const int w = 8;
  const int64_t c = 1000, n = w * c;
  int64_t work[8];
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, n, w, 1, NULL, &l, &e), SR_OK);
  causal_work(&l, work);
  for (int r = 0; r < w; r++) CHECK_EQ_INT(work[r], c * c * r + c * (c + 1) / 2);
  double ratio = (double)work[w - 1] / (double)work[0];
  CHECK_NEAR(ratio, 1.0 + 2.0 * (w - 1) * c / (c + 1.0), 1e-9);
  CHECK_NEAR(ratio, 2 * w - 1, 0.02);
  layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// names and permutation files

TEST(layout_parse_kind_reads_names_and_granularity) {
  sr_error e;
  layout_kind k;
  int64_t g = 128;
  CHECK_EQ_INT(layout_parse_kind("zigzag", &k, &g, &e), SR_OK);
  CHECK_EQ_INT(k, LAYOUT_ZIGZAG);
  CHECK_EQ_INT(g, 128);
  CHECK_EQ_INT(layout_parse_kind("striped:64", &k, &g, &e), SR_OK);
  CHECK_EQ_INT(k, LAYOUT_STRIPED);
  CHECK_EQ_INT(g, 64);
  CHECK_EQ_INT(layout_parse_kind("striped1", &k, &g, &e), SR_OK);
  CHECK_EQ_INT(g, 1);
  CHECK_EQ_INT(layout_parse_kind("permutation:/tmp/p.txt", &k, &g, &e), SR_OK);
  CHECK_EQ_INT(k, LAYOUT_PERMUTATION);
  CHECK(strcmp(layout_permutation_path("permutation:/tmp/p.txt"), "/tmp/p.txt") == 0);
  CHECK_EQ_INT(layout_parse_kind("spiral", &k, &g, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "layout");
  CHECK_STR_CONTAINS(e.msg, "spiral");
  CHECK_EQ_INT(layout_parse_kind("striped:0", &k, &g, &e), SR_EINPUT);
  CHECK_EQ_INT(layout_parse_kind("striped:x", &k, &g, &e), SR_EINPUT);
  CHECK(strcmp(layout_kind_name(LAYOUT_STRIPED), "striped") == 0);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

TEST(layout_permutation_file_in_both_formats_gives_the_same_layout) {
  sr_error e;
  char pj[600], pl[600];
  snprintf(pj, sizeof pj, "%s/perm.json", test_tmpdir());
  snprintf(pl, sizeof pl, "%s/perm.txt", test_tmpdir());
  write_file(pj, "[4, 0, 5, 1, 2, 3, 6]\n");
  write_file(pl, "4\n0\n5\n1\n2\n3\n6\n");
  layout a, b;
  CHECK_EQ_INT(layout_load_permutation(pj, 7, 3, &a, &e), SR_OK);
  CHECK_EQ_INT(layout_load_permutation(pl, 7, 3, &b, &e), SR_OK);
  // 7 tokens over 3 ranks: 3, 2, 2 entries of the file's order.
  const int64_t want[7] = {4, 0, 5, 1, 2, 3, 6};
  int i = 0;
  for (int r = 0; r < 3; r++)
    for (int64_t k = 0; k < a.rank_count[r]; k++, i++) {
      CHECK_EQ_INT(layout_global(&a, r, k), want[i]);
      CHECK_EQ_INT(layout_global(&b, r, k), want[i]);
    }
  CHECK_EQ_INT(i, 7);
  CHECK_EQ_INT(check_bijection(&a), 0);
  layout_free(&a);
  layout_free(&b);
}

TEST(layout_bad_permutation_files_name_file_field_and_reason) {
  sr_error e;
  char p[600];
  snprintf(p, sizeof p, "%s/bad.json", test_tmpdir());
  layout l;
  write_file(p, "[0, 1, 1]");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, p);
  CHECK_STR_CONTAINS(e.msg, "[2]");
  CHECK_STR_CONTAINS(e.msg, "twice");
  write_file(p, "[0, 1, 7]");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "outside");
  write_file(p, "[0, 1]");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "2 entries");
  write_file(p, "[0, \"1\", 2]");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "[1]");
  write_file(p, "[0, 1, 2");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "truncated");
  write_file(p, "0\n1\nx\n");
  CHECK_EQ_INT(layout_load_permutation(p, 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "line 3");
  CHECK_EQ_INT(layout_load_permutation("/nonexistent/perm.txt", 3, 2, &l, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "/nonexistent/perm.txt");
}

TEST(layout_rejects_impossible_sizes) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, 0, 4, 1, NULL, &l, &e), SR_EINPUT);
  CHECK_EQ_INT(layout_build(LAYOUT_CONTIGUOUS, 10, 0, 1, NULL, &l, &e), SR_EINPUT);
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, 10, 2, 0, NULL, &l, &e), SR_EINPUT);
}

// test_tiles_runs.c — the forward form (tiles_runs_build) against brute force: every kept (q, k) element
// computed exactly once by a FULL tile, a PARTIAL tile, a run or a bar, runs and bars where they may be,
// the runs no more chunks than the tiles they replace, and the CPU reference forward equal on both forms.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

static int64_t *positions_of(const layout *l, int r) {
  int64_t *pos = malloc((size_t)(l->rank_count[r] + 1) * sizeof *pos);
  layout_positions(l, r, pos);
  return pos;
}

// A VS head made of scattered slashes (the budget mix's hard case), a short window and a few verticals.
static void scattered_head(head_pattern *h, int64_t n, uint64_t *seed) {
  h->kind = PATTERN_VS;
  h->vertical = malloc(64 * sizeof(int32_t));
  h->slash = malloc(200 * sizeof(int32_t));
  int32_t nv = 0, ns = 0;
  for (int x = 0; x < 40; x++) h->vertical[nv++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  for (int d = 0; d < 16 && d < n; d++) h->slash[ns++] = d;
  for (int x = 0; x < 60; x++) h->slash[ns++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  h->n_vertical = fx_unique(h->vertical, nv);
  h->n_slash = fx_unique(h->slash, ns);
}

// The fixture's mixed pattern (heads VS, VS, WINDOW, BLOCK, DENSE, ...) with its first two heads made of
// scattered slashes.
static void scattered_mixed_pattern(pattern *p, int64_t n, int heads, uint64_t seed) {
  fx_mixed_pattern(p, n, heads, seed);
  seed++;
  for (int h = 0; h < 2 && h < heads; h++) {
    head_pattern *hp = pattern_head(p, 0, h);
    free(hp->vertical), free(hp->slash);
    scattered_head(hp, n, &seed);
  }
}

typedef struct {
  int64_t tiles_in, runs, converted;  // chunks of the tile form's PARTIAL VS tiles; runs; tiles converted
} run_stats;

// The exhaustive check of one pattern on one layout; returns the run statistics over every cell.
static run_stats check_runs(const pattern *p, const layout *l) {
  sr_error e;
  int W = l->world, H = p->heads;
  run_stats st = {0, 0, 0};
  int64_t **pos = malloc((size_t)W * sizeof *pos);
  for (int r = 0; r < W; r++) pos[r] = positions_of(l, r);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(p, 0, &masks, &e), SR_OK);
  int64_t bad_cover = 0, bad_full = 0, bad_run = 0, bad_bar = 0, bad_order = 0;
  for (int q = 0; q < W; q++) {
    tile_index t, f;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &t, &e), SR_OK);
    if (tiles_runs_build(&t, masks, l, &f, &e) != SR_OK) {
      test_fail(__FILE__, __LINE__, "tiles_runs_build: %s", e.msg);
      tiles_free(&t);
      continue;
    }
    int64_t nq = t.n_qtiles;
    for (int h = 0; h < H; h++) {
      const head_pattern *hp = pattern_head(p, 0, h);
      for (int src = 0; src < W; src++) {
        int64_t nqr = l->rank_count[q], nks = l->rank_count[src];
        uint8_t *cov = calloc((size_t)(nqr * nks) + 1, 1), *in_entry = calloc((size_t)nks + 1, 1);
        for (int64_t i = 0; i < nq; i++) {
          int64_t c = ((int64_t)h * nq + i) * (W + 1) + src;
          int64_t r0 = i * TILE, r1 = sr_min64(r0 + TILE, nqr);
          for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1]; a++)
            if (t.tile_kind[a] == TILE_PARTIAL && hp->kind == PATTERN_VS) st.tiles_in += 2;
          memset(in_entry, 0, (size_t)nks);
          for (int64_t a = f.tile_cnt[c]; a < f.tile_cnt[c + 1]; a++) {
            int32_t j = f.tile_idx[a];
            for (int64_t y = (int64_t)j * TILE; y < sr_min64((int64_t)j * TILE + TILE, nks); y++) {
              in_entry[y] = 1;
              for (int64_t x = r0; x < r1; x++) {
                int keep = pattern_keeps(hp, pos[q][x], pos[src][y]);
                if (f.tile_kind[a] == TILE_FULL && !keep) bad_full++;
                if (keep) cov[x * nks + y]++;
              }
            }
          }
          for (int64_t a = f.run_cnt[c]; a < f.run_cnt[c + 1]; a++) {
            int64_t k0 = f.run_key[a], len = f.run_len[a];
            if (len < 1 || len > 64 || k0 < 0 || k0 + len > nks ||
                (a > f.run_cnt[c] && k0 < f.run_key[a - 1] + f.run_len[a - 1])) {
              bad_order++;
              continue;
            }
            st.runs++;
            for (int64_t y = k0; y < k0 + len; y++) {
              if (in_entry[y]) bad_run++;  // a run inside a tile entry would compute its elements twice
              in_entry[y] = 2;
              for (int64_t x = r0; x < r1; x++)
                if (pattern_keeps(hp, pos[q][x], pos[src][y])) cov[x * nks + y]++;
            }
          }
          for (int64_t a = f.bar_cnt[c]; a < f.bar_cnt[c + 1]; a++) {
            int32_t kl = f.bar_idx[a];
            if (kl < 0 || kl >= nks || (a > f.bar_cnt[c] && kl <= f.bar_idx[a - 1])) {
              bad_order++;
              continue;
            }
            if (in_entry[kl]) bad_bar++;
            for (int64_t x = r0; x < r1; x++) {
              if (pos[q][x] < pos[src][kl]) continue;
              if (!pattern_keeps(hp, pos[q][x], pos[src][kl])) bad_bar++;
              cov[x * nks + kl]++;
            }
          }
        }
        for (int64_t x = 0; x < nqr; x++)
          for (int64_t y = 0; y < nks; y++)
            if (cov[x * nks + y] != pattern_keeps(hp, pos[q][x], pos[src][y])) bad_cover++;
        free(cov), free(in_entry);
      }
    }
    for (int64_t x = 0; x < t.n_tiles; x++) st.converted += t.tile_kind[x] == TILE_PARTIAL;
    for (int64_t x = 0; x < f.n_tiles; x++) st.converted -= f.tile_kind[x] == TILE_PARTIAL;
    tiles_free(&f);
    tiles_free(&t);
  }
  CHECK_EQ_INT(bad_cover, 0);
  CHECK_EQ_INT(bad_full, 0);
  CHECK_EQ_INT(bad_run, 0);
  CHECK_EQ_INT(bad_bar, 0);
  CHECK_EQ_INT(bad_order, 0);
  CHECK(st.runs <= 2 * st.converted);  // at most two runs start in a converted tile (64 + 64 = 128 keys)
  tiles_masks_free(masks, H);
  for (int r = 0; r < W; r++) free(pos[r]);
  free(pos);
  return st;
}

static run_stats check_case(int kind, int64_t n, int W, int64_t g, uint64_t seed, int scattered) {
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  if (scattered) scattered_mixed_pattern(&p, n, 5, seed);
  else fx_mixed_pattern(&p, n, 5, seed);
  run_stats st = check_runs(&p, &l);
  pattern_free(&p);
  fx_layout_free(&l);
  return st;
}

TEST(runs_cover_kept_elements_once_on_one_rank) {
  run_stats st = check_case(0, 1000, 1, 1, 1, 0);
  CHECK(st.converted > 0 && st.runs > 0);
}
TEST(runs_cover_kept_elements_once_contiguous_uneven) { check_case(0, 1100, 3, 1, 2, 0); }
TEST(runs_cover_kept_elements_once_zigzag_straddling_chunks) { check_case(1, 1300, 2, 1, 3, 1); }
TEST(runs_cover_kept_elements_once_striped_128) {
  run_stats st = check_case(2, 1700, 3, 128, 4, 1);
  CHECK(st.converted > 0);
}
TEST(runs_cover_kept_elements_once_striped_1_nothing_converts) {
  // no tile of striped:1 holds consecutive positions: the form is the tile form
  run_stats st = check_case(2, 700, 2, 1, 6, 1);
  CHECK_EQ_INT(st.converted, 0);
  CHECK_EQ_INT(st.runs, 0);
}
TEST(runs_cover_kept_elements_once_striped_200_not_a_tile_multiple) { check_case(2, 1500, 2, 200, 7, 1); }
TEST(runs_cover_kept_elements_once_with_empty_ranks) { check_case(2, 200, 4, 128, 9, 1); }

// Scattered slashes on one rank: fewer 64-key chunks than the PARTIAL tiles' halves.
TEST(runs_take_fewer_chunks_than_tiles_for_scattered_slashes) {
  run_stats st = check_case(0, 2000, 1, 1, 21, 1);
  CHECK(st.runs > 0);
  CHECK(st.runs < st.tiles_in);
}

// An index built for one head (every head keeps the same elements) serves every head with masks[0].
TEST(runs_of_a_one_head_index) {
  sr_error e;
  layout l;
  fx_layout(0, 900, 1, 1, &l);
  pattern p;
  pattern_alloc(&p, 900, 1, 1, &e);
  uint64_t seed = 5;
  scattered_head(pattern_head(&p, 0, 0), 900, &seed);
  run_stats st = check_runs(&p, &l);
  CHECK(st.runs > 0);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---- the CPU reference forward computes the same function on both forms -------------------------

TEST(ref_fwd_equal_on_tile_and_runs_forms) {
  sr_error e;
  int64_t n = 700;
  int W = 2, H = 4, KH = 2, d = 16;
  layout l;
  fx_layout(0, n, W, 1, &l);
  pattern p;
  scattered_mixed_pattern(&p, n, H, 31);
  uint64_t seed = 32;
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  int64_t nmax = l.rank_count[0];
  float *qf = malloc(sizeof(float) * (size_t)(nmax * H * d)), *kf = malloc(sizeof(float) * (size_t)(nmax * KH * d));
  float *vf = malloc(sizeof(float) * (size_t)(nmax * KH * d));
  for (int64_t x = 0; x < nmax * H * d; x++) qf[x] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1.0);
  for (int64_t x = 0; x < nmax * KH * d; x++) kf[x] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1.0);
  for (int64_t x = 0; x < nmax * KH * d; x++) vf[x] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1.0);
  int64_t *pos[2] = {positions_of(&l, 0), positions_of(&l, 1)};
  double worst = 0;
  int64_t runs = 0;
  for (int q = 0; q < W; q++) {
    tile_index t, f;
    CHECK_EQ_INT(tiles_build(&p, 0, &l, q, &t, &e), SR_OK);
    CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
    runs += f.n_runs;
    int64_t nqr = l.rank_count[q];
    float *o[2], *lse[2];
    for (int v = 0; v < 2; v++) {
      o[v] = calloc((size_t)(nqr * H * d), sizeof(float));
      lse[v] = malloc(sizeof(float) * (size_t)(nqr * H));
      for (int64_t x = 0; x < nqr * H; x++) lse[v][x] = -INFINITY;
      for (int s = 0; s < W; s++) {
        sa_shape sh = {nqr, l.rank_count[s], H, KH, d, 0.25f, 0};
        // the same random K/V rows serve every source (only the pattern's elements differ)
        CHECK_EQ_INT(sa_ref_fwd(&sh, qf, kf, vf, pos[q], pos[s], v ? &f : &t, s, masks, o[v], lse[v]), 0);
      }
    }
    for (int64_t x = 0; x < nqr * H * d; x++) worst = fmax(worst, fabs(o[0][x] - o[1][x]));
    for (int64_t x = 0; x < nqr * H; x++)
      if (!(lse[0][x] == lse[1][x] || fabs(lse[0][x] - lse[1][x]) < 1e-5)) worst = fmax(worst, 1.0);
    for (int v = 0; v < 2; v++) free(o[v]), free(lse[v]);
    tiles_free(&f);
    tiles_free(&t);
  }
  CHECK(runs > 0);
  CHECK(worst < 1e-5);
  free(qf), free(kf), free(vf), free(pos[0]), free(pos[1]);
  tiles_masks_free(masks, H);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---- bad input ---------------------------------------------------------------------------------------

TEST(runs_refuse_a_mismatched_layout_and_a_second_pass_and_the_transpose_refuses_runs) {
  sr_error e;
  layout l, l2;
  fx_layout(0, 900, 1, 1, &l);
  fx_layout(0, 900, 2, 1, &l2);
  pattern p;
  pattern_alloc(&p, 900, 1, 1, &e);
  uint64_t seed = 7;
  scattered_head(pattern_head(&p, 0, 0), 900, &seed);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  tile_index t, f, g;
  tile_index_t tt;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  CHECK_EQ_INT(tiles_runs_build(&t, masks, &l2, &f, &e), SR_EINPUT);
  CHECK(strstr(e.msg, "layout") != NULL);
  CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
  CHECK(f.n_runs > 0);
  CHECK_EQ_INT(tiles_runs_build(&f, masks, &l, &g, &e), SR_EINPUT);
  CHECK_EQ_INT(tiles_transpose(&f, 0, 900, &tt, &e), SR_EINPUT);
  CHECK(strstr(e.msg, "runs") != NULL);
  tiles_free(&f);
  tiles_free(&t);
  tiles_masks_free(masks, 1);
  pattern_free(&p);
  fx_layout_free(&l);
  fx_layout_free(&l2);
}

// By hand: one slash (offset 100) and one vertical (key 255) over 512 tokens on one rank. Query tile 1
// (rows 128..255) keeps keys 28..155 through the slash: the tile form computes KV tiles 0 and 1 whole
// (256 keys); the forward form runs [28, 92) and [92, 156), the second across the join of the two tiles,
// and key 255, kept by row 255 alone, is a bar.
TEST(runs_by_hand_one_slash_crosses_a_tile_join_and_the_last_rows_vertical_is_a_bar) {
  sr_error e;
  layout l;
  fx_layout(0, 512, 1, 1, &l);
  pattern p;
  pattern_alloc(&p, 512, 1, 1, &e);
  head_pattern *hp = pattern_head(&p, 0, 0);
  hp->kind = PATTERN_VS;
  hp->vertical = malloc(sizeof(int32_t)), hp->slash = malloc(sizeof(int32_t));
  hp->vertical[0] = 255, hp->slash[0] = 100, hp->n_vertical = 1, hp->n_slash = 1;
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  tile_index t, f;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
  int64_t c = 1 * 2;  // head 0, query tile 1, source 0 (W + 1 = 2 offsets a cell)
  CHECK_EQ_INT(t.tile_cnt[c + 1] - t.tile_cnt[c], 2);
  CHECK_EQ_INT(f.tile_cnt[c + 1] - f.tile_cnt[c], 0);
  CHECK_EQ_INT(f.run_cnt[c + 1] - f.run_cnt[c], 2);
  if (f.run_cnt[c + 1] - f.run_cnt[c] == 2) {
    int64_t a = f.run_cnt[c];
    CHECK_EQ_INT(f.run_key[a], 28);
    CHECK_EQ_INT(f.run_len[a], 64);
    CHECK_EQ_INT(f.run_key[a + 1], 92);
    CHECK_EQ_INT(f.run_len[a + 1], 64);
  }
  CHECK_EQ_INT(f.bar_cnt[c + 1] - f.bar_cnt[c], 1);
  if (f.bar_cnt[c + 1] - f.bar_cnt[c] == 1) CHECK_EQ_INT(f.bar_idx[f.bar_cnt[c]], 255);
  tiles_free(&f);
  tiles_free(&t);
  tiles_masks_free(masks, 1);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---- the forward form's counts (sparsering pattern --fwd-runs) ------------------------------------

TEST(runs_count_layer_sums_every_ranks_forward_form_and_saves_work_on_scattered_slashes) {
  sr_error e;
  layout l;
  fx_layout(0, 1100, 2, 1, &l);
  pattern p;
  scattered_mixed_pattern(&p, 1100, 5, 41);
  runs_count rc;
  CHECK_EQ_INT(tiles_runs_count_layer(&p, 0, &l, &rc, &e), SR_OK);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  double full = 0, partial = 0, runs = 0, bars = 0, tile_work = 0;
  for (int r = 0; r < 2; r++) {
    tile_index t, f;
    CHECK_EQ_INT(tiles_build(&p, 0, &l, r, &t, &e), SR_OK);
    CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
    tile_work += (double)TILE * TILE * (double)t.n_tiles + (double)TILE * (double)t.n_bars;
    for (int64_t x = 0; x < f.n_tiles; x++) f.tile_kind[x] == TILE_FULL ? full++ : partial++;
    runs += (double)f.n_runs, bars += (double)f.n_bars;
    tiles_free(&t), tiles_free(&f);
  }
  CHECK(rc.full == full && rc.partial == partial && rc.runs == runs && rc.bars == bars);
  CHECK(rc.work == (double)TILE * TILE * (full + partial) + (double)TILE * 64 * runs + (double)TILE * bars);
  CHECK(runs > 0 && rc.work < tile_work);
  tiles_masks_free(masks, p.heads);
  pattern_free(&p);
  fx_layout_free(&l);
}

TEST(pattern_cli_fwd_runs_adds_the_forward_forms_columns) {
  // dense causal, 4 tiles of 128, one rank, tiny-test's 4 heads: no VS head, so the forward form is the
  // tile form (24 FULL, 16 PARTIAL, no runs or bars; work 40 x 128^2)
  char cmd[1024], csv[600], *out = NULL, *text = NULL;
  snprintf(csv, sizeof csv, "%s/r.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering pattern --model tiny-test --seq 512 --pattern dense --layout contiguous "
           "--ranks 1 --fwd-runs --csv %s", test_bin_dir(), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "fwd runs");
  CHECK_STR_CONTAINS(out, "100.0%");
  free(out);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(text, "full_tiles,partial_tiles,bars,runs_full_tiles,runs_partial_tiles,runs,runs_bars,runs_work\n");
  CHECK_STR_CONTAINS(text, ",24,16,0,24,16,0,0,655360\n");
  free(text);
}

// tiles_runs_account_layer's (query rank, source rank) cells against the forms' own segments.
TEST(runs_account_layer_splits_the_counts_by_query_and_source_rank) {
  sr_error e;
  layout l;
  fx_layout(2, 1700, 3, 128, &l);  // striped:128 over 3 ranks
  pattern p;
  scattered_mixed_pattern(&p, 1700, 5, 51);
  work_count acc[9];
  CHECK_EQ_INT(tiles_runs_account_layer(&p, 0, &l, acc, &e), SR_OK);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  int64_t bad = 0, runs = 0;
  for (int q = 0; q < 3; q++) {
    tile_index t, f;
    CHECK_EQ_INT(tiles_build(&p, 0, &l, q, &t, &e), SR_OK);
    CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
    for (int s = 0; s < 3; s++) {
      int64_t full = 0, partial = 0, nr = 0, nb = 0;
      for (int64_t c = 0; c < (int64_t)f.heads * f.n_qtiles; c++) {
        for (int64_t a = f.tile_cnt[c * 4 + s]; a < f.tile_cnt[c * 4 + s + 1]; a++) f.tile_kind[a] ? partial++ : full++;
        nr += f.run_cnt[c * 4 + s + 1] - f.run_cnt[c * 4 + s];
        nb += f.bar_cnt[c * 4 + s + 1] - f.bar_cnt[c * 4 + s];
      }
      const work_count *w = &acc[q * 3 + s];
      bad += w->full != full || w->partial != partial || w->runs != nr || w->bars != nb;
      runs += nr;
    }
    tiles_free(&t), tiles_free(&f);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(runs > 0);
  tiles_masks_free(masks, p.heads);
  pattern_free(&p);
  fx_layout_free(&l);
}

// tiles_runs_account_layer builds a (query rank, head) pair an item over the host's threads: on a later layer of a
// generated pattern (vs-topp's scattered slashes) the counts are one serial build per rank's, on one thread and on
// several alike.
TEST(runs_account_layer_of_a_later_layer_is_the_serial_forms_on_any_thread_count) {
  sr_error e;
  model_config m = {.num_layers = 3, .num_heads = 5};
  pattern p;
  CHECK_EQ_INT(pattern_from_spec("vs-topp:0.9", &m, 2300, 7, 0, &p, &e), SR_OK);
  layout l;
  fx_layout(2, 2300, 3, 128, &l);  // striped:128 over 3 ranks
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 2, &masks, &e), SR_OK);
  work_count want[9];
  memset(want, 0, sizeof want);
  for (int q = 0; q < 3; q++) {
    tile_index t, f;
    CHECK_EQ_INT(tiles_build(&p, 2, &l, q, &t, &e), SR_OK);
    CHECK_EQ_INT(tiles_runs_build(&t, masks, &l, &f, &e), SR_OK);
    for (int64_t c = 0; c < (int64_t)f.heads * f.n_qtiles; c++)
      for (int s = 0; s < 3; s++) {
        work_count *w = &want[q * 3 + s];
        for (int64_t a = f.tile_cnt[c * 4 + s]; a < f.tile_cnt[c * 4 + s + 1]; a++) f.tile_kind[a] ? w->partial++ : w->full++;
        w->runs += f.run_cnt[c * 4 + s + 1] - f.run_cnt[c * 4 + s];
        w->bars += f.bar_cnt[c * 4 + s + 1] - f.bar_cnt[c * 4 + s];
      }
    tiles_free(&t), tiles_free(&f);
  }
  const char *was = getenv("SR_THREADS");
  char saved[32] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  const char *threads[2] = {"1", "4"};
  int64_t runs = 0;
  for (int i = 0; i < 2; i++) {
    setenv("SR_THREADS", threads[i], 1);
    work_count got[9];
    CHECK_EQ_INT(tiles_runs_account_layer(&p, 2, &l, got, &e), SR_OK);
    int bad = 0;
    for (int x = 0; x < 9; x++)
      bad += got[x].full != want[x].full || got[x].partial != want[x].partial || got[x].runs != want[x].runs ||
             got[x].bars != want[x].bars || got[x].pairs != 0;
    CHECK_EQ_INT(bad, 0);
    for (int x = 0; x < 9; x++) runs += got[x].runs;
  }
  if (*saved) setenv("SR_THREADS", saved, 1);
  else unsetenv("SR_THREADS");
  CHECK(runs > 0);
  // a layer outside the pattern is the input error it was
  work_count got[9];
  CHECK(tiles_runs_account_layer(&p, 3, &l, got, &e) == SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "outside");
  tiles_masks_free(masks, p.heads);
  pattern_free(&p);
  fx_layout_free(&l);
}

// test_tiles_account.c — the fast accounting path against the generic one (which test_tiles.c checks
// against brute force), on aligned layouts where the fast path applies, and its refusal elsewhere.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

static void check_fast_equals_generic(int kind, int64_t n, int W, int64_t g, uint64_t seed, int heads) {
  sr_error e;
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  fx_mixed_pattern(&p, n, heads, seed);
  size_t cells = (size_t)heads * W * W;
  work_count *fast = calloc(cells, sizeof *fast), *gen = calloc(cells, sizeof *gen);
  int handled = 0;
  CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, fast, &handled, &e), SR_OK);
  CHECK_EQ_INT(handled, 1);
  CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, gen, &e), SR_OK);
  int bad = 0;
  for (size_t x = 0; x < cells; x++)
    if (fast[x].full != gen[x].full || fast[x].partial != gen[x].partial || fast[x].bars != gen[x].bars ||
        fast[x].pairs != gen[x].pairs) {
      if (bad++ < 4)
        test_fail(__FILE__, __LINE__, "cell %zu (head %zu): fast %lld/%lld/%lld/%.0f generic %lld/%lld/%lld/%.0f", x,
                  x / ((size_t)W * W), (long long)fast[x].full, (long long)fast[x].partial, (long long)fast[x].bars,
                  fast[x].pairs, (long long)gen[x].full, (long long)gen[x].partial, (long long)gen[x].bars, gen[x].pairs);
    }
  CHECK_EQ_INT(bad, 0);
  free(fast);
  free(gen);
  pattern_free(&p);
  fx_layout_free(&l);
}

TEST(fast_accounting_equals_generic_on_one_rank) { check_fast_equals_generic(0, 3000, 1, 1, 21, 10); }
TEST(fast_accounting_equals_generic_striped_128_short_last_tile) { check_fast_equals_generic(2, 5000, 3, 128, 22, 10); }
TEST(fast_accounting_equals_generic_striped_128_many_ranks) { check_fast_equals_generic(2, 9000, 8, 128, 23, 10); }
TEST(fast_accounting_equals_generic_striped_256_period_2w) { check_fast_equals_generic(2, 6000, 2, 256, 24, 10); }
TEST(fast_accounting_equals_generic_contiguous_aligned) { check_fast_equals_generic(0, 3 * 4 * TILE, 3, 1, 25, 10); }
TEST(fast_accounting_equals_generic_zigzag_aligned) { check_fast_equals_generic(1, 2 * 2 * 3 * TILE, 2, 1, 26, 10); }
TEST(fast_accounting_equals_generic_with_fewer_tiles_than_ranks) { check_fast_equals_generic(2, 300, 6, 128, 27, 5); }

TEST(fast_accounting_declines_unaligned_layouts) {
  sr_error e;
  layout l;
  fx_layout(2, 2000, 2, 64, &l);  // striped G = 64: every local tile straddles two runs
  pattern p;
  fx_mixed_pattern(&p, 2000, 2, 28);
  work_count w[8];
  int handled = 1;
  CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, w, &handled, &e), SR_OK);
  CHECK_EQ_INT(handled, 0);
  pattern_free(&p);
  fx_layout_free(&l);
}

// test_pattern.c — the reference keep rule of every pattern kind and head validation.
#include <stdlib.h>
#include <string.h>

#include "plan/pattern.h"
#include "tests/test.h"

TEST(pattern_alloc_makes_every_head_dense_and_causal) {
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 100, 2, 3, &e), SR_OK);
  for (int l = 0; l < 2; l++)
    for (int h = 0; h < 3; h++) {
      const head_pattern *hp = pattern_head(&p, l, h);
      CHECK_EQ_INT(hp->kind, PATTERN_DENSE);
      CHECK(pattern_keeps(hp, 5, 5) && pattern_keeps(hp, 5, 0) && !pattern_keeps(hp, 5, 6));
    }
  pattern_free(&p);
  CHECK_EQ_INT(pattern_alloc(&p, 0, 1, 1, &e), SR_EINPUT);
}

TEST(window_keeps_sinks_and_the_last_window_keys) {
  head_pattern h = {.kind = PATTERN_WINDOW, .sinks = 2, .window = 3};
  // row 10 keeps keys 0, 1 (sinks) and 8, 9, 10 (q - k < 3)
  int expect[11] = {1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1};
  for (int k = 0; k <= 10; k++) CHECK_EQ_INT(pattern_keeps(&h, 10, k), expect[k]);
  CHECK(!pattern_keeps(&h, 10, 11));
}

TEST(vertical_slash_keeps_columns_and_diagonals) {
  int32_t v[] = {3, 7}, s[] = {0, 4};
  head_pattern h = {.kind = PATTERN_VS, .n_vertical = 2, .n_slash = 2, .vertical = v, .slash = s};
  CHECK(pattern_keeps(&h, 20, 3) && pattern_keeps(&h, 20, 7));   // verticals
  CHECK(pattern_keeps(&h, 20, 20) && pattern_keeps(&h, 20, 16));  // slashes 0 and 4
  CHECK(!pattern_keeps(&h, 20, 15) && !pattern_keeps(&h, 2, 3));  // neither; vertical above the diagonal
}

TEST(block_keeps_by_block_bit_and_causality) {
  uint64_t mask[3] = {0x1, 0x3, 0x4};  // rows: block 0 -> {0}, 1 -> {0,1}, 2 -> {2}
  head_pattern h = {.kind = PATTERN_BLOCK, .block = 4, .n_blocks = 3, .row_words = 1, .mask = mask};
  CHECK(pattern_keeps(&h, 5, 1) && pattern_keeps(&h, 5, 4) && !pattern_keeps(&h, 5, 6));
  CHECK(!pattern_keeps(&h, 9, 1) && pattern_keeps(&h, 9, 8));
}

TEST(validate_rejects_unsorted_duplicate_and_out_of_range_indices) {
  sr_error e;
  int32_t ok[] = {1, 5}, dup[] = {1, 1}, down[] = {5, 1}, far[] = {1, 100};
  head_pattern h = {.kind = PATTERN_VS, .n_vertical = 2, .vertical = ok};
  CHECK_EQ_INT(pattern_validate_head(&h, 100, "p.json", "layer 0 head 1", &e), SR_OK);
  h.vertical = dup;
  CHECK_EQ_INT(pattern_validate_head(&h, 100, "p.json", "layer 0 head 1", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "p.json: layer 0 head 1");
  h.vertical = down;
  CHECK_EQ_INT(pattern_validate_head(&h, 100, "p.json", "x", &e), SR_EINPUT);
  h.vertical = far;
  CHECK_EQ_INT(pattern_validate_head(&h, 100, "p.json", "x", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "outside");
  head_pattern b = {.kind = PATTERN_BLOCK, .block = 4, .n_blocks = 2, .row_words = 1};
  CHECK_EQ_INT(pattern_validate_head(&b, 10, NULL, "b", &e), SR_EINPUT);  // n_blocks should be 3
}

TEST(pattern_layer_heads_uniform_only_when_every_head_keeps_the_same_elements) {
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 64, 3, 4, &e), SR_OK);
  CHECK(pattern_layer_heads_uniform(&p, 0));  // all dense
  for (int h = 0; h < 4; h++) {
    head_pattern *x = pattern_head(&p, 1, h);
    x->kind = PATTERN_WINDOW, x->sinks = 4, x->window = 16;
  }
  CHECK(pattern_layer_heads_uniform(&p, 1));  // one window everywhere
  pattern_head(&p, 1, 3)->window = 17;
  CHECK(!pattern_layer_heads_uniform(&p, 1));  // one head's window differs
  pattern_head(&p, 2, 2)->kind = PATTERN_WINDOW, pattern_head(&p, 2, 2)->sinks = 0, pattern_head(&p, 2, 2)->window = 64;
  CHECK(!pattern_layer_heads_uniform(&p, 2));  // dense and window mixed, though this window keeps everything
  pattern_free(&p);
}

TEST(pattern_heads_equal_compares_descriptions_by_content_not_by_address) {
  int32_t v1[] = {0, 5, 9}, v2[] = {0, 5, 9}, v3[] = {0, 5, 10}, s1[] = {0, 1}, s2[] = {0, 1};
  head_pattern a = {.kind = PATTERN_VS, .n_vertical = 3, .n_slash = 2, .vertical = v1, .slash = s1};
  head_pattern b = {.kind = PATTERN_VS, .n_vertical = 3, .n_slash = 2, .vertical = v2, .slash = s2};
  CHECK(pattern_heads_equal(&a, &b));  // equal arrays at other addresses
  b.vertical = v3;
  CHECK(!pattern_heads_equal(&a, &b));  // one vertical differs
  b.vertical = v2, b.n_slash = 1;
  CHECK(!pattern_heads_equal(&a, &b));  // a shorter slash list
  head_pattern w1 = {.kind = PATTERN_WINDOW, .sinks = 4, .window = 16}, w2 = w1, d = {.kind = PATTERN_DENSE};
  CHECK(pattern_heads_equal(&w1, &w2));
  w2.window = 17;
  CHECK(!pattern_heads_equal(&w1, &w2));
  CHECK(!pattern_heads_equal(&w1, &d));  // another kind, even where it would keep the same elements
  uint64_t m1[] = {0x5, 0x3}, m2[] = {0x5, 0x3};
  head_pattern k1 = {.kind = PATTERN_BLOCK, .block = 4, .n_blocks = 2, .row_words = 1, .mask = m1}, k2 = k1;
  k2.mask = m2;
  CHECK(pattern_heads_equal(&k1, &k2));
  m2[1] = 0x1;
  CHECK(!pattern_heads_equal(&k1, &k2));
}

TEST(heads_with_empty_index_arrays_compare_equal_whether_or_not_they_allocated_them) {
  // n_vertical 0 with vertical NULL on one side and an allocation on the other: equal, and memcmp never
  // sees the NULL (undefined behaviour that `make test SAN=1` stops on)
  int32_t one[1] = {0};
  head_pattern a = {0}, b = {0};
  a.kind = b.kind = PATTERN_VS;
  b.vertical = one, b.slash = one;
  CHECK(pattern_heads_equal(&a, &b));
  CHECK(pattern_heads_equal(&b, &a));
  b.n_vertical = 1, a.n_vertical = 1;
  a.vertical = NULL;  // a count without its array is not the same head
  CHECK(!pattern_heads_equal(&a, &b));
  uint64_t word[1] = {0};
  head_pattern c = {0}, d = {0};
  c.kind = d.kind = PATTERN_BLOCK;
  d.mask = word;
  CHECK(pattern_heads_equal(&c, &d));
}

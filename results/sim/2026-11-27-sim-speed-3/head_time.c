// head_time.c: CPU seconds a head of exact accounting takes (striped G = 128, layer 0 of a one-layer model),
// the way the simulator accounts a layer's distinct heads: with -DPENDING (this branch) through
// tiles_account_head_add_pending and one tiles_accounter_fold, without it (main at c484000) through
// tiles_account_head_add. Prints a checksum of the counts (pairs, full, bars, two cells): the same before
// and after. Usage: head_time HEADS TOKENS RANKS MODEL PATTERN. Built against each tree's library:
//   cc -O2 -I. -D_GNU_SOURCE -std=c11 [-DPENDING] -o head_time head_time.c LIB -lcjson -lgsl -lgslcblas -lm -lpthread
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 6) return 2;
  sr_error e = {0};
  model_config m;
  int heads = atoi(argv[1]), W = atoi(argv[3]);
  int64_t n = atoll(argv[2]);
  if (model_load(argv[4], &m, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
  m.num_layers = 1;
  pattern p;
  layout l;
  if (pattern_from_spec(argv[5], &m, n, 0, 0, &p, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
  if (heads > p.heads) heads = p.heads;
  layout_build(LAYOUT_STRIPED, n, W, 128, NULL, &l, &e);
  tiles_accounter *a;
  tiles_accounter_open(&l, &a, &e);
  work_count *c = calloc((size_t)W * W, sizeof *c);
  double c0 = cpu_now();
  for (int h = 0; h < heads; h++) {
#ifdef PENDING
    tiles_account_head_add_pending(a, pattern_head(&p, 0, h), c, &e);
#else
    tiles_account_head_add(a, pattern_head(&p, 0, h), c, &e);
#endif
  }
#ifdef PENDING
  tiles_accounter_fold(a, c);
#endif
  double c1 = cpu_now(), pairs = 0;
  long long full = 0, bars = 0;
  for (int64_t i = 0; i < (int64_t)W * W; i++) pairs += c[i].pairs, full += c[i].full, bars += c[i].bars;
  printf("%s %s, %lld tokens, %d ranks: %d heads in %.3f s CPU (%.4f s a head); pairs %.17g full %lld bars %lld chk %.17g\n",
         argv[4], argv[5], (long long)n, W, heads, c1 - c0, (c1 - c0) / heads, pairs, full, bars,
         c[12345 % ((int64_t)W * W)].pairs + c[(int64_t)W * W - 7].bars);
  return 0;
}

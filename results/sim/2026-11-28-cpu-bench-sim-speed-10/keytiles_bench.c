// keytiles_bench.c — a lean view's column tiles alone (tiles_fast_key_tiles, plan/tiles_internal.h): 32768 tiles with
// keys at random, 3% of the tokens (about four keys a tile, as bench-sim's heads have on average); the fastest of 50
// runs on the portable path and on the AVX-512 path. Built against the branch's library from the tree's root:
//   mpicc -I. -D_GNU_SOURCE -std=c11 -O2 -o /tmp/keytiles_bench keytiles_bench.c build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "plan/tiles_internal.h"
#include "plan/util.h"
int main(void) {
  int64_t tiles = 32768, n = 0;
  int32_t *keys = malloc(sizeof(int32_t) * tiles * TILE);
  int64_t *out = malloc(sizeof(int64_t) * 5 * tiles);
  uint64_t s = 88172645463325252ull;
  for (int64_t k = 0; k < tiles * TILE; k++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; if (s % 1000 < 30) keys[n++] = (int32_t)k; }
  for (int isa = 0; isa <= 2; isa += 2) {
    sr_isa_cap(isa);
    double best = 1e9;
    int64_t m = 0;
    for (int r = 0; r < 50; r++) { double t = sr_now(); m = tiles_fast_key_tiles(keys, n, tiles, out); t = sr_now() - t; if (t < best) best = t; }
    printf("%s: %lld keys, %lld tiles: %.3f ms, %.2f ns a tile\n", isa ? "AVX-512" : "portable", (long long)n, (long long)m,
           best * 1e3, best * 1e9 / (double)m);
  }
}

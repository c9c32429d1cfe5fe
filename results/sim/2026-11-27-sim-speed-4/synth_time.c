// synth_time: CPU time of synth_vs_topp (one thread) and a checksum of every head's verticals and slashes.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "plan/pattern.h"
#include "plan/synth.h"
static uint64_t fnv(uint64_t h, const int32_t *a, int64_t n) {
  for (int64_t i = 0; i < n; i++) { h ^= (uint32_t)a[i]; h *= 0x100000001b3ull; }
  return h;
}
int main(int argc, char **argv) {
  int64_t n = atoll(argv[1]); int layers = atoi(argv[2]), heads = atoi(argv[3]);
  double mass = atof(argv[4]); uint64_t seed = strtoull(argv[5], 0, 10); int step = atoi(argv[6]); int reps = argc > 7 ? atoi(argv[7]) : 3;
  double best = 1e9; uint64_t h = 0; long long nv = 0, ns = 0;
  for (int r = 0; r < reps; r++) {
    pattern p; sr_error e;
    if (pattern_alloc(&p, n, layers, heads, &e)) return 1;
    synth_opts o = synth_defaults(seed, step);
    clock_t t0 = clock();
    if (synth_vs_topp(&p, mass, &o, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    double t = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (t < best) best = t;
    h = 0xcbf29ce484222325ull; nv = ns = 0;
    for (int x = 0; x < layers * heads; x++) { h = fnv(h, p.h[x].vertical, p.h[x].n_vertical); h = fnv(h, p.h[x].slash, p.h[x].n_slash); nv += p.h[x].n_vertical; ns += p.h[x].n_slash; }
    pattern_free(&p);
  }
  printf("n %lld layers %d heads %d mass %g seed %llu step %d: verticals %lld slashes %lld checksum %016llx cpu %.4f s (best of %d)\n",
         (long long)n, layers, heads, mass, (unsigned long long)seed, step, nv, ns, (unsigned long long)h, best, reps);
  return 0;
}

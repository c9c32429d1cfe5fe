#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "plan/model.h"
#include "plan/pattern_spec.h"
static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
  sr_error e = {0}; model_config m; model_load(argv[1], &m, &e);
  pattern p; double c0 = cpu_now();
  for (int r = 0; r < 3; r++) { if (pattern_from_spec(argv[2], &m, atoll(argv[3]), 0, 0, &p, &e)) return 1; if (r < 2) pattern_free(&p); }
  double c1 = cpu_now(); long long s = 0;
  for (int i = 0; i < p.layers * p.heads; i++) for (int k = 0; k < p.h[i].n_vertical; k++) s = s * 31 + p.h[i].vertical[k];
  printf("%s %s: %.3f s CPU a build (hash %lld)\n", argv[1], argv[2], (c1 - c0) / 3, s);
  return 0;
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
  sr_error e = {0};
  model_config m;
  int heads = argc > 1 ? atoi(argv[1]) : 4;
  int64_t n = 4LL << 20; int W = 1024;
  if (model_load("llama-3.1-70b", &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
  m.num_layers = 1;
  pattern p; layout l;
  double c0 = cpu_now();
  if (pattern_from_spec("vs-topp:0.95", &m, n, 0, 0, &p, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
  double c1 = cpu_now();
  layout_build(LAYOUT_STRIPED, n, W, 128, NULL, &l, &e);
  tiles_accounter *a; tiles_accounter_open(&l, &a, &e);
  work_count *c = calloc((size_t)W * W, sizeof *c);
  double c2 = cpu_now(); double pairs = 0; long long full = 0, bars = 0;
  for (int h = 0; h < heads; h++) { tiles_account_head_add(a, pattern_head(&p, 0, h), c, &e); }
  double c3 = cpu_now();
  for (int64_t i = 0; i < (int64_t)W * W; i++) { pairs += c[i].pairs; full += c[i].full; bars += c[i].bars; }
  printf("pattern %d heads %.3f s CPU; accounting %d heads %.3f s CPU (%.3f s a head); pairs %.17g full %lld bars %lld chk %.17g\n", p.heads, c1 - c0, heads, c3 - c2, (c3 - c2) / heads, pairs, full, bars, c[12345].pairs + c[W*W-7].bars);
  return 0;
}

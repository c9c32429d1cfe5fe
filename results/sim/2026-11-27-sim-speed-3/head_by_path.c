// head_by_path.c: CPU seconds of one head's exact accounting (tiles_account_head_add_pending) by each way of
// counting the verticals' overlap with the slashes (1: by vertical, 2: by offset tile) and by the automatic choice.
// Usage: head_by_path HEADS TOKENS RANKS MODEL PATTERN (striped G = 128, layer 0 of a one-layer model). Built
// against this worktree's library: cc -O2 -I. -D_GNU_SOURCE -std=c11 -o head_by_path head_by_path.c
//   build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
extern int tiles_fast_overlap_by_tiles;
static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char **argv) {
  sr_error e = {0};
  model_config m;
  int heads = atoi(argv[1]); int64_t n = atoll(argv[2]); int W = atoi(argv[3]);
  const char *model = argv[4], *pat_src = argv[5];
  if (model_load(model, &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
  m.num_layers = 1;
  pattern p; layout l;
  if (pattern_from_spec(pat_src, &m, n, 0, 0, &p, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
  layout_build(LAYOUT_STRIPED, n, W, 128, NULL, &l, &e);
  tiles_accounter *a; tiles_accounter_open(&l, &a, &e);
  work_count *c = calloc((size_t)W * W, sizeof *c);
  for (int h = 0; h < heads && h < p.heads; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    double t[3];
    for (int mode = 1; mode <= 2; mode++) {
      tiles_fast_overlap_by_tiles = mode;
      int reps = 3; double c0 = cpu_now();
      for (int r = 0; r < reps; r++) tiles_account_head_add_pending(a, hp, c, &e);
      t[mode] = (cpu_now() - c0) / reps;
    }
    tiles_fast_overlap_by_tiles = 0;
    double c0 = cpu_now(); tiles_account_head_add_pending(a, hp, c, &e); double ta = cpu_now() - c0;
    printf("head %d nv %d ns %d: by vertical %.4f s, by tile %.4f s, auto %.4f\n", h, hp->n_vertical, hp->n_slash, t[1], t[2], ta);
  }
  tiles_accounter_fold(a, c);
  return 0;
}

#include <stdio.h>
#include <stdlib.h>
#include "exec/exec_plan.h"
#include "plan/tiles.h"
#include "plan/util.h"
static const cli_flag hf[] = {{"layer", "L", "0", ""}, {NULL, NULL, NULL, NULL}};
static const cli_usage hu = {NULL, "", {plan_spec_flags, exec_plan_flags, hf, NULL}};
int main(int argc, char **argv) {
  cli_args a; sr_error e = {0};
  if (cli_parse(argc, argv, &hu, &a, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  plan pl; pattern pat;
  if (exec_plan_load(&a, NULL, NULL, NULL, &pl, &pat, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  int layer = atoi(cli_get(&a, "layer", "0"));
  head_mask *masks; tiles_masks_build(&pat, layer, &masks, &e);
  double sum = 0, mx = 0;
  for (int q = 0; q < pl.layout.world; q++) for (int h = 0; h < pat.heads; h++) {
    double t0 = sr_now();
    pattern one = pat; one.heads = 1; one.layers = 1; one.h = pattern_head(&pat, layer, h);
    tile_index t, f; tiles_build(&one, 0, &pl.layout, q, &t, &e); tiles_runs_build(&t, &masks[h], &pl.layout, &f, &e);
    tiles_free(&t); tiles_free(&f);
    double dt = sr_now() - t0; sum += dt; if (dt > mx) mx = dt;
    printf("%d %d %.3f\n", q, h, dt);
  }
  printf("sum %.2f max %.3f mean %.3f\n", sum, mx, sum / (pl.layout.world * pat.heads));
  return 0;
}

// analysis only: the layer-shaped calls of a calibrate CSV against calib_layer_fit (with and without the diag term)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/calibrate.h"
#include "plan/cluster.h"
int main(int argc, char **argv) {
  cluster_desc cl; sr_error e; memset(&e, 0, sizeof e);
  if (cluster_load(argv[2], &cl, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  if (!(cl.gpu.l2_mb > 0)) cl.gpu.l2_mb = calib_gpu_l2(cl.gpu.name);
  FILE *f = fopen(argv[1], "r"); char line[512];
  calib_layer ly; memset(&ly, 0, sizeof ly);
  while (fgets(line, sizeof line, f)) {
    char shape[16]; long long tok; double fu, bu;
    if (sscanf(line, "layer_%15[^,],%lld,%lf,%lf", shape, &tok, &fu, &bu) == 4) {
      int i = ly.n;
      if (calib_layer_add(&ly, shape, tok, 16, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
      ly.seconds[0][i] = fu * 1e-6, ly.seconds[1][i] = bu * 1e-6;
    }
  }
  if (calib_layer_fit(&ly, &cl.gpu, 16, 2, 128, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  for (int i = 0; i < ly.n; i++)
    printf("%-6s %7lld fwd %+5.1f%% bwd %+5.1f%%\n", ly.shape[i], (long long)ly.tokens[i],
           100 * (ly.model_s[0][i] / ly.seconds[0][i] - 1), 100 * (ly.model_s[1][i] / ly.seconds[1][i] - 1));
  for (int p = 0; p < 2; p++)
    printf("%s: %.0f TFLOP/s walk %.4f us fixed %.1f us l2 %+.1f%% diag %+.1f%%\n", p ? "bwd" : "fwd", ly.tflops[p],
           ly.walk_us[p], ly.fixed_us[p], 100 * ly.l2_slow[p], 100 * ly.diag_slow[p]);
  return 0;
}

// reshard.c — what re-balancing a layout costs on the wire (sim.h, sim_reshard_s).
#include <errno.h>
#include <stdlib.h>

#include "plan/balance.h"
#include "sim/cost.h"
#include "sim/sim.h"

int sim_reshard_s(const plan *p, const layout *from, const layout *to, double *seconds, sr_error *e) {
  *seconds = 0;
  const int W = from->world;
  int64_t *moved = malloc((size_t)W * sizeof *moved);
  if (!moved) return sr_internal_error(e, ENOMEM, "re-shard of %d ranks", W);
  int rc = balance_moved_tokens(from, to, moved, e);
  if (!rc && W > 1) {
    int64_t most = 0;
    for (int r = 0; r < W; r++) most = moved[r] > most ? moved[r] : most;
    const double bytes = (double)most * (double)p->model.hidden_size * 2;  // bf16 residual stream
    // cost_alltoall_cluster takes what each rank holds, of which it sends (W - 1) / W away.
    *seconds = cost_alltoall_cluster(&p->cluster, W, p->cluster.gpus_per_node, bytes * W / (W - 1));
  }
  free(moved);
  return rc;
}

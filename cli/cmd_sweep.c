// cmd_sweep.c — `sparsering sweep sweep.json`: the simulator over a grid of models x clusters x
// lengths x sparse patterns x strategies, one CSV row per point, in point order. Under
// `mpirun -np K` the points are dealt round-robin over the K processes and rank 0 gathers the rows,
// so the CSV is the same (row order included) whatever K is. MPI is initialised only here.
//
// sweep.json: {"models": [...], "clusters": [...], "seq": ["128K", 524288, ...], "strategies": [...],
//              "patterns": ["vs-topp:0.9", ...] (optional: the sparse strategies' pattern),
//              "seed": 0, "recompute": 1, "zero": 1, "representative": true}
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "plan/json.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/report.h"
#include "sim/strategy.h"
#include "sim/sweep.h"

// Point i in a fixed order: model, cluster, length, pattern, then strategy fastest.
static int run_point(const sweep_grid *g, int64_t i, sim_cache *cache, sr_buf *row, sr_error *e) {
  int k = (int)(i % g->n_strategies);
  int64_t j = i / g->n_strategies;
  int pi = (int)(j % g->n_patterns);
  j /= g->n_patterns;
  int si = (int)(j % g->n_seq);
  j /= g->n_seq;
  int ci = (int)(j % g->n_clusters);
  int mi = (int)(j / g->n_clusters);
  strategy_study st;
  memset(&st, 0, sizeof st);
  plan_spec_defaults(&st.base);
  snprintf(st.base.model, sizeof st.base.model, "%s", g->models[mi]);
  snprintf(st.base.cluster, sizeof st.base.cluster, "%s", g->clusters[ci]);
  st.base.seq = g->seq[si];
  st.base.seed = (uint64_t)g->seed;
  st.base.recompute = (int)g->recompute;
  st.base.zero = (int)g->zero;
  snprintf(st.sparse_pattern, sizeof st.sparse_pattern, "%s", g->patterns[pi]);
  st.cache = cache;
  sim_options o = {g->representative, 0, 0, 0, 0, 0, 0, 0};
  sim_result r;
  int rc = sim_strategy(&st, g->strategies[k], &o, &r, NULL, e);
  if (rc) return rc;
  char lead[1800];
  snprintf(lead, sizeof lead, "%lld,%s,%s,%lld,%s", (long long)i, g->models[mi], g->clusters[ci], (long long)g->seq[si],
           g->patterns[pi][0] ? g->patterns[pi] : "default");
  return report_csv_row(row, lead, &r) ? sr_internal_error(e, 0, "sweep: out of memory") : SR_OK;
}

static void progress(int64_t done, int64_t total, double t0) {
  int width = 30, fill = total > 0 ? (int)(width * done / total) : width;
  fprintf(stderr, "\rsweep [%.*s%*s] %lld/%lld points, %.0f s", fill, "##############################", width - fill, "",
          (long long)done, (long long)total, sr_now() - t0);
  if (done == total) fputc('\n', stderr);
}

// ---- the command -----------------------------------------------------------------------------

static const cli_flag sweep_flags[] = {
    {"out", cli_out_file, "- (stdout)", "where to write the CSV (one row per point; written atomically)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage sweep_usage = {"sweep.json", "mpirun -np 4 sparsering sweep notebooks-data/sweeps/seqlen.json -o out.csv",
                                      {sweep_flags, NULL}};

static int cmd_sweep(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  int rank = 0, size = 1, rc;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sweep_grid *g = calloc(1, sizeof *g);
  if (!g) {
    MPI_Finalize();
    return 1;
  }
  if ((rc = cli_parse(argc, argv, &sweep_usage, &a, &e)) == SR_OK) {
    if (a.n_pos != 1) rc = sr_input_error(&e, NULL, "sweep", "expected one sweep file (sparsering sweep sweep.json)");
    else rc = sweep_read(a.pos[0], g, &e);
  }
  // Every process reads the same file, so they agree on the grid or on the error.
  int64_t total = rc ? 0 : sweep_points(g);
  sr_buf rows = {0};
  double t0 = sr_now();
  int tty = rank == 0 && isatty(2);
  // Which efficiencies the numbers rest on, once per cluster (stderr: stdout may be the CSV).
  for (int ci = 0; !rc && rank == 0 && ci < g->n_clusters; ci++) {
    cluster_desc cd;
    char note[600];
    if (!cluster_load(g->clusters[ci], &cd, &e)) fprintf(stderr, "%s: %s\n", cd.name, cluster_calibration_note(&cd, note, sizeof note));
    sr_error_clear(&e);
  }
  // A process's points share built patterns and accounting (consecutive points differ by strategy).
  sim_cache *cache = NULL;
  if (!rc) rc = sim_cache_open(&cache, &e);
  for (int64_t i = rank; !rc && i < total; i += size) {
    rc = run_point(g, i, cache, &rows, &e);
    if (tty) progress(i + 1 < total ? i + 1 : total, total, t0);
  }
  sim_cache_close(cache);
  // Agree on failure: the lowest failing rank's error is reported by rank 0.
  int worst = rc, code;
  MPI_Allreduce(&worst, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (code) {
    int who = rc ? rank : size, first;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first != 0 && first < size) {
      if (rank == first) MPI_Send(&e, (int)sizeof e, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
      if (rank == 0) MPI_Recv(&e, (int)sizeof e, MPI_BYTE, first, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    sr_buf_free(&rows);
    free(g);
    MPI_Finalize();
    return rank == 0 ? sr_error_report(&e, "sparsering sweep") : (e.code == SR_EINPUT ? 2 : 1);
  }
  // Gather every process's rows at rank 0 and interleave them back into point order.
  int len = (int)rows.len, *lens = NULL, *offs = NULL;
  char *all = NULL;
  if (rank == 0) lens = calloc((size_t)size, sizeof *lens), offs = calloc((size_t)size + 1, sizeof *offs);
  MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int k = 0; k < size; k++) offs[k + 1] = offs[k] + lens[k];
    all = malloc((size_t)offs[size] + 1);
  }
  MPI_Gatherv(rows.data ? rows.data : "", len, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD);
  rc = SR_OK;
  if (rank == 0) {
    sr_buf out = {0};
    report_csv_header(&out, "point,model,cluster,seq,pattern");
    int *cur = calloc((size_t)size, sizeof *cur);
    for (int64_t i = 0; i < total; i++) {
      int k = (int)(i % size);
      const char *p = all + offs[k] + cur[k], *nl = memchr(p, '\n', (size_t)(offs[k + 1] - offs[k] - cur[k]));
      size_t n = nl ? (size_t)(nl - p) + 1 : 0;
      sr_buf_append(&out, p, n);
      cur[k] += (int)n;
    }
    rc = sr_write_atomic(cli_get(&a, "out", "-"), out.data, out.len, &e);
    if (!rc && strcmp(cli_get(&a, "out", "-"), "-") != 0)
      fprintf(stderr, "sweep: %lld points on %d process%s in %.1f s -> %s\n", (long long)total, size, size > 1 ? "es" : "",
              sr_now() - t0, cli_get(&a, "out", "-"));
    free(cur);
    sr_buf_free(&out);
  }
  free(all);
  free(lens);
  free(offs);
  sr_buf_free(&rows);
  free(g);
  MPI_Finalize();
  return rc ? sr_error_report(&e, "sparsering sweep") : 0;
}

CLI_COMMAND("sweep", cmd_sweep, "simulate a grid (sweep.json) to CSV (mpirun -np K splits it)",
            &sweep_usage)

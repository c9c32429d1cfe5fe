// cmd_tune.c — `sparsering tune`: search the strategy space of a model, cluster, length and pattern in
// the simulator, print the ranked leaders, write the chosen plan (with its predicted step time) and, with
// --csv, the full CSV. Under `mpirun -np K` the points are split over the ranks; rank 0 prints and writes.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_tune.h"
#include "plan/util.h"
#include "sim/study_flags.h"

// ---------------------------------------------------------------------------------------------
// MPI

static int mpi_started;

static int mpi_allgather(void *ctx, const void *mine, void *all, size_t bytes, int count, sr_error *e) {
  (void)ctx;
  // Records are plain fixed-size structs, so they travel as bytes.
  int n = (int)(bytes * (size_t)count);
  int rc = MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return sr_internal_error(e, 0, "tune: MPI_Allgather: %s", msg);
  }
  return SR_OK;
}

void tune_mpi_start(int *argc, char ***argv, tune_exchange *x) {
  memset(x, 0, sizeof *x);
  x->size = 1;
  // Only a launcher's environment starts MPI, so a plain `sparsering tune` needs no MPI runtime.
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_SIZE")) return;
  if (MPI_Init(argc, argv) != MPI_SUCCESS) return;
  mpi_started = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &x->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &x->size);
  x->allgather = x->size > 1 ? mpi_allgather : NULL;
}

void tune_mpi_finish(void) {
  if (mpi_started) MPI_Finalize();
  mpi_started = 0;
}

int tune_mpi_status(int status) {
  if (!mpi_started) return status;
  int out = status;
  MPI_Allreduce(&status, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

// ---------------------------------------------------------------------------------------------
// progress

// One line on stderr, redrawn: points decided of all, simulated, pruned, the best step so far, elapsed
// time and the estimate of what is left.
static void progress_bar(void *ctx, const tune_progress *p) {
  const tune_space *sp = ctx;
  int width = 24, fill = p->n_points > 0 ? (int)((int64_t)width * p->done / p->n_points) : width;
  char best[160] = "none yet";
  if (p->best >= 0) {
    char label[128];
    tune_point_label(&sp->pt[p->best], label, sizeof label);
    snprintf(best, sizeof best, "%.4g s (%s)", p->best_s, label);
  }
  char eta[32] = "";
  if (p->eta_s > 0) snprintf(eta, sizeof eta, ", ETA %.0f s", p->eta_s);
  fprintf(stderr, "\r\033[Ktune %-10s [%.*s%*s] %d/%d points, %d simulated, %d pruned, best %s, %.0f s%s",
          p->phase, fill, "########################", width - fill, "", p->done, p->n_points, p->simulated, p->pruned,
          best, p->elapsed_s, eta);
  if (!strcmp(p->phase, "done")) fputc('\n', stderr);
  fflush(stderr);
}

void tune_progress_on_terminal(tune_options *o, const tune_space *sp, int rank) {
  if (rank != 0 || !isatty(STDERR_FILENO)) return;
  o->progress = progress_bar;
  o->progress_ctx = (void *)sp;
}

// ---------------------------------------------------------------------------------------------
// the command

// The search's flags are sim/study_flags.h's; the outputs are this command's.
static const cli_flag tune_out_flags[] = {
    {"out", cli_out_file, "best_plan.json", "where to write the chosen plan (with its predicted step time)"},
    {"csv", cli_out_file, NULL, "where to write every point's result (no CSV without it)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage tune_usage = {
    NULL, "sparsering tune --model qwen2.5-3b --cluster a100-4x8 --seq 512K --pattern vs-topp:0.95 -o best.json",
    {tune_flags, tune_out_flags, NULL}};

static int parse(int argc, char **argv, plan_spec *s, tune_options *o, const char **out, const char **csv,
                 int *representative, sr_error *e) {
  cli_args a;
  int rc;
  if ((rc = cli_parse(argc, argv, &tune_usage, &a, e))) return rc;
  if (a.n_pos > 0) return sr_input_error(e, NULL, a.pos[0], "unexpected argument");
  if ((rc = tune_spec_from_flags(&a, s, o, representative, e))) return rc;
  *out = cli_get(&a, "out", "best_plan.json");
  *csv = cli_get(&a, "csv", NULL);
  return SR_OK;
}

// Rank 0's outputs: the report, the CSV, the plan file.
static int write_outputs(tune_sim *t, const tune_space *sp, const tune_result *r, const tune_options *o,
                         const plan_spec *base, const char *out, const char *csv, int size, sr_error *e) {
  char tok[32];
  printf("tune: %s on %s (%d GPUs), %s tokens, pattern %s; %d process%s, %.1f s\n", tune_sim_model(t)->name,
         tune_sim_cluster(t)->name, cluster_world(tune_sim_cluster(t)), sr_format_tokens(base->seq, tok, sizeof tok),
         base->pattern, size, size == 1 ? "" : "es", r->search_wall_s);
  char note[600];
  printf("%s\n", cluster_calibration_note(tune_sim_cluster(t), note, sizeof note));
  char *text = NULL;
  int rc = tune_report(sp, r, o, &text, e);
  if (rc) return rc;
  fputs(text, stdout);
  free(text);
  if (csv) {  // the full CSV only where asked (--csv FILE)
    char *body = NULL;
    if ((rc = tune_csv(sp, r, &body, e))) return rc;
    rc = sr_write_atomic(csv, body, strlen(body), e);
    free(body);
    if (rc) return rc;
    printf("csv: %s (%d rows)\n", csv, r->n_points);
  }
  if (r->chosen < 0) return sr_input_error(e, NULL, "tune", "no point of the space fits in memory; no plan written");
  plan p;
  if ((rc = tune_sim_plan(t, &sp->pt[r->chosen], &p, e))) return rc;
  rc = plan_write(&p, out, e);
  if (!rc) printf("plan: %s (predicted step %.6g s)\n", out, p.spec.predicted_step_s);
  plan_free(&p);
  return rc;
}

static int cmd_tune(int argc, char **argv) {
  tune_exchange x;
  tune_mpi_start(&argc, &argv, &x);
  sr_error e;
  sr_error_clear(&e);
  plan_spec base;
  tune_options o;
  const char *out = NULL, *csv = NULL;
  int representative = 0;
  tune_sim *t = NULL;
  tune_space sp = {0};
  tune_result r;
  memset(&r, 0, sizeof r);
  int rc = parse(argc, argv, &base, &o, &out, &csv, &representative, &e);
  if (!rc) rc = tune_sim_open(&base, representative, &t, &e);
  if (!rc && o.robust_steps > tune_sim_max_step(t)) o.robust_steps = tune_sim_max_step(t);  // a trace's last step
  if (!rc) rc = tune_space_full(tune_sim_model(t), tune_sim_cluster(t), base.seq, &sp, &e);
  if (!rc) {
    tune_evaluator ev = tune_sim_evaluator(t);
    tune_progress_on_terminal(&o, &sp, x.rank);
    rc = tune_search(&sp, &ev, &x, &o, &r, &e);
  }
  if (!rc && x.rank == 0) rc = write_outputs(t, &sp, &r, &o, &base, out, csv, x.size, &e);
  int status = rc ? (x.rank == 0 ? sr_error_report(&e, "sparsering tune") : (rc == SR_EINPUT ? 2 : 1)) : 0;
  status = tune_mpi_status(status);
  tune_result_free(&r);
  tune_space_free(&sp);
  tune_sim_close(t);
  tune_mpi_finish();
  return status;
}

CLI_COMMAND("tune", cmd_tune,
            "search layouts, schedules and options in the simulator (mpirun -np K splits it)",
            &tune_usage)

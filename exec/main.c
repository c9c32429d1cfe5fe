// main.c — `sparsering-exec <command> [flags]`, normally under `mpirun -np W`: dispatch to the
// subcommands registered with EXEC_COMMAND (exec/exec.h; also `--help` of every command, `help`,
// `--version`: plan/commands.h). Each command starts MPI itself (comm_init).
#include <stdio.h>

#include "exec/exec.h"

// The command's files appear together when it succeeds, and none when it fails (plan/util.h).
static int run_command(const sr_dispatch *d) {
  sr_outputs_defer();
  int status = d->fn(d->argc, d->argv);
  if (status != 0) {
    sr_outputs_discard();
    return status;
  }
  sr_error e = {0};
  return sr_outputs_commit(&e) ? sr_error_report(&e, "sparsering-exec") : 0;
}

int main(int argc, char **argv) {
  sr_dispatch d;
  if (exec_dispatch(argc, argv, &d)) {
    fprintf(stderr, "sparsering-exec: out of memory\n");
    return 1;
  }
  if (d.fn) return run_command(&d);
  fputs(d.text.data ? d.text.data : "", d.status ? stderr : stdout);
  sr_buf_free(&d.text);
  return d.status;
}

// main.c — `sparsering-exec <command> [flags]`, normally under `mpirun -np W`: dispatch to the
// subcommands registered with EXEC_COMMAND (exec/exec.h; also `--help` of every command, `help`,
// `--version`: plan/commands.h). Each command starts MPI itself (comm_init).
#include <stdio.h>

#include "exec/exec.h"

int main(int argc, char **argv) {
  sr_dispatch d;
  if (exec_dispatch(argc, argv, &d)) {
    fprintf(stderr, "sparsering-exec: out of memory\n");
    return 1;
  }
  if (d.fn) return d.fn(d.argc, d.argv);
  fputs(d.text.data ? d.text.data : "", d.status ? stderr : stdout);
  sr_buf_free(&d.text);
  return d.status;
}

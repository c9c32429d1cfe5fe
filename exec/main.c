// main.c — `sparsering-exec <command> [flags]`, normally under `mpirun -np W`: dispatch to the
// subcommands registered with EXEC_COMMAND (exec/exec.h). Each command starts MPI itself (comm_init).
#include <stdio.h>
#include <string.h>

#include "exec/exec.h"

static void usage(FILE *f) {
  fprintf(f, "usage: mpirun -np W sparsering-exec <command> [flags]\n\ncommands:\n");
  exec_print_commands(f);
  fprintf(f, "\nSee docs/exec.md for the flags of each command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  exec_fn fn = exec_find(argv[1]);
  if (fn) return fn(argc - 1, argv + 1);
  fprintf(stderr, "sparsering-exec: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}

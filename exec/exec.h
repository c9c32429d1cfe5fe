// exec.h — the executor's command layer: self-registering subcommands of `sparsering-exec`, and a
// small flag parser (the CLI's own parser lives in cli/, which the executor does not link).
//
// A file exec/<name>.c registers its subcommands with EXEC_COMMAND; exec/main.c dispatches
// `sparsering-exec <command> ...` (normally under `mpirun -np W`). Commands parse flags, call the
// library (comm.h, dist_attn.h, ...), print, and return an exit status (0 ok, 2 bad input, 1 other
// failure). Library code never prints and never exits; a rank that fails calls comm_abort (comm.h).
#ifndef SR_EXEC_H
#define SR_EXEC_H

#include <stdint.h>

#include "plan/args.h"
#include "plan/error.h"

typedef int (*exec_fn)(int argc, char **argv);  // argv[0] is the command name

// Register a subcommand of sparsering-exec (used by EXEC_COMMAND).
void exec_register(const char *name, exec_fn fn, const char *summary);
// Find a registered subcommand by name (NULL when unknown).
exec_fn exec_find(const char *name);
// Print the registered subcommands, sorted by name, one per line.
void exec_print_commands(void *file);

// Register fn as `sparsering-exec name` (a constructor runs before main; the binary links the exec
// library whole-archive so every registration is kept).
#define EXEC_COMMAND(name, fn, summary) \
  __attribute__((constructor)) static void exec_reg_##fn(void) { exec_register(name, fn, summary); }

// Flags: plan/args.h (cli_parse, cli_get, ...), the same parser as bin/sparsering's.

#endif

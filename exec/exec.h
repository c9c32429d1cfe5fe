// exec.h — the executor's command layer: self-registering subcommands of `sparsering-exec`, with the
// same flag parser and command table as bin/sparsering's (plan/args.h, plan/commands.h).
//
// A file exec/<name>.c registers its subcommands with EXEC_COMMAND; exec/main.c dispatches
// `sparsering-exec <command> ...` (normally under `mpirun -np W`). Commands parse flags, call the
// library (comm.h, dist_attn.h, ...), print, and return an exit status (0 ok, 2 bad input, 1 other
// failure). Library code never prints and never exits; a rank that fails calls comm_abort (comm.h).
#ifndef SR_EXEC_H
#define SR_EXEC_H

#include <stdint.h>

#include "plan/args.h"
#include "plan/commands.h"
#include "plan/error.h"

typedef int (*exec_fn)(int argc, char **argv);  // argv[0] is the command name

// Register a subcommand of sparsering-exec (used by EXEC_COMMAND); usage: its flags, for its parser
// and its --help.
void exec_register(const char *name, exec_fn fn, const char *summary, const cli_usage *usage);
// What `sparsering-exec argv[1..]` asks: a command to run, or a text to print (sr_commands_dispatch).
int exec_dispatch(int argc, char **argv, sr_dispatch *d);

// Register fn as `sparsering-exec name` with its cli_usage (a constructor runs before main; the binary
// links the exec library whole-archive so every registration is kept).
#define EXEC_COMMAND(name, fn, summary, usage) \
  __attribute__((constructor)) static void exec_reg_##fn(void) { exec_register(name, fn, summary, usage); }

#endif

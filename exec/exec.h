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

// ---------------------------------------------------------------------------------------------
// flags: "--key value", "--key=value", bare "--switch", positionals (same rules as cli/cli.h)

typedef struct {
  int n_flags, n_pos;
  const char *key[64], *val[64];
  const char *pos[64];
} exec_args;

// Parse argv[1..]; `flags` and `switches` are NULL-terminated lists without "--". Unknown flags are input errors.
int exec_parse(int argc, char **argv, const char *const *flags, const char *const *switches, exec_args *a,
               sr_error *e);
// Value of a flag, or def when absent (the last occurrence wins).
const char *exec_get(const exec_args *a, const char *key, const char *def);
// True when a switch or flag was given.
int exec_has(const exec_args *a, const char *key);
// Integer flag within [lo, hi] (def when absent).
int exec_get_int(const exec_args *a, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out, sr_error *e);
// Floating flag within [lo, hi] (def when absent).
int exec_get_num(const exec_args *a, const char *key, double def, double lo, double hi, double *out, sr_error *e);

#endif

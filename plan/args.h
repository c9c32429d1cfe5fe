// args.h — the command-line flag parser shared by bin/sparsering (cli/) and bin/sparsering-exec (exec/).
#ifndef SR_ARGS_H
#define SR_ARGS_H

#include <stdint.h>

#include "plan/error.h"

// Parsed flags: "--key value", "--key=value", bare "--switch" (value "1" when the flag is listed as a
// switch), and positionals. Flags not in the allowed list are input errors.
typedef struct {
  int n_flags, n_pos;
  const char *key[64], *val[64];
  const char *pos[64];
} cli_args;

// Parse argv[1..]; `flags` lists value flags ("model", "seq", ...) and `switches` lists boolean flags
// ("csv"), both NULL-terminated, without the leading "--". "-o" is an alias of "--out".
int cli_parse(int argc, char **argv, const char *const *flags, const char *const *switches, cli_args *a, sr_error *e);
// Value of a flag, or def when absent.
const char *cli_get(const cli_args *a, const char *key, const char *def);
// True when a switch or flag was given.
int cli_has(const cli_args *a, const char *key);
// Integer value of a flag within [lo, hi] (def when absent).
int cli_get_int(const cli_args *a, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out, sr_error *e);
// Floating value of a flag within [lo, hi] (def when absent).
int cli_get_num(const cli_args *a, const char *key, double def, double lo, double hi, double *out, sr_error *e);
// A required flag's value (input error naming the flag when absent).
int cli_require(const cli_args *a, const char *key, const char **out, sr_error *e);

#endif

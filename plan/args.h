// args.h — the command-line flag parser shared by bin/sparsering (cli/) and bin/sparsering-exec (exec/).
//
// A command describes its command line once, as flag tables (cli_flag rows: name, value, default, one
// line of help) and an example (cli_usage). The parser accepts exactly the rows of those tables and
// the help text is printed from the same rows, so what --help lists and what the parser accepts
// cannot drift apart.
#ifndef SR_ARGS_H
#define SR_ARGS_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/util.h"

// One flag a command reads. A table of them ends with a row whose name is NULL.
typedef struct {
  const char *name;   // without the leading "--"
  const char *value;  // how help names the value ("N", "FILE", "NAME|PATH"); NULL: a switch (no value)
  const char *def;    // the default as help shows it, "required", or NULL (optional, no default)
  const char *help;   // what the flag does, one line
} cli_flag;

// The value of a row naming a file (cli_out_file, help shows "FILE") or a directory (cli_out_dir, "DIR") the
// command writes: the parser checks that it can be written (its directory exists and takes files, it is not a
// directory, no other output flag names it) before the command does any work.
extern const char cli_out_file[];
extern const char cli_out_dir[];

#define CLI_MAX_TABLES 6

// A command's command line: its flag tables and how to call it. A flag named in several tables takes
// the last table's row (so a command's own table, after a shared one, can describe a shared flag in its
// own words) and is listed where the first table names it. -h/--help needs no row: the dispatcher
// (plan/commands.h) answers it from these tables before the command runs.
typedef struct {
  const char *args;                        // positional arguments as usage shows them ("plan.json"), or NULL
  const char *example;                     // one example command line, in full ("sparsering plan --model ...")
  const cli_flag *tables[CLI_MAX_TABLES];  // the flag tables, NULL-terminated (fewer than CLI_MAX_TABLES)
} cli_usage;

// Parsed flags: "--key value", "--key=value", bare "--switch" (value "1"), and positionals.
// Flags not in the command's tables are input errors.
typedef struct {
  int n_flags, n_pos;
  const char *key[64], *val[64];
  const char *pos[64];
} cli_args;

// Parse argv[1..] against u's tables. "-o" is an alias of "--out". Output flags (cli_out_file, cli_out_dir)
// are checked as sr_check_output says.
int cli_parse(int argc, char **argv, const cli_usage *u, cli_args *a, sr_error *e);
// True when argv[1..] asks for help: "-h" or "--help" where a flag may stand (not as another flag's value).
int cli_asks_help(int argc, char **argv, const cli_usage *u);
// Append the help of `prog` (e.g. "sparsering plan") to out: usage, summary, every flag with its value,
// default and help, and the example. Returns 0, or -1 when memory runs out.
int cli_help(const char *prog, const char *summary, const cli_usage *u, sr_buf *out);
// The row of a flag in u's tables (the last when several name it), or NULL.
const cli_flag *cli_find_flag(const cli_usage *u, const char *name);
// Give a flag a value as if the command line ended with it (a command trying each entry of a list).
int cli_set(cli_args *a, const char *key, const char *val, sr_error *e);
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

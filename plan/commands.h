// commands.h — a table of named subcommands: what the two binaries' dispatchers (cli/main.c for
// bin/sparsering, exec/main.c for bin/sparsering-exec) register into and dispatch through, including
// each command's --help (from its flag tables, plan/args.h) and the binaries' --version.
#ifndef SR_COMMANDS_H
#define SR_COMMANDS_H

#include "plan/args.h"
#include "plan/util.h"

typedef int (*sr_command_fn)(int argc, char **argv);  // argv[0] is the command's last word

#define SR_MAX_COMMANDS 64

// A name is one word ("plan") or two ("trace gen": a group "trace" with a subcommand "gen").
typedef struct {
  struct {
    const char *name, *summary;
    sr_command_fn fn;
    const cli_usage *usage;  // the command's flags, for its parser and its --help
  } cmd[SR_MAX_COMMANDS];
  int n;
} sr_command_table;

// Add a command (registration runs in constructors, before main; past SR_MAX_COMMANDS it is dropped).
void sr_commands_add(sr_command_table *t, const char *name, sr_command_fn fn, const char *summary,
                     const cli_usage *usage);
// The index of the command of that name, or -1.
int sr_commands_index(const sr_command_table *t, const char *name);
// The command of that name, or NULL.
sr_command_fn sr_commands_find(const sr_command_table *t, const char *name);
// order[0 .. t->n) = the commands' indices in name order, so help text is stable whatever the link order.
void sr_commands_sorted(const sr_command_table *t, int *order);

// What a command line asks of a binary: run a command, or print a text and exit.
typedef struct {
  sr_command_fn fn;  // the command to run as fn(argc, argv); NULL: print text and exit with status
  int argc;
  char **argv;
  int status;  // exit status when fn is NULL; 0: text goes to stdout, else to stderr
  sr_buf text;  // help, version or usage when fn is NULL (free with sr_buf_free)
} sr_dispatch;

// Decide what `binary argv[1..]` asks: a command ("plan ...", "trace gen ..."); its help (-h/--help
// among its flags, or "help COMMAND"); the list of commands (no command, -h, --help, help, or a group's
// name alone); the version (--version, version); or an unknown command (usage, status 2). Returns 0, or
// -1 when memory runs out.
int sr_commands_dispatch(const sr_command_table *t, const char *binary, int argc, char **argv, sr_dispatch *d);

#endif

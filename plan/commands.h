// commands.h — a table of named subcommands: what the two binaries' dispatchers (cli/main.c for
// bin/sparsering, exec/exec.c for bin/sparsering-exec) register into and look up in.
#ifndef SR_COMMANDS_H
#define SR_COMMANDS_H

typedef int (*sr_command_fn)(int argc, char **argv);  // argv[0] is the command name

#define SR_MAX_COMMANDS 64

typedef struct {
  struct {
    const char *name, *summary;
    sr_command_fn fn;
  } cmd[SR_MAX_COMMANDS];
  int n;
} sr_command_table;

// Add a command (registration runs in constructors, before main; past SR_MAX_COMMANDS it is dropped).
void sr_commands_add(sr_command_table *t, const char *name, sr_command_fn fn, const char *summary);
// The command of that name, or NULL.
sr_command_fn sr_commands_find(const sr_command_table *t, const char *name);
// order[0 .. t->n) = the commands' indices in name order, so help text is stable whatever the link order.
void sr_commands_sorted(const sr_command_table *t, int *order);

#endif

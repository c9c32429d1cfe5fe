// exec.c — the registry of sparsering-exec subcommands (the table and dispatch: plan/commands.h).
#include "exec/exec.h"

static sr_command_table commands;

void exec_register(const char *name, exec_fn fn, const char *summary, const cli_usage *usage) {
  sr_commands_add(&commands, name, fn, summary, usage);
}

int exec_dispatch(int argc, char **argv, sr_dispatch *d) {
  return sr_commands_dispatch(&commands, "sparsering-exec", argc, argv, d);
}

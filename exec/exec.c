// exec.c — the registry of sparsering-exec subcommands (flags: plan/args.h, shared with bin/sparsering).
#include "exec/exec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/commands.h"

// ---------------------------------------------------------------------------------------------
// registry

static sr_command_table commands;

void exec_register(const char *name, exec_fn fn, const char *summary) { sr_commands_add(&commands, name, fn, summary); }

exec_fn exec_find(const char *name) { return sr_commands_find(&commands, name); }

void exec_print_commands(void *file) {
  int order[SR_MAX_COMMANDS];
  sr_commands_sorted(&commands, order);
  for (int k = 0; k < commands.n; k++)
    fprintf((FILE *)file, "  %-16s %s\n", commands.cmd[order[k]].name, commands.cmd[order[k]].summary);
}

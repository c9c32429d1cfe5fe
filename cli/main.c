// main.c — `sparsering <command> [flags]`: dispatch to the registered subcommands.
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/commands.h"

static sr_command_table commands;

void cli_register(const char *name, cli_fn fn, const char *summary) { sr_commands_add(&commands, name, fn, summary); }

static void usage(FILE *f) {
  fprintf(f, "usage: sparsering <command> [flags]\n\ncommands:\n");
  int order[SR_MAX_COMMANDS];
  sr_commands_sorted(&commands, order);
  for (int k = 0; k < commands.n; k++) fprintf(f, "  %-16s %s\n", commands.cmd[order[k]].name, commands.cmd[order[k]].summary);
  fprintf(f, "\nSee README.md for the flags of each command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  cli_fn fn = sr_commands_find(&commands, argv[1]);
  if (fn) return fn(argc - 1, argv + 1);
  fprintf(stderr, "sparsering: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}

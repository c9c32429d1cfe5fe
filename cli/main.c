// main.c — `sparsering <command> [flags]`: dispatch to the registered subcommands.
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define MAX_COMMANDS 64

static struct {
  const char *name, *summary;
  cli_fn fn;
} commands[MAX_COMMANDS];
static int n_commands;

void cli_register(const char *name, cli_fn fn, const char *summary) {
  if (n_commands < MAX_COMMANDS) {
    commands[n_commands].name = name;
    commands[n_commands].summary = summary;
    commands[n_commands].fn = fn;
    n_commands++;
  }
}

static void usage(FILE *f) {
  fprintf(f, "usage: sparsering <command> [flags]\n\ncommands:\n");
  // Print in name order so the help is stable whatever the link order.
  int done[MAX_COMMANDS] = {0};
  for (int k = 0; k < n_commands; k++) {
    int best = -1;
    for (int i = 0; i < n_commands; i++)
      if (!done[i] && (best < 0 || strcmp(commands[i].name, commands[best].name) < 0)) best = i;
    done[best] = 1;
    fprintf(f, "  %-16s %s\n", commands[best].name, commands[best].summary);
  }
  fprintf(f, "\nSee README.md for the flags of each command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (int i = 0; i < n_commands; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "sparsering: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}

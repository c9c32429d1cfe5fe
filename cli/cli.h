// cli.h — the thin command-line layer: self-registering subcommands (flags: plan/args.h).
//
// Each cli/cmd_*.c file registers its subcommands with CLI_COMMAND, each with its flag tables
// (cli_usage: what its parser accepts and what its --help prints); cli/main.c dispatches
// `sparsering <command> ...` (plan/commands.h). Commands parse flags, call the library, print, and return an exit
// status (0 ok, 2 bad input, 1 other failure). Library code never prints or exits.
#ifndef SR_CLI_H
#define SR_CLI_H

#include <stdint.h>

#include "plan/args.h"
#include "plan/error.h"

typedef int (*cli_fn)(int argc, char **argv);  // argv[0] is the command name

// Register a subcommand (used by CLI_COMMAND); usage: its flags, for its parser and its --help.
void cli_register(const char *name, cli_fn fn, const char *summary, const cli_usage *usage);

// Register fn as `sparsering name` ("trace gen": a subcommand of a group) with its cli_usage.
#define CLI_COMMAND(name, fn, summary, usage) \
  __attribute__((constructor)) static void cli_reg_##fn(void) { cli_register(name, fn, summary, usage); }

#endif

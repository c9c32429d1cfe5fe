// test_commands.c — the subcommand table both binaries dispatch through (plan/commands.h).
#include <string.h>

#include "plan/commands.h"
#include "tests/test.h"

static int one(int argc, char **argv) { return argc + (argv != NULL); }
static int two(int argc, char **argv) { return 2 * argc + (argv != NULL); }

TEST(command_table_finds_by_name_and_lists_in_name_order) {
  static sr_command_table t;
  memset(&t, 0, sizeof t);
  sr_commands_add(&t, "zeta", one, "last");
  sr_commands_add(&t, "alpha", two, "first");
  sr_commands_add(&t, "mid", one, "middle");
  CHECK(sr_commands_find(&t, "alpha") == two);
  CHECK(sr_commands_find(&t, "zeta") == one);
  CHECK(sr_commands_find(&t, "beta") == NULL);
  int order[SR_MAX_COMMANDS];
  sr_commands_sorted(&t, order);
  CHECK_EQ_INT(order[0], 1);
  CHECK_EQ_INT(order[1], 2);
  CHECK_EQ_INT(order[2], 0);
}

TEST(command_table_drops_commands_past_its_capacity) {
  static sr_command_table t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < SR_MAX_COMMANDS + 3; i++) sr_commands_add(&t, i < SR_MAX_COMMANDS ? "x" : "late", one, "");
  CHECK_EQ_INT(t.n, SR_MAX_COMMANDS);
  CHECK(sr_commands_find(&t, "late") == NULL);
}

// test_args.c — the flag parser and its help (plan/args.h): a command's flag tables are what the parser
// accepts and what --help lists, row for row; a later table refines a shared row; -h/--help is found
// only where a flag may stand.
#include <stdlib.h>
#include <string.h>

#include "plan/args.h"
#include "tests/test.h"

// A shared table and a command's own, as plan_spec_flags and a command's table are.
static const cli_flag shared[] = {
    {"model", "NAME", "required", "the model"},
    {"seed", "X", "0", "seed of patterns"},
    {NULL, NULL, NULL, NULL},
};
static const cli_flag own[] = {
    {"steps", "N", "20", "optimizer steps"},
    {"quiet", NULL, NULL, "no per-step lines"},
    {"out", "FILE", "- (stdout)", "where to write"},
    {"seed", "X", "1", "seed of the weights and the data"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage usage = {"data.txt", "sparsering demo --model m --steps 3", {shared, own, NULL}};

static int parse(cli_args *a, sr_error *e, int argc, const char **argv) { return cli_parse(argc, (char **)argv, &usage, a, e); }

TEST(cli_parse_accepts_the_rows_of_every_table_values_switches_and_positionals) {
  const char *argv[] = {"demo", "--model", "m1", "--steps=7", "--quiet", "data.txt", "-o", "x.json", "--seed", "5"};
  cli_args a;
  sr_error e = {0};
  CHECK_EQ_INT(parse(&a, &e, 10, argv), SR_OK);
  CHECK(strcmp(cli_get(&a, "model", ""), "m1") == 0);
  CHECK(strcmp(cli_get(&a, "steps", ""), "7") == 0);
  CHECK(strcmp(cli_get(&a, "quiet", ""), "1") == 0);
  CHECK(strcmp(cli_get(&a, "out", ""), "x.json") == 0);  // -o is --out
  CHECK(strcmp(cli_get(&a, "seed", ""), "5") == 0);
  CHECK_EQ_INT(a.n_pos, 1);
  CHECK(strcmp(a.pos[0], "data.txt") == 0);
}

TEST(cli_parse_refuses_a_flag_no_table_lists_naming_it) {
  const char *argv[] = {"demo", "--model", "m1", "--colour", "red"};
  cli_args a;
  sr_error e = {0};
  CHECK_EQ_INT(parse(&a, &e, 5, argv), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--colour");
  CHECK_STR_CONTAINS(e.msg, "unknown flag");
  const char *missing[] = {"demo", "--steps"};  // a value flag at the end
  CHECK_EQ_INT(parse(&a, &e, 2, missing), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "needs a value");
}

TEST(cli_help_lists_every_row_once_with_its_value_default_and_the_example) {
  sr_buf b = {0};
  CHECK_EQ_INT(cli_help("sparsering demo", "a demonstration", &usage, &b), 0);
  const char *h = b.data;
  CHECK_STR_CONTAINS(h, "usage: sparsering demo data.txt [flags]");
  CHECK_STR_CONTAINS(h, "a demonstration");
  CHECK_STR_CONTAINS(h, "--model NAME");
  CHECK_STR_CONTAINS(h, "the model [required]");
  CHECK_STR_CONTAINS(h, "--steps N");
  CHECK_STR_CONTAINS(h, "optimizer steps [default: 20]");
  CHECK_STR_CONTAINS(h, "--quiet ");  // a switch: no value
  CHECK(!strstr(h, "--quiet N") && !strstr(h, "--quiet FILE"));
  CHECK_STR_CONTAINS(h, "-o, --out FILE");
  CHECK_STR_CONTAINS(h, "-h, --help");
  CHECK_STR_CONTAINS(h, "example:\n  sparsering demo --model m --steps 3\n");
  sr_buf_free(&b);
}

TEST(a_later_table_refines_a_shared_row_listed_once_where_first_named) {
  sr_buf b = {0};
  CHECK_EQ_INT(cli_help("sparsering demo", NULL, &usage, &b), 0);
  const char *h = b.data;
  const char *seed = strstr(h, "--seed");
  CHECK(seed != NULL);
  CHECK(seed && !strstr(seed + 1, "--seed"));         // once
  CHECK(seed && strstr(h, "--model") < seed);          // at the shared table's place, before the own rows
  CHECK(seed && strstr(seed, "--steps") != NULL);
  CHECK_STR_CONTAINS(h, "seed of the weights and the data [default: 1]");  // in the own table's words
  CHECK(!strstr(h, "seed of patterns"));
  CHECK(cli_find_flag(&usage, "seed") == &own[3]);
  CHECK(cli_find_flag(&usage, "colour") == NULL);
  sr_buf_free(&b);
}

TEST(cli_asks_help_only_where_a_flag_may_stand) {
  const char *h1[] = {"demo", "--model", "m", "-h"};
  const char *h2[] = {"demo", "--help"};
  const char *h3[] = {"demo", "--quiet", "--help"};  // a switch takes no value
  const char *v1[] = {"demo", "--out", "-h"};        // the value of --out
  const char *v2[] = {"demo", "-o", "--help"};
  const char *v3[] = {"demo", "--out=-h", "--model", "m"};
  CHECK(cli_asks_help(4, (char **)h1, &usage));
  CHECK(cli_asks_help(2, (char **)h2, &usage));
  CHECK(cli_asks_help(3, (char **)h3, &usage));
  CHECK(!cli_asks_help(3, (char **)v1, &usage));
  CHECK(!cli_asks_help(3, (char **)v2, &usage));
  CHECK(!cli_asks_help(4, (char **)v3, &usage));
}

TEST(cli_set_gives_a_flag_a_value_as_if_given_last) {
  const char *argv[] = {"demo", "--model", "m1"};
  cli_args a;
  sr_error e = {0};
  CHECK_EQ_INT(parse(&a, &e, 3, argv), SR_OK);
  CHECK_EQ_INT(cli_set(&a, "model", "m2", &e), SR_OK);
  CHECK(strcmp(cli_get(&a, "model", ""), "m2") == 0);
}

TEST(cli_num_beyond_a_double_is_named_so_not_as_inf_out_of_range) {
  const char *argv[] = {"demo", "--steps", "1e400"};
  cli_args a;
  sr_error e;
  CHECK_EQ_INT(parse(&a, &e, 3, argv), SR_OK);
  double x;
  CHECK_EQ_INT(cli_get_num(&a, "steps", 0, 0, INFINITY, &x, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "'1e400' is beyond the range of a double");
  CHECK(!strstr(e.msg, "inf"));
}

// A command writing two files: the parser checks them before the command runs.
static const cli_flag outs[] = {
    {"csv", cli_out_file, NULL, "a CSV"},
    {"svg", cli_out_file, NULL, "an SVG"},
    {"ckpt", cli_out_dir, NULL, "checkpoints"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage out_usage = {NULL, "sparsering demo --csv x.csv", {outs, NULL}};

TEST(output_flags_are_checked_when_parsed_and_may_not_share_a_file) {
  cli_args a;
  sr_error e;
  char ok[700], help_text[64];
  snprintf(ok, sizeof ok, "%s/x.csv", test_tmpdir());
  const char *bad_dir[] = {"demo", "--csv", ok, "--svg", "/nonexistent-dir/x.svg"};
  CHECK_EQ_INT(cli_parse(5, (char **)bad_dir, &out_usage, &a, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--svg: the directory /nonexistent-dir does not exist");
  const char *same[] = {"demo", "--csv", ok, "--svg", ok};
  CHECK_EQ_INT(cli_parse(5, (char **)same, &out_usage, &a, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "also given to --csv");
  const char *dir_as_file[] = {"demo", "--csv", test_tmpdir()};
  CHECK_EQ_INT(cli_parse(3, (char **)dir_as_file, &out_usage, &a, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "is a directory, not a file");
  const char *good[] = {"demo", "--csv", ok, "--ckpt", test_tmpdir()};
  CHECK_EQ_INT(cli_parse(5, (char **)good, &out_usage, &a, &e), SR_OK);
  sr_buf h = {0};  // help names the value as before
  CHECK_EQ_INT(cli_help("sparsering demo", NULL, &out_usage, &h), 0);
  snprintf(help_text, sizeof help_text, "--csv FILE");
  CHECK_STR_CONTAINS(h.data, help_text);
  CHECK_STR_CONTAINS(h.data, "--ckpt DIR");
  sr_buf_free(&h);
}

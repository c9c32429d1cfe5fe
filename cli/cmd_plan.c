// cmd_plan.c — `sparsering plan` (build a plan, write its JSON) and `sparsering show` (print a plan
// file for a person: layout, per-rank tokens, per-step transfers).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/plan_flags.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// plan

static const cli_flag plan_flags[] = {
    {"out", cli_out_file, "- (stdout)", "where to write the plan file (JSON; written atomically)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage plan_usage = {
    NULL, "sparsering plan --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining -o plan.json",
    {plan_spec_flags, plan_flags, NULL}};

static int cmd_plan(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan p;
  if (cli_parse(argc, argv, &plan_usage, &a, &e)) return sr_error_report(&e, "sparsering plan");
  if (a.n_pos > 0) {
    sr_input_error(&e, NULL, a.pos[0], "unexpected argument");
    return sr_error_report(&e, "sparsering plan");
  }
  if (plan_build_from_flags(&a, &p, &e)) return sr_error_report(&e, "sparsering plan");
  int rc = plan_write(&p, cli_get(&a, "out", "-"), &e);
  plan_free(&p);
  return rc ? sr_error_report(&e, "sparsering plan") : 0;
}

CLI_COMMAND("plan", cmd_plan,
            "build a plan (layout and schedule) and write it as JSON",
            &plan_usage)

// ---------------------------------------------------------------------------------------------
// show

static const char *human_bytes(int64_t b, char *buf, size_t n) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(buf, n, "%lld B", (long long)b);
  else snprintf(buf, n, "%.2f %s", v, unit[u]);
  return buf;
}

static void print_transfer(const char *label, const transfer *t) {
  if (t->peer < 0) return;
  char b[32];
  printf("  %s->%d ", label, t->peer);
  if (t->shard >= 0) printf("kv%d", t->shard);
  if (t->grad_shard >= 0) printf("%sdkv%d", t->shard >= 0 ? "+" : "", t->grad_shard);
  printf(" %s %s", human_bytes(t->bytes, b, sizeof b), link_class_name(t->link));
}

static void show_layout(const plan *p) {
  const layout *l = &p->layout;
  char tok[32];
  printf("layout     %s", layout_kind_name(l->kind));
  if (l->kind == LAYOUT_STRIPED) {
    printf(" G=%lld", (long long)l->granularity);
    if (l->granularity != l->granularity_asked) printf(" (asked %lld; shrunk so every rank holds tokens)", (long long)l->granularity_asked);
  }
  printf(", %s tokens over %d ranks, %lld runs\n", sr_format_tokens(l->n_tokens, tok, sizeof tok), l->world,
         (long long)l->n_runs);
  int64_t lo = l->rank_count[0], hi = l->rank_count[0];
  for (int r = 1; r < l->world; r++) lo = sr_min64(lo, l->rank_count[r]), hi = sr_max64(hi, l->rank_count[r]);
  printf("tokens     per rank min %lld, max %lld\n", (long long)lo, (long long)hi);
  printf("  rank   tokens   runs  first run\n");
  for (int r = 0; r < l->world; r++) {
    int64_t b = l->rank_run_begin[r], n = l->rank_run_begin[r + 1] - b;
    printf("  %4d %8lld %6lld", r, (long long)l->rank_count[r], (long long)n);
    if (n > 0) printf("  [%lld, %lld)", (long long)l->runs[b].global, (long long)(l->runs[b].global + l->runs[b].len));
    printf("\n");
  }
}

static void show_schedule(const plan *p, int brief) {
  const schedule *s = &p->schedule;
  char b1[32], b2[32];
  printf("schedule   %s, %d steps", schedule_kind_name(s->kind), s->n_steps);
  if (s->kind == SCHED_DOUBLE_RING) printf(", inner ring %d x outer ring %d", s->inner, s->outer);
  if (s->kind == SCHED_ULYSSES || s->kind == SCHED_USP)
    printf(", Ulysses degree %d x ring degree %d, %d heads and %d KV heads a rank%s", s->ulysses, s->ring,
           s->heads_per_rank, s->kv_heads_per_rank, s->kv_heads_replicated ? " (KV heads replicated)" : "");
  printf("\nbytes      per layer; KV %d B/elem, dK+dV %d B/elem (fp32 partial sums)\n", s->kv_bytes_per_elem,
         s->grad_bytes_per_elem);
  if (s->ulysses > 1)
    printf("all-to-all q,k,v %s and o %s per rank (%s); backward doubles them\n",
           human_bytes(s->a2a_bytes_qkv, b1, sizeof b1), human_bytes(s->a2a_bytes_out, b2, sizeof b2),
           link_class_name(s->a2a_link));
  for (int t = 0; t < s->n_steps; t++) {
    int64_t fwd[4] = {0}, bwd[4] = {0};
    for (int r = 0; r < s->world; r++) {
      const ring_step *st = schedule_at(s, t, r);
      fwd[st->send.link] += st->send.bytes, fwd[st->send_outer.link] += st->send_outer.bytes;
      bwd[st->send_bwd.link] += st->send_bwd.bytes, bwd[st->send_outer_bwd.link] += st->send_outer_bwd.bytes;
    }
    char b3[32], b4[32];
    printf("step %d: fwd intra %s inter %s | bwd intra %s inter %s\n", t, human_bytes(fwd[LINK_INTRA], b1, sizeof b1),
           human_bytes(fwd[LINK_INTER], b2, sizeof b2), human_bytes(bwd[LINK_INTRA], b3, sizeof b3),
           human_bytes(bwd[LINK_INTER], b4, sizeof b4));
    if (brief) continue;
    for (int r = 0; r < s->world; r++) {
      const ring_step *st = schedule_at(s, t, r);
      printf("  rank %d: kv%d", r, st->kv_src);
      print_transfer("fwd", &st->send);
      print_transfer("outer", &st->send_outer);
      print_transfer("bwd", &st->send_bwd);
      print_transfer("outer-bwd", &st->send_outer_bwd);
      printf("\n");
    }
  }
}

static const cli_flag show_flags[] = {
    {"brief", NULL, NULL, "per step the bytes by link class only, without each rank's line"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage show_usage = {"plan.json", "sparsering show plan.json --brief", {show_flags, NULL}};

static int cmd_show(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  if (cli_parse(argc, argv, &show_usage, &a, &e)) return sr_error_report(&e, "sparsering show");
  if (a.n_pos != 1) {
    sr_input_error(&e, NULL, NULL, "usage: sparsering show plan.json [--brief]");
    return sr_error_report(&e, "sparsering show");
  }
  plan p;
  if (plan_read(a.pos[0], &p, &e)) return sr_error_report(&e, "sparsering show");
  const plan_spec *s = &p.spec;
  char tok[32];
  printf("plan       %s\n", a.pos[0]);
  printf("model      %s (%lld layers, %lld heads, %lld KV heads, head_dim %lld)\n", p.model.name,
         (long long)p.model.num_layers, (long long)p.model.num_heads, (long long)p.model.num_kv_heads,
         (long long)p.model.head_dim);
  printf("cluster    %s: %d nodes x %d %s\n", p.cluster.name, p.cluster.nodes, p.cluster.gpus_per_node,
         p.cluster.gpu.name);
  printf("sequence   %s tokens (%lld)\n", sr_format_tokens(s->seq, tok, sizeof tok), (long long)s->seq);
  printf("strategy   %s, pattern %s, seed %llu\n", s->strategy, s->pattern, (unsigned long long)s->seed);
  show_layout(&p);
  show_schedule(&p, cli_has(&a, "brief"));
  plan_free(&p);
  return 0;
}

CLI_COMMAND("show", cmd_show, "print a plan file for a person", &show_usage)

// ---------------------------------------------------------------------------------------------
// bench-plan: how long the planner takes for the largest plans we ship clusters for

static const cli_usage bench_plan_usage = {NULL, "sparsering bench-plan", {NULL}};

static int cmd_bench_plan(int argc, char **argv) {
  static const struct {
    const char *cluster, *layout, *schedule;
    int64_t seq, g;
  } cases[] = {
      {"a100-4x8", "striped", "double-ring", 512 * 1024, 128},
      {"h100-8x8", "striped", "double-ring", 4 * 1024 * 1024, 128},
      {"h100-8x8", "striped", "ring", 4 * 1024 * 1024, 1},
      {"h100-8x8", "zigzag", "usp", 4 * 1024 * 1024, 1},
  };
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  if (cli_parse(argc, argv, &bench_plan_usage, &a, &e)) return sr_error_report(&e, "sparsering bench-plan");
  if (a.n_pos > 0) {
    sr_input_error(&e, NULL, a.pos[0], "unexpected argument");
    return sr_error_report(&e, "sparsering bench-plan");
  }
  printf("%-10s %-12s %-12s %8s %10s %10s %10s\n", "cluster", "layout", "schedule", "seq", "runs", "build_ms",
         "json_ms");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    plan_spec s;
    plan_spec_defaults(&s);
    snprintf(s.model, sizeof s.model, "llama-3.1-8b");
    snprintf(s.cluster, sizeof s.cluster, "%s", cases[i].cluster);
    snprintf(s.layout, sizeof s.layout, "%s", cases[i].layout);
    snprintf(s.schedule, sizeof s.schedule, "%s", cases[i].schedule);
    s.seq = cases[i].seq;
    s.granularity = cases[i].g;
    plan p;
    double t0 = sr_now();
    if (plan_build(&s, &p, &e)) return sr_error_report(&e, "sparsering bench-plan");
    double t1 = sr_now();
    char *text = NULL;
    if (plan_to_json(&p, &text, &e)) {
      plan_free(&p);
      return sr_error_report(&e, "sparsering bench-plan");
    }
    double t2 = sr_now();
    char tok[32], lay[32];
    if (strcmp(cases[i].layout, "striped") == 0) snprintf(lay, sizeof lay, "striped:%lld", (long long)cases[i].g);
    else snprintf(lay, sizeof lay, "%s", cases[i].layout);
    printf("%-10s %-12s %-12s %8s %10lld %10.1f %10.1f\n", cases[i].cluster, lay, cases[i].schedule,
           sr_format_tokens(s.seq, tok, sizeof tok), (long long)p.layout.n_runs, 1e3 * (t1 - t0), 1e3 * (t2 - t1));
    free(text);
    plan_free(&p);
  }
  return 0;
}

CLI_COMMAND("bench-plan", cmd_bench_plan, "time the planner (layout + schedule build, JSON) on the largest shipped clusters",
            &bench_plan_usage)

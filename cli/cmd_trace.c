// cmd_trace.c — `sparsering trace gen | stats | import-minference`: make attention traces from the
// pattern generators or from MInference/MTraining head configs, and summarise what a trace holds.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "plan/model.h"
#include "plan/util.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// trace gen

static const cli_flag gen_flags[] = {
    {"model", "NAME|PATH", "required", "the model: a shipped name (models/NAME.json) or a config file"},
    {"seq", "N", "required", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"pattern", "P", "required", "the pattern generator (docs/patterns.md)"},
    {"out", cli_out_file, "required", "the trace file to write (safetensors)"},
    {"steps", "S", "1", "training steps to record (a synthetic pattern drifts from step to step)"},
    {"seed", "X", "0", "seed of the generator"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage gen_usage = {
    NULL, "sparsering trace gen --model tiny-25m --seq 32K --steps 4 --pattern vs-topp:0.9 --seed 1 -o t.safetensors",
    {gen_flags, NULL}};

static int trace_gen(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  const char *model_name, *seq_text, *spec, *out;
  int64_t seq = 0, steps = 0, seed = 0;
  model_config m;
  if (cli_parse(argc, argv, &gen_usage, &a, &e) || cli_require(&a, "model", &model_name, &e) ||
      cli_require(&a, "seq", &seq_text, &e) || cli_require(&a, "pattern", &spec, &e) ||
      cli_require(&a, "out", &out, &e) || sr_parse_tokens(seq_text, "--seq", &seq, &e) ||
      cli_get_int(&a, "steps", 1, 1, 1000000, &steps, &e) || cli_get_int(&a, "seed", 0, 0, INT64_MAX, &seed, &e) ||
      model_load(model_name, &m, &e))
    return sr_error_report(&e, "sparsering trace gen");
  trace_info in;
  memset(&in, 0, sizeof in);
  trace_info_set_model(&in, &m);
  in.seq_len = seq;
  in.layers = (int)m.num_layers;
  in.heads = (int)m.num_heads;
  in.seed = (uint64_t)seed;
  snprintf(in.source, sizeof in.source, "generator");
  snprintf(in.origin, sizeof in.origin, "%s", spec);
  trace_writer w;
  int rc = trace_writer_begin(&w, &in, &e);
  for (int s = 0; rc == SR_OK && s < steps; s++) {
    pattern p;
    rc = pattern_source_load(spec, &m, seq, (uint64_t)seed, s, &p, &e);
    if (rc == SR_OK) {
      rc = trace_writer_add_step(&w, &p, NULL, &e);
      pattern_free(&p);
    }
  }
  if (rc == SR_OK) rc = trace_writer_finish(&w, out, &e);
  trace_writer_free(&w);
  if (rc) return sr_error_report(&e, "sparsering trace gen");
  char buf[32];
  fprintf(stderr, "wrote %s: %s, %s tokens, %lld steps x %lld layers x %lld heads, pattern %s, seed %lld\n", out,
          m.name, sr_format_tokens(seq, buf, sizeof buf), (long long)steps, (long long)m.num_layers,
          (long long)m.num_heads, spec, (long long)seed);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// trace stats

static const char *kind_name(int k) {
  static const char *const names[] = {"dense", "window", "vs", "block"};
  return k >= 0 && k < 4 ? names[k] : "?";
}

static int write_stats_csv(const char *path, const trace_head_stats *st, int64_t n, sr_error *e) {
  sr_buf b = {0};
  int bad = sr_buf_printf(&b, "step,layer,head,kind,kept_pairs,density,n_vertical,n_slash,n_blocks,jaccard_prev\n");
  for (int64_t i = 0; i < n && !bad; i++) {
    const trace_head_stats *x = &st[i];
    bad |= sr_buf_printf(&b, "%d,%d,%d,%s,%.0f,%.9g,%d,%d,%lld,", x->step, x->layer, x->head, kind_name(x->kind),
                         x->kept_pairs, x->density, x->n_vertical, x->n_slash, (long long)x->n_blocks);
    bad |= isnan(x->jaccard_prev) ? sr_buf_printf(&b, "\n") : sr_buf_printf(&b, "%.9g\n", x->jaccard_prev);
  }
  int rc = bad ? sr_internal_error(e, 12, "building %s", path) : sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}

static const cli_flag stats_flags[] = {
    {"csv", cli_out_file, NULL, "write one row per step, layer and head as CSV"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage stats_usage = {"t.safetensors", "sparsering trace stats t.safetensors --csv heads.csv",
                                      {stats_flags, NULL}};

static int trace_stats_cmd(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  if (cli_parse(argc, argv, &stats_usage, &a, &e)) return sr_error_report(&e, "sparsering trace stats");
  if (a.n_pos != 1) {
    sr_input_error(&e, NULL, "trace stats", "expected one trace file (sparsering trace stats t.safetensors [--csv out.csv])");
    return sr_error_report(&e, "sparsering trace stats");
  }
  trace_file t;
  trace_head_stats *st = NULL;
  int64_t n = 0;
  if (trace_open(a.pos[0], &t, &e)) return sr_error_report(&e, "sparsering trace stats");
  if (trace_stats(&t, &st, &n, &e)) {
    trace_close(&t);
    return sr_error_report(&e, "sparsering trace stats");
  }
  const trace_info *in = &t.info;
  char buf[32];
  printf("trace %s\n  model %s, %s tokens, %d steps x %d layers x %d heads, pattern %s\n  source %s: %s (seed %llu)\n",
         a.pos[0], in->model[0] ? in->model : "(none)", sr_format_tokens(in->seq_len, buf, sizeof buf), in->steps,
         in->layers, in->heads, in->pattern_kind, in->source, in->origin[0] ? in->origin : "-",
         (unsigned long long)in->seed);
  printf("\n%5s  %-7s %9s %9s %9s %10s %10s %9s %9s\n", "layer", "kinds", "density", "min head", "max head",
         "verticals", "slashes", "blocks", "drift J");
  const int H = in->heads;
  double all_kept = 0, all_j = 0;
  int64_t all_jn = 0;
  for (int l = 0; l < in->layers; l++) {
    // Per head: mean over steps; the row shows the mean over heads and the extreme heads.
    double sum = 0, lo = INFINITY, hi = -INFINITY, nv = 0, ns = 0, nb = 0, jsum = 0;
    int64_t jn = 0;
    int kinds = 0;
    for (int h = 0; h < H; h++) {
      double d = 0;
      for (int s = 0; s < in->steps; s++) {
        const trace_head_stats *x = &st[((int64_t)s * in->layers + l) * H + h];
        d += x->density;
        nv += x->n_vertical;
        ns += x->n_slash;
        nb += (double)x->n_blocks;
        all_kept += x->kept_pairs;
        kinds |= 1 << x->kind;
        if (!isnan(x->jaccard_prev)) jsum += x->jaccard_prev, jn++;
      }
      d /= in->steps;
      sum += d;
      lo = fmin(lo, d);
      hi = fmax(hi, d);
    }
    const double cnt = (double)H * in->steps;
    const char *k = "mixed";
    for (int i = 0; i < 4; i++)
      if (kinds == 1 << i) k = kind_name(i);
    printf("%5d  %-7s %8.3f%% %8.3f%% %8.3f%% %10.1f %10.1f %9.1f ", l, k, 100 * sum / H, 100 * lo, 100 * hi, nv / cnt,
           ns / cnt, nb / cnt);
    if (jn) printf("%9.4f\n", jsum / (double)jn);
    else printf("%9s\n", "-");
    all_j += jsum;
    all_jn += jn;
  }
  const double causal = (double)in->seq_len * (double)(in->seq_len + 1) / 2;
  const double density = all_kept / (causal * (double)n);
  printf("\nall    density %.3f%% (sparsity %.3f%%) over %lld heads x steps", 100 * density, 100 * (1 - density),
         (long long)n);
  if (all_jn) printf(", mean drift J %.4f between consecutive steps\n", all_j / (double)all_jn);
  else printf("%s\n", in->steps > 1 ? ", drift not comparable (heads changed kind)" : ", one step (no drift)");
  const char *csv = cli_get(&a, "csv", NULL);
  int rc = csv ? write_stats_csv(csv, st, n, &e) : SR_OK;
  free(st);
  trace_close(&t);
  return rc ? sr_error_report(&e, "sparsering trace stats") : 0;
}

// ---------------------------------------------------------------------------------------------
// trace import-minference

static const cli_flag import_flags[] = {
    {"seq", "N", "required", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"out", cli_out_file, "required", "the trace file to write (safetensors)"},
    {"model", "NAME|PATH", NULL, "the model the config is for (checked against it, recorded in the trace)"},
    {"steps", "S", "1", "training steps to record"},
    {"seed", "X", "0", "seed of the synthesised indices"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage import_usage = {
    "config.json",
    "sparsering trace import-minference traces/samples/minference-tiny-test.json --model tiny-test --seq 8K -o t.safetensors",
    {import_flags, NULL}};

static int trace_import(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  const char *seq_text, *out;
  int64_t seq = 0, steps = 0, seed = 0;
  if (cli_parse(argc, argv, &import_usage, &a, &e) || cli_require(&a, "seq", &seq_text, &e) ||
      cli_require(&a, "out", &out, &e) || sr_parse_tokens(seq_text, "--seq", &seq, &e) ||
      cli_get_int(&a, "steps", 1, 1, 1000000, &steps, &e) || cli_get_int(&a, "seed", 0, 0, INT64_MAX, &seed, &e))
    return sr_error_report(&e, "sparsering trace import-minference");
  if (a.n_pos != 1) {
    sr_input_error(&e, NULL, "trace import-minference", "expected one MInference config file");
    return sr_error_report(&e, "sparsering trace import-minference");
  }
  model_config m, *mp = NULL;
  const char *model_name = cli_get(&a, "model", NULL);
  if (model_name) {
    if (model_load(model_name, &m, &e)) return sr_error_report(&e, "sparsering trace import-minference");
    mp = &m;
  }
  minference_config c;
  if (minference_load(a.pos[0], mp, &c, &e)) return sr_error_report(&e, "sparsering trace import-minference");
  trace_info in;
  memset(&in, 0, sizeof in);
  if (mp) trace_info_set_model(&in, mp);
  in.seq_len = seq;
  in.layers = c.layers;
  in.heads = c.heads;
  in.seed = (uint64_t)seed;
  snprintf(in.source, sizeof in.source, "import");
  snprintf(in.origin, sizeof in.origin, "minference:%s", a.pos[0]);
  trace_writer w;
  int rc = trace_writer_begin(&w, &in, &e);
  for (int s = 0; rc == SR_OK && s < steps; s++) {
    pattern p;
    rc = minference_pattern(&c, seq, (uint64_t)seed, s, &p, &e);
    if (rc == SR_OK) {
      rc = trace_writer_add_step(&w, &p, c.score, &e);
      pattern_free(&p);
    }
  }
  if (rc == SR_OK) rc = trace_writer_finish(&w, out, &e);
  trace_writer_free(&w);
  minference_free(&c);
  if (rc) return sr_error_report(&e, "sparsering trace import-minference");
  fprintf(stderr, "wrote %s: %d layers x %d heads from %s, %lld tokens, %lld steps\n", out, in.layers, in.heads,
          a.pos[0], (long long)seq, (long long)steps);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// bench-trace: write, read and summarise a realistic trace (figures in docs/traces.md)

static const cli_flag bench_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model"},
    {"seq", "N", "128K", "tokens in the sequence"},
    {"steps", "S", "2", "steps to write and read"},
    {"pattern", "P", "vs-preset:qwen2.5-3b", "the pattern generator"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_usage = {NULL, "sparsering bench-trace --seq 512K --steps 1", {bench_flags, NULL}};

static int bench_trace(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  const char *prog = "sparsering bench-trace";
  int64_t seq = 0, steps = 0;
  model_config m;
  if (cli_parse(argc, argv, &bench_usage, &a, &e) || sr_parse_tokens(cli_get(&a, "seq", "128K"), "--seq", &seq, &e) ||
      cli_get_int(&a, "steps", 2, 1, 1000, &steps, &e) || model_load(cli_get(&a, "model", "qwen2.5-3b"), &m, &e))
    return sr_error_report(&e, prog);
  const char *spec = cli_get(&a, "pattern", "vs-preset:qwen2.5-3b");
  char path[64];
  snprintf(path, sizeof path, "/tmp/sparsering-bench-trace.%ld.safetensors", (long)getpid());
  trace_info in;
  memset(&in, 0, sizeof in);
  trace_info_set_model(&in, &m);
  in.seq_len = seq, in.layers = (int)m.num_layers, in.heads = (int)m.num_heads;
  snprintf(in.origin, sizeof in.origin, "%s", spec);
  trace_writer w;
  double t_gen = 0, t0;
  int rc = trace_writer_begin(&w, &in, &e);
  for (int s = 0; rc == SR_OK && s < steps; s++) {
    pattern p;
    t0 = sr_now();
    rc = pattern_source_load(spec, &m, seq, 1, s, &p, &e);
    t_gen += sr_now() - t0;
    if (rc == SR_OK) rc = trace_writer_add_step(&w, &p, NULL, &e);
    if (rc == SR_OK) pattern_free(&p);
  }
  t0 = sr_now();
  if (rc == SR_OK) rc = trace_writer_finish(&w, path, &e);
  double t_write = sr_now() - t0;
  trace_writer_free(&w);
  trace_file t;
  double t_read = 0, t_stats = 0, mb = 0;
  if (rc == SR_OK) {
    t0 = sr_now();
    rc = trace_open(path, &t, &e);
    for (int s = 0; rc == SR_OK && s < steps; s++) {
      pattern p;
      if ((rc = trace_read_step(&t, s, &p, &e)) == SR_OK) pattern_free(&p);
    }
    t_read = sr_now() - t0;
    if (rc == SR_OK) {
      trace_head_stats *st;
      int64_t n;
      t0 = sr_now();
      rc = trace_stats(&t, &st, &n, &e);
      t_stats = sr_now() - t0;
      if (rc == SR_OK) free(st);
      for (int i = 0; i < t.f.n_tensors; i++) mb += (double)(t.f.tensors[i].end - t.f.tensors[i].begin) / 1e6;
      trace_close(&t);
    }
  }
  unlink(path);
  if (rc) return sr_error_report(&e, prog);
  char buf[32];
  printf("bench-trace: %s, %s tokens, %lld steps, %s: %.1f MB of tensors\n", m.name, sr_format_tokens(seq, buf, sizeof buf),
         (long long)steps, spec, mb);
  printf("  generate %.3f s   write %.3f s (%.0f MB/s)   open+read all steps %.3f s (%.0f MB/s)   stats %.3f s\n", t_gen,
         t_write, mb / t_write, t_read, mb / t_read, t_stats);
  return 0;
}

CLI_COMMAND("bench-trace", bench_trace, "trace write/read/stats speed",
            &bench_usage)

// ---------------------------------------------------------------------------------------------
// the group: `sparsering trace` alone lists these three (plan/commands.h)

CLI_COMMAND("trace gen", trace_gen, "write a trace from a pattern generator (docs/traces.md)", &gen_usage)
CLI_COMMAND("trace stats", trace_stats_cmd, "summarise a trace per layer: density, kinds, drift between steps", &stats_usage)
CLI_COMMAND("trace import-minference", trace_import, "a trace from an MInference/MTraining head config",
            &import_usage)

// cmd_cluster.c — `sparsering cluster --cluster C [--json]`: print a cluster description as the
// planner reads it (for a person, or as the normalised file with every default made explicit).
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "plan/cluster.h"

static const cli_flag cluster_flags[] = {
    {"cluster", "NAME|PATH", "required", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"json", NULL, NULL, "print the normalised file, every default made explicit"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage cluster_usage = {NULL, "sparsering cluster --cluster a100-4x8", {cluster_flags, NULL}};

static int cmd_cluster(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  const char *name = NULL;
  cluster_desc c;
  if (cli_parse(argc, argv, &cluster_usage, &a, &e) || cli_require(&a, "cluster", &name, &e) || cluster_load(name, &c, &e))
    return sr_error_report(&e, "sparsering cluster");
  if (cli_has(&a, "json")) {
    char *text = cluster_to_json(&c);
    if (!text) {
      fprintf(stderr, "sparsering cluster: out of memory\n");
      return 1;
    }
    fputs(text, stdout);
    free(text);
    return 0;
  }
  const gpu_desc *g = &c.gpu;
  printf("cluster %s (%s)\n", c.name, c.path);
  printf("  GPUs                %d nodes x %d = %d %s\n", c.nodes, c.gpus_per_node, cluster_world(&c), g->name);
  printf("  GPU                 %.0f TFLOP/s bf16 dense, HBM %.0f GB/s, %.1f GiB\n", g->peak_tflops, g->hbm_gbps, g->mem_gib);
  printf("  efficiency          GEMM %.2f, memory %.2f\n", g->eff_gemm, g->eff_mem);
  printf("    attention fwd     full %.2f, partial %.2f, bar %.2f\n", g->eff_attn_fwd_full, g->eff_attn_fwd_partial,
         g->eff_attn_fwd_bar);
  printf("    attention bwd     full %.2f, partial %.2f, bar %.2f\n", g->eff_attn_bwd_full, g->eff_attn_bwd_partial,
         g->eff_attn_bwd_bar);
  printf("  comm slowdown       compute x%.2f while a comm kernel runs\n", g->comm_slowdown);
  if (c.gpus_per_node > 1) printf("  intra-node          %.0f GB/s per direction per GPU, %.1f us\n", c.intra.gbps, c.intra.latency_us);
  if (c.nics_per_node > 0)
    printf("  inter-node          %d NICs x %.0f GB/s per node (%.1f GB/s per GPU), %.1f us%s\n", c.nics_per_node, c.nic.gbps,
           cluster_inter_gbps_per_gpu(&c), c.nic.latency_us, c.nodes == 1 ? " (unused: one node)" : "");
  printf("  host                PCIe %.0f GB/s per direction per GPU, %.1f us; %.0f GiB per node\n", c.host.gbps,
         c.host.latency_us, c.host_mem_gib);
  return 0;
}

CLI_COMMAND("cluster", cmd_cluster, "print a cluster description", &cluster_usage)

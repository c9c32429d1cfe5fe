// test_sim_step.c — whole simulated steps against closed forms: the contiguous causal layout's
// imbalance, double ring = flat ring on one node, memory with and without recomputation; and the
// CLI: the timeline's JSON parses and every event has pid/tid/ts/dur, the sweep's CSV is the same
// under mpirun -np 1 and -np 2, bad inputs exit 2.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "plan/tiles.h"
#include "sim/memory.h"
#include "sim/strategy.h"
#include "tests/test.h"

// A cluster of `nodes` x `gpus` with every attention efficiency equal (so time is proportional to
// tiles) and no comm slowdown; written into the test's scratch directory.
static const char *test_cluster_pcie(int nodes, int gpus, double pcie_gbps, double pcie_latency_us) {
  static char path[700];
  snprintf(path, sizeof path, "%s/c%dx%d-%g.json", test_tmpdir(), nodes, gpus, pcie_gbps);
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": %d, \"gpus_per_node\": %d,\n"
           " \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, \"mem_gib\": 40,\n"
           "   \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_fwd_bar\": 0.5,\n"
           "     \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8},\n"
           "   \"comm_slowdown\": 1.0},\n"
           " \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},\n"
           " \"inter_node\": {\"nics_per_node\": %d, \"nic_gbps\": 25, \"latency_us\": 5},\n"
           " \"host\": {\"pcie_gbps\": %g, \"latency_us\": %g, \"mem_gib\": 512}}\n",
           nodes, gpus, gpus, pcie_gbps, pcie_latency_us);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  return path;
}

static const char *test_cluster(int nodes, int gpus) { return test_cluster_pcie(nodes, gpus, 25, 10); }

// strategy's plan for tiny-test on cluster, simulated with options o (record_timeline set when tl != NULL).
static int run_spec_opts(const char *strategy, const char *cluster, int64_t seq, int recompute, sim_options o,
                         sim_result *r, sim_timeline *tl) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, strategy, &e)) return -1;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = seq;
  s.recompute = recompute;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  o.record_timeline = tl != NULL;
  int rc = sim_plan(&p, &o, r, tl, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  plan_free(&p);
  return rc;
}

static int run_spec(const char *strategy, const char *cluster, int64_t seq, int recompute, sim_result *r,
                    sim_timeline *tl) {
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  return run_spec_opts(strategy, cluster, seq, recompute, o, r, tl);
}

// Events of phase ph in layer 0 on rank 0.
static int count_phase(const sim_timeline *tl, int ph) {
  int n = 0;
  for (int64_t i = 0; i < tl->n; i++) n += tl->ev[i].phase == ph && tl->ev[i].layer == 0 && tl->ev[i].rank == 0;
  return n;
}

TEST(sim_step_contiguous_causal_last_rank_does_2w_minus_1_times_the_first) {
  // Dense causal attention over W = 4 ranks of n = 4096 tokens (nt = 32 tiles of 128): rank r computes
  // r full n x n blocks plus its causal diagonal block, i.e. r * nt^2 + nt(nt+1)/2 tiles per head. With
  // equal efficiencies its forward attention time is proportional to that, and the ratio last/first
  // tends to 2W - 1 = 7 as nt grows.
  int W = 4;
  double nt = 32, first = nt * (nt + 1) / 2, last = (W - 1) * nt * nt + first;
  sim_result r;
  sim_timeline tl = {0};
  CHECK_EQ_INT(run_spec("dense-ring", test_cluster(1, W), (int64_t)W * 4096, 0, &r, &tl), 0);
  double t0 = 0, tl_last = 0;
  for (int64_t i = 0; i < tl.n; i++)
    if (tl.ev[i].phase == PHASE_ATTN && tl.ev[i].layer == 0 && tl.ev[i].step >= 0) {  // the ring steps' kernels
      if (tl.ev[i].rank == 0) t0 += tl.ev[i].dur;
      if (tl.ev[i].rank == W - 1) tl_last += tl.ev[i].dur;
    }
  CHECK(t0 > 0);
  // Per-step times are stored in single precision (float), hence 1e-6.
  CHECK_REL(tl_last / t0, last / first, 1e-6);
  CHECK_REL(tl_last / t0, 2 * W - 1, 0.03);
  // Worker imbalance = max / mean of the per-rank forward attention time: the tiles (4 heads of 4 x 128^2 x 16
  // FLOPs at 0.5 x 100 TFLOP/s) and every rank's call passes around them, the same on every rank (tiny-test's
  // 528 + 384 bytes a token of its 4096, at 0.8 x 1000 GB/s; test_sim_exec_cost.c).
  double tile_s = 4 * 4.0 * 128 * 128 * 16 / 50e12, pass_s = (528.0 + 384) * 4096 / 800e9, mean = 0;
  for (int k = 0; k < W; k++) mean += (k * nt * nt + first) * tile_s + pass_s;
  mean /= W;
  CHECK_REL(r.worker_imbalance, (last * tile_s + pass_s) / mean, 1e-6);
  sim_timeline_free(&tl);
}

TEST(sim_step_double_ring_equals_flat_ring_on_one_node) {
  // With one node the inner ring is the whole ring: the same transfers, the same step time.
  sim_result flat, dbl;
  const char *c = test_cluster(1, 4);
  CHECK_EQ_INT(run_spec("mtraining-flat", c, 16384, 1, &flat, NULL), 0);
  CHECK_EQ_INT(run_spec("mtraining", c, 16384, 1, &dbl, NULL), 0);
  CHECK(flat.step_s > 0);
  CHECK_REL(dbl.step_s, flat.step_s, 1e-12);
}

// FPDT on 2 GPUs, 16K tokens in 4 chunks of 4K, with or without host offload.
static double fpdt_step(const char *cluster, int offload) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "fpdt", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  s.seq = 16384;
  s.fpdt_chunk = 4096;
  s.fpdt_offload = offload;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  sim_result r;
  CHECK_EQ_INT(sim_plan(&p, NULL, &r, NULL, &e), SR_OK);
  plan_free(&p);
  return r.step_s;
}

// tiny-test on 1 x 4, contiguous layout of 1024 tokens a rank, a causal window of 256 without sinks.
static int run_window(int skip, sim_result *r) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", test_cluster(1, 4));
  snprintf(s.layout, sizeof s.layout, "contiguous");
  snprintf(s.schedule, sizeof s.schedule, "ring");
  snprintf(s.pattern, sizeof s.pattern, "window:0:256");
  s.seq = 4096;
  s.skip_empty_sends = skip;
  plan p;
  sr_error e;
  if (plan_build(&s, &p, &e)) return -1;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  int rc = sim_plan(&p, &o, r, NULL, &e);
  plan_free(&p);
  return rc;
}

TEST(sim_step_skipping_empty_sends_moves_only_the_shards_the_window_touches) {
  // Rank q needs only shard q-1 besides its own. Per layer, without skipping: W(W-1) KV hops forward
  // (twice, with recomputation) and backward, W(W-1) accumulator hops and W flushes. With skipping:
  // W-1 KV hops, W-1 accumulator hops (q-1's own, with its shard) and W-1 flushes (shard q-1, home).
  // KV = 2 x 1024 tokens x 2 KV heads x 16 x 2 bytes; dK/dV the same at 4 bytes. (The gradient
  // reduction's bytes, also counted, are the same in both.)
  const double W = 4, L = 2, kv = 2.0 * 1024 * 2 * 16 * 2, dkv = 2 * kv;
  sim_result all, kept;
  CHECK_EQ_INT(run_window(0, &all), SR_OK);
  CHECK_EQ_INT(run_window(1, &kept), SR_OK);
  double ring_all = L * (3 * W * (W - 1) * kv + (W * (W - 1) + W) * dkv);
  double ring_kept = L * (3 * (W - 1) * kv + 2 * (W - 1) * dkv);
  CHECK(all.comm_bytes - kept.comm_bytes == ring_all - ring_kept);
  CHECK(kept.comm_bytes > ring_kept);
  CHECK(kept.step_s < all.step_s);
  CHECK(kept.attn_fwd_s == all.attn_fwd_s);  // the same work, computed on the same steps
}

TEST(sim_step_fpdt_prefetch_hides_when_pcie_outpaces_chunk_compute) {
  // With a PCIe link far faster than a chunk pair's compute (and no latency) every fetch finishes
  // before the compute that needs it: offload costs nothing. With a slow link the fetches show.
  double resident = fpdt_step(test_cluster_pcie(1, 2, 1e5, 0), 0);
  double fast = fpdt_step(test_cluster_pcie(1, 2, 1e5, 0), 1);
  double slow = fpdt_step(test_cluster_pcie(1, 2, 0.001, 0), 1);
  CHECK(resident > 0);
  CHECK_REL(fast, resident, 1e-6);  // a 256 KB fetch takes ~3 ns at 1e5 GB/s
  CHECK(slow > 2 * resident);
}

TEST(sim_step_memory_with_recomputation_is_below_memory_without) {
  sim_result with, without;
  const char *c = test_cluster(1, 4);
  CHECK_EQ_INT(run_spec("zigzag-ring", c, 16384, 1, &with, NULL), 0);
  CHECK_EQ_INT(run_spec("zigzag-ring", c, 16384, 0, &without, NULL), 0);
  CHECK(with.mem.activations < without.mem.activations);
  CHECK(with.mem.total < without.mem.total);
  // Recomputation runs the forward twice: the step is slower.
  CHECK(with.step_s > without.step_s);
}

TEST(sim_selective_recomputation_runs_attention_once_a_layer_and_holds_its_output_and_lse) {
  // The recomputed forward of selective recomputation reruns the GEMMs but not attention: a layer's attention
  // forward tasks halve, its KV is sent once less, and memory holds every layer's O (bf16) and LSE (fp32).
  const char *c = test_cluster(1, 4);
  sim_options keep = {0, 0, 0, 1, 0, 0, 0, 0}, full = {0, 0, 0, 0, 0, 0, 0, 0};
  sim_result rk, rf;
  sim_timeline tk = {0}, tf = {0};
  CHECK_EQ_INT(run_spec_opts("dense-ring", c, 16384, 1, keep, &rk, &tk), 0);
  CHECK_EQ_INT(run_spec_opts("dense-ring", c, 16384, 1, full, &rf, &tf), 0);
  CHECK(count_phase(&tk, PHASE_ATTN) > 0);
  CHECK_EQ_INT(2 * count_phase(&tk, PHASE_ATTN), count_phase(&tf, PHASE_ATTN));
  CHECK_EQ_INT(count_phase(&tk, PHASE_ATTN_BWD), count_phase(&tf, PHASE_ATTN_BWD));
  CHECK(rk.step_s < rf.step_s);
  CHECK(rk.comm_bytes < rf.comm_bytes);
  // tiny-test: 2 layers, 4 heads of 16; 4096 tokens a rank: O 2 x 64 B and LSE 4 x 4 B a token and layer
  CHECK_NEAR(rk.mem.activations - rf.mem.activations, 2 * 4096.0 * (2 * 64 + 4 * 4), 1e-6);
  sim_timeline_free(&tk);
  sim_timeline_free(&tf);
}

TEST(sim_index_ready_builds_no_index_in_the_step_of_a_fixed_pattern) {
  // The trainer keeps every layer's plan: a fixed sparse pattern's forward builds no execution form in the step.
  const char *c = test_cluster(1, 2);
  sim_options ready = {0, 0, 1, 0, 1, 0, 0, 0}, built = {0, 0, 1, 0, 0, 0, 0, 0};
  sim_result rr, rb;
  sim_timeline tr = {0}, tb = {0};
  CHECK_EQ_INT(run_spec_opts("mtraining", c, 8192, 1, ready, &rr, &tr), 0);
  CHECK_EQ_INT(run_spec_opts("mtraining", c, 8192, 1, built, &rb, &tb), 0);
  CHECK(count_phase(&tb, PHASE_INDEX) > 0);
  CHECK_EQ_INT(count_phase(&tr, PHASE_INDEX), 0);
  CHECK(rr.step_s < rb.step_s);
  sim_timeline_free(&tr);
  sim_timeline_free(&tb);
}

// tiny-test on a bare cluster of 80 GiB GPUs, for the memory model alone
static void memory_fixture(model_config *m, cluster_desc *c) {
  sr_error e;
  CHECK_EQ_INT(model_load("tiny-test", m, &e), SR_OK);
  memset(c, 0, sizeof *c);
  c->gpu.mem_gib = 80;
  c->host_mem_gib = 100;
}

TEST(sim_memory_shards_optimizer_state_with_zero1) {
  // 12 bytes of fp32 master weights, momentum and variance a parameter (ZeRO paper), over W ranks.
  model_config m;
  cluster_desc c;
  memory_fixture(&m, &c);
  mem_inputs in = {.world = 8, .tokens_per_rank = 1024, .recompute = 1, .zero = 1, .kv_bytes_per_elem = 2,
                   .grad_bytes_per_elem = 4};
  sim_memory a, b;
  sim_memory_estimate(&m, &c, &in, &a);
  in.zero = 0;
  sim_memory_estimate(&m, &c, &in, &b);
  double P = (double)model_param_count(&m);
  CHECK_REL(a.optim, 12 * P / 8, 1e-12);
  CHECK_REL(b.optim, 12 * P, 1e-12);
  CHECK_REL(a.weights, 2 * P, 1e-12);
}

TEST(sim_memory_of_the_exec_trainer_is_its_state_and_buffers) {
  // sparsering-exec train: fp32 weights (4) + bf16 copy (2) + fp32 grads (4) a parameter, fp32 AdamW m and v
  // (8) over the ZeRO-1 ranks, plan/model.h's buffers a local token, a 2K-token chunk of bf16 logits with their
  // gradient in place (2 bytes an element, not fp32 logits and gradient's 8); the index term does not change
  model_config m;
  cluster_desc c;
  memory_fixture(&m, &c);
  mem_inputs in = {.world = 4, .tokens_per_rank = 3000, .kv_shard_tokens = 3000, .index_bytes = 12345, .recompute = 1,
                   .zero = 1, .kv_bytes_per_elem = 2, .grad_bytes_per_elem = 4};
  sim_memory mixed, exec;
  sim_memory_estimate(&m, &c, &in, &mixed);
  in.exec_trainer = 1;
  sim_memory_estimate(&m, &c, &in, &exec);
  double P = (double)model_param_count(&m);
  CHECK_REL(exec.weights + exec.grads + exec.optim, 10 * P + 8 * P / 4, 1e-12);
  CHECK_REL(exec.weights + exec.grads + exec.optim, model_exec_state_bytes(&m, 4), 1e-12);
  CHECK_REL(exec.activations, 3000 * model_exec_bytes_per_token(&m, 1, 3000, 0), 1e-12);  // the MLP whole
  CHECK_REL(exec.index_bytes, mixed.index_bytes, 1e-12);
  CHECK(exec.total > mixed.total);
}

TEST(sim_memory_of_the_exec_trainer_holds_the_executors_shared_workspace_for_its_attention) {
  // The exec trainer's attention buffers are the executor's shared workspace (exec_workspace, and the expanded
  // bars bars_bytes on top), not the generic ring double buffers and running output: no KV buffers of their own;
  // the workspace line is that, a 2K-token chunk of bf16 logits (tiny-test: vocabulary 256) and the reserve.
  model_config m;
  cluster_desc c;
  memory_fixture(&m, &c);
  mem_inputs in = {.world = 4, .tokens_per_rank = 3000, .kv_shard_tokens = 3000, .recompute = 1, .zero = 1,
                   .kv_bytes_per_elem = 2, .grad_bytes_per_elem = 4, .exec_trainer = 1, .exec_workspace = 7e6,
                   .bars_bytes = 5e5};
  sim_memory exec;
  sim_memory_estimate(&m, &c, &in, &exec);
  CHECK_NEAR(exec.kv_buffers, 0, 0);
  CHECK_REL(exec.workspace, 7e6 + 5e5 + 2048.0 * 256 * 2 + SIM_MEM_RESERVE, 1e-12);
}

TEST(sim_trainer_exec_survives_the_plan_file_and_old_files_read_as_mixed) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "dense-ring", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", test_cluster(1, 2));
  snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = 4096;
  plan p, q;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  char path[700];
  snprintf(path, sizeof path, "%s/exec.json", test_tmpdir());
  CHECK_EQ_INT(plan_write(&p, path, &e), SR_OK);
  CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
  CHECK(strcmp(q.spec.trainer, "exec") == 0);
  plan_free(&q);
  // a plan file written before the field: the same text without its "trainer" line
  char *text = NULL, cmd[1600];
  snprintf(cmd, sizeof cmd, "grep -v '\"trainer\"' %s > %s.old && cat %s.old", path, path, path);
  CHECK_EQ_INT(test_run(cmd, &text), 0);
  // (the test's folder, in the cluster's path, holds the word too: look for the key)
  CHECK(text && strstr(text, "\"trainer\":") == NULL && strstr(text, "\"seed\"") != NULL);
  free(text);
  snprintf(path + strlen(path), sizeof path - strlen(path), ".old");
  CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
  CHECK(strcmp(q.spec.trainer, "mixed") == 0);
  plan_free(&q);
  plan_free(&p);
}

TEST(sim_step_ulysses_above_the_heads_is_reported_not_run) {
  // tiny-test has 4 heads: Ulysses over 8 GPUs cannot split them.
  strategy_study st;
  memset(&st, 0, sizeof st);
  plan_spec_defaults(&st.base);
  snprintf(st.base.model, sizeof st.base.model, "tiny-test");
  snprintf(st.base.cluster, sizeof st.base.cluster, "%s", test_cluster(1, 8));
  st.base.seq = 8192;
  sim_result r;
  sr_error e;
  CHECK_EQ_INT(sim_strategy(&st, "ulysses", NULL, &r, NULL, &e), SR_OK);
  CHECK_EQ_INT(r.feasible, 0);
  CHECK(strlen(r.note) > 0);
}

// ---- CLI ---------------------------------------------------------------------------------------

TEST(sim_cli_timeline_json_parses_and_every_event_has_pid_tid_ts_dur) {
  char cmd[2048], json[700], csv[700], *out = NULL;
  snprintf(json, sizeof json, "%s/t.json", test_tmpdir());
  snprintf(csv, sizeof csv, "%s/t.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd,
           "%s/sparsering sim --strategy mtraining --model tiny-test --cluster %s --seq 16K --timeline %s --csv %s",
           test_bin_dir(), test_cluster(2, 2), json, csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  char *text = NULL;
  sr_error e;
  CHECK_EQ_INT(sr_read_file(json, &text, NULL, &e), SR_OK);
  cJSON *root = cJSON_Parse(text ? text : "");
  CHECK(root != NULL);
  const cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  CHECK(cJSON_IsArray(ev) && cJSON_GetArraySize(ev) > 0);
  int n_x = 0, bad = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, ev) {
    if (!cJSON_IsNumber(cJSON_GetObjectItem(it, "pid")) || !cJSON_IsNumber(cJSON_GetObjectItem(it, "tid")) ||
        !cJSON_IsNumber(cJSON_GetObjectItem(it, "ts")) || !cJSON_IsNumber(cJSON_GetObjectItem(it, "dur")))
      bad++;
    const cJSON *ph = cJSON_GetObjectItem(it, "ph");
    if (cJSON_IsString(ph) && strcmp(ph->valuestring, "X") == 0) n_x++;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(n_x > 0);
  // The CSV has the shared header and one row per complete event.
  char *ct = NULL;
  CHECK_EQ_INT(sr_read_file(csv, &ct, NULL, &e), SR_OK);
  CHECK(ct && strncmp(ct, "run,layer,rank,step,phase,stream,start_us,dur_us\n", 49) == 0);
  int rows = 0;
  for (const char *p = ct; p && *p; p++) rows += *p == '\n';
  CHECK_EQ_INT(rows - 1, n_x);
  cJSON_Delete(root);
  free(text);
  free(ct);
}

TEST(sim_cli_sweep_csv_is_identical_under_mpirun_np_1_and_np_2) {
  char grid[700], a[700], b[700], cmd[4096], *out = NULL;
  snprintf(grid, sizeof grid, "%s/sweep.json", test_tmpdir());
  snprintf(a, sizeof a, "%s/a.csv", test_tmpdir());
  snprintf(b, sizeof b, "%s/b.csv", test_tmpdir());
  char text[1400];
  snprintf(text, sizeof text,
           "{\"models\": [\"tiny-test\"], \"clusters\": [\"%s\", \"%s\"], \"seq\": [\"8K\", 12288],\n"
           " \"strategies\": [\"dense-ring\", \"zigzag-ring\", \"mtraining\"], \"patterns\": [\"vs-topp:0.9\"]}\n",
           test_cluster(1, 4), test_cluster(2, 2));
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(grid, text, strlen(text), &e), SR_OK);
  const char *env = "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                    "OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent=false";
  snprintf(cmd, sizeof cmd, "%s mpirun --oversubscribe -np 1 %s/sparsering sweep %s -o %s", env, test_bin_dir(), grid, a);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  snprintf(cmd, sizeof cmd, "%s mpirun --oversubscribe -np 2 %s/sparsering sweep %s -o %s", env, test_bin_dir(), grid, b);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  char *ta = NULL, *tb = NULL;
  CHECK_EQ_INT(sr_read_file(a, &ta, NULL, &e), SR_OK);
  CHECK_EQ_INT(sr_read_file(b, &tb, NULL, &e), SR_OK);
  CHECK(ta && tb && strcmp(ta, tb) == 0);
  // 1 model x 2 clusters x 2 lengths x 1 pattern x 3 strategies = 12 rows after the header.
  int rows = 0;
  for (const char *p = ta; p && *p; p++) rows += *p == '\n';
  CHECK_EQ_INT(rows, 13);
  free(ta);
  free(tb);
}

TEST(sim_cli_bad_inputs_exit_2) {
  char cmd[2048], path[700], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering sim --strategy mtraining --model no-such-model --cluster a100-4x8 --seq 16K",
           test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering sim --plan /nonexistent/plan.json", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering whatif --seq 12Q", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--seq");
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering whatif --model tiny-test --strategies warp-drive", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  free(out);
  // --trainer: a name outside mixed|exec, and exec with what sparsering-exec train does not do (ZeRO other than 1,
  // optimizer offload)
  const char *trainer_bad[] = {"whatif --model tiny-test --trainer fp16", "sim --strategy dense-ring --model tiny-test "
                               "--cluster h200-1x2 --seq 4K --trainer exec --zero 0",
                               "sim --strategy dense-ring --model tiny-test --cluster h200-1x2 --seq 4K --trainer exec --zero 3",
                               "sim --strategy fpdt --model tiny-test --cluster h200-1x2 --seq 4K --trainer exec "
                               "--offload-optimizer"};
  for (size_t i = 0; i < sizeof trainer_bad / sizeof trainer_bad[0]; i++) {
    snprintf(cmd, sizeof cmd, "%s/sparsering %s", test_bin_dir(), trainer_bad[i]);
    CHECK_EQ_INT(test_run(cmd, &out), 2);
    CHECK_STR_CONTAINS(out, "trainer");
    free(out);
  }
  snprintf(path, sizeof path, "%s/bad.json", test_tmpdir());
  sr_error e;
  const char *bad = "{\"models\": [\"tiny-test\"], \"clusters\": [\"a100-4x8\"], \"seq\": [\"8K\"], "
                    "\"strategies\": [\"mtraining\"], \"colour\": 1}";
  CHECK_EQ_INT(sr_write_atomic(path, bad, strlen(bad), &e), SR_OK);
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s/sparsering sweep %s", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "colour");
  free(out);
}

TEST(sim_cli_checks_the_plan_flags_as_plan_does) {
  // One parser (plan/plan_flags.c) for both commands: the same bad flags give the same error.
  const char *bad[] = {"--layout striped:64 --granularity 32 --schedule ring", "--layout zigzag --granularity 16 --schedule ring",
                       "--layout zigzag --schedule ring --inner 0"};
  const char *flag[] = {"--granularity", "--granularity", "--inner"};
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < 2; c++) {
      char cmd[1024], *out = NULL;
      snprintf(cmd, sizeof cmd, "%s/sparsering %s --model tiny-test --cluster h200-1x2 --seq 4K %s", test_bin_dir(),
               c ? "sim" : "plan", bad[i]);
      CHECK_EQ_INT(test_run(cmd, &out), 2);
      CHECK_STR_CONTAINS(out, flag[i]);
      free(out);
    }
}

// plan.spec.fwd_runs: the forward is costed on the forward form (plan/tiles_runs.c), the backward on the
// tile form. Attention seconds of layer 0 on 2 ranks (contiguous ring, vs-topp:0.9, whose scattered
// slashes make runs) by phase, with and without the flag.
static void attn_seconds(int fwd_runs, double *fwd, double *bwd) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", test_cluster(1, 2));
  snprintf(s.layout, sizeof s.layout, "contiguous");
  snprintf(s.pattern, sizeof s.pattern, "vs-topp:0.9");
  s.granularity = 1;
  s.seq = 8192;
  s.fwd_runs = fwd_runs;
  plan p;
  *fwd = *bwd = 0;
  if (plan_build(&s, &p, &e)) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return;
  }
  sim_options o = {0, 1, 0, 0, 0, 0, 0, 0};
  sim_result r;
  sim_timeline tl = {0};
  CHECK_EQ_INT(sim_plan(&p, &o, &r, &tl, &e), SR_OK);
  for (int64_t i = 0; i < tl.n; i++)
    if (tl.ev[i].layer == 0 && tl.ev[i].phase == PHASE_ATTN) *fwd += tl.ev[i].dur;
    else if (tl.ev[i].layer == 0 && tl.ev[i].phase == PHASE_ATTN_BWD) *bwd += tl.ev[i].dur;
  sim_timeline_free(&tl);
  plan_free(&p);
}

TEST(sim_fwd_runs_costs_the_forward_on_the_runs_form_and_the_backward_on_tiles) {
  double f0, b0, f1, b1;
  attn_seconds(0, &f0, &b0);
  attn_seconds(1, &f1, &b1);
  CHECK(f0 > 0 && b0 > 0);
  CHECK(f1 < 0.95 * f0);       // fewer 64-key chunks at the same (PARTIAL) efficiency
  CHECK_REL(b1, b0, 1e-12);    // the backward takes the tile form either way
}

// An attention-only step on one GPU is each layer's attention forward and backward, nothing else: its time
// is the layers' attention time from the cost model on the layer's whole tile counts (one rank, one ring
// step), here dense causal over 16 tiles: 136 tiles a head (16 diagonal PARTIAL, 120 FULL), and the calls' passes.
TEST(sim_attention_only_step_is_the_layers_attention_forward_and_backward) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "dense-ring", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", test_cluster(1, 1));
  s.seq = 16 * 128;
  s.attention_only = 1;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  sim_result r;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_EQ_INT(sim_plan(&p, &o, &r, NULL, &e), SR_OK);
  // 4 heads x (120 FULL + 16 PARTIAL) tiles of 4 * 128^2 * d FLOPs at 0.5 x 100 TFLOP/s, backward 2.5x; and the
  // call's passes around its kernels at 0.8 of 1000 GB/s (tiny-test's bytes, test_sim_exec_cost.c): the forward's
  // 528 + 384 a token, the backward's 1040 a token and 1024 a key of its one source.
  double d = (double)p.model.head_dim, heads = (double)p.model.num_heads, layers = (double)p.model.num_layers;
  double n = 16 * 128, fwd = heads * 136 * 4.0 * 128 * 128 * d / 50e12 + (528.0 + 384) * n / 800e9;
  double bwd = 2.5 * heads * 136 * 4.0 * 128 * 128 * d / 50e12 + (1040.0 + 1024) * n / 800e9;
  CHECK_REL(r.step_s, layers * (fwd + bwd), 1e-6);
  CHECK_REL(r.attn_fwd_s, layers * fwd, 1e-6);
  CHECK(r.mem.weights == 0 && r.mem.optim == 0);
  plan_free(&p);
}

TEST(sim_attention_only_survives_the_plan_file) {
  char path[700], cmd[1600], *out = NULL;
  snprintf(path, sizeof path, "%s/p.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering plan --model tiny-test --cluster h200-1x2 --seq 4K --strategy zigzag-ring -o %s",
           test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  plan p;
  sr_error e;
  CHECK_EQ_INT(plan_read(path, &p, &e), SR_OK);
  CHECK_EQ_INT(p.spec.attention_only, 0);
  p.spec.attention_only = 1;
  CHECK_EQ_INT(plan_write(&p, path, &e), SR_OK);
  plan_free(&p);
  CHECK_EQ_INT(plan_read(path, &p, &e), SR_OK);
  CHECK_EQ_INT(p.spec.attention_only, 1);
  plan_free(&p);
  // The flag on a plan file: only attention in the step.
  snprintf(cmd, sizeof cmd, "%s/sparsering sim --plan %s --attention-only", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "weights 0.00");
  free(out);
}

// One GPU's attention-only step of tiny-test over 16 query tiles (the dense ring's plan with `pattern`) on a cluster
// file of `cluster_json` written to NAME in the test's folder.
static double one_gpu_step(const char *name, const char *cluster_json, const char *pattern) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, cluster_json, strlen(cluster_json), &e), SR_OK);
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "dense-ring", &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", path);
  if (pattern) snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  s.seq = 16 * 128;
  s.attention_only = 1;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  sim_result r;
  CHECK_EQ_INT(sim_plan(&p, NULL, &r, NULL, &e), SR_OK);
  plan_free(&p);
  return r.step_s;
}

// Ring-step costs beyond the kernel's work (cost_ring_step): on one GPU a layer's attention is one step
// forward and one backward, each adding its fixed time and its time per (query tile, head) cell; dense
// causal over 16 tiles and 4 heads runs 16 x 4 = 64 cells.
TEST(sim_ring_step_costs_add_a_fixed_and_a_per_cell_time_to_each_step) {
  double t[2];
  for (int k = 0; k < 2; k++) {
    char name[32], text[2048];
    snprintf(name, sizeof name, "ring%d.json", k);
    snprintf(text, sizeof text,
             "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
             " \"mem_gib\": 40, \"efficiency\": {\"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_bwd_full\": 0.5,"
             " \"attn_bwd_partial\": 0.5}%s},"
             " \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}}",
             k ? ", \"ring_step\": {\"fwd_us\": 10, \"bwd_us\": 20, \"fwd_cell_us\": 0.5, \"bwd_cell_us\": 1}" : "");
    t[k] = one_gpu_step(name, text, NULL);
  }
  // 2 layers x ((10 + 64 x 0.5) + (20 + 64 x 1)) us
  CHECK_REL(t[1] - t[0], 2 * (10 + 32 + 20 + 64) * 1e-6, 1e-5);
}

// The bars' walk (cost_bar_walk): on one GPU each layer's backward is one call over the rank's 16 query tiles; the
// window pattern's 4 sinks are bars in the query tiles past the window, so the call's bar kernel walks 16 tiles, 32
// steps of 64 rows. With a walk far longer than the bars' work (1 and 2 ms a step) a layer's backward grows by 32 ms
// for each further millisecond a step: 2 layers, 64 ms. A dense layer has no bars and no walk.
static double walk_step_time(const char *pattern, double walk_us) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"bar_walk_us\": %g}, \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}}",
           walk_us);
  return one_gpu_step("walk.json", text, pattern);
}

TEST(sim_bar_walk_makes_a_backward_with_bars_last_its_longest_walk) {
  // (a step's seconds are kept as floats: 7 digits)
  CHECK_REL(walk_step_time("window:4:512", 2000) - walk_step_time("window:4:512", 1000), 2 * 32 * 1e-3, 1e-6);
}

TEST(sim_bar_walk_leaves_a_layer_without_bars_alone) {
  CHECK(walk_step_time("dense", 2000) == walk_step_time("dense", 0));
}

// The FULL tiles' loss beyond the L2 cache (cost_attn_l2) on one GPU: tiny-test's layer is one call forward and one
// backward over 2048 keys, whose K and V of a KV head (head_dim 16: 64 B a key) are 128 KiB. Dense causal over 16 tiles
// and 4 heads: 4 x 16 x 15 / 2 = 480 FULL tiles of 4 x 128 x 128 x 16 FLOPs at 0.5e14 FLOP/s, 2.5 times those backward.
static double l2_step_time(const char *name, const char *l2) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"efficiency\": {\"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_bwd_full\": 0.5,"
           " \"attn_bwd_partial\": 0.5}%s}, \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}}",
           l2);
  return one_gpu_step(name, text, NULL);
}

TEST(sim_a_file_with_the_l2_but_no_fitted_loss_or_keys_within_it_simulates_the_same_bits) {
  double before = l2_step_time("l2-none.json", "");
  CHECK(l2_step_time("l2-only.json", ", \"l2_mb\": 0.1") == before);
  CHECK(l2_step_time("l2-fits.json", ", \"l2_mb\": 0.125, \"attn_l2\": {\"fwd\": 0.5, \"bwd\": 0.25}") == before);
}

TEST(sim_a_layers_full_tiles_take_the_files_l2_loss_where_its_keys_outgrow_the_cache) {
  double before = l2_step_time("l2-none.json", "");
  double after = l2_step_time("l2-past.json", ", \"l2_mb\": 0.12, \"attn_l2\": {\"fwd\": 0.5, \"bwd\": 0.25}");
  double full_s = 480 * 4.0 * 128 * 128 * 16 / 0.5e14;
  // 2 layers x (half the FULL tiles' forward + a quarter of their backward); step seconds are floats (7 digits)
  CHECK_REL(after - before, 2 * (0.5 * full_s + 0.25 * 2.5 * full_s), 1e-4);
}

// tiny-test's attention-only step of `strategy` on 2 GPUs of one node over 4096 tokens (FPDT: chunks of 2048) on a
// cluster whose figures are those of l2_step_time plus `l2`.
static double l2_two_gpu_step(const char *strategy, const char *l2) {
  char path[700], text[2048];
  snprintf(path, sizeof path, "%s/l2-2gpu.json", test_tmpdir());
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000,"
           " \"mem_gib\": 40, \"efficiency\": {\"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_bwd_full\": 0.5,"
           " \"attn_bwd_partial\": 0.5}%s}, \"intra_node\": {\"gbps\": 100, \"latency_us\": 2},"
           " \"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}}",
           l2);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, strategy, &e), SR_OK);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", path);
  s.seq = 4096;
  if (!strcmp(strategy, "fpdt")) s.fpdt_chunk = 2048, s.fpdt_offload = 0;
  s.attention_only = 1;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  sim_result r;
  CHECK_EQ_INT(sim_plan(&p, NULL, &r, NULL, &e), SR_OK);
  plan_free(&p);
  return r.step_s;
}

// Ulysses' calls run a rank's heads over every key (4096: 256 KiB of K and V a KV head at head_dim 16), FPDT's over a
// chunk's (2048: 128 KiB): a cache of 0.2 MiB holds FPDT's and not Ulysses', one of 0.1 MiB neither.
TEST(sim_ulysses_and_fpdt_calls_take_the_l2_loss_by_their_own_keys) {
  const char *loss = "\"attn_l2\": {\"fwd\": 0.5, \"bwd\": 0.25}";
  char small[128], mid[128];
  snprintf(small, sizeof small, ", \"l2_mb\": 0.1, %s", loss);
  snprintf(mid, sizeof mid, ", \"l2_mb\": 0.2, %s", loss);
  double u = l2_two_gpu_step("ulysses", ""), f = l2_two_gpu_step("fpdt", "");
  CHECK(l2_two_gpu_step("ulysses", mid) > u);
  CHECK(l2_two_gpu_step("fpdt", mid) == f);
  CHECK(l2_two_gpu_step("fpdt", small) > f);
  CHECK(l2_two_gpu_step("ulysses", ", \"l2_mb\": 0.25, \"attn_l2\": {\"fwd\": 0.5, \"bwd\": 0.25}") == u);
}

// One GPU, tiny-test, vs-like:4:256:32 over 4096 contiguous tokens: the step's time with the plans of the
// last first_step_plans layers built in the step, and (when entries is not NULL) the tile and bar entries
// of every layer by the planner's accounting.
static double first_step_time(int first_step_plans, int index_ready, double *entries) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", test_cluster(1, 1));
  snprintf(s.pattern, sizeof s.pattern, "vs-like:4:256:32");
  snprintf(s.layout, sizeof s.layout, "contiguous");
  s.granularity = 1;
  s.seq = 4096;
  s.first_step_plans = first_step_plans;
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  sim_options o = {0, 0, 0, 0, index_ready, 0, 0, 0};
  sim_result r;
  CHECK_EQ_INT(sim_plan(&p, &o, &r, NULL, &e), SR_OK);
  if (entries) {
    *entries = 0;
    pattern pat;
    CHECK_EQ_INT(sim_pattern_build(&p, &pat, &e), SR_OK);
    work_count *c = calloc((size_t)pat.heads, sizeof *c);
    for (int l = 0; l < pat.layers; l++) {
      CHECK_EQ_INT(tiles_account_layer(&pat, l, &p.layout, c, &e), SR_OK);
      for (int h = 0; h < pat.heads; h++) *entries += (double)(c[h].full + c[h].partial + c[h].bars);
    }
    free(c);
    pattern_free(&pat);
  }
  plan_free(&p);
  return r.step_s;
}

// The first training step builds its layers' attention plans on the host when their layer comes: on one
// GPU the step grows by the plan building of every layer, 13.5 ns a tile or bar entry (sim/estimate.c),
// the entries counted here by the planner's accounting.
TEST(sim_first_step_adds_the_host_plan_building_of_every_layer) {
  double entries = 0, t0 = first_step_time(0, 0, &entries), t1 = first_step_time(1000, 0, NULL);
  CHECK(entries > 0);
  CHECK_REL(t1 - t0, entries * 13.5e-9, 1e-6);
}

// Where the trainer keeps every layer's plan (sim_options.index_ready) a later step builds no index, but
// a first step still builds each plan, index included, when its layer comes: the step grows by the plan
// building and the index build (16 bytes an entry at the test GPU's 1000 GB/s x 0.8) of every layer.
TEST(sim_first_step_builds_plans_and_their_index_even_where_every_plan_is_kept) {
  double entries = 0, t0 = first_step_time(0, 1, &entries), t1 = first_step_time(1000, 1, NULL);
  CHECK(entries > 0);
  CHECK_REL(t1 - t0, entries * (13.5e-9 + 16.0 / 800e9), 1e-6);
}

// Representative mode replays the layers equal to one already simulated (every layer of a dense model): the
// attention it reports, the call passes around the kernels included, is the full simulation's (its step time is
// an approximation: a replayed layer starts on every rank at once).
TEST(sim_representative_mode_reports_the_full_simulations_attention) {
  sim_result full, rep;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  CHECK_EQ_INT(run_spec_opts("striped-ring", test_cluster(1, 4), 4 * 4096, 1, o, &full, NULL), 0);
  o.representative = 1;
  CHECK_EQ_INT(run_spec_opts("striped-ring", test_cluster(1, 4), 4 * 4096, 1, o, &rep, NULL), 0);
  CHECK(full.attn_fwd_s > 0 && full.attn_bwd_s > 0);
  CHECK_REL(rep.attn_fwd_s, full.attn_fwd_s, 1e-9);
  CHECK_REL(rep.attn_bwd_s, full.attn_bwd_s, 1e-9);
  CHECK_REL(rep.worker_imbalance, full.worker_imbalance, 1e-9);
}

// The GPU line says whether the GPUs hold the step, the host line whether the hosts do: Qwen2.5-3B at 1M on two
// H200 under FPDT with activation offload needs 103 GiB a GPU (of 140) and 265 GiB of pinned host memory (of the
// cluster file's 256), so the GPU line fits and the host line does not.
TEST(sim_cli_memory_lines_give_the_gpu_and_the_host_their_own_verdicts) {
  char cmd[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "%s/sparsering sim --strategy fpdt --model qwen2.5-3b --cluster h200-1x2 --seq 1M --trainer exec "
           "--offload-activations",
           test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  const char *gpu = out ? strstr(out, "memory per GPU (GiB)") : NULL, *host = out ? strstr(out, "host memory per node") : NULL;
  CHECK(gpu && host);
  if (gpu && host) {
    const char *eol = strchr(gpu, '\n');
    CHECK(eol && !strncmp(eol - 4, "fits", 4));
    CHECK_STR_CONTAINS(host, "OUT OF HOST MEMORY");
  }
  free(out);
}

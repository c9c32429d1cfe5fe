#!/usr/bin/env python3
"""gpu_torch_check.py [STAGES] — sparsering.torch and sparsering.hf on one GPU (scripts/gpu/python_check.sh
runs it; stages: dense vs online hf train bench, default all but bench). Each check prints one line with its
measured errors and PASS or FAIL; the run ends with "N passed, N failed" and exits 1 when any failed.

  dense   forward, LSE and gradients of the dense pattern against an fp32 reference (torch SDPA, math
          backend, on the same bf16 inputs), and the bf16 SDPA (flash) output for scale; GQA 16/2 heads,
          d 128 and 64, batch 2; the same through a [N, H, D] tensor.
  vs      an explicit vertical-slash pattern against the fp32 masked reference (SDPA with the boolean mask)
          and FlexAttention on the identical mask (block mask), forward and gradients.
  online  vs_estimate on the GPU selects the same indices as the CPU reference from the same (bf16) values;
          the vs-online forward equals the forward of its estimate given as explicit indices, bit for bit, and
          so does the deterministic backward (the default one adds dQ by atomics: bitwise is promised only with
          deterministic=True), which also repeats bit for bit from call to call.
  hf      a tiny Qwen2 (models/tiny-25m.json) with attn_implementation="sparsering" (dense) against "sdpa":
          loss and gradients of one batch; then our trainer (bin/sparsering-exec train --backend cuda) and
          the HF model trained from the same weights on the same text with the same AdamW (every setting
          passed to the trainer explicitly: constant lr, no warm-up): per-step losses.
  bench   the Qwen2.5-3B shape as an HF Qwen2 (models/qwen2.5-3b.json: N_LAYERS layers, default all 36) training
          step at 128K (SEQ) on one GPU: SDPA against sparsering, each timed in this one call (the issue's >= 2x
          goal; one warm-up step, the median of 3), once per pattern of BENCH_PATTERNS (default "vs-topp:0.95
          vs-online:0.95"): vs-topp:0.95 is the planner's stand-in for a trained model's vertical-slash attention
          (docs/patterns.md), each decoder layer running its own layer of it, as our trainer does (sparsering.hf
          passes layer_idx); the online estimate is what a user gets, but on random weights attention is nearly
          uniform and its top-p 0.95 keeps most keys (near-dense work). Each implementation prints its step time,
          its peak memory in torch's allocator and the device's memory in use after the steps (torch's pool and
          the library's own allocations: the layers' indices), and a fixed pattern the mean over layers of the
          share of the causal pairs it keeps and computes. A pattern whose run would end past BENCH_BUDGET_S
          seconds from the stage's start (default 540: one GPU call's 600 less the set-up) is skipped, saying so
          (its time projected as the longest run before it).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import sparsering
import sparsering.torch as st

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
results = []


def report(name, ok, detail):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def inputs(B, N, H, KH, D, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda h: (torch.randn(B, N, h, D, device="cuda", generator=g)).bfloat16()
    return mk(H), mk(KH), mk(KH), mk(H)


def reference(q, k, v, do, mask=None):
    """fp32 attention on the bf16 values (SDPA math backend): o, lse, dq, dk, dv in [B, N, H, D]."""
    H, KH = q.shape[2], k.shape[2]
    qf, kf, vf = (x.float().transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    kr, vr = kf.repeat_interleave(H // KH, 1), vf.repeat_interleave(H // KH, 1)
    scale = q.shape[-1] ** -0.5
    s = (qf @ kr.transpose(-1, -2)) * scale
    n = q.shape[1]
    keep = torch.ones(n, n, dtype=torch.bool, device="cuda").tril() if mask is None else mask
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ vr
    dq, dk, dv = torch.autograd.grad(o, (qf, kf, vf), do.float().transpose(1, 2))
    t = lambda x: x.transpose(1, 2)
    return t(o).detach(), lse.detach(), t(dq), t(dk), t(dv)


def ours(q, k, v, do, pattern, deterministic=False):
    qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
    o, lse = st.sparse_attention(qq, kk, vv, pattern, return_lse=True, deterministic=deterministic)
    dq, dk, dv = torch.autograd.grad(o, (qq, kk, vv), do)
    return o, lse, dq, dk, dv


def same_bits(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def diff_text(a, b):
    """The largest elementwise difference of each of O, LSE, dQ, dK, dV between two results."""
    return " ".join(f"{n} {(x.float() - y.float()).abs().max().item():.2e}" for n, x, y in zip(("O", "LSE", "dQ", "dK", "dV"), a, b))


def compare(name, got, want, bounds=(8e-3, 1e-4, 1e-2, 1e-2, 1e-2)):
    names = ("O", "LSE", "dQ", "dK", "dV")
    errs = [rel(g, w) for g, w in zip(got, want)]
    ok = all(e <= b for e, b in zip(errs, bounds))
    report(name, ok, " ".join(f"{n} {e:.2e}" for n, e in zip(names, errs)) + f" (bounds {bounds})")


# ---- dense -------------------------------------------------------------------------------------------

def stage_dense():
    for D in (128, 64):
        B, N, H, KH = 2, 2048, 16, 2
        q, k, v, do = inputs(B, N, H, KH, D, seed=D)
        got = ours(q, k, v, do, "dense")
        want = reference(q, k, v, do)
        compare(f"dense d{D} B{B} N{N} H{H}/{KH} vs fp32 reference", got, want)
        with torch.no_grad():  # torch's own bf16 kernel, for scale
            o_sdpa = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                    is_causal=True, enable_gqa=True).transpose(1, 2)
        print(f"     bf16 SDPA's O vs the fp32 reference: {rel(o_sdpa, want[0]):.2e}; ours {rel(got[0], want[0]):.2e}")
        det = ours(q, k, v, do, "dense", deterministic=True)
        compare(f"dense d{D} deterministic backward vs fp32 reference", det, want)
        again = ours(q, k, v, do, "dense", deterministic=True)
        report(f"dense d{D} deterministic: two calls equal bit for bit", same_bits(det, again), diff_text(det, again))
        print(f"     the default backward, two calls: {diff_text(got, ours(q, k, v, do, 'dense'))} (atomics: may differ)")
    q, k, v, do = inputs(1, 1000, 4, 4, 64, seed=3)  # an unaligned length, no GQA, a 3-d call
    o3 = st.sparse_attention(q[0], k[0], v[0], "dense")
    report("dense 3-d [N, H, D], N 1000", rel(o3, reference(q, k, v, do)[0][0]) < 8e-3, f"O {rel(o3, reference(q, k, v, do)[0][0]):.2e}")


# ---- an explicit vertical-slash pattern --------------------------------------------------------------

def vs_pattern(N, H, seed=1):
    g = torch.Generator().manual_seed(seed)
    vert, slash = [], []
    for h in range(H):
        vert.append(torch.cat([torch.arange(4), torch.randint(0, N, (N // 64,), generator=g)]).tolist())
        slash.append(torch.cat([torch.arange(256), torch.randint(0, N, (N // 256,), generator=g)]).tolist())
    return sparsering.VSPattern(vert, slash)


def stage_vs():
    B, N, H, KH, D = 1, 8192, 16, 2, 128
    pat = vs_pattern(N, H)
    q, k, v, do = inputs(B, N, H, KH, D, seed=5)
    vb = torch.zeros(H, N, dtype=torch.bool, device="cuda")
    sb = torch.zeros(H, N, dtype=torch.bool, device="cuda")
    for h in range(H):
        vb[h, torch.as_tensor(pat.vertical[h], dtype=torch.long)] = True
        sb[h, torch.as_tensor(pat.slash[h], dtype=torch.long)] = True
    idx = torch.arange(N, device="cuda")
    mask = (idx[None, :, None] >= idx[None, None, :]) & (vb[:, None, :] | sb[:, (idx[:, None] - idx[None, :]).clamp(min=0)])
    got = ours(q, k, v, do, pat)
    want = reference(q, k, v, do, mask[None])
    compare(f"explicit VS N{N} H{H}/{KH} vs fp32 masked reference", got, want)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def mm(b, h, qi, ki):
            return (ki <= qi) & (vb[h, ki] | sb[h, (qi - ki).clamp(min=0)])

        bm = create_block_mask(mm, 1, H, N, N, device="cuda")
        qf, kf, vf = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        of = torch.compile(flex_attention)(qf, kf, vf, block_mask=bm, enable_gqa=True)
        gf = torch.autograd.grad(of, (qf, kf, vf), do.transpose(1, 2))
        flex = [of.transpose(1, 2)] + [x.transpose(1, 2) for x in gf]
        errs = [rel(a, b) for a, b in zip([got[0]] + list(got[2:]), flex)]
        ferr = [rel(a, b) for a, b in zip(flex, [want[0]] + list(want[2:]))]
        report("explicit VS vs FlexAttention (identical mask)", max(errs) < 1.5e-2,
               "ours vs flex O %.2e dQ %.2e dK %.2e dV %.2e; flex vs fp32 O %.2e dQ %.2e" % (*errs, ferr[0], ferr[1]))
    except Exception as ex:  # FlexAttention needs torch >= 2.5 and a compiler
        print(f"     FlexAttention not run: {str(ex).splitlines()[0][:120]}")


# ---- the online estimate ------------------------------------------------------------------------------

def stage_online():
    B, N, H, KH, D = 1, 4096, 8, 2, 128
    q, k, v, do = inputs(B, N, H, KH, D, seed=9)
    # planted verticals: keys the late queries attend to (so the estimate has structure to find)
    k[0, 100] += 3 * q[0, -64:].float().mean(0)[::H // KH].bfloat16()
    est_gpu = st.vs_estimate(q, k, "vs-online:0.9")[0]
    est_cpu = st.vs_estimate(q[0].float().cpu(), k[0].float().cpu(), "vs-online:0.9")
    same = all((a == b).all() for a, b in zip(est_gpu.vertical + est_gpu.slash, est_cpu.vertical + est_cpu.slash))
    report("vs_estimate GPU = CPU reference (bits)", same and 100 in est_gpu.vertical[0], repr(est_gpu))
    o1 = st.sparse_attention(q, k, v, "vs-online:0.9")
    o2 = st.sparse_attention(q, k, v, est_gpu)
    report("vs-online forward = its estimate given explicitly", torch.equal(o1, o2), f"max diff {(o1 - o2).abs().max().item()}")
    # bit for bit only in the deterministic backward: the default one adds dQ with float atomics in any order
    got = ours(q, k, v, do, "vs-online:0.9", deterministic=True)
    want = ours(q, k, v, do, est_gpu, deterministic=True)
    report("vs-online deterministic backward = its estimate's", same_bits(got, want), "bitwise; " + diff_text(got, want))
    again = ours(q, k, v, do, "vs-online:0.9", deterministic=True)
    report("vs-online deterministic: two calls equal bit for bit", same_bits(got, again), diff_text(got, again))


# ---- Hugging Face ------------------------------------------------------------------------------------

def tiny_config():
    from transformers import Qwen2Config

    with open(os.path.join(ROOT, "models", "tiny-25m.json")) as f:
        cfg = json.load(f)
    for key in ("architectures", "torch_dtype"):
        cfg.pop(key, None)
    return Qwen2Config(**cfg)


def text_tokens(n_bytes, seed=0):
    """A deterministic text (byte-level tokens): sentences from a small vocabulary with repeats."""
    g = torch.Generator().manual_seed(seed)
    words = ("the cat dog runs over under quickly slowly red blue green house tree river stone light dark "
             "one two three four five six seven eight nine ten").split()
    out = []
    size = 0
    while size < n_bytes:
        s = " ".join(words[i] for i in torch.randint(0, len(words), (int(torch.randint(4, 12, (1,), generator=g)),),
                                                      generator=g)) + ". "
        out.append(s)
        size += len(s)
    return "".join(out)[:n_bytes]


def stage_hf():
    try:
        import transformers  # noqa: F401
        import sparsering.hf as shf
    except ImportError as ex:
        print(f"SKIP hf: {ex} (transformers is needed on this machine)")
        return
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = tiny_config()
    seq = 4096
    text = text_tokens(seq * 40).encode()
    data = torch.tensor(list(text), dtype=torch.long)
    # one batch: sparsering (dense) against sdpa, same weights
    shf.set_pattern("dense")
    m_sdpa = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa").cuda()
    m_ours = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sparsering").cuda()
    m_ours.load_state_dict(m_sdpa.state_dict())
    x = data[:seq][None].cuda()
    y = torch.roll(data, -1)[:seq][None].cuda()
    losses, grads = [], []
    for m in (m_sdpa, m_ours):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = m(input_ids=x).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in m.parameters()]))
    report("HF tiny Qwen2: sparsering (dense) vs sdpa, one batch", abs(losses[0] - losses[1]) < 2e-3 * losses[0] and
           rel(grads[1], grads[0]) < 2e-2, f"loss {losses[1]:.6f} vs {losses[0]:.6f}, grads rel {rel(grads[1], grads[0]):.2e}")
    # training: our trainer and the HF model from the same weights, on the same text, same AdamW
    hf_vs_trainer(cfg, data, text, seq)


# The optimisation both sides run, every setting the trainer has a flag for given to it explicitly (so a
# new trainer default, such as the learning-rate warm-up, cannot drift the comparison): AdamW with a
# constant learning rate (no warm-up, no --cosine decay), no weight decay, the global gradient norm clipped
# to 1.0, one sequence a step. AdamW's betas and eps have no flag: the trainer's are fixed at (0.9, 0.95)
# and 1e-8 (train/model_cpu.c, adamw_create).
OPT = dict(lr=1e-3, wd=0.0, warmup=0, clip=1.0, batch=1, pack=1, betas=(0.9, 0.95), eps=1e-8)


def trainer_opt_flags(o):
    return ["--lr", str(o["lr"]), "--wd", str(o["wd"]), "--warmup", str(o["warmup"]), "--clip", str(o["clip"]),
            "--batch", str(o["batch"]), "--pack", str(o["pack"])]


def hf_vs_trainer(cfg, data, text, seq, steps=8, o=OPT):
    from safetensors.torch import save_file
    from transformers import Qwen2ForCausalLM

    import sparsering.hf as shf

    work = tempfile.mkdtemp(prefix="sr-hf-")
    torch.manual_seed(1)
    init = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sparsering")
    sd = {k: v.contiguous() for k, v in init.state_dict().items() if k != "lm_head.weight"}  # tied to the embedding
    save_file(sd, os.path.join(work, "init.safetensors"))
    with open(os.path.join(work, "data.txt"), "wb") as f:
        f.write(text)
    cl = os.path.join(work, "h200-1x1.json")
    with open(os.path.join(ROOT, "models", "clusters", "h200-1x2.json")) as f:
        c = json.load(f)
    c["gpus_per_node"] = 1
    with open(cl, "w") as f:
        json.dump(c, f)
    for pattern, strategy in (("dense", "dense-ring"), ("vs-online:0.95", "mtraining")):
        csv = os.path.join(work, f"train-{strategy}.csv")
        cmd = [os.path.join(ROOT, "bin", "sparsering-exec"), "train", "--backend", "cuda", "--model", "tiny-25m",
               "--cluster", cl, "--strategy", strategy, "--pattern", pattern, "--seq", str(seq), "--steps", str(steps),
               "--data", os.path.join(work, "data.txt"), "--data-format", "text", "--precision", "bf16",
               "--init", os.path.join(work, "init.safetensors"), "--csv", csv, "--quiet"] + trainer_opt_flags(o)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            report(f"our trainer ({strategy})", False, p.stdout[-500:] + p.stderr[-1500:])
            continue
        with open(csv) as f:
            rows = [line.split(",") for line in f.read().splitlines()[1:]]
        ours_loss = [float(r[2]) for r in rows]
        # the HF model: the trainer's sequence s is bytes [s * seq, s * seq + seq) of the text, targets the next bytes
        shf.set_pattern(pattern)
        m = Qwen2ForCausalLM._from_config(cfg, attn_implementation="sparsering").cuda()
        m.load_state_dict(init.state_dict())
        opt = torch.optim.AdamW(m.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["wd"])
        hf_loss = []
        n = len(data)
        for s in range(steps):
            pos = (torch.arange(seq) + s * seq) % n
            x, y = data[pos][None].cuda(), data[(pos + 1) % n][None].cuda()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = m(input_ids=x).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.view(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), o["clip"])
            opt.step()
            hf_loss.append(loss.item())
        worst = max(abs(a - b) / b for a, b in zip(hf_loss, ours_loss))
        table = " ".join(f"{a:.4f}/{b:.4f}" for a, b in zip(hf_loss, ours_loss))
        report(f"HF ({pattern}) vs our trainer ({strategy}), {steps} steps, losses hf/ours", worst < 2e-2,
               f"max rel diff {worst:.2e}: {table}")
    shf.set_pattern(None)


# ---- the speed goal -----------------------------------------------------------------------------------

def layer_work(impl, layers):
    """A string pattern's mean kept and computed shares of the causal pairs over the model's layers (the prepared
    shapes sparsering.torch holds), as text."""
    shapes = [a for a in st.cached_shapes() if a.pattern == impl]
    if any(a.online or a.gated for a in shapes):
        return "selected from Q and K in every forward (its density is not reported)"
    per_layer = [a for a in shapes if a.num_layers == layers]
    if len(per_layer) != layers:
        return f"{len(per_layer)} of {layers} layers prepared (no mean)"
    kept = sum(a.info["density"] for a in per_layer) / layers
    computed = sum(a.info["computed"] for a in per_layer) / layers
    return f"mean over {layers} layers: {100 * kept:.2f}% of the causal pairs kept, {100 * computed:.2f}% computed"


def stage_bench():
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM
        import sparsering.hf as shf
    except ImportError as ex:
        print(f"SKIP bench: {ex}")
        return
    from torch.utils.checkpoint import checkpoint

    start = time.time()
    budget = float(os.environ.get("BENCH_BUDGET_S", 540))
    seq = int(os.environ.get("SEQ", 128 * 1024))
    with open(os.path.join(ROOT, "models", "qwen2.5-3b.json")) as f:
        cfg = json.load(f)
    for key in ("architectures", "torch_dtype"):
        cfg.pop(key, None)
    layers = int(os.environ.get("N_LAYERS", cfg["num_hidden_layers"]))  # the whole model (36) by default
    cfg["num_hidden_layers"] = layers
    patterns = os.environ.get("BENCH_PATTERNS", "vs-topp:0.95 vs-online:0.95").split()
    times, longest = {}, 0.0
    for impl in ["sdpa"] + patterns:
        if time.time() - start + longest > budget:
            print(f"SKIP bench {impl}: {time.time() - start:.0f} s spent, a run takes up to {longest:.0f} s "
                  f"(BENCH_BUDGET_S {budget:.0f})", flush=True)
            continue
        began = time.time()
        if impl != "sdpa":
            shf.set_pattern(impl)
        torch.manual_seed(0)
        with torch.device("cuda"):  # initialised on the GPU: a 3B model's random init on the host takes minutes
            m = Qwen2ForCausalLM._from_config(Qwen2Config(**cfg), torch_dtype=torch.bfloat16,
                                              attn_implementation="sdpa" if impl == "sdpa" else "sparsering").cuda()
        m.train()
        m.gradient_checkpointing_enable()
        m.config.use_cache = False
        opt = torch.optim.AdamW(m.parameters(), lr=1e-5)
        x = torch.randint(0, cfg["vocab_size"], (1, seq), device="cuda")

        def step():
            h = m.model(input_ids=x).last_hidden_state
            loss = 0
            for c in range(0, seq, 8192):  # the LM head and loss in chunks: 128K x 152K logits do not fit
                loss = loss + checkpoint(lambda hh, yy: F.cross_entropy(m.lm_head(hh).float().view(-1, cfg["vocab_size"]),
                                                                         yy.view(-1), reduction="sum"),
                                         h[:, c:c + 8192], torch.roll(x, -1, 1)[:, c:c + 8192], use_reentrant=False)
            (loss / seq).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # warm-up (a fixed pattern's layers are prepared here)
        torch.cuda.synchronize()
        t = []
        for _ in range(3):
            t0 = time.time()
            step()
            torch.cuda.synchronize()
            t.append(time.time() - t0)
        times[impl] = sorted(t)[1]
        free, total = torch.cuda.mem_get_info()  # torch's pool and what the library holds itself (indices, scratch)
        work = "" if impl == "sdpa" else f"; {layer_work(impl, layers)}"
        print(f"     {impl}: {times[impl]:.3f} s a step (median of 3), peak {torch.cuda.max_memory_allocated() / 2**30:.1f} "
              f"GiB by torch, {(total - free) / 2**30:.1f} GiB of the device in use after the steps{work}", flush=True)
        del m, opt
        st.clear_shapes()  # the layers' indices leave the device before the next implementation
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        longest = max(longest, time.time() - began)
    for p in patterns:
        if p not in times or "sdpa" not in times:
            continue
        speedup = times["sdpa"] / times[p]
        report(f"Qwen2.5-3B shape ({layers} layers), {seq // 1024}K, one GPU: sdpa / sparsering {p} step", speedup >= 2,
               f"{times['sdpa']:.3f} / {times[p]:.3f} s = {speedup:.2f}x (goal >= 2x)")
    shf.set_pattern(None)


def main():
    stages = sys.argv[1:] or ["dense", "vs", "online", "hf"]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, sparsering {sparsering.version()}", flush=True)
    for s in stages:
        print(f"== {s}", flush=True)
        try:
            globals()["stage_" + s]()
        except Exception as ex:  # a stage that breaks is a failure, and the others still run
            import traceback

            traceback.print_exc()
            report(f"stage {s}", False, f"{type(ex).__name__}: {ex}")
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

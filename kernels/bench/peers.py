#!/usr/bin/env python3
"""peers.py — the peers of bin/sparsering-bench-attn on the same GPU, same run, identical masks:
torch SDPA (cuDNN and FlashAttention-2 backends) and FlexAttention (torch.compile) at the Qwen2.5-3B
attention shape (16 query heads, 2 KV heads, d 128, bf16): dense causal at 16K and 64K, and the VS-like
mask (per head sinks 128 + window 4096 + 1000 verticals at N*u^3, drawn by the same splitmix64
stream, seed 1, as kernels/test/index_build.h) at 64K and 128K; with --check DIR also MTraining's Qwen2.5-3B
budget mix at 64K and 128K, read from the pattern files the benchmark's --dump writes there
(preset_N_pattern.bin); forward and backward.
Timing: CUDA events, 3 warm-ups, median of 10, inputs rotated over 3 sets.
With --check DIR (files from `sparsering-bench-attn --dump DIR`) it first compares our kernels'
outputs and gradients with SDPA (dense) and FlexAttention (VS-like) on the same inputs.
Usage: python3 kernels/bench/peers.py [--check DIR] [--quick] [--fwd] [--cudnn [--seqs N,N...]] [--mix] [--shapes]
  (--fwd: no backward timings; --cudnn: SDPA cuDNN with GQA at 16K, 64K and 128K only, or at --seqs (e.g.
  128K,512K: the dense layer that `sparsering-exec attn` one rank is compared with; from 256K on 1 warm-up and 3
  timed repetitions); --mix: FlexAttention
  causal and VS-like at 128K and the budget mix at 64K and 128K only, the mix read from --check DIR; --shapes:
  SDPA cuDNN on dense causal attention with MHA (16 / 16 heads, d 128) and d 64 (16 / 2 heads) at 16K and 64K,
  the shapes of sparsering-bench-attn --shapes)
"""
import math
import os
import statistics
import sys

import torch
import torch._functorch.config
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Backward is timed repeatedly on one graph (retain_graph), which compiled backward with donated
# buffers refuses.
torch._functorch.config.donated_buffer = False
# Each block mask, length and grad mode is one more compiled variant of flex_attention; the default limit
# of 8 sends the ninth (the budget mix at 128K) to the unfused path, which materialises the scores.
torch._dynamo.config.recompile_limit = 64

H, KH, D = 16, 2, 128
SETS, WARM, REPS = 3, 3, 10
FWD_ONLY = "--fwd" in sys.argv  # forward timings only (the backward peers take most of the run)
M64 = (1 << 64) - 1


def splitmix_uniform(state):
    """Same stream as ib_rng_next / ib_uniform (kernels/test/index_build.h)."""
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & M64
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 11) / 9007199254740992.0


def verticals(n, nvert=1000, seed=1):
    """Per head the vertical columns of the VS-like mask as a bool tensor [H, n] (sinks included)."""
    vert = torch.zeros(H, n, dtype=torch.bool)
    for h in range(H):
        st = [(seed + h * 0x100000001) & M64]
        got = set()
        while len(got) < min(nvert, n):
            u = splitmix_uniform(st)
            got.add(int(n * u * u * u))
        vert[h, list(got)] = True
    vert[:, :128] = True
    return vert.cuda()


def mix_mask(dirname, n):
    """The budget mix's per-head verticals and slash offsets as bool tensors [H, n] (None without the file)."""
    path = "%s/preset_%d_pattern.bin" % (dirname, n)
    if not os.path.exists(path):
        return None
    a = torch.from_file(path, size=os.path.getsize(path) // 4, dtype=torch.int32)
    heads, at = int(a[0]), 1
    vert = torch.zeros(heads, n, dtype=torch.bool)
    slash = torch.zeros(heads, n, dtype=torch.bool)
    for h in range(heads):
        nv, ns = int(a[at]), int(a[at + 1])
        at += 2
        vert[h, a[at:at + nv].long()] = True
        at += nv
        slash[h, a[at:at + ns].long()] = True
        at += ns
    return vert.cuda(), slash.cuda()


def time_ms(fn, n=0):
    ts = []
    warm, reps = (1, 3) if n >= 262144 else (WARM, REPS)  # a 512K backward takes seconds
    for it in range(warm + reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(it % SETS)
        b.record()
        b.synchronize()
        if it >= warm:
            ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def inputs(n, gqa_expand):
    g = torch.Generator(device="cuda").manual_seed(n)
    kh = H if gqa_expand else KH
    sets = []
    for _ in range(SETS):
        q = (torch.rand(1, H, n, D, device="cuda", generator=g) * 2 - 1).bfloat16().requires_grad_()
        k = (torch.rand(1, kh, n, D, device="cuda", generator=g) * 2 - 1).bfloat16().requires_grad_()
        v = (torch.rand(1, kh, n, D, device="cuda", generator=g) * 2 - 1).bfloat16().requires_grad_()
        do = (torch.rand(1, H, n, D, device="cuda", generator=g) * 2 - 1).bfloat16()
        sets.append((q, k, v, do))
    return sets


def bench(name, n, fwd, gqa_expand=False, flop=None):
    try:
        sets = inputs(n, gqa_expand)
        outs = [None] * SETS

        def run_fwd(s):
            q, k, v, _ = sets[s]
            with torch.no_grad():
                fwd(q, k, v)

        tf = time_ms(run_fwd, n)
        if FWD_ONLY:
            rate = lambda ms: "%9.0f" % (flop / ms / 1e9) if flop else "%9s" % "-"
            print("%-30s %6dK %9.2f %s %9s %9s" % (name, n // 1024, tf, rate(tf), "-", "-"), flush=True)
            del sets, outs
            torch.cuda.empty_cache()
            return
        for s in range(SETS):
            q, k, v, _ = sets[s]
            outs[s] = fwd(q, k, v)

        def run_bwd(s):
            q, k, v, do = sets[s]
            torch.autograd.grad(outs[s], (q, k, v), do, retain_graph=True)

        tb = time_ms(run_bwd, n)
        rate = lambda ms, m: "%9.0f" % (m * flop / ms / 1e9) if flop else "%9s" % "-"
        print("%-30s %6dK %9.2f %s %9.2f %s" % (name, n // 1024, tf, rate(tf, 1), tb, rate(tb, 2.5)), flush=True)
        del sets, outs
    except Exception as ex:  # a backend that cannot run this case says so and the table goes on
        print("%-30s %6dK  failed: %s" % (name, n // 1024, str(ex).split("\n")[0][:90]), flush=True)
    torch.cuda.empty_cache()


def sdpa(backend, gqa):
    def f(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    return f


def check(dirname):
    """Our kernels' outputs vs torch on the same inputs (rel. Frobenius error, as in the GPU test)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    for kind, n in (("dense", 16384), ("vs", 65536), ("mix", 65536)):
        if not os.path.exists("%s/%s_%d_q.bin" % (dirname, kind, n)):
            print("check %-6s %6dK: no dump in %s (the bench ran without that case)" % (kind, n // 1024, dirname), flush=True)
            continue
        def load(name, dtype, shape):
            t = torch.from_file("%s/%s_%d_%s.bin" % (dirname, kind, n, name), size=math.prod(shape), dtype=dtype)
            return t.view(shape).cuda()
        q = load("q", torch.bfloat16, (n, H, D)).transpose(0, 1)[None].float().requires_grad_()
        k = load("k", torch.bfloat16, (n, KH, D)).transpose(0, 1)[None].float().requires_grad_()
        v = load("v", torch.bfloat16, (n, KH, D)).transpose(0, 1)[None].float().requires_grad_()
        do = load("dout", torch.bfloat16, (n, H, D)).transpose(0, 1)[None].float()
        o_ours = load("o", torch.bfloat16, (n, H, D)).transpose(0, 1)[None].float()
        lse_ours = load("lse", torch.float32, (H, n))
        g_ours = [load(x, torch.float32, s).transpose(0, 1)[None] for x, s in
                  (("dq", (n, H, D)), ("dk", (n, KH, D)), ("dv", (n, KH, D)))]
        if kind == "dense":
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                o = F.scaled_dot_product_attention(q, k.repeat_interleave(H // KH, 1), v.repeat_interleave(H // KH, 1),
                                                   is_causal=True)
            lse = None
            ref = "SDPA mem-eff (fp32)"
        else:
            if kind == "vs":
                vert = verticals(n)
                def mm(b, h, qi, ki):
                    return (ki <= qi) & ((qi - ki < 4096) | vert[h, ki])
            else:
                mv, ms = mix_mask(dirname, n)
                def mm(b, h, qi, ki):
                    return (ki <= qi) & (mv[h, ki] | ms[h, (qi - ki).clamp(min=0)])
            bm = create_block_mask(mm, 1, H, n, n, device="cuda", _compile=True)
            qb, kb, vb = (x.detach().bfloat16().requires_grad_() for x in (q, k, v))
            o, lse = torch.compile(flex_attention)(qb, kb, vb, block_mask=bm, enable_gqa=True, return_lse=True)
            q, k, v, o, do = qb, kb, vb, o.float(), do.bfloat16()
            ref = "FlexAttention (bf16)"
        grads = [g.float() for g in torch.autograd.grad(o, (q, k, v), do.to(o.dtype))]
        rel = lambda a, b: ((a - b).norm() / b.norm()).item()
        msg = "check %-6s %6dK vs %-20s O %.2e" % (kind, n // 1024, ref, rel(o_ours, o))
        if lse is not None:
            msg += " LSE %.2e" % rel(lse_ours, lse[0])
        msg += " dQ %.2e dK %.2e dV %.2e" % tuple(rel(a, b) for a, b in zip(g_ours, grads))
        print(msg, flush=True)
        del q, k, v, do, o, grads
        torch.cuda.empty_cache()


def main():
    args = sys.argv[1:]
    if "--check" in args:
        try:
            check(args[args.index("--check") + 1])
        except Exception as ex:
            print("check failed to run: %s" % str(ex).split("\n")[0][:200], flush=True)
    quick = "--quick" in args
    only_mix = "--mix" in args
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    print("%-30s %7s %9s %9s %9s %9s" % ("peer", "N", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s"))
    if "--shapes" in args:  # the other shapes of the dense goals; the module's H, KH, D set per shape
        global H, KH, D
        for h, kh, d, name in ((16, 16, 128, "SDPA cuDNN (MHA 16/16)"), (16, 2, 64, "SDPA cuDNN (GQA d64)")):
            H, KH, D = h, kh, d
            for n in (16384, 65536):
                bench(name, n, sdpa(SDPBackend.CUDNN_ATTENTION, kh != h), flop=4.0 * n * n * D * H / 2)
        H, KH, D = 16, 2, 128
        return
    sizes = (16384, 65536, 131072) if "--cudnn" in args else (16384, 65536)
    if "--seqs" in args:
        try:
            sizes = tuple(int(x[:-1]) * 1024 if x[-1] in "kK" else int(x)
                          for x in args[args.index("--seqs") + 1].split(","))
        except (IndexError, ValueError):
            sys.exit("peers.py: --seqs wants lengths like 128K,512K")
    for n in (() if only_mix else (16384,) if quick else sizes):
        flop = 4.0 * n * n * D * H / 2
        bench("SDPA cuDNN (GQA)", n, sdpa(SDPBackend.CUDNN_ATTENTION, True), flop=flop)
        if "--cudnn" in args:
            continue
        bench("SDPA cuDNN (KV expanded)", n, sdpa(SDPBackend.CUDNN_ATTENTION, False), gqa_expand=True, flop=flop)
        bench("SDPA flash2 (GQA)", n, sdpa(SDPBackend.FLASH_ATTENTION, True), flop=flop)
        causal = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, n, n, device="cuda", _compile=True)
        bench("FlexAttention causal", n, lambda q, k, v: flex(q, k, v, block_mask=causal, enable_gqa=True), flop=flop)
    if only_mix:
        n = 131072
        causal = create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, n, n, device="cuda", _compile=True)
        bench("FlexAttention causal", n, lambda q, k, v: flex(q, k, v, block_mask=causal, enable_gqa=True),
              flop=4.0 * n * n * D * H / 2)
    for n in (() if quick or "--cudnn" in args else (131072,) if only_mix else (65536, 131072)):
        vert = verticals(n)

        def mm(b, h, qi, ki):
            return (ki <= qi) & ((qi - ki < 4096) | vert[h, ki])
        bm = create_block_mask(mm, 1, H, n, n, device="cuda", _compile=True)
        bench("FlexAttention vs-like", n, lambda q, k, v: flex(q, k, v, block_mask=bm, enable_gqa=True))
    dump = args[args.index("--check") + 1] if "--check" in args else None
    for n in (() if quick or "--cudnn" in args or not dump else (65536, 131072)):
        got = mix_mask(dump, n)
        if got is None:
            print("%-30s %6dK  no %s/preset_%d_pattern.bin" % ("FlexAttention qwen mix", n // 1024, dump, n), flush=True)
            continue
        mv, ms = got

        def mm(b, h, qi, ki):
            return (ki <= qi) & (mv[h, ki] | ms[h, (qi - ki).clamp(min=0)])
        bm = create_block_mask(mm, 1, H, n, n, device="cuda", _compile=True)
        bench("FlexAttention qwen mix", n, lambda q, k, v: flex(q, k, v, block_mask=bm, enable_gqa=True))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""cp_peer.py — PyTorch's own context parallelism, the multi-GPU peer our distributed attention and trainer are quoted
next to: torch.distributed.tensor.experimental.context_parallel (ring attention over SDPA, the sequence sharded over
every GPU of the job, head-tail load balancing on by default, the KV rotated by all-gather or all-to-all), SDPA with
cuDNN first, then flash, then memory-efficient attention (no math fallback: context parallelism has no ring for it).

  --mode layer  one attention layer of the Qwen2.5-3B shape (16 query heads, 2 KV heads, head dim 128, bf16, causal)
                at --seq tokens: random Q, K, V and output gradient dO (seeded, sharded by context_parallel), forward
                then backward (the gradient of sum(O * dO)), timed with CUDA events; each repetition's time is the
                slowest rank's, the result the median of --repeat after --warmup. --check compares the output and
                the gradients, gathered back, with one GPU's SDPA on the whole sequence instead of timing.
  --mode train  training steps of Hugging Face transformers' Qwen2 from --model (models/qwen2.5-3b.json) with the
                one-GPU peer's conventions (scripts/gpu/train_peer.py: random init, fp32 weights under bf16 autocast,
                per-layer checkpointing, fused AdamW, 4K-token chunked cross-entropy, clip 1), input ids, targets and
                position ids sharded by context_parallel; the parameters replicated with DDP (--params replicated)
                or sharded with FSDP2 (--params sharded), gradients averaged over the ranks as either does. The
                attention must run as SDPA with is_causal and no mask tensor: the model is handed an already-built
                mask mapping of None (as generate does), so transformers never builds a mask (with load balancing
                a rank's positions are not contiguous, which it would read as packed sequences); a model with
                sliding-window layers is refused. Tokens from --samples (`sparsering-exec train --write-samples`:
                the same stream as ours), else seeded random tokens.

GQA: --gqa native passes the 2 KV heads to SDPA (enable_gqa); repeat repeats them to 16 before it (the ring then moves
8x the bytes); auto (default) checks native against one GPU at 4K tokens first and repeats when that fails.

Prints (rank 0) a line per run and, last, one machine-readable line:
  RESULT mode=layer seq=N world=W fwd_ms=.. bwd_ms=.. total_ms=.. peak_gib=.. (TFLOP/s a GPU, settings)
  RESULT mode=train seq=N world=W median_step_s=.. tokens_per_s=.. peak_gib=.. (settings)
peak_gib: torch.cuda.max_memory_allocated on rank 0 (layer: while timing, the full-length inputs released).

  torchrun --standalone --nproc-per-node 4 scripts/gpu/cp_peer.py --mode layer --seq 512K [--warmup 2] [--repeat 3]
      [--no-load-balance] [--rotate alltoall] [--gqa auto|native|repeat] [--check]
  torchrun --standalone --nproc-per-node 4 scripts/gpu/cp_peer.py --mode train --model models/qwen2.5-3b.json
      --seq 128K [--samples S.i32] [--warmup-steps 1] [--steps 2] [--params replicated|sharded]
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

# NVLink SHARP (multicast) stays off on the lent machines (their KINDS.md); a caller's own setting wins
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

HEADS, KV_HEADS, HEAD_DIM = 16, 2, 128  # the Qwen2.5-3B attention layer
PROBE_TOKENS = 4096  # --gqa auto: the length native GQA is checked at
CHECK_TOL = 2e-2  # max |CP - one GPU| / max |one GPU|, each of O, dQ, dK, dV (bf16 inputs; our CUDA check's)


def tokens(text):
    """524288, 512K, 1M, 1.5M (K = 1024, M = 1048576) as a token count."""
    t = text.strip()
    mult = {"k": 1024, "m": 1048576}.get(t[-1:].lower(), 1)
    num = t[:-1] if mult > 1 else t
    try:
        n = float(num) * mult
    except ValueError:
        n = -1
    if n < 1 or n != int(n):
        raise argparse.ArgumentTypeError(f"'{text}' is not a token count (524288, 512K, 1M)")
    return int(n)


def positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive integer")
    return n


def count(text):
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a count (0 or more)")
    return n


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="cp_peer.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="run under torchrun, one process a GPU (see the module's docstring)")
    ap.add_argument("--mode", required=True, choices=["layer", "train"], help="one attention layer, or training steps")
    ap.add_argument("--seq", type=tokens, required=True, help="tokens in the sequence: 524288, 512K, 1M")
    ap.add_argument("--no-load-balance", dest="load_balance", action="store_false",
                    help="contiguous shards (context parallelism's head-tail load balancing off)")
    ap.add_argument("--rotate", choices=["allgather", "alltoall"], default="allgather",
                    help="how the KV shards move (set_rotate_method) [default: allgather]")
    ap.add_argument("--gqa", choices=["auto", "native", "repeat"], default="auto",
                    help="2 KV heads to SDPA (native), repeated to 16 (repeat), or native where it checks out [auto]")
    ap.add_argument("--seed", type=count, default=1, help="seed of the inputs (layer) or weights and tokens (train)")
    g = ap.add_argument_group("layer mode")
    g.add_argument("--warmup", type=count, default=2, help="untimed repetitions first [default: 2]")
    g.add_argument("--repeat", type=positive, default=3, help="timed repetitions (their median is the result) [3]")
    g.add_argument("--check", action="store_true", help="compare with one GPU's SDPA instead of timing")
    g = ap.add_argument_group("train mode")
    g.add_argument("--model", help="Hugging Face config.json (models/qwen2.5-3b.json) [required]")
    g.add_argument("--samples", help="token stream: sparsering-exec train --write-samples FILE [default: random]")
    g.add_argument("--warmup-steps", type=count, default=1, help="untimed steps first [default: 1]")
    g.add_argument("--steps", type=positive, default=2, help="timed steps (their median is the result) [default: 2]")
    g.add_argument("--ce-chunk", type=positive, default=4096, help="tokens a cross-entropy chunk [default: 4096]")
    g.add_argument("--lr", type=float, default=3e-4, help="learning rate [default: 3e-4]")
    g.add_argument("--params", choices=["replicated", "sharded"], default="replicated",
                   help="parameters on every GPU (DDP) or sharded over them (FSDP2) [default: replicated]")
    a = ap.parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    parts = 2 * world if a.load_balance else world  # head-tail: two chunks a rank
    if a.seq % parts:
        ap.error(f"--seq {a.seq}: not a multiple of {parts} ({world} ranks"
                 f"{', two chunks each with load balancing' if a.load_balance else ''})")
    if a.mode == "train":
        if not a.model:
            ap.error("--mode train needs --model (a Hugging Face config.json, e.g. models/qwen2.5-3b.json)")
        for flag, path in (("--model", a.model), ("--samples", a.samples)):
            if path and not os.path.isfile(path):
                ap.error(f"{flag} {path}: no such file")
    elif a.model or a.samples:
        ap.error("--model and --samples belong to --mode train")
    return a


def log(msg):
    print(msg, flush=True)


def refuse(msg):
    """An input the peer cannot run (exit status 2, as a bad flag)."""
    print(f"cp_peer.py: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


# ---- the distributed set-up -----------------------------------------------------------------------------------------

def cp_module():
    """The module holding context parallelism's options and helpers: torch.distributed.tensor.experimental._attention
    (a stub re-exporting _context_parallel._attention since the move; the module itself before it)."""
    try:
        import torch.distributed.tensor.experimental._attention as cp
    except ImportError:
        import torch.distributed.tensor.experimental._context_parallel._attention as cp
    return cp


def setup(a):
    """One process a GPU under torchrun: the NCCL group, a 1-D device mesh over every rank, context parallelism's
    options. Returns (mesh, rank, world, device)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if "LOCAL_RANK" not in os.environ:
        refuse("run under torchrun (torchrun --standalone --nproc-per-node G scripts/gpu/cp_peer.py ...)")
    if not torch.cuda.is_available():
        refuse("needs CUDA GPUs: context parallelism's ring runs SDPA's CUDA kernels")
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != 0:
        sys.stdout = open(os.devnull, "w")  # rank 0 speaks; every rank's errors still reach stderr
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    cp_module()._cp_options.enable_load_balance = a.load_balance
    cp_module().set_rotate_method(a.rotate)
    return mesh, rank, world, dev


def sdpa_backends():
    """SDPA's cuDNN backend first, then flash, then memory-efficient (set_priority: torch >= 2.6; else cuDNN alone)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    try:
        return sdpa_kernel(order, set_priority=True), "cuDNN, then flash, efficient"
    except TypeError:
        return sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), "cuDNN only (this torch has no set_priority)"


@contextlib.contextmanager
def cp_sharded(mesh, buffers, seq_dims):
    """context_parallel over `buffers` (sharded in place along seq_dims, not restored): SDPA is the ring inside."""
    import torch.nn.functional as F
    from torch.distributed.tensor.experimental import context_parallel

    sdpa = F.scaled_dot_product_attention
    try:
        with context_parallel(mesh, buffers=buffers, buffer_seq_dims=seq_dims, no_restore_buffers=set(buffers)):
            yield buffers
    finally:
        F.scaled_dot_product_attention = sdpa  # context_parallel leaves its patch in place when the body raises


def compact(t):
    """The local shard in storage of its own: context_parallel resizes a buffer in place, keeping the full-length
    storage behind it, which would count in every memory figure after."""
    c = t.clone()
    t.set_()
    return c


def slowest(values, dev):
    """Each entry's maximum over the ranks (a step is as slow as its slowest rank)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def sdpa_choice(q, k, v, gqa):
    """The SDPA backend this torch picks for a rank's local shapes (context parallelism calls it on those)."""
    import torch
    from torch.nn.attention import SDPBackend

    try:
        kv = (k, v) if gqa == "native" else (k.repeat_interleave(HEADS // KV_HEADS, 1),
                                             v.repeat_interleave(HEADS // KV_HEADS, 1))
        choice = torch._fused_sdp_choice(q, *kv, is_causal=True, **({"enable_gqa": True} if gqa == "native" else {}))
        return SDPBackend(choice).name.lower().replace("_attention", "")
    except Exception as e:  # informative only: a torch without this entry point still runs
        return f"unknown ({type(e).__name__})"


# ---- one attention layer ---------------------------------------------------------------------------------------------

def layer_inputs(n, seed, dev):
    """Q (16 heads), K, V (2 heads) and dO over the whole sequence, the same on every rank (seeded)."""
    import torch

    g = torch.Generator(device=dev).manual_seed(seed)
    shapes = [(1, HEADS, n, HEAD_DIM), (1, KV_HEADS, n, HEAD_DIM), (1, KV_HEADS, n, HEAD_DIM), (1, HEADS, n, HEAD_DIM)]
    return [torch.randn(s, generator=g, device=dev, dtype=torch.bfloat16) for s in shapes]


def attention(q, k, v, gqa):
    """Causal SDPA of the layer; F.scaled_dot_product_attention is looked up at the call, so inside context_parallel
    it is the ring."""
    import torch.nn.functional as F

    if gqa == "native":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    rep = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)


def check_layer(mesh, n, gqa, seed, dev):
    """Context parallelism's O, dQ, dK, dV (gathered back into sequence order) against one GPU's SDPA on the whole
    sequence with the KV heads repeated. Returns {name: max |error| / max |reference|}."""
    import torch

    full = layer_inputs(n, seed, dev)
    ref = [t.clone().requires_grad_() for t in full[:3]]
    o_ref = attention(*ref, "repeat")
    torch.autograd.backward(o_ref, full[3])
    want = [o_ref.detach()] + [t.grad for t in ref]
    with cp_sharded(mesh, full, [2, 2, 2, 2]) as (q, k, v, do):
        for t in (q, k, v):
            t.requires_grad_()
        o = attention(q, k, v, gqa)
        torch.autograd.backward(o, do)
        got = cp_module().context_parallel_unshard(mesh, [o.detach(), q.grad, k.grad, v.grad], [2, 2, 2, 2])
    return {name: ((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-30)).item()
            for name, g, w in zip(("O", "dQ", "dK", "dV"), got, want)}


def resolve_gqa(a, mesh, dev):
    """--gqa auto: native where context parallelism's result with 2 KV heads matches one GPU at PROBE_TOKENS (every
    rank agrees), else repeat."""
    import torch
    import torch.distributed as dist

    if a.gqa != "auto":
        return a.gqa
    n = PROBE_TOKENS - PROBE_TOKENS % (2 * mesh.size())
    try:
        errs = check_layer(mesh, n, "native", a.seed, dev)
        ok, why = all(e <= CHECK_TOL for e in errs.values()), ", ".join(f"{k} {v:.1e}" for k, v in errs.items())
    except Exception as e:  # noqa: BLE001 — any failure of the native path means repeat
        ok, why = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    flag = torch.tensor([1 if ok else 0], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    ok = bool(flag.item())
    log(f"peer: GQA with 2 KV heads under context parallelism at {n} tokens: {'ok' if ok else 'not usable'} ({why}); "
        f"{'native' if ok else 'KV heads repeated to 16'}")
    return "native" if ok else "repeat"


def run_layer(a, mesh, rank, world, dev):
    import torch
    import torch.distributed as dist

    gqa = resolve_gqa(a, mesh, dev)
    log(f"peer: layer of {HEADS} query / {KV_HEADS} KV heads, head dim {HEAD_DIM}, bf16, causal, seq {a.seq}, gqa {gqa}")
    if a.check:
        errs = check_layer(mesh, a.seq, gqa, a.seed, dev)
        worst = max(errs.values())
        log(f"peer: check seq {a.seq} world {world} gqa {gqa}: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items())
            + f" (max |CP - one GPU| / max |one GPU|, tol {CHECK_TOL:g}): {'ok' if worst <= CHECK_TOL else 'FAILED'}")
        log(f"RESULT mode=check seq={a.seq} world={world} worst={worst:.3e} tol={CHECK_TOL:g} "
            f"ok={int(worst <= CHECK_TOL)} lb={'on' if a.load_balance else 'off'} rotate={a.rotate} gqa={gqa}")
        return 0 if worst <= CHECK_TOL else 1
    full = layer_inputs(a.seq, a.seed, dev)
    times = []
    with cp_sharded(mesh, full, [2, 2, 2, 2]):
        q, k, v, do = [compact(t) for t in full]
        del full
        for t in (q, k, v):
            t.requires_grad_()
        backend = sdpa_choice(q, k, v, gqa)
        torch.cuda.reset_peak_memory_stats()
        for it in range(a.warmup + a.repeat):
            dist.barrier()
            torch.cuda.synchronize()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
            o = attention(q, k, v, gqa)
            ev[1].record()
            torch.autograd.backward(o, do)
            ev[2].record()
            torch.cuda.synchronize()
            if it >= a.warmup:
                times += [ev[0].elapsed_time(ev[1]), ev[1].elapsed_time(ev[2])]
            q.grad = k.grad = v.grad = o = None
        peak = torch.cuda.max_memory_allocated() / 2**30
    t = slowest(times, dev)
    fwd, bwd = t[0::2], t[1::2]
    f, b, tot = statistics.median(fwd), statistics.median(bwd), statistics.median([x + y for x, y in zip(fwd, bwd)])
    flops_f = 4.0 * a.seq * a.seq * HEADS * HEAD_DIM / 2  # causal: half the square
    flops_b = 2.5 * flops_f
    tf = lambda fl, ms: fl / world / (ms * 1e-3) / 1e12  # noqa: E731 — TFLOP/s a GPU
    log(f"peer: layer seq {a.seq} world {world}: fwd {f:.1f} ms, bwd {b:.1f} ms, fwd+bwd {tot:.1f} ms (median of "
        f"{a.repeat} after {a.warmup}, slowest rank each); {tf(flops_f, f):.0f} / {tf(flops_b, b):.0f} / "
        f"{tf(flops_f + flops_b, tot):.0f} TFLOP/s a GPU; peak {peak:.2f} GiB on rank 0")
    log(f"RESULT mode=layer seq={a.seq} world={world} fwd_ms={f:.3f} bwd_ms={b:.3f} total_ms={tot:.3f} "
        f"peak_gib={peak:.3f} fwd_tflops_gpu={tf(flops_f, f):.1f} bwd_tflops_gpu={tf(flops_b, b):.1f} "
        f"total_tflops_gpu={tf(flops_f + flops_b, tot):.1f} lb={'on' if a.load_balance else 'off'} "
        f"rotate={a.rotate} gqa={gqa} backend={backend} repeat={a.repeat}")
    return 0


# ---- training steps --------------------------------------------------------------------------------------------------

def step_tokens(a, vocab, total_steps):
    """(steps, 2, seq) int64 on the host: tokens then targets (-1: no loss) a step, from --samples or random."""
    import numpy as np

    if a.samples:
        data = np.fromfile(a.samples, dtype="<i4")
        per = 2 * a.seq
        if data.size % per or data.size // per < total_steps:
            refuse(f"{a.samples}: {data.size} int32 values are not {total_steps} samples of 2 x {a.seq}")
        return data.reshape(-1, 2, a.seq)[:total_steps].astype(np.int64)
    rng = np.random.default_rng(a.seed)
    ids = rng.integers(0, vocab, size=(total_steps, a.seq), dtype=np.int64)
    tgt = np.concatenate([ids[:, 1:], np.full((total_steps, 1), -1, dtype=np.int64)], axis=1)
    return np.stack([ids, tgt], axis=1)


def causal_lm(a, dev, gqa):
    """The one-GPU peer's model (train_peer.build_model: fp32 weights, SDPA, per-layer checkpointing), checked to
    reach SDPA with is_causal and no mask; with gqa repeat, transformers repeats the KV heads before SDPA."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_peer

    model = train_peer.build_model(a.model, dev, False)
    cfg = model.config
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        refuse(f"{a.model}: transformers chose attention '{cfg._attn_implementation}', not sdpa")
    types = getattr(cfg, "layer_types", None)
    if ("sliding_attention" in types) if types else getattr(cfg, "use_sliding_window", False):
        refuse(f"{a.model}: sliding-window layers need a mask; context parallelism's ring takes is_causal only")
    if gqa == "repeat":
        import transformers.integrations.sdpa_attention as hf_sdpa

        if not hasattr(hf_sdpa, "use_gqa_in_sdpa"):
            refuse("--gqa repeat: this transformers has no sdpa_attention.use_gqa_in_sdpa to turn off")
        hf_sdpa.use_gqa_in_sdpa = lambda *args, **kwargs: False
    return model, train_peer


def step_loss_module(model, train_peer, ce_chunk):
    """The forward a step differentiates, as one module so DDP / FSDP2 see every parameter used through it."""
    import torch

    no_mask = {"full_attention": None}  # an already-built mask mapping: transformers builds none, SDPA runs is_causal

    class StepLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = model

        def forward(self, ids, pos, tgt, count):
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                hidden = self.lm.model(input_ids=ids, position_ids=pos, attention_mask=no_mask,
                                       use_cache=False).last_hidden_state[0]
                return train_peer.chunked_cross_entropy(hidden, self.lm.lm_head.weight, tgt, ce_chunk) / count

    return StepLoss()


def distribute(step_loss, params_mode, mesh, dev):
    """Replicated (DDP) or sharded (FSDP2, each decoder layer a unit): either averages the gradients over the ranks."""
    if params_mode == "replicated":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(step_loss, device_ids=[dev.index], broadcast_buffers=False,
                                       gradient_as_bucket_view=True)
    from torch.distributed.fsdp import fully_shard

    for layer in step_loss.lm.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(step_loss, mesh=mesh)


def run_train(a, mesh, rank, world, dev):
    import torch
    import torch.distributed as dist

    gqa = resolve_gqa(a, mesh, dev)
    torch.manual_seed(a.seed)
    model, train_peer = causal_lm(a, dev, gqa)
    total = a.warmup_steps + a.steps
    data = step_tokens(a, model.config.vocab_size, total)
    step_loss = distribute(step_loss_module(model, train_peer, a.ce_chunk), a.params, mesh, dev)
    params = [p for p in step_loss.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    warm = train_peer.default_warmup(total)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    log(f"peer: train seq {a.seq} over {world} GPUs ({a.seq // world} tokens each), context parallelism (load "
        f"balancing {'on' if a.load_balance else 'off'}, {a.rotate}), gqa {gqa}, parameters "
        f"{a.params} ({'DDP' if a.params == 'replicated' else 'FSDP2'}), bf16 autocast, fused AdamW, per-layer "
        f"checkpointing, cross-entropy in {a.ce_chunk}-token chunks, lr {a.lr} (warm-up {warm}), clip 1.0, "
        f"{a.warmup_steps} warm-up + {a.steps} timed steps, tokens from {a.samples or 'random'}")
    times = []
    for step in range(total):
        ids = torch.from_numpy(data[step, 0]).to(dev).unsqueeze(0)
        tgt = torch.from_numpy(data[step, 1]).to(dev).unsqueeze(0)
        pos = torch.arange(a.seq, device=dev).unsqueeze(0)
        n_loss = max(1, int((tgt >= 0).sum()))  # the loss is a mean over the whole sequence's scored tokens
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cp_sharded(mesh, [ids, tgt, pos], [1, 1, 1]):
            loss = step_loss(ids, pos, tgt[0], n_loss)
            (loss * world).backward()  # the ranks' gradients are averaged; the sequence's is their sum
        gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        dt, total_loss = slowest([dt], dev)[0], loss.detach().clone()
        dist.all_reduce(total_loss)
        gnorm = gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm
        if step >= a.warmup_steps:
            times.append(dt)
        log(f"peer: step {step + 1}/{total}{' (warm-up)' if step < a.warmup_steps else ''} | loss "
            f"{total_loss.item():.4f} | gnorm {gnorm.item():.3f} | {dt:.3f} s | {a.seq / dt:.0f} tok/s | peak "
            f"memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    med = statistics.median(times)
    log(f"RESULT mode=train seq={a.seq} world={world} median_step_s={med:.4f} tokens_per_s={a.seq / med:.1f} "
        f"peak_gib={torch.cuda.max_memory_allocated() / 2**30:.3f} params={a.params} gqa={gqa} "
        f"lb={'on' if a.load_balance else 'off'} rotate={a.rotate} steps={len(times)}")
    return 0


def main(argv):
    a = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"cp_peer.py: needs PyTorch with CUDA (and transformers for --mode train): {e}", file=sys.stderr)
        return 1

    mesh, rank, world, dev = setup(a)
    log(f"peer: torch {torch.__version__}, {world} ranks, {torch.cuda.get_device_name(dev)}, "
        f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}")
    ctx, order = sdpa_backends()
    log(f"peer: context parallelism (load balancing {'on' if a.load_balance else 'off'}, {a.rotate}); SDPA {order}")
    try:
        with ctx:
            rc = (run_layer if a.mode == "layer" else run_train)(a, mesh, rank, world, dev)
    finally:
        dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

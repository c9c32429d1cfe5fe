#!/usr/bin/env python3
"""train_peer.py — the PyTorch trainer a user would run instead of `sparsering-exec train`: the peer that every
training figure of ours is quoted next to.

Hugging Face transformers' Qwen2 built from a config.json (models/qwen2.5-3b.json), random init, fp32 weights with
bf16 autocast, SDPA with the cuDNN backend first, fused AdamW (beta 0.9 / 0.95, wd 0), per-layer activation
checkpointing (non-reentrant), cross-entropy in 4K-token chunks (each chunk checkpointed, so one chunk's logits
exist at a time), gradient norm clipped to 1, one sequence a step, the learning-rate warm-up of ours (10% of the
steps, 10 to 100). With --compile each decoder layer is torch.compile'd (regional compilation). No other tuning.

The tokens are ours: `sparsering-exec train ... --write-samples FILE` writes the steps' sequences (int32 tokens then
targets a sample, -1: no loss), so both trainers run on the same token stream.

Prints a line a step and, last, one line `peer: RESULT variant=... seq=... median_step_s=... tokens_per_s=...`
(the median of the steps after the warm-up steps).

  python3 scripts/gpu/train_peer.py --model models/qwen2.5-3b.json --samples S.i32 --seq 32768 [--compile]
      [--warmup-steps 2] [--steps 3] [--ce-chunk 4096] [--lr 3e-4]
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def log(msg):
    print(msg, flush=True)


def build_model(config_path, device, compile_layers):
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(config_path) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(**raw)  # the model type of the file (qwen2), exactly its fields
    cfg.use_cache = False
    t0 = time.perf_counter()
    with torch.device(device):  # weights drawn where they live: a 3B model never fills host memory
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model = model.float().to(device)  # fp32 master weights (the config's torch_dtype would say bf16)
    model.train()
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if compile_layers:
        for layer in model.model.layers:  # regional compilation: one compiled decoder layer, reused by all
            layer.compile()
    n = sum(p.numel() for p in model.parameters())
    log(f"peer: {raw.get('model_type', '?')} from {config_path}, {n} parameters, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {'each decoder layer compiled' if compile_layers else 'eager'}, "
        f"built in {time.perf_counter() - t0:.1f}s")
    return model


def chunked_cross_entropy(hidden, weight, targets, chunk):
    """Summed cross-entropy over the chunks of `chunk` tokens; each chunk's logits are recomputed in the backward."""

    def one(h, w, t):
        logits = F.linear(h, w)
        return F.cross_entropy(logits.float(), t, ignore_index=-1, reduction="sum")

    total = hidden.new_zeros((), dtype=torch.float32)
    for s in range(0, hidden.shape[0], chunk):
        total = total + checkpoint(one, hidden[s:s + chunk], weight, targets[s:s + chunk], use_reentrant=False)
    return total


def sdpa_backends():
    """SDPA's cuDNN backend first, the others as fallbacks (set_priority: torch >= 2.6; else cuDNN alone)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    try:
        return sdpa_kernel(order, set_priority=True), "cuDNN, then flash, efficient, math"
    except TypeError:
        return sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), "cuDNN only (this torch has no set_priority)"


def default_warmup(steps):
    return min(100, max(10, steps // 10))  # train/train.c train_default_warmup


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face config.json (models/qwen2.5-3b.json)")
    ap.add_argument("--samples", required=True, help="the token stream: sparsering-exec train --write-samples FILE")
    ap.add_argument("--seq", type=int, required=True, help="tokens a sequence (as the samples file was written)")
    ap.add_argument("--compile", action="store_true", help="torch.compile each decoder layer (regional)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (their median is the result)")
    ap.add_argument("--ce-chunk", type=int, default=4096, help="tokens a cross-entropy chunk")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()

    total_steps = a.warmup_steps + a.steps
    data = np.fromfile(a.samples, dtype="<i4")
    per = 2 * a.seq
    if data.size % per or data.size // per < total_steps:
        sys.exit(f"train_peer.py: {a.samples}: {data.size} int32 values are not {total_steps} samples of 2 x {a.seq}")
    data = data.reshape(-1, 2, a.seq)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(1)
    model = build_model(a.model, dev, a.compile)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0, **({"fused": True} if cuda else {}))
    warm = default_warmup(total_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    ctx, order = sdpa_backends()
    log(f"peer: seq {a.seq}, SDPA {order}, bf16 autocast over fp32 weights, fused AdamW, per-layer checkpointing "
        f"(non-reentrant), cross-entropy in {a.ce_chunk}-token chunks, lr {a.lr} (warm-up {warm}), clip 1.0, "
        f"{a.warmup_steps} warm-up + {a.steps} timed steps on {dev}")
    pos = torch.arange(a.seq, device=dev).unsqueeze(0)
    times = []
    with ctx:
        for step in range(total_steps):
            ids = torch.from_numpy(data[step, 0].astype(np.int64)).to(dev).unsqueeze(0)
            tgt = torch.from_numpy(data[step, 1].astype(np.int64)).to(dev)
            count = max(1, int((tgt >= 0).sum()))
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                hidden = model.model(input_ids=ids, position_ids=pos, use_cache=False).last_hidden_state[0]
                loss = chunked_cross_entropy(hidden, model.lm_head.weight, tgt, a.ce_chunk) / count
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if step >= a.warmup_steps:
                times.append(dt)
            mem = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
            log(f"peer: step {step + 1}/{total_steps}{' (warm-up)' if step < a.warmup_steps else ''} | loss "
                f"{loss.item():.4f} | gnorm {gnorm.item():.3f} | {dt:.3f} s | {a.seq / dt:.0f} tok/s | peak memory "
                f"{mem:.1f} GiB")
    med = statistics.median(times)
    log(f"peer: RESULT variant={'compiled' if a.compile else 'eager'} seq={a.seq} median_step_s={med:.4f} "
        f"tokens_per_s={a.seq / med:.1f} steps={len(times)} "
        f"max_mem_gib={torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0:.1f}")


if __name__ == "__main__":
    main()

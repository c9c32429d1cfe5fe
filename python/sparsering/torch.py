"""sparsering's sparse attention as a PyTorch autograd function.

    import sparsering.torch as st
    o = st.sparse_attention(q, k, v, "vs-online:0.95")            # q [B, N, H, D], k, v [B, N, Hkv, D]
    o, lse = st.sparse_attention(q, k, v, "dense", return_lse=True)  # lse [B, H, N], natural log
    o = st.sparse_attention(q, k, v, "dense", deterministic=True)    # a backward that repeats bit for bit

Tensors: bf16 CUDA tensors in the [batch, tokens, heads, head_dim] layout (FlashAttention's; a 3-d
[tokens, heads, head_dim] tensor is one sequence), head_dim 64 or 128, heads a multiple of the KV heads
(GQA). Attention is causal over positions 0..N-1 of each sequence (no padding mask), with softmax scale
1/sqrt(head_dim) unless given. The forward and backward are our kernels (kernels/sparse_attn.h) on the
current CUDA stream; the gradients are computed in fp32 and returned in the inputs' dtype. Float32 CPU
tensors run the CPU reference kernels instead (float64 accumulation: small shapes, for tests).

pattern: a source string ("dense", "window:S:W", "vs-topp:0.95", "vs-online:0.95", "block:0.1", ...;
docs/patterns.md), a VSPattern of explicit per-head verticals and slashes, or a prepared
sparsering.Attention of the same shape. "vs-online:P" estimates MTraining's vertical-slash pattern from
the last 64 queries of each sequence in every forward, on the GPU, and the backward runs the same pattern.
The gated "moba:B:K" and "token-topk:K" select from Q and K on the CPU reference only (float32 CPU tensors);
on CUDA tensors they are refused (SparseringError).

deterministic: the GPU backward's kernels. False (the default) runs the fastest ones: on Hopper dQ is summed
by float atomics, in an order that varies from call to call, so gradients may differ in their last bits
between two identical calls. True runs the split kernels without float atomics (kernels/sparse_attn.h,
sa_shape.deterministic; the trainer's --deterministic): dQ, dK and dV repeat bit for bit, at some cost in
speed. It is also on while torch.use_deterministic_algorithms(True) is. The forward is bit-reproducible
either way, and so is the CPU reference, which accepts the flag and has nothing to change.
layer, num_layers: the pattern of layer `layer` of a num_layers-layer model (sparsering.Attention's): a synthetic
source such as "vs-topp:0.95" gives each layer the heads `sparsering-exec train --pattern P` runs in that layer
(the Hugging Face backend, sparsering.hf, passes each attention module's layer_idx); None for both is layer 0 of 1.
seed: of synthetic sources, 0 as the trainer's default --seed.
Prepared shapes of string patterns are cached (SHAPES_CACHED of them, or as many as the model has layers when
that is more); one shape of an estimated or gated pattern serves every layer.
"""
import collections

import torch

from .attention import Attention, VSPattern

SHAPES_CACHED = 16
_cache = collections.OrderedDict()


def _layers(layer, num_layers):
    """(layer, num_layers) of sparse_attention's arguments: both None (layer 0 of 1) or both given."""
    if layer is None and num_layers is None:
        return 0, 1
    if layer is None or num_layers is None:
        raise ValueError(f"layer={layer!r}, num_layers={num_layers!r}: give both (or neither: layer 0 of 1)")
    return int(layer), int(num_layers)


def _attention_for(pattern, n, heads, kv_heads, head_dim, scale, seed, layer=0, num_layers=1):
    """The Attention of a pattern for this shape and layer: given, cached, or made."""
    if isinstance(pattern, Attention):
        want = (n, heads, kv_heads, head_dim)
        have = (pattern.n, pattern.heads, pattern.kv_heads, pattern.head_dim)
        if have != want:
            raise ValueError(f"the Attention's shape {have} is not the tensors' {want} (n, heads, kv_heads, head_dim)")
        return pattern
    if isinstance(pattern, VSPattern):
        return Attention(n, heads, kv_heads, head_dim, pattern, scale)
    shape = (str(pattern), n, heads, kv_heads, head_dim, scale, seed)
    # an estimated or gated pattern is the same on every layer: its one shape is cached without the layer
    for key in (shape + (None, None), shape + (layer, num_layers)):
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    a = Attention(n, heads, kv_heads, head_dim, str(pattern), scale, seed, layer, num_layers)
    _cache[shape + ((None, None) if a.online or a.gated else (layer, num_layers))] = a
    while len(_cache) > max(SHAPES_CACHED, num_layers):  # a model's every layer stays prepared
        _cache.popitem(last=False)
    return a


def clear_shapes():
    """Release the prepared shapes (and their device copies, once no graph holds them)."""
    _cache.clear()


def cached_shapes():
    """The prepared Attention shapes of string patterns, least recently used first (their .info says what each
    computes: density, computed, per layer)."""
    return list(_cache.values())


def _p(t):
    return t.data_ptr()


class _SparseAttention(torch.autograd.Function):
    """q, k, v [B, N, H(kv), D] contiguous -> o [B, N, H, D], lse [B, H, N] (not differentiable)."""

    @staticmethod
    def forward(ctx, q, k, v, attn, deterministic):
        B, N, H, D = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(B, H, N, dtype=torch.float32, device=q.device)
        keep = any(ctx.needs_input_grad[:3])
        saved = []
        if q.is_cuda:
            with torch.cuda.device(q.device):
                stream = torch.cuda.current_stream().cuda_stream
                for b in range(B):
                    saved.append(attn.forward_ptr(_p(q[b]), _p(k[b]), _p(v[b]), _p(o[b]), _p(lse[b]), stream, keep))
        else:
            for b in range(B):
                ob, lb = attn.forward_cpu(*(x[b].detach().numpy() for x in (q, k, v)))
                o[b].copy_(torch.from_numpy(ob))
                lse[b].copy_(torch.from_numpy(lb))
        ctx.attn, ctx.saved, ctx.deterministic = attn, saved, deterministic  # saved: released with the graph
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        attn = ctx.attn
        do = do.contiguous()
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.empty(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        if q.is_cuda:
            with torch.cuda.device(q.device):
                stream = torch.cuda.current_stream().cuda_stream
                d_row = torch.empty(q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
                for b in range(q.shape[0]):
                    attn.backward_ptr(ctx.saved[b], _p(q[b]), _p(k[b]), _p(v[b]), _p(o[b]), _p(lse[b]), _p(do[b]),
                                      _p(d_row), _p(dq[b]), _p(dk[b]), _p(dv[b]), stream, ctx.deterministic)
        else:  # the CPU reference sums in a fixed order: deterministic either way
            for b in range(q.shape[0]):
                g = attn.backward_cpu(*(x[b].detach().numpy() for x in (q, k, v, o, lse, do)))
                for dst, src in zip((dq[b], dk[b], dv[b]), g):
                    dst.copy_(torch.from_numpy(src))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def _check(q, k, v):
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.shape != k.shape:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: expected [B, N, H, D] and "
                         "[B, N, Hkv, D] (or without B)")
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch, tokens or head_dim")
    if q.is_cuda:
        if q.dtype != torch.bfloat16 or k.dtype != torch.bfloat16 or v.dtype != torch.bfloat16:
            raise TypeError(f"CUDA tensors must be bfloat16 (got {q.dtype}, {k.dtype}, {v.dtype})")
        if not (k.is_cuda and v.is_cuda) or k.device != q.device or v.device != q.device:
            raise ValueError("q, k and v must be on the same CUDA device")
    elif q.dtype != torch.float32 or k.dtype != torch.float32 or v.dtype != torch.float32:
        raise TypeError("CPU tensors (the reference kernels) must be float32")


def sparse_attention(q, k, v, pattern="dense", *, scale=None, return_lse=False, seed=0, deterministic=False,
                     layer=None, num_layers=None):
    """Causal sparse attention: o [B, N, H, D] (and lse [B, H, N] with return_lse). deterministic=True: the
    backward's gradients repeat bit for bit (no float atomics; slower; also on under
    torch.use_deterministic_algorithms(True)). layer, num_layers: a string pattern's layer of a model (both or
    neither). See the module's help."""
    layer, num_layers = _layers(layer, num_layers)
    _check(q, k, v)
    squeeze = q.dim() == 3
    if squeeze:
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    _, N, H, D = q.shape
    attn = _attention_for(pattern, N, H, k.shape[2], D, scale, seed, layer, num_layers)
    det = bool(deterministic) or torch.are_deterministic_algorithms_enabled()
    o, lse = _SparseAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), attn, det)
    if squeeze:
        o, lse = o.squeeze(0), lse.squeeze(0)
    return (o, lse) if return_lse else o


def vs_estimate(q, k, pattern="vs-online:0.95", *, scale=None):
    """MTraining's online vertical-slash estimate of q [B, N, H, D], k [B, N, Hkv, D] (the pattern
    "vs-online:..." selects from the last 64 queries): a VSPattern per sequence (one VSPattern for 3-d
    tensors), the indices sparse_attention(q, k, v, "vs-online:...") runs."""
    if q.dim() == 3:
        return vs_estimate(q.unsqueeze(0), k.unsqueeze(0), pattern, scale=scale)[0]
    _check(q, k, k)
    _, N, H, D = q.shape
    attn = _attention_for(pattern, N, H, k.shape[2], D, scale, 0)
    q, k = q.detach().contiguous(), k.detach().contiguous()
    out = []
    for b in range(q.shape[0]):
        if q.is_cuda:
            with torch.cuda.device(q.device):
                out.append(attn.estimate_ptr(_p(q[b]), _p(k[b]), torch.cuda.current_stream().cuda_stream))
        else:
            out.append(attn.estimate_cpu(q[b].numpy(), k[b].numpy()))
    return out

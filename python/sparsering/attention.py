"""Causal sparse attention on one device through the C API (api/api.h), without torch: a shape and its
pattern (Attention), the CPU reference on numpy arrays (float64 accumulation: small shapes, tests), and the
raw GPU calls on device pointers that sparsering.torch builds its autograd function on.

Layout (kernels/sparse_attn.h): q, o, do [n, heads, head_dim]; k, v [n, kv_heads, head_dim], tokens
outermost; lse [heads, n] (natural log). Query head h reads KV head h // (heads // kv_heads) (GQA). The
sequence is whole on the device, positions 0..n-1.
"""
import ctypes
import json

import numpy as np

from . import _lib
from .errors import SparseringError


class VSPattern:
    """Explicit vertical-slash indices, per query head: vertical[h] the kept key positions (columns), slash[h]
    the kept offsets q - k (diagonals), each a sequence of ints in [0, n) (sorted and deduplicated here)."""

    def __init__(self, vertical, slash):
        if len(vertical) != len(slash):
            raise ValueError(f"{len(vertical)} heads of verticals but {len(slash)} of slashes")
        self.vertical = [np.unique(np.asarray(v, dtype=np.int64)).astype(np.int32) for v in vertical]
        self.slash = [np.unique(np.asarray(s, dtype=np.int64)).astype(np.int32) for s in slash]

    @property
    def heads(self):
        return len(self.vertical)

    def __repr__(self):
        nv = sum(len(v) for v in self.vertical)
        ns = sum(len(s) for s in self.slash)
        return f"VSPattern({self.heads} heads, {nv} verticals, {ns} slashes)"

    def keeps(self, n):
        """The kept (q, k) pairs as a bool array [heads, n, n] (causal included; small n only)."""
        q = np.arange(n)[:, None]
        k = np.arange(n)[None, :]
        out = np.zeros((self.heads, n, n), dtype=bool)
        for h in range(self.heads):
            col = np.zeros(n, dtype=bool)
            col[self.vertical[h]] = True
            diag = np.zeros(n, dtype=bool)
            diag[self.slash[h]] = True
            out[h] = (k <= q) & (col[k] | diag[np.clip(q - k, 0, n - 1)])
        return out

    @staticmethod
    def from_bits(vbits, sbits, n):
        """From per-head bit sets [heads, ceil(n / 32)] of uint32 (bit k % 32 of word k // 32)."""
        def unpack(bits):
            flat = np.unpackbits(np.ascontiguousarray(bits).view(np.uint8), axis=-1, bitorder="little")
            return [np.flatnonzero(row[:n]).astype(np.int32) for row in flat]
        return VSPattern(unpack(vbits), unpack(sbits))


def _lib_for_attention():
    """The CUDA library where it exists (the GPU calls need it, and a shape must stay with the library
    that made it), else the CPU one."""
    return _lib.load(_lib.CUDA_LIB if _lib.has_cuda_lib() else _lib.CPU_LIB)


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


class Attention:
    """One attention shape and its pattern.

    pattern: a source string ("dense", "window:S:W", "vs-like:S:W:NV", "vs-topp:0.95", "vs-preset:qwen2.5-3b",
    "block:D", "vs-online:0.95" estimated from Q and K every forward, "moba:B:K" and "token-topk:K" selected
    from Q and K by every CPU reference call, ...; docs/patterns.md), or a VSPattern.
    scale: the softmax scale (default 1/sqrt(head_dim)); seed: of synthetic sources (0, as the trainer's
    default --seed draws its patterns).
    layer, num_layers: the pattern of layer `layer` of a num_layers-layer model of this shape, the heads
    `sparsering-exec train --pattern P` runs in that layer for the same length and seed (a synthetic source such as
    vs-topp differs from layer to layer); the default is layer 0 of 1. Estimated (vs-online) and gated sources and
    a VSPattern are the same on every layer.
    """

    def __init__(self, n, heads, kv_heads, head_dim, pattern="dense", scale=None, seed=0, layer=0, num_layers=1):
        self.n, self.heads, self.kv_heads, self.head_dim = int(n), int(heads), int(kv_heads), int(head_dim)
        self.layer, self.num_layers = int(layer), int(num_layers)
        self._lib = _lib_for_attention()
        self._h = None
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        sc = 0.0 if scale is None else float(scale)
        if isinstance(pattern, VSPattern):
            if pattern.heads != self.heads:
                raise SparseringError(f"heads: the pattern has {pattern.heads} heads, the shape {self.heads}", code=2,
                                      field="heads", reason=f"the pattern has {pattern.heads} heads, the shape {self.heads}")
            counts = np.array([c for v, s in zip(pattern.vertical, pattern.slash) for c in (len(v), len(s))],
                              dtype=np.int32)
            idx = np.concatenate([np.concatenate([v, s]) for v, s in zip(pattern.vertical, pattern.slash)] +
                                 [np.zeros(0, np.int32)]).astype(np.int32)
            rc = self._lib.sr_attn_new_vs(self.n, self.heads, self.kv_heads, self.head_dim, sc, _ptr(counts), _ptr(idx),
                                          ctypes.byref(out), ctypes.byref(err))
            self.pattern = "explicit"
        else:
            rc = self._lib.sr_attn_new_layer(str(pattern).encode(), self.n, self.heads, self.kv_heads, self.head_dim,
                                             sc, int(seed), self.layer, self.num_layers, ctypes.byref(out),
                                             ctypes.byref(err))
            self.pattern = str(pattern)
        _lib.check(self._lib, rc, err)
        self._h = out.value
        self.info = self._info()
        self.scale = self.info["scale"]
        self.online = bool(self.info["online"])
        self.gated = bool(self.info["gated"])

    def __del__(self):
        self.close()

    def close(self):
        """Release the shape (and its device copies)."""
        if getattr(self, "_h", None):
            self._lib.sr_attn_free(self._h)
            self._h = None

    def __repr__(self):
        where = f", layer={self.layer}, num_layers={self.num_layers}" if self.num_layers > 1 else ""
        return (f"Attention(n={self.n}, heads={self.heads}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"pattern={self.pattern!r}{where})")

    def _info(self):
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        rc = self._lib.sr_attn_info(self._h, ctypes.byref(out), ctypes.byref(err))
        text = _lib.take_string(self._lib, out.value)
        _lib.check(self._lib, rc, err)
        return json.loads(text)

    # ---- CPU reference (numpy float32) -----------------------------------------------------------------

    def _arrays(self, q, k, *more_q):
        q = np.ascontiguousarray(q, dtype=np.float32)
        k = np.ascontiguousarray(k, dtype=np.float32)
        want_q, want_k = (self.n, self.heads, self.head_dim), (self.n, self.kv_heads, self.head_dim)
        if q.shape != want_q or k.shape != want_k:
            raise ValueError(f"q {q.shape} / k {k.shape}: expected {want_q} / {want_k}")
        return q, k

    def forward_cpu(self, q, k, v):
        """The CPU reference forward: (o [n, heads, head_dim], lse [heads, n]) as float32 arrays."""
        q, k = self._arrays(q, k)
        v = np.ascontiguousarray(v, dtype=np.float32).reshape(k.shape)
        o = np.empty_like(q)
        lse = np.empty((self.heads, self.n), dtype=np.float32)
        err = ctypes.c_void_p()
        rc = self._lib.sr_attn_forward_cpu(self._h, _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse), ctypes.byref(err))
        _lib.check(self._lib, rc, err)
        return o, lse

    def backward_cpu(self, q, k, v, o, lse, do):
        """The CPU reference backward with the forward's o and lse: (dq, dk, dv) float32 arrays."""
        q, k = self._arrays(q, k)
        v = np.ascontiguousarray(v, dtype=np.float32).reshape(k.shape)
        o = np.ascontiguousarray(o, dtype=np.float32).reshape(q.shape)
        do = np.ascontiguousarray(do, dtype=np.float32).reshape(q.shape)
        lse = np.ascontiguousarray(lse, dtype=np.float32).reshape(self.heads, self.n)
        dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(k)
        err = ctypes.c_void_p()
        rc = self._lib.sr_attn_backward_cpu(self._h, _ptr(q), _ptr(k), _ptr(v), _ptr(o), _ptr(lse), _ptr(do), _ptr(dq),
                                            _ptr(dk), _ptr(dv), ctypes.byref(err))
        _lib.check(self._lib, rc, err)
        return dq, dk, dv

    def _bit_arrays(self):
        words = (self.n + 31) // 32
        return np.zeros((self.heads, words), np.uint32), np.zeros((self.heads, words), np.uint32)

    def estimate_cpu(self, q, k):
        """The online estimate (vs-online shapes) on the CPU: the VSPattern the GPU would select."""
        q, k = self._arrays(q, k)
        vb, sb = self._bit_arrays()
        err = ctypes.c_void_p()
        rc = self._lib.sr_attn_estimate_cpu(self._h, _ptr(q), _ptr(k), _ptr(vb), _ptr(sb), ctypes.byref(err))
        _lib.check(self._lib, rc, err)
        return VSPattern.from_bits(vb, sb, self.n)

    # ---- GPU (device pointers; sparsering.torch calls these) ------------------------------------------

    def _gpu(self, name):
        fn = getattr(self._lib, name, None)
        if fn is None or self._lib is not _lib._loaded.get(_lib.CUDA_LIB):
            raise SparseringError(f"{name}: the GPU attention needs {_lib.CUDA_LIB} (built where nvcc exists)",
                                  code=1, file=_lib.CUDA_LIB, field="", reason="not built")
        return fn

    def forward_ptr(self, q, k, v, o, lse, stream=0, keep=True):
        """GPU forward on device pointers (bf16 q, k, v, o; fp32 lse [heads, n]); returns what the backward
        needs (a Saved, or None for a fixed pattern or keep=False)."""
        fn = self._gpu("sr_attn_forward")
        saved, err = ctypes.c_void_p(), ctypes.c_void_p()
        rc = fn(self._h, q, k, v, o, lse, stream or None, ctypes.byref(saved) if keep else None, ctypes.byref(err))
        _lib.check(self._lib, rc, err)
        return Saved(self._lib, saved.value) if saved.value else None

    def backward_ptr(self, saved, q, k, v, o, lse, do, d_row, dq, dk, dv, stream=0, deterministic=False):
        """GPU backward on device pointers: dq, dk, dv fp32 written; d_row fp32 scratch [heads, n].
        deterministic: the kernels without float atomics (gradients repeat bit for bit; slower), else the
        fastest ones (on Hopper dQ is summed by atomics in a varying order)."""
        fn = self._gpu("sr_attn_backward")
        err = ctypes.c_void_p()
        rc = fn(self._h, saved.handle if saved else None, q, k, v, o, lse, do, d_row, dq, dk, dv, int(bool(deterministic)),
                stream or None, ctypes.byref(err))
        _lib.check(self._lib, rc, err)

    def estimate_ptr(self, q, k, stream=0):
        """The online estimate on the GPU from device pointers (bf16 q, k): a VSPattern."""
        fn = self._gpu("sr_attn_estimate")
        vb, sb = self._bit_arrays()
        err = ctypes.c_void_p()
        rc = fn(self._h, q, k, stream or None, _ptr(vb), _ptr(sb), ctypes.byref(err))
        _lib.check(self._lib, rc, err)
        return VSPattern.from_bits(vb, sb, self.n)


class Saved:
    """What one GPU forward of an online pattern keeps for its backward (released with the object)."""

    def __init__(self, lib, handle):
        self._lib, self.handle = lib, handle

    def __del__(self):
        if self.handle:
            self._lib.sr_attn_saved_free(self.handle)
            self.handle = None


def attention_reference(q, k, v, pattern="dense", scale=None, seed=0):
    """Causal sparse attention on the CPU reference kernels for numpy arrays [n, heads, d] (or [b, n, heads, d]):
    returns (o, lse) with lse [heads, n] (or [b, heads, n]). For checks on small shapes."""
    q, k, v = (np.asarray(x, dtype=np.float32) for x in (q, k, v))
    if q.ndim == 4:
        outs = [attention_reference(q[i], k[i], v[i], pattern, scale, seed) for i in range(q.shape[0])]
        return np.stack([o for o, _ in outs]), np.stack([lse for _, lse in outs])
    a = Attention(q.shape[0], q.shape[1], k.shape[1], q.shape[2], pattern, scale, seed)
    try:
        return a.forward_cpu(q, k, v)
    finally:
        a.close()

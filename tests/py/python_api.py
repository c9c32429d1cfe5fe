#!/usr/bin/env python3
"""python_api.py CASE — the Python package (python/sparsering) on the CPU, one case a run, for
tests/test_python_api.c: each case prints "ok CASE" or fails with an assertion naming what differed.
The command line (bin/sparsering, from $SR_BIN) is the reference the package must equal: the same flags
give the same plan file, timeline CSV, what-if CSV and tuner outputs, and the same error messages.

    SR_BIN=bin PYTHONPATH=python python3 tests/py/python_api.py plan_equals_cli
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import sparsering
from sparsering import SparseringError

BIN = os.path.join(os.environ.get("SR_BIN", "bin"), "sparsering")
# A small configuration every case can afford on two shared cores.
SMALL = dict(model="tiny-25m", cluster="h200-1x8", seq="64K")


def cli(*args, ok=True):
    """Run bin/sparsering; returns (exit status, stdout, stderr)."""
    p = subprocess.run([BIN] + [str(a) for a in args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError(f"sparsering {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


def flags(**kw):
    out = []
    for k, v in kw.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def case_plan_equals_cli(tmp):
    kw = dict(SMALL, layout="striped:128", schedule="double-ring", inner=4, pattern="vs-topp:0.95")
    path = os.path.join(tmp, "p.json")
    cli("plan", *flags(**kw), "-o", path)
    p = sparsering.plan(**kw)
    with open(path) as f:
        assert p.json == f.read(), "the plan's JSON differs from `sparsering plan -o`"
    # the derived views: every token on exactly one rank; a double ring of 8 ranks has 8 steps, each of whose
    # forward sends moves one KV shard of a rank's tokens
    assert sum(p.rank_tokens) == 64 * 1024 and len(p.rank_tokens) == 8
    t = p.transfers
    assert sorted(t.step.unique()) == list(range(8 - 1)) or sorted(t.step.unique()) == list(range(8))
    fwd = t[t.direction == "fwd"]
    assert (fwd.src != fwd.dst).all() and set(fwd.link) <= {"intra", "inter"}
    # a saved plan reads back as the same plan, and simulates the same from its file
    saved = os.path.join(tmp, "saved.json")
    p.save(saved)
    assert sparsering.load_plan(saved).json == p.json


def case_simulate_equals_cli(tmp):
    kw = dict(SMALL, strategy="mtraining")
    csv = os.path.join(tmp, "t.csv")
    _, out, _ = cli("sim", *flags(**kw), "--csv", csv)
    report, timeline = sparsering.plan(**kw).simulate()
    with open(csv) as f:
        text = f.read()
    import pandas as pd
    import io
    assert timeline.equals(pd.read_csv(io.StringIO(text))), "the timeline differs from `sim --csv`"
    assert len(timeline) == text.count("\n") - 1
    # the report's figures are the ones the command prints (its table rounds them)
    assert report["strategy"] == "mtraining" and report["feasible"]
    assert f"{report['step_s']:.3f}" in out, (report["step_s"], out)
    assert f"forward {report['attn_fwd_s']:.3f} s, backward {report['attn_bwd_s']:.3f} s" in out
    assert f"= {report['memory']['total'] / 2**30:.2f} of" in out
    # the step's end is the last task's end (an independent reading of the same timeline)
    end = (timeline.start_us + timeline.dur_us).max() * 1e-6
    assert abs(end - report["step_s"]) <= 1e-3 * report["step_s"], (end, report["step_s"])
    # the options of sim: recomputation off costs memory, not time
    r0, _ = sparsering.plan(**kw).simulate(recompute=0, timeline=False)
    assert r0["memory"]["activations"] > report["memory"]["activations"]


def case_whatif_equals_cli(tmp):
    kw = dict(SMALL, strategies="dense-ring,striped-ring,mtraining", pattern="vs-topp:0.95")
    csv = os.path.join(tmp, "w.csv")
    cli("whatif", *flags(**kw), "--csv", csv)
    import pandas as pd
    df = sparsering.whatif(**dict(kw, strategies=["dense-ring", "striped-ring", "mtraining"]))
    assert df.equals(pd.read_csv(csv)), "the what-if table differs from `whatif --csv`"
    assert list(df.strategy) == ["dense-ring", "striped-ring", "mtraining"]


def case_tune_equals_cli(tmp):
    kw = dict(model="tiny-test", cluster="h200-1x2", seq="8K", pattern="vs-topp:0.95", robust_steps=1)
    csv, plan = os.path.join(tmp, "t.csv"), os.path.join(tmp, "best.json")
    _, out, _ = cli("tune", *flags(**kw), "--csv", csv, "-o", plan)
    t = sparsering.tune(**kw)
    import pandas as pd
    assert t.points.equals(pd.read_csv(csv)), "the tuner's points differ from `tune --csv`"
    with open(plan) as f:
        assert t.plan.json == f.read(), "the chosen plan differs from `tune -o`"
    assert t.report in out, "the report is not the one `tune` prints"
    # the chosen plan simulates (from its text) to the step time the tuner predicted for it
    r, _ = t.plan.simulate(timeline=False)
    assert abs(r["step_s"] - t.plan.spec["predicted_step_s"]) <= 1e-9 * r["step_s"]


def expect_error(fn, **kw):
    try:
        fn(**kw)
    except SparseringError as err:
        return err
    raise AssertionError(f"{fn.__name__}({kw}) did not raise")


def case_errors_carry_file_field_and_reason(tmp):
    # a bad flag value: the field is the flag, the message the command line's
    err = expect_error(sparsering.plan, **dict(SMALL, seq="12Q", strategy="mtraining"))
    _, _, stderr = cli("plan", *flags(**dict(SMALL, seq="12Q", strategy="mtraining")), ok=False)
    assert stderr.strip() == f"sparsering plan: {err.message}", (stderr, err.message)
    assert err.code == 2 and err.is_input_error and err.field == "--seq" and err.file == ""
    assert err.message.endswith(err.reason) and "12Q" in err.reason
    # a bad model file: the file and the field inside it, behind the flag that named the file
    bad = os.path.join(tmp, "bad.json")
    with open("models/tiny-test.json") as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace('"num_attention_heads": 4', '"num_attention_heads": -4'))
    err = expect_error(sparsering.plan, model=bad, cluster="h200-1x2", seq="8K", strategy="dense-ring")
    assert err.file == bad and err.field == "num_attention_heads", (err.file, err.field, err.message)
    assert err.message.startswith("--model: " + bad) and err.reason and "num_attention_heads" not in err.reason
    # an unknown keyword is an unknown flag; a missing plan file names the file
    err = expect_error(sparsering.whatif, **dict(SMALL, strategies="nope"))
    assert err.field == "--strategies" or "nope" in err.message, err.message
    missing = os.path.join(tmp, "missing.json")
    err = expect_error(sparsering.load_plan, path=missing)
    assert err.file == missing, (err.file, err.message)
    # an impossible attention shape
    err = expect_error(sparsering.Attention, n=64, heads=3, kv_heads=2, head_dim=16)
    assert err.field == "kv_heads" and err.code == 2


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def case_calls_do_not_leak(tmp):
    small = dict(model="tiny-test", cluster="h200-1x2", seq="4K", strategy="mtraining")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((64, 4, 16)).astype(np.float32) for _ in range(3))
    k, v = k[:, :2], v[:, :2]

    def one_round():
        p = sparsering.plan(**small)
        p.simulate(timeline=False)
        try:
            sparsering.plan(**dict(small, seq="12Q"))
        except SparseringError:
            pass
        a = sparsering.Attention(64, 4, 2, 16, "vs-online:0.9")
        o, lse = a.forward_cpu(q, k, v)
        a.backward_cpu(q, k, v, o, lse, o)
        a.close()

    for _ in range(200):  # warm: allocator pools and caches reach their size
        one_round()
    before = rss_kib()
    for _ in range(1000):
        one_round()
    grown = rss_kib() - before
    # a round makes a plan file's text (2 KiB), a report, an error and an attention index: leaking any of them
    # would grow the process by their size times 1000, a MiB or more
    assert grown < 1024, f"RSS grew by {grown} KiB over 1000 rounds"
    print(f"rss grew {grown} KiB over 1000 rounds")


def reference(q, k, v, keep, scale):
    """Masked softmax attention in float64 with numpy: o [n, h, d], lse [h, n], and its gradients."""
    n, h, d = q.shape
    g = h // k.shape[1]
    kk, vv = np.repeat(k, g, axis=1).astype(np.float64), np.repeat(v, g, axis=1).astype(np.float64)
    s = np.einsum("qhd,khd->hqk", q.astype(np.float64), kk) * scale
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    z = p.sum(axis=2, keepdims=True)
    p /= z
    o = np.einsum("hqk,khd->qhd", p, vv)
    lse = (np.log(z) + m)[:, :, 0]
    return o, lse, p, kk, vv


def case_attention_reference_matches_numpy(tmp):
    n, h, hkv, d = 200, 4, 2, 16
    rng = np.random.default_rng(7)
    q = rng.standard_normal((n, h, d)).astype(np.float32)
    k = rng.standard_normal((n, hkv, d)).astype(np.float32)
    v = rng.standard_normal((n, hkv, d)).astype(np.float32)
    do = rng.standard_normal((n, h, d)).astype(np.float32)
    causal = np.tril(np.ones((n, n), dtype=bool))
    vs = sparsering.VSPattern(vertical=[[0, 5, 130], [1], [], [199]], slash=[[0, 1, 2], [0, 64], [0], [0, 3, 150]])
    cases = [("dense", np.broadcast_to(causal, (h, n, n))),
             ("window:4:16", np.broadcast_to(causal & ((np.arange(n)[None, :] < 4) |
                                                       (np.arange(n)[:, None] - np.arange(n)[None, :] < 16)), (h, n, n))),
             (vs, vs.keeps(n)),
             # MoBA with K = 1 selects its own 128-token block only (the gate runs, but has nothing to choose)
             ("moba:128:1", np.broadcast_to(causal & (np.arange(n)[:, None] // 128 == np.arange(n)[None, :] // 128),
                                            (h, n, n)))]
    scale = d ** -0.5
    for pattern, keep in cases:
        a = sparsering.Attention(n, h, hkv, d, pattern)
        o, lse = a.forward_cpu(q, k, v)
        o_ref, lse_ref, p, kk, vv = reference(q, k, v, keep, scale)
        assert np.abs(o - o_ref).max() < 1e-5 and np.abs(lse - lse_ref).max() < 1e-5, pattern
        dq, dk, dv = a.backward_cpu(q, k, v, o, lse, do)
        # gradients of softmax attention: dP = dO V^T, dS = P (dP - rowsum(dO * O)), dQ = dS K s, dK = dS^T Q s
        dp = np.einsum("qhd,khd->hqk", do.astype(np.float64), vv)
        ds = p * (dp - np.einsum("qhd,qhd->hq", do.astype(np.float64), o_ref)[:, :, None])
        dq_ref = np.einsum("hqk,khd->qhd", ds, kk) * scale
        dk_full = np.einsum("hqk,qhd->khd", ds, q.astype(np.float64)) * scale
        dv_full = np.einsum("hqk,qhd->khd", p, do.astype(np.float64))
        dk_ref = dk_full.reshape(n, hkv, h // hkv, d).sum(axis=2)
        dv_ref = dv_full.reshape(n, hkv, h // hkv, d).sum(axis=2)
        for got, want in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref)):
            assert np.abs(got - want).max() < 1e-4, (pattern, np.abs(got - want).max())
        a.close()
    # explicit indices keep exactly what they say: the info counts the kept pairs
    a = sparsering.Attention(n, h, hkv, d, vs)
    assert a.info["pairs"] == vs.keeps(n).sum()
    # the online estimate: what it selects, run as explicit indices, gives the online forward's output
    a = sparsering.Attention(n, h, hkv, d, "vs-online:0.9")
    est = a.estimate_cpu(q, k)
    o_online, _ = a.forward_cpu(q, k, v)
    o_explicit, _ = sparsering.Attention(n, h, hkv, d, est).forward_cpu(q, k, v)
    assert np.array_equal(o_online, o_explicit)
    # a key every late query attends to strongly is among the estimate's verticals
    k2 = k.copy()
    k2[77] = 4 * q[-64:].mean(axis=0)[:: h // hkv]
    assert all(77 in est2 for est2 in a.estimate_cpu(q, k2).vertical)


def case_cpu_backward_is_deterministic_and_accepts_the_flag(tmp):
    """The CPU reference sums in a fixed order: its gradients repeat bit for bit, and sparse_attention's
    deterministic=True (which picks the GPU's atomic-free backward) is accepted there and changes nothing."""
    n, h, hkv, d = 160, 4, 2, 16
    rng = np.random.default_rng(11)
    q, do = (rng.standard_normal((n, h, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((n, hkv, d)).astype(np.float32) for _ in range(2))
    for pattern in ("dense", "vs-online:0.9"):
        a = sparsering.Attention(n, h, hkv, d, pattern)
        o, lse = a.forward_cpu(q, k, v)
        first, second = a.backward_cpu(q, k, v, o, lse, do), a.backward_cpu(q, k, v, o, lse, do)
        assert all(np.array_equal(x, y) for x, y in zip(first, second)), pattern
        a.close()
    try:
        import torch
        import sparsering.torch as st
    except ImportError as err:
        print("skip sparsering.torch:", err)
        return
    t = [torch.from_numpy(x[None]) for x in (q, k, v, do)]

    def grads(pattern, deterministic):
        qq, kk, vv = (x.clone().requires_grad_() for x in t[:3])
        o = st.sparse_attention(qq, kk, vv, pattern, deterministic=deterministic)
        return [o.detach()] + list(torch.autograd.grad(o, (qq, kk, vv), t[3]))

    for pattern in ("dense", "vs-online:0.9"):
        det, again, default = grads(pattern, True), grads(pattern, True), grads(pattern, False)
        assert all(torch.equal(x, y) for x, y in zip(det, again)), pattern
        assert all(torch.equal(x, y) for x, y in zip(det, default)), pattern
    print("torch present: deterministic=True accepted on CPU tensors")


def case_gpu_calls_need_a_device(tmp):
    from sparsering import _lib
    if not _lib.has_cuda_lib():
        print("skip: libsparsering_cuda.so not built (no nvcc)")
        return
    # a gated pattern selects on the host: the GPU calls refuse it, device or not
    try:
        sparsering.Attention(256, 4, 2, 64, "moba:128:2").forward_ptr(0, 0, 0, 0, 0)
    except SparseringError as err:
        assert "selects its keys from Q and K on the host" in err.message, err.message
    else:
        raise AssertionError("a moba shape ran on the GPU")
    a = sparsering.Attention(256, 4, 2, 64, "dense")
    try:
        a.forward_ptr(0, 0, 0, 0, 0)
    except SparseringError as err:
        if "no CUDA device" not in err.message:
            raise
        print("no CUDA device: refused as expected")
        # the backward's deterministic flag reaches the C call (its signature takes it) before the refusal
        try:
            a.backward_ptr(None, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, deterministic=True)
        except SparseringError as err:
            assert "no CUDA device" in err.message, err.message
        else:
            raise AssertionError("a deterministic backward ran without a device")
    else:
        print("skip: a GPU is present (scripts/gpu/python_check.sh tests it)")
    # sparsering.torch needs torch: without it the import says so
    import importlib
    try:
        importlib.import_module("sparsering.torch")
        print("torch present: sparsering.torch imported")
    except ImportError as err:
        assert "torch" in str(err), err
        print("no torch:", err)


# ---- a model's layers (sparsering.Attention's layer, sparsering.torch's cache, sparsering.hf) ------------------------

LAYERED = dict(n=4096, heads=8, kv_heads=2, head_dim=64, layers=8)  # models/tiny-25m.json's attention, 8 layers


def planner_densities(pattern):
    """The kept share of each layer's causal pairs as the planner draws the pattern of tiny-25m at 4K with the
    trainer's default pattern seed (0; `sparsering pattern`'s own default is 1)."""
    from sparsering import commands
    return list(commands.pattern("tiny-25m", "4K", pattern=pattern, ranks=1, seed=0).density)


def case_attention_layers_are_the_planners_layers(tmp):
    s = LAYERED
    want = planner_densities("vs-topp:0.95")
    got = []
    for layer in range(s["layers"]):
        a = sparsering.Attention(s["n"], s["heads"], s["kv_heads"], s["head_dim"], "vs-topp:0.95", layer=layer,
                                 num_layers=s["layers"])
        assert a.info["layer"] == layer and a.info["num_layers"] == s["layers"], a.info
        assert a.info["density"] <= a.info["computed"] <= 1, a.info  # the kernels compute whole tiles and bars
        got.append(a.info["density"])
        a.close()
    assert all(abs(g - w) <= 1e-6 * w for g, w in zip(got, want)), (got, want)
    assert len({round(g, 6) for g in got}) == s["layers"], got  # vs-topp draws every layer's own density
    # the default is layer 0 of a one-layer model, whose layer 0 is the deep model's layer 0
    a = sparsering.Attention(s["n"], s["heads"], s["kv_heads"], s["head_dim"], "vs-topp:0.95")
    assert (a.info["layer"], a.info["num_layers"]) == (0, 1) and abs(a.info["density"] - want[0]) <= 1e-6 * want[0]
    # a layer outside the model names the field
    for layer, layers, field in ((8, 8, "layer"), (-1, 8, "layer"), (0, 0, "num_layers")):
        err = expect_error(sparsering.Attention, n=256, heads=4, kv_heads=2, head_dim=16, pattern="vs-topp:0.95",
                           layer=layer, num_layers=layers)
        assert err.code == 2 and err.field == field, (layer, layers, err.message)


def torch_stand_ins():
    """Where torch or transformers are missing (the CPU test machine), modules that hold what sparsering.torch and
    sparsering.hf touch at import, so the backend's layer plumbing runs without them (no tensor math is done)."""
    import types
    try:
        import torch  # noqa: F401
    except ImportError:
        t = types.ModuleType("torch")
        t.autograd = types.SimpleNamespace(Function=object)
        t.bfloat16, t.float32 = "bfloat16", "float32"
        sys.modules["torch"] = t
    try:
        import transformers  # noqa: F401
    except ImportError:
        tr = types.ModuleType("transformers")
        tr.AttentionInterface = types.SimpleNamespace(register=lambda name, fn: None)
        sys.modules["transformers"] = tr


class FakeTensor:
    """A [B, H, N, D] activation as transformers hands it to an attention function: a shape and transpose only."""
    is_cuda, dtype = False, "float32"

    def __init__(self, shape):
        self.shape = tuple(shape)

    def transpose(self, a, b):
        s = list(self.shape)
        s[a], s[b] = s[b], s[a]
        return FakeTensor(s)


def case_hf_backend_gives_each_layer_its_pattern(tmp):
    import types
    torch_stand_ins()
    import sparsering.hf as shf
    import sparsering.torch as st
    s = LAYERED
    calls = []

    def record(q, k, v, pattern, **kw):  # sparse_attention's arguments, and the shape it would run
        layer, layers = st._layers(kw["layer"], kw["num_layers"])
        a = st._attention_for(pattern, q.shape[1], q.shape[2], k.shape[2], q.shape[3], kw["scale"], kw["seed"], layer,
                              layers)
        calls.append(dict(kw, attn=a))
        return q

    st.sparse_attention = record  # the backend calls it through the module
    config = types.SimpleNamespace(num_hidden_layers=s["layers"], sparsering_pattern="vs-topp:0.95")
    q = FakeTensor((1, s["heads"], s["n"], s["head_dim"]))
    kv = FakeTensor((1, s["kv_heads"], s["n"], s["head_dim"]))
    st.SHAPES_CACHED = 4  # fewer than the layers: a model's every layer must stay prepared all the same
    for step in range(2):
        for layer in range(s["layers"]):
            out, _ = shf.sparsering_attention(types.SimpleNamespace(layer_idx=layer, config=config), q, kv, kv, None)
            assert out.shape == (1, s["n"], s["heads"], s["head_dim"])
    first, second = calls[:s["layers"]], calls[s["layers"]:]
    assert [(c["layer"], c["num_layers"], c["seed"]) for c in first] == [(i, s["layers"], 0) for i in range(s["layers"])]
    assert all(a["attn"] is b["attn"] for a, b in zip(first, second)), "a layer's shape was prepared again"
    want = planner_densities("vs-topp:0.95")
    got = [c["attn"].info["density"] for c in first]
    assert all(abs(g - w) <= 1e-6 * w for g, w in zip(got, want)), (got, want)
    # the config's seed, and a module without layer_idx (layer 0 of 1)
    config.sparsering_seed = 5
    shf.sparsering_attention(types.SimpleNamespace(layer_idx=3, config=config), q, kv, kv, None)
    assert (calls[-1]["seed"], calls[-1]["layer"]) == (5, 3)
    shf.sparsering_attention(types.SimpleNamespace(config=config), q, kv, kv, None)
    assert (calls[-1]["layer"], calls[-1]["num_layers"]) == (None, None) and calls[-1]["attn"].info["num_layers"] == 1
    # vs-online is estimated from each layer's own q and k: one shape serves every layer
    config.sparsering_pattern = "vs-online:0.9"
    for layer in range(s["layers"]):
        shf.sparsering_attention(types.SimpleNamespace(layer_idx=layer, config=config), q, kv, kv, None)
    assert len({id(c["attn"]) for c in calls[-s["layers"]:]}) == 1 and calls[-1]["attn"].online
    # both or neither of layer and num_layers
    try:
        st._layers(2, None)
    except ValueError:
        pass
    else:
        raise AssertionError("a layer without num_layers was taken")


def case_pip_install_is_self_contained(tmp):
    target = os.path.join(tmp, "site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--target",
                        target, os.path.abspath("python")], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.path.isfile(os.path.join(target, "sparsering", "lib", "libsparsering.so"))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSERING_LIB_DIR", "SR_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = target
    code = ("import sparsering; p = sparsering.plan(model='qwen2.5-3b', cluster='a100-4x8', seq='512K', "
            "strategy='mtraining'); print(sum(p.rank_tokens))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp, env=env)
    assert p.returncode == 0 and p.stdout.strip() == str(512 * 1024), p.stdout + p.stderr


# ---- the other CPU commands (sparsering.commands) ----------------------------------------------------------

TRACE = dict(model="tiny-test", seq="8K")  # 2 layers x 4 heads: a trace small enough for every case


def cli_number(text, label):
    """The exact count `sparsering model` prints in parentheses after a label."""
    import re
    m = re.search(re.escape(label) + r"\s.*\((\d+)\)", text)
    assert m, (label, text)
    return int(m.group(1))


def case_model_equals_cli(tmp):
    from sparsering import commands
    _, out, _ = cli("model", "--model", "qwen2.5-3b")
    m = commands.model("qwen2.5-3b", seq="32K", world=2)
    assert m["params"] == cli_number(out, "total") and m["layer_params"] == cli_number(out, "per layer")
    assert m["embedding_params"] == cli_number(out, "embedding") == m["vocab_size"] * m["hidden_size"]
    assert (m["layers"], m["heads"], m["kv_heads"], m["head_dim"]) == (36, 16, 2, 128), m
    # one sequence's attention FLOPs per layer: 4 FLOPs a (query, key) pair per head dim and query head
    n = 32 * 1024
    assert m["sequence"]["attn_flops_per_layer"] == 4 * n * (n + 1) // 2 * 128 * 16
    assert m["sequence"]["kv_bytes_per_layer"] == 2 * n * 2 * 128 * 2  # K and V, 2 KV heads, bf16
    assert m["sequence"]["exec_local_tokens"] == n // 2 and "sequence" not in commands.model("qwen2.5-3b")


def case_cluster_equals_cli(tmp):
    import json
    from sparsering import commands
    _, out, _ = cli("cluster", "--cluster", "a100-4x8", "--json")
    c = commands.cluster("a100-4x8")
    assert c == json.loads(out), "the cluster differs from `cluster --json`"
    assert c["nodes"] * c["gpus_per_node"] == 32


def case_compare_gives_relative_errors(tmp):
    import pandas as pd
    from sparsering import commands
    csv = os.path.join(tmp, "sim.csv")
    cli("sim", *flags(**SMALL, strategy="mtraining"), "--csv", csv)
    r = commands.compare(csv, csv)
    assert r["phases"] and all(p["rel_err"] == 0 for p in r["phases"]) and r["phase_max_abs"] == 0
    # a "measurement" that takes twice as long everywhere: every predicted time is half the measured one
    slow = os.path.join(tmp, "slow.csv")
    t = pd.read_csv(csv)
    t.assign(start_us=2 * t.start_us, dur_us=2 * t.dur_us).to_csv(slow, index=False)
    r = commands.compare(csv, slow)
    assert all(abs(p["rel_err"] + 0.5) < 1e-6 for p in r["phases"] + r["steps"] + [r["total"]]), r
    assert abs(r["step_max_abs"] - 0.5) < 1e-6 and len(r["steps"]) > 0


def mib(text):
    """Bytes of `show`'s human figure ("32.00 MiB", "0 B")."""
    value, unit = text.split()
    return float(value) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


def case_show_step_bytes_equal_cli(tmp):
    import re
    from sparsering import commands
    path = os.path.join(tmp, "p.json")
    cli("plan", "--model", "tiny-25m", "--cluster", "a100-4x8", "--seq", "64K", "--strategy", "mtraining", "-o", path)
    _, out, _ = cli("show", path, "--brief")
    got = commands.show(path).set_index(["step", "direction", "link"]).bytes
    lines = re.findall(r"step (\d+): fwd intra (.+?) inter (.+?) \| bwd intra (.+?) inter (.+)", out)
    assert len(lines) == len(got) // 4 == 32, (len(lines), len(got))
    for step, *figs in lines:
        for (d, link), fig in zip([("fwd", "intra"), ("fwd", "inter"), ("bwd", "intra"), ("bwd", "inter")], figs):
            want = mib(fig)
            assert abs(got[(int(step), d, link)] - want) <= 0.01 * max(want, 1), (step, d, link, fig)
    assert got.xs("inter", level="link").sum() > 0, "four nodes: some sends cross nodes"


def case_pattern_dense_keeps_every_causal_pair(tmp):
    from sparsering import commands
    t = commands.pattern("tiny-25m", "16K", pattern="dense", ranks=4)
    n = 16 * 1024
    assert len(t) == commands.model("tiny-25m")["layers"]
    assert (t.density == 1).all() and (t.kept_pairs == n * (n + 1) // 2 * commands.model("tiny-25m")["heads"]).all()
    # a window keeps less, and striped:128 spreads it evenly over 4 ranks
    w = commands.pattern("tiny-25m", "16K", pattern="window:64:256", ranks=4)
    assert (w.density < 0.1).all() and (w.worker_imbalance < 1.05).all(), w


def case_trace_gen_then_stats_round_trip(tmp):
    from sparsering import commands
    path = commands.trace_gen(pattern="vs-topp:0.9", out=os.path.join(tmp, "t.safetensors"), steps=2, seed=3,
                              **TRACE)
    st = commands.trace_stats(path)
    assert len(st) == 2 * 2 * 4 and set(st.step) == {0, 1} and (st.kind == "vs").all(), st
    # the recorded pattern, read back as the trace:PATH source, has the per-layer density the stats give
    per_layer = st[st.step == 0].groupby("layer").density.mean()
    tab = commands.pattern(pattern=f"trace:{path}", ranks=2, **TRACE)
    assert all(abs(a - b) < 1e-6 for a, b in zip(per_layer, tab.density)), (list(per_layer), list(tab.density))
    assert st[st.step == 1].jaccard_prev.notna().all()  # the second step is compared with the first


def case_trace_import_minference_gives_the_config_heads(tmp):
    from sparsering import commands
    path = commands.trace_import_minference("traces/samples/minference-tiny-test.json", "8K",
                                            os.path.join(tmp, "m.safetensors"), model="tiny-test")
    st = commands.trace_stats(path)
    m = commands.model("tiny-test")
    assert len(st) == m["layers"] * m["heads"] and (st.density > 0).all() and (st.density <= 1).all()


def case_trace_fit_compares_recorded_with_fitted(tmp):
    from sparsering import commands
    path = commands.trace_gen(pattern="vs-topp:0.9", out=os.path.join(tmp, "t.safetensors"), **TRACE)
    fit = commands.trace_fit(path, ranks=[2, 4])
    density = fit[fit.figure == "density"].iloc[0]
    assert abs(density.recorded - 100 * commands.trace_stats(path).density.mean()) < 1e-4, density
    imb = fit[fit.figure == "worker imbalance"]
    assert set(imb.ranks) == {2, 4} and len(imb) == 2 * 5  # 4 layouts and the whole-tile bound at 2 rank counts
    bound = imb[imb.layout == "tile-bound"]
    assert all(b.recorded <= r.recorded * (1 + 1e-9) for b in bound.itertuples()
               for r in imb[(imb.layout == "balanced") & (imb.ranks == b.ranks)].itertuples())
    assert all(abs(r.rel_diff - (r.fitted - r.recorded) / r.recorded) < 1e-6 for r in imb.itertuples())


def case_replay_steps_are_simulated_steps(tmp):
    from sparsering import commands
    path = commands.trace_gen(pattern="vs-topp:0.9", out=os.path.join(tmp, "t.safetensors"), steps=2, **TRACE)
    r = commands.replay(path, cluster="h200-1x2", strategy="mtraining", no_estimate=True)
    assert list(r.step) == [0, 1] and all(abs(x.tokens_per_s * x.step_s - 8192) < 1e-3 for x in r.itertuples())
    # step 0 with no estimation cost is the plan whose pattern is the trace's step 0, simulated
    report, _ = sparsering.plan(cluster="h200-1x2", strategy="mtraining", pattern=f"trace:{path}",
                                **TRACE).simulate(timeline=False)
    assert abs(r.step_s[0] - report["step_s"]) <= 1e-6 * report["step_s"], (r.step_s[0], report["step_s"])


def case_sweep_rows_are_whatif_rows(tmp):
    from sparsering import commands
    grid = {"models": ["tiny-25m"], "clusters": ["h200-1x8"], "seq": ["64K"], "strategies": ["dense-ring", "mtraining"],
            "patterns": ["vs-topp:0.95"]}
    s = commands.sweep(grid)  # a sweep simulates representative layers by default, as whatif --representative
    w = sparsering.whatif(strategies=["dense-ring", "mtraining"], pattern="vs-topp:0.95", representative=True, **SMALL)
    assert list(s.point) == [0, 1] and list(s.strategy) == list(w.strategy)
    assert all(abs(a - b) <= 1e-6 * b for a, b in zip(s.step_s, w.step_s)), (list(s.step_s), list(w.step_s))


def case_predict_spans_its_timeline(tmp):
    from sparsering import commands
    p = commands.predict(model="tiny-test", cluster="h200-1x2", seq="8K", strategy="dense-ring")
    t = p.timeline
    assert p.fwd_ms > 0 and p.bwd_ms > 0 and set(t.run) == {"sim"} and set(t.layer) == {0}
    # the backward is placed right after the forward: together they span the timeline
    span_ms = ((t.start_us + t.dur_us).max() - t.start_us.min()) / 1e3
    assert abs(p.fwd_ms + p.bwd_ms - span_ms) <= 2e-3 + 1e-3 * span_ms, (p, span_ms)


def case_repredict_errors_are_its_predictions(tmp):
    from sparsering import commands
    t = commands.repredict(root="results/exec/2026-11-22-h200x2-exec-run-wgmma-forward")
    assert len(t) > 0 and (t.world == 2).all()
    err = (t.pred_fwd_ms - t.fwd_ms) / t.fwd_ms
    assert (abs(err - t.err_fwd) < 1e-3).all(), t


def case_command_errors_name_the_flag(tmp):
    from sparsering import commands
    # through the binary: the command line's message, its exit status 2 as an input error naming the flag
    err = expect_error(commands.pattern, model="tiny-25m", seq="12Q")
    _, _, stderr = cli("pattern", "--model", "tiny-25m", "--seq", "12Q", ok=False)
    assert stderr.strip() == f"sparsering pattern: {err.message}", (stderr, err.message)
    assert err.code == 2 and err.field == "--seq" and "12Q" in err.reason
    err = expect_error(commands.predict, model="tiny-test", cluster="h200-1x2", seq="8K", strategy="mtraining",
                       pattern="vs-online:0.95")
    assert err.code == 2 and err.field == "--trace", err.message
    missing = os.path.join(tmp, "missing.safetensors")
    err = expect_error(commands.trace_stats, trace=missing)
    assert err.code == 2 and err.file == missing, (err.file, err.message)
    # through the library: the flag named as in sparsering.plan
    err = expect_error(commands.model, model="qwen2.5-3b", seq="12Q")
    assert err.code == 2 and err.field == "--seq"
    err = expect_error(commands.cluster, cluster="nope")
    assert err.code == 2 and err.message.startswith("--cluster: nope")
    err = expect_error(commands.compare, sim_csv=missing, exec_csv=missing)
    assert err.code == 2 and err.file == missing


def mpi_env():
    """The environment the tests give mpirun (Open MPI refuses root without it)."""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def case_attn_job_runs_every_combination_on_the_clusters_ranks(tmp):
    import sparsering
    a = sparsering.attn(model="tiny-test", cluster="h200-1x2", seq=700, layout="zigzag", schedule="ring",
                        pattern="dense,vs-like:4:16:8", check=True)
    r = a.runs
    # one row a combination, on the cluster's 2 GPUs as 2 ranks, each within the CPU backend's check tolerance
    assert list(r.pattern) == ["dense", "vs-like:4:16:8"] and (r.layout == "zigzag").all(), r
    assert (r.ranks == 2).all() and (r.check_worst <= 1e-4).all() and (r.fwd_ms > 0).all(), r
    assert set(a.timeline["rank"]) == {0, 1} and set(a.timeline.run) == {0, 1}, a.timeline


def case_train_job_logs_the_cli_losses(tmp):
    import sparsering
    steps = sparsering.train(model="tiny-test", cluster="h200-1x2", seq=256, steps=3, strategy="dense-ring")
    csv = os.path.join(tmp, "cli.csv")
    exec_bin = os.path.join(os.environ.get("SR_BIN", "bin"), "sparsering-exec")
    subprocess.run(["mpirun", "--oversubscribe", "-np", "2", exec_bin, "train",
                    "--model", "tiny-test", "--cluster", "h200-1x2", "--seq", "256", "--steps", "3", "--strategy",
                    "dense-ring", "--csv", csv], check=True, capture_output=True, env=mpi_env())
    import pandas as pd
    cli_steps = pd.read_csv(csv)
    assert list(steps.step) == [1, 2, 3] and list(steps.loss) == list(cli_steps.loss), (steps, cli_steps)


def case_calibrate_job_writes_a_cluster_with_measured_links(tmp):
    import sparsering
    out = os.path.join(tmp, "measured.json")
    c = sparsering.calibrate(out, cluster="h200-1x2", backend="cpu", reps=2)
    with open(out) as f:
        written = json.load(f)
    # the links measured over MPI replace the description's (h200-1x2 says 450 GB/s inside a node)
    assert c["intra_node"]["gbps"] == written["intra_node"]["gbps"] and 0 < c["intra_node"]["gbps"] < 450, c
    assert "calibration" in written and c["nodes"] == 1 and c["gpus_per_node"] == 2


def case_executor_job_errors_name_the_flag(tmp):
    import sparsering
    err = expect_error(sparsering.attn, model="tiny-test", cluster="h200-1x2", seq=700, layout="nonsense",
                       schedule="ring")
    assert err.code == 2 and err.field == "--layout" and "nonsense" in err.reason, err.message
    err = expect_error(sparsering.train, model="tiny-test", cluster="h200-1x2", seq="12Q", steps=2,
                       strategy="dense-ring")
    assert err.code == 2 and err.field == "--seq" and "12Q" in err.reason, err.message


def main():
    name = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        globals()["case_" + name](tmp)
    print("ok", name)


if __name__ == "__main__":
    main()

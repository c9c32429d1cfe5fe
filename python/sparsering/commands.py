"""The other CPU commands of bin/sparsering and bin/sparsering-exec from Python: model, cluster, compare (through
the C library, api/api_tools.c), show (from the plan file the library reads), and pattern, replay, sweep, trace
gen / stats / fit / import-minference, predict and repredict (a thin subprocess wrapper around the binaries,
sparsering/_cli.py: those commands build their tables themselves; the binaries are found through $SR_BIN, the
checkout's bin/ or the PATH). Keyword arguments are the command's flags (underscores for dashes; True for a
switch; None or False leaves a flag out); tables come back as pandas DataFrames (the rows of the command's --csv);
failures raise SparseringError with the command's message and, for bad input (exit status 2), the flag it names.

The executor's commands run as MPI jobs: attn, train and calibrate take `ranks` (the processes, one a GPU with
backend="cuda"; by default the cluster's GPU count, which a plan's world must equal) and launch
`mpirun -np ranks sparsering-exec ...` (Open MPI on the PATH; one process without a launcher). Only
`train-gpu-check` and the benchmarks (`bench-*`) stay on the command line.
"""
import ctypes
import json
import os
import re
import tempfile
from collections import namedtuple

from . import _cli, _lib
from .errors import SparseringError
from .planner import _flags, load_plan


def _call_json(fn_name, *args):
    """Call an API function of string arguments and one JSON result; returns it parsed."""
    lib = _lib.load()
    fn = getattr(lib, fn_name)
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    c_args = [None if a is None else str(a).encode() for a in args]
    rc = fn(*c_args, ctypes.byref(out), ctypes.byref(err))
    text = _lib.take_string(lib, out.value)
    _lib.check(lib, rc, err)
    return json.loads(text)


# ---- through the library ------------------------------------------------------------------------------


def model(model, seq=None, world=1):
    """A model's derived quantities (`sparsering model`), as a dict: layers, heads, kv_heads, head_dim, params,
    layer_params, embedding_params, layer_gemm_flops_per_token, lm_head_flops_per_token, attn_flops_per_pair,
    model_state_bytes, kv_bytes_per_token_layer, ...; with seq ("32K") also "sequence": one sequence's attention
    and GEMM FLOPs per layer, K+V and activation bytes, and the executor trainer's memory per GPU on world GPUs."""
    lib = _lib.load()
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    rc = lib.sr_api_model(str(model).encode(), None if seq is None else str(seq).encode(), int(world),
                          ctypes.byref(out), ctypes.byref(err))
    text = _lib.take_string(lib, out.value)
    _lib.check(lib, rc, err)
    return json.loads(text)


def cluster(cluster):
    """A cluster description as the planner reads it (`sparsering cluster --json`: every default explicit), a dict."""
    return _call_json("sr_api_cluster", cluster)


def compare(sim_csv, exec_csv, run_sim=None, run_exec=None):
    """A predicted timeline CSV (sim --csv, predict) against a measured one (attn --timeline): `sparsering compare`
    as a dict: phases and steps (lists of {name, predicted_us, measured_us, rel_err}), total, phase_mean_abs,
    phase_max_abs, step_mean_abs, step_max_abs (relative errors, (predicted - measured) / measured)."""
    return _call_json("sr_api_compare", sim_csv, exec_csv, run_sim, run_exec)


def show(path):
    """What `sparsering show --brief` prints of a plan file per ring step: a DataFrame step, direction (fwd /
    bwd), link (intra / inter), bytes summed over ranks (one layer). The plan itself: load_plan(path)."""
    return load_plan(path).step_bytes


# ---- through the binaries -----------------------------------------------------------------------------


def pattern(model, seq, pattern=None, layout=None, ranks=None, granularity=None, seed=None, step=None,
            fwd_runs=False):
    """A pattern's per-layer density and imbalance on a layout (`sparsering pattern --csv`), a DataFrame: layer,
    density, kept_pairs, work, worker_imbalance, step_imbalance_mean, step_imbalance_worst, tiles and bars."""
    flags = _flags(model=model, seq=seq, pattern=pattern, layout=layout, ranks=ranks, granularity=granularity,
                   seed=seed, step=step, fwd_runs=fwd_runs)
    return _cli.frame(_cli.run_csv("sparsering", "pattern", flags)[1])


def replay(trace, cluster, strategy, model=None, no_estimate=False, layout=None, rebalance_every=None,
           rebalance_above=None):
    """Simulate every recorded step of a trace (`sparsering replay --csv`), a DataFrame: step, step_s,
    tokens_per_s, worker_imbalance, step_imbalance, exposed_comm_s, density, reshard_s."""
    flags = _flags(cluster=cluster, strategy=strategy, model=model, no_estimate=no_estimate, layout=layout,
                   rebalance_every=rebalance_every, rebalance_above=rebalance_above)
    return _cli.frame(_cli.run_csv("sparsering", "replay", [trace] + flags)[1])


def sweep(grid):
    """Simulate a grid (`sparsering sweep`, one process), a DataFrame of one row per point. grid: a sweep file's
    path, or its content as a dict ({"models": [...], "clusters": [...], "seq": [...], "strategies": [...], ...})."""
    with tempfile.TemporaryDirectory() as d:
        if isinstance(grid, dict):
            path = os.path.join(d, "sweep.json")
            with open(path, "w") as f:
                json.dump(grid, f)
            grid = path
        return _cli.frame(_cli.run_csv("sparsering", "sweep", [grid], flag="--out")[1])


def trace_gen(model, seq, pattern, out, steps=None, seed=None):
    """Write a trace from a pattern generator (`sparsering trace gen`); returns out."""
    _cli.run("sparsering", ["trace", "gen"], _flags(model=model, seq=seq, pattern=pattern, out=out, steps=steps,
                                                    seed=seed))
    return out


def trace_import_minference(config, seq, out, model=None, steps=None, seed=None):
    """A trace from an MInference/MTraining head config (`sparsering trace import-minference`); returns out."""
    _cli.run("sparsering", ["trace", "import-minference"], [config] + _flags(seq=seq, out=out, model=model,
                                                                             steps=steps, seed=seed))
    return out


def trace_stats(trace):
    """What a trace holds (`sparsering trace stats --csv`), a DataFrame of one row per step, layer and head:
    kind, kept_pairs, density, n_vertical, n_slash, n_blocks, jaccard_prev (drift from the step before)."""
    return _cli.frame(_cli.run_csv("sparsering", ["trace", "stats"], [trace])[1])


def trace_fit(trace, ranks=None, step=None, seed=None):
    """Fit the generator to a trace (vs-fit:PATH) and compare (`sparsering trace fit --csv`), a DataFrame: figure,
    layout, ranks, recorded, fitted, rel_diff (layout "tile-bound": the lower bound over every layout of whole
    tiles, not a layout). ranks: a list or "8,32,64"."""
    flags = _flags(ranks=ranks, step=step, seed=seed)
    return _cli.frame(_cli.run_csv("sparsering", ["trace", "fit"], [trace] + flags)[1])


Prediction = namedtuple("Prediction", ["fwd_ms", "bwd_ms", "timeline"])
Prediction.__doc__ = """The simulator's prediction of one layer's attention: fwd_ms, bwd_ms (milliseconds, as
`sparsering-exec predict` prints them: 3 decimals) and timeline (DataFrame, the rows of predict --csv)."""


def predict(model=None, cluster=None, seq=None, strategy=None, layout=None, granularity=None, schedule=None,
            inner=None, ulysses=None, pattern=None, seed=None, plan=None, trace=None, layer=None, step=None,
            skip_empty_sends=False, fwd_runs=False):
    """One layer's distributed attention as the simulator predicts it (`sparsering-exec predict`, no MPI or GPU
    needed), for the plan flags or a plan file (plan=PATH) and, for vs-online, a recorded trace: a Prediction."""
    flags = _flags(model=model, cluster=cluster, seq=seq, strategy=strategy, layout=layout, granularity=granularity,
                   schedule=schedule, inner=inner, ulysses=ulysses, pattern=pattern, seed=seed, plan=plan,
                   trace=trace, layer=layer, step=step, skip_empty_sends=skip_empty_sends, fwd_runs=fwd_runs)
    out, csv = _cli.run_csv("sparsering-exec", "predict", flags)
    m = re.search(r"fwd ([0-9.]+) ms bwd ([0-9.]+) ms", out)
    if not m:
        raise SparseringError(f"sparsering-exec predict printed no prediction: {out!r}")
    return Prediction(float(m.group(1)), float(m.group(2)), _cli.frame(csv))


def repredict(root=None):
    """Every kept GPU run under root (default results/) predicted again (`sparsering-exec repredict --csv`), a
    DataFrame of the layers' table: run, world, seq, layout, schedule, pattern, measured and predicted fwd_ms,
    bwd_ms, and the relative errors err_fwd, err_bwd, err_layer."""
    return _cli.frame(_cli.run_csv("sparsering-exec", "repredict", _flags(root=root))[1])


# ---- the executor: MPI jobs ---------------------------------------------------------------------------


def _world(cluster, ranks):
    """The processes of a job: ranks when given, else the cluster's GPUs (nodes x gpus_per_node)."""
    if ranks is not None:
        return int(ranks)
    c = _call_json("sr_api_cluster", cluster)
    return int(c["nodes"]) * int(c["gpus_per_node"])


_ATTN_LINE = re.compile(r"^attn (?P<layout>\S+) \| (?P<schedule>\S+) \| (?P<pattern>\S+): (?P<ranks>\d+) ranks, .*?"
                        r"fwd (?P<fwd_ms>[0-9.]+) ms bwd (?P<bwd_ms>[0-9.]+) ms per layer; sent (?P<sent_bytes>\d+) B"
                        r"(?:.*?check worst (?P<check_worst>[0-9.e+-]+))?", re.M)

Attn = namedtuple("Attn", ["runs", "timeline"])
Attn.__doc__ = """One `sparsering-exec attn` job: runs (DataFrame, a row per layout x schedule x pattern combination:
layout, schedule, pattern, ranks, fwd_ms, bwd_ms per layer, sent_bytes, check_worst: the largest relative error
against dense attention with check=True, else NaN) and timeline (DataFrame, the measured timeline: attn --csv)."""


def attn(model, cluster, seq, ranks=None, **flags):
    """Distributed attention forward + backward for a plan (`sparsering-exec attn`), as an MPI job of `ranks`
    processes (default: the cluster's GPUs). flags: the command's flags (strategy="mtraining", layout="zigzag",
    schedule="ring", pattern="vs-topp:0.95", backend="cuda", check=True, repeat=2, ...; its --help lists them).
    Returns an Attn; a failed check raises SparseringError."""
    import pandas as pd

    args = _flags(model=model, cluster=cluster, seq=seq, **flags)
    out, csv = _cli.run_csv("sparsering-exec", "attn", args, ranks=_world(cluster, ranks))
    rows = []
    for m in _ATTN_LINE.finditer(out):
        r = m.groupdict()
        rows.append({"layout": r["layout"], "schedule": r["schedule"], "pattern": r["pattern"], "ranks": int(r["ranks"]),
                     "fwd_ms": float(r["fwd_ms"]), "bwd_ms": float(r["bwd_ms"]), "sent_bytes": int(r["sent_bytes"]),
                     "check_worst": float(r["check_worst"]) if r["check_worst"] else float("nan")})
    if not rows:
        raise SparseringError(f"sparsering-exec attn printed no run line: {out[-2000:]!r}")
    return Attn(pd.DataFrame(rows), _cli.frame(csv))


def train(model, cluster, seq, ranks=None, **flags):
    """Train under a plan (`sparsering-exec train`), as an MPI job of `ranks` processes (default: the cluster's GPUs).
    flags: the command's flags (steps=20, strategy=..., pattern=..., backend="cuda", data="corpus", lr=3e-4,
    ckpt="DIR", ...). Returns the per-step log (train --csv) as a DataFrame: run, step, loss, grad_norm, lr,
    tokens_per_s, mfu, density, attn_s, gemm_s, comm_s, step_s, plan_wait_s."""
    args = _flags(model=model, cluster=cluster, seq=seq, **flags)
    return _cli.frame(_cli.run_csv("sparsering-exec", "train", args, ranks=_world(cluster, ranks))[1])


def calibrate(out, cluster="h200-1x2", ranks=None, **flags):
    """Measure links and kernels and write a cluster file (`sparsering-exec calibrate --out OUT`), as an MPI job of
    `ranks` processes (default: the cluster's GPUs). flags: backend ("cuda", or "cpu": links over MPI only), reps,
    heads, kv_heads, head_dim, log="FILE.csv", refit="CSV". Returns the written cluster as a dict (what
    cluster(out) reads back, every default explicit)."""
    args = _flags(out=out, cluster=cluster, **flags)
    _cli.run_ranks("sparsering-exec", "calibrate", args, _world(cluster, ranks))
    return _call_json("sr_api_cluster", out)

"""The planner, the simulator, the what-if study and the tuner (the commands plan, sim, whatif and tune of
bin/sparsering) from Python. Every function takes the command's flags as keyword arguments (underscores for
dashes: robust_top= is --robust-top; True for a switch; None or False leaves a flag out), so a call means
what the command line means and fails with the same message, raised as SparseringError.
"""
import ctypes
import io
import json
import os
from collections import namedtuple

from . import _lib


def _flags(**kw):
    """Keyword arguments as command-line flags, in the order given."""
    out = []
    for key, value in kw.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def _csv_frame(text):
    import pandas as pd

    return pd.read_csv(io.StringIO(text))


Simulation = namedtuple("Simulation", ["report", "timeline"])
Simulation.__doc__ = """One simulated training step: report (dict: the figures of `sparsering sim`, seconds and
bytes, memory under "memory") and timeline (pandas DataFrame: the rows of `sparsering sim --csv`)."""


class Plan:
    """A plan: model, cluster, sequence, token layout and ring schedule (what `sparsering plan` writes).

    json: the plan file's text; data: it parsed; spec: what was asked; rank_tokens: tokens each rank
    holds; transfers: a DataFrame of every send of every ring step (forward and backward).
    """

    def __init__(self, text, flags=None, path=None):
        self.json = text
        self.data = json.loads(text)
        self._flags = flags
        self._path = path

    def __repr__(self):
        s = self.spec
        return (f"Plan({s['model']} on {s['cluster']}, {s['seq']} tokens, layout {s['layout']}, "
                f"schedule {s['schedule']}, pattern {s['pattern']})")

    @property
    def spec(self):
        """The plan's spec (dict): model, cluster, seq, layout, schedule, pattern, strategy, ..."""
        return self.data["spec"]

    @property
    def world(self):
        """Ranks the sequence is spread over."""
        return self.data["layout"]["world"]

    @property
    def rank_tokens(self):
        """Tokens each rank holds (list, by rank)."""
        return list(self.data["layout"]["rank_tokens"])

    @property
    def kv_sources(self):
        """DataFrame step, rank, kv_src: whose KV shard each rank works on in each ring step."""
        import pandas as pd

        rows = [(st["step"], r, src) for st in self.data["schedule"]["steps"] for r, src in enumerate(st["kv_src"])]
        return pd.DataFrame(rows, columns=["step", "rank", "kv_src"])

    @property
    def transfers(self):
        """DataFrame of the sends of every ring step: step, direction (fwd / bwd), src, dst, shard,
        grad_shard (-1: none), bytes, grad_bytes, link (intra / inter), level (docs/plan.md)."""
        import pandas as pd

        rows = []
        for st in self.data["schedule"]["steps"]:
            for t in st["fwd"]:  # [from, to, shard, bytes, link, level]
                rows.append((st["step"], "fwd", t[0], t[1], t[2], -1, t[3], 0, t[4], t[5]))
            for t in st["bwd"]:  # [from, to, shard, grad_shard, bytes, grad_bytes, link, level]
                rows.append((st["step"], "bwd", t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]))
        cols = ["step", "direction", "src", "dst", "shard", "grad_shard", "bytes", "grad_bytes", "link", "level"]
        return pd.DataFrame(rows, columns=cols)

    @property
    def step_bytes(self):
        """DataFrame step, direction (fwd / bwd), link (intra / inter), bytes: what a ring step sends over each
        link class, summed over ranks (one layer; a backward send's bytes hold its dK+dV), as `sparsering show
        --brief` prints."""
        t = self.transfers
        rows = []
        for step in [st["step"] for st in self.data["schedule"]["steps"]]:
            for direction in ("fwd", "bwd"):
                for link in ("intra", "inter"):
                    sel = t[(t.step == step) & (t.direction == direction) & (t.link == link)]
                    rows.append((step, direction, link, int(sel.bytes.sum())))
        import pandas as pd

        return pd.DataFrame(rows, columns=["step", "direction", "link", "bytes"])

    def save(self, path):
        """Write the plan file (the same bytes `sparsering plan -o` writes); returns path."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self.json)
        os.replace(tmp, path)
        self._path = self._path or os.path.abspath(path)
        return path

    def simulate(self, recompute=None, zero=None, trainer=None, representative=False, timeline=True):
        """Simulate one training step of the plan (`sparsering sim`): a Simulation (report, timeline).
        recompute, zero (0/1), trainer ("mixed"/"exec") as sim's flags; they apply to a plan made from flags
        (a plan read from a file carries its own). timeline=False skips recording the timeline (None)."""
        step = _flags(recompute=recompute, zero=zero, trainer=trainer, representative=representative)
        if self._flags is not None:
            return _simulate(self._flags + step, timeline)
        if self._path is not None:
            return _simulate(["--plan", self._path] + step, timeline)
        import tempfile  # a plan held only as text (the tuner's): simulated from a file of it

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            with open(path, "w") as f:
                f.write(self.json)
            return _simulate(["--plan", path] + step, timeline)


def _simulate(flags, want_timeline):
    lib = _lib.load()
    argc, arr = _lib.argv("sim", flags)
    report, tl, err = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    rc = lib.sr_api_sim(argc, arr, ctypes.byref(report), ctypes.byref(tl) if want_timeline else None,
                        ctypes.byref(err))
    report_text, tl_text = _lib.take_string(lib, report.value), _lib.take_string(lib, tl.value)
    _lib.check(lib, rc, err)
    return Simulation(json.loads(report_text), _csv_frame(tl_text) if want_timeline else None)


def plan(model, cluster, seq, layout=None, schedule=None, pattern=None, strategy=None, granularity=None,
         inner=None, ulysses=None, seed=None):
    """Build a plan (`sparsering plan`): model and cluster as a shipped name or a path, seq as 524288 or
    "512K"; a strategy ("mtraining", "dense-ring", ...) or a layout ("striped:128", "zigzag", ...) and a
    schedule ("ring", "double-ring", "ulysses", "usp"); pattern as docs/patterns.md. Returns a Plan."""
    flags = _flags(model=model, cluster=cluster, seq=seq, strategy=strategy, layout=layout, granularity=granularity,
                   schedule=schedule, inner=inner, ulysses=ulysses, pattern=pattern, seed=seed)
    (text,) = _lib.call_strings("sr_api_plan", "plan", flags, 1)
    return Plan(text, flags=flags)


def load_plan(path):
    """Read and check a plan file (as `sparsering show` does): a Plan."""
    lib = _lib.load()
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    rc = lib.sr_api_plan_read(str(path).encode(), ctypes.byref(out), ctypes.byref(err))
    text = _lib.take_string(lib, out.value)
    _lib.check(lib, rc, err)
    return Plan(text, path=os.path.abspath(path))


def whatif(model=None, cluster=None, seq=None, pattern=None, seed=None, strategies=None, recompute=None, zero=None,
           trainer=None, representative=False):
    """The strategies side by side (`sparsering whatif`), as a DataFrame (the rows of `whatif --csv`).
    strategies: a list or "a,b,c" (default: all); the other flags default as the command's."""
    flags = _flags(model=model, cluster=cluster, seq=seq, pattern=pattern, seed=seed, strategies=strategies,
                   recompute=recompute, zero=zero, trainer=trainer, representative=representative)
    (text,) = _lib.call_strings("sr_api_whatif", "whatif", flags, 1)
    return _csv_frame(text)


class Tuning:
    """A tuner's search: points (DataFrame, the rows of `tune --csv`, one a point of the space), report (the
    text `sparsering tune` prints) and plan (the chosen Plan, with its predicted step time; None when no
    point fits in memory)."""

    def __init__(self, points, report, plan):
        self.points, self.report, self.plan = points, report, plan

    def __repr__(self):
        return f"Tuning({len(self.points)} points, chosen {self.plan!r})"


def tune(model, cluster, seq, pattern=None, trace=None, seed=None, trainer=None, top=None, robust_top=None,
         robust_steps=None, margin=None, batch=None, no_prune=False, representative=False):
    """Search the strategy space in the simulator (`sparsering tune`, in this one process): a Tuning."""
    flags = _flags(model=model, cluster=cluster, seq=seq, pattern=pattern, trace=trace, seed=seed, trainer=trainer,
                   top=top, robust_top=robust_top, robust_steps=robust_steps, margin=margin, batch=batch,
                   no_prune=no_prune, representative=representative)
    csv, report, plan_text = _lib.call_strings("sr_api_tune", "tune", flags, 3)
    return Tuning(_csv_frame(csv), report, Plan(plan_text) if plan_text else None)

#!/usr/bin/env python3
"""studies.py — run the standard what-if studies with the simulator and write their CSVs into
notebooks-data/, each with a JSON sidecar (NAME.csv.json) giving the exact commands, the inputs
(with their SHA-256 and, for generated files, their content) and the git version. `make studies`
runs it; docs/studies.md says what each study asks.

    python3 scripts/studies.py [--bin bin/sparsering] [--out notebooks-data] [--jobs 2] [STUDY ...]

Studies (default: all of them):
    strategies  strategies side by side at 128K-4M tokens on the shipped multi-node clusters
    seqlen      step time and peak memory vs sequence length per strategy
    imbalance   worker and step imbalance per layout vs sparsity (+ rank x ring-step heat maps)
    bandwidth   inter-node bandwidth what-if (100/200/400/800 Gb/s per GPU): MTraining vs USP vs dense ring
    timeline    one simulated step, task by task (CSV for the Gantt figure, SVG for browsers)
    replay      trace replay over recorded steps (traces/samples/), when `sparsering replay` exists
    measured    simulated vs measured attention time per layer, from the executor's logs (results/exec/)
    gated       MTraining, MoBA and token top-k side by side at 512K-4M, worker and step imbalance per layout

Standard library only: the notebooks need pandas and matplotlib, the studies do not.
"""
import argparse
import csv
import datetime
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSION = None  # the git version when the run started, before any output rewrote a tracked file

# ---- helpers ---------------------------------------------------------------------------------


def rel(path):
    """Path relative to the repository root when inside it (sidecars stay machine-independent)."""
    p = os.path.abspath(path)
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else p


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_version():
    def git(*args):
        r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "describe": git("describe", "--always", "--dirty"),
            "branch": git("rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(status) if status is not None else None}


def data_file(kind, name):
    """The shipped model or cluster file a name resolves to (None for a path or an unknown name)."""
    if os.path.exists(name):
        return name
    p = os.path.join(ROOT, "models", "clusters" if kind == "cluster" else "", name + ".json")
    return p if os.path.exists(p) else None


class Study:
    """One study's record: the commands it ran and the inputs they read, written as the sidecar."""

    def __init__(self, name, question, out_dir):
        self.name, self.question, self.out_dir = name, question, out_dir
        self.commands, self.inputs, self.outputs, self.notes = [], {}, [], []
        self.t0 = time.time()

    def add_input(self, path, content=None, generated=False):
        entry = {"sha256": sha256(path)}
        if content is not None:
            entry["content"] = content
        if generated:
            entry["generated"] = True
        self.inputs[rel(path)] = entry

    def add_grid_inputs(self, grid):
        for m in grid.get("models", []):
            p = data_file("model", m)
            if p:
                self.add_input(p)
        for c in grid.get("clusters", []):
            p = data_file("cluster", c)
            if p and not p.startswith(tempfile.gettempdir()):
                self.add_input(p)

    def run(self, argv, env=None):
        """Run a command from the repository root; record it; fail loudly with its output."""
        line = " ".join(shlex.quote(a) for a in argv)
        print(f"studies[{self.name}]: {line}", flush=True)
        t = time.time()
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env)
        self.commands.append({"argv": line, "wall_s": round(time.time() - t, 3)})
        if r.returncode != 0:
            sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
            raise SystemExit(f"studies[{self.name}]: command failed with status {r.returncode}: {line}")
        return r.stdout

    def output(self, path):
        self.outputs.append(path)

    def write_sidecars(self):
        for path in self.outputs:
            with open(path, newline="") as f:
                rows = max(0, sum(1 for _ in csv.reader(f)) - 1)
            meta = {"study": self.name, "question": self.question, "csv": os.path.basename(path), "rows": rows,
                    "commands": self.commands, "inputs": self.inputs, "notes": self.notes,
                    "version": VERSION,
                    "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "wall_s": round(time.time() - self.t0, 3)}
            tmp = path + ".json.tmp"
            with open(tmp, "w") as f:
                json.dump(meta, f, indent=2, sort_keys=False)
                f.write("\n")
            os.replace(tmp, path + ".json")
            print(f"studies[{self.name}]: wrote {rel(path)} ({rows} rows) and its sidecar", flush=True)


def sweep_argv(args, sweep_path, out_csv):
    """`sparsering sweep` (under mpirun -np JOBS when there is more than one job)."""
    argv = [args.bin, "sweep", rel(sweep_path), "-o", rel(out_csv)]
    if args.jobs > 1 and shutil.which("mpirun"):
        argv = ["mpirun", "--oversubscribe", "-np", str(args.jobs)] + argv
    return argv


def mpi_env():
    # Open MPI refuses to start as root without these (containers run as root).
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def run_sweep(study, args, grid_name):
    """Run the sweep file notebooks-data/sweeps/GRID.json into notebooks-data/GRID.csv."""
    sweep = os.path.join(args.out, "sweeps", grid_name + ".json")
    with open(sweep) as f:
        grid = json.load(f)
    study.add_input(sweep)
    study.add_grid_inputs(grid)
    out_csv = os.path.join(args.out, study.name + ".csv")
    study.run(sweep_argv(args, sweep, out_csv), env=mpi_env())
    study.output(out_csv)
    return out_csv


# ---- the studies -----------------------------------------------------------------------------


def study_strategies(args):
    s = Study("strategies", "Which strategy trains fastest at 128K-4M tokens on each shipped multi-node cluster, "
              "and which fit in memory?", args.out)
    run_sweep(s, args, "strategies")
    return s


def study_seqlen(args):
    s = Study("seqlen", "How do step time and peak memory per GPU grow with sequence length for each strategy?",
              args.out)
    run_sweep(s, args, "seqlen")
    return s


# Layouts of the imbalance study, each as the strategy that runs it with the same flat ring and pattern
# (the simulator's strategy table, docs/sim.md): contiguous, zigzag and striped G=128.
IMBALANCE_HEAT = [("contiguous", ["--layout", "contiguous"]), ("zigzag", ["--layout", "zigzag"]),
                  ("striped:128", ["--layout", "striped:128"])]


def study_imbalance(args):
    s = Study("imbalance", "How evenly do the layouts spread sparse attention work over ranks (worker imbalance) "
              "and over ring steps (step imbalance) as sparsity grows?", args.out)
    run_sweep(s, args, "imbalance")
    # Heat maps: attention forward time per (rank, ring step), summed over layers, from one step's timeline.
    with open(os.path.join(args.out, "sweeps", "imbalance_heat.json")) as f:
        heat = json.load(f)
    s.add_input(os.path.join(args.out, "sweeps", "imbalance_heat.json"))
    s.add_grid_inputs({"models": [heat["model"]], "clusters": [heat["cluster"]]})
    rows = []
    with tempfile.TemporaryDirectory(prefix="sparsering-studies-") as tmp:
        for layout, flags in IMBALANCE_HEAT:
            tl = os.path.join(tmp, "timeline.csv")
            s.run([args.bin, "sim", "--model", heat["model"], "--cluster", heat["cluster"], "--seq", heat["seq"],
                   "--schedule", "ring", "--pattern", heat["pattern"], "--seed", str(heat.get("seed", 0)), *flags,
                   "--csv", tl])
            sums = {}
            with open(tl, newline="") as f:
                for r in csv.DictReader(f):
                    if r["phase"] == "attn":
                        key = (int(r["rank"]), int(r["step"]))
                        sums[key] = sums.get(key, 0.0) + float(r["dur_us"])
            rows += [(layout, heat["pattern"], rank, step, round(us, 3)) for (rank, step), us in sorted(sums.items())]
    s.notes.append("imbalance_heat.csv: per layout, the 'attn' (forward attention) tasks of each command's timeline "
                   "CSV summed over layers per (rank, ring step); the timelines themselves are not kept.")
    out = os.path.join(args.out, "imbalance_heat.csv")
    with open(out + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["layout", "pattern", "rank", "step", "attn_us"])
        w.writerows(rows)
    os.replace(out + ".tmp", out)
    s.output(out)
    return s


def study_bandwidth(args):
    s = Study("bandwidth", "How much does inter-node bandwidth (100/200/400/800 Gb/s per GPU) matter to MTraining, "
              "USP and dense ring attention?", args.out)
    with open(os.path.join(args.out, "sweeps", "bandwidth.json")) as f:
        spec = json.load(f)
    s.add_input(os.path.join(args.out, "sweeps", "bandwidth.json"))
    with tempfile.TemporaryDirectory(prefix="sparsering-bandwidth-") as tmp:
        clusters = []
        for base in spec["base_clusters"]:
            src = data_file("cluster", base)
            s.add_input(src)
            with open(src) as f:
                c = json.load(f)
            for gbit in spec["gbit_per_gpu"]:
                # One NIC per GPU at gbit Gb/s: nic_gbps is in GB/s (bytes), so divide bits by 8.
                d = json.loads(json.dumps(c))
                d["inter_node"]["nics_per_node"] = d["gpus_per_node"]
                d["inter_node"]["nic_gbps"] = gbit / 8
                d["description"] = f"{base} with one {gbit} Gb/s NIC per GPU (what-if)"
                path = os.path.join(tmp, f"{base}-nic{gbit}g.json")
                with open(path, "w") as f:
                    json.dump(d, f, indent=2)
                clusters.append(path)
        grid = {k: v for k, v in spec.items() if k not in ("base_clusters", "gbit_per_gpu")}
        grid["clusters"] = clusters
        sweep = os.path.join(tmp, "bandwidth-sweep.json")
        with open(sweep, "w") as f:
            json.dump(grid, f, indent=2)
        s.add_input(sweep, content=grid, generated=True)
        for p in clusters:
            with open(p) as f:
                s.add_input(p, content=json.load(f), generated=True)
        s.add_grid_inputs({"models": grid["models"]})
        out_csv = os.path.join(args.out, "bandwidth.csv")
        s.run(sweep_argv(args, sweep, out_csv), env=mpi_env())
        s.output(out_csv)
    s.notes.append("cluster column: the generated cluster file (a temporary path); its name ends in -nicNNNg.json "
                   "with NNN the Gb/s per GPU. Contents are in inputs.")
    return s


def study_timeline(args):
    s = Study("timeline", "Where does the time of one training step go, rank by rank: compute, intra-node and "
              "inter-node transfers?", args.out)
    with open(os.path.join(args.out, "sweeps", "timeline.json")) as f:
        spec = json.load(f)
    s.add_input(os.path.join(args.out, "sweeps", "timeline.json"))
    s.add_grid_inputs({"models": [spec["model"]], "clusters": [spec["cluster"]]})
    out_csv, out_svg = os.path.join(args.out, "timeline.csv"), os.path.join(args.out, "timeline.svg")
    argv = [args.bin, "sim", "--strategy", spec["strategy"], "--model", spec["model"], "--cluster", spec["cluster"],
            "--seq", spec["seq"], "--csv", rel(out_csv), "--svg", rel(out_svg)]
    if spec.get("pattern"):
        argv += ["--pattern", spec["pattern"]]
    s.run(argv)
    s.output(out_csv)
    return s


def study_replay(args):
    s = Study("replay", "How do step time and imbalance vary over the recorded steps of a trace, per cluster and "
              "strategy?", args.out)
    helptext = subprocess.run([args.bin, "help"], capture_output=True, text=True).stdout
    if "replay" not in helptext:
        print("studies[replay]: skipped: this build has no `sparsering replay` (traces area not merged yet)")
        return None
    with open(os.path.join(args.out, "sweeps", "replay.json")) as f:
        spec = json.load(f)
    s.add_input(os.path.join(args.out, "sweeps", "replay.json"))
    trace = os.path.join(ROOT, spec["trace"])
    s.add_input(trace)
    s.add_grid_inputs({"clusters": spec["clusters"]})
    header, rows = None, []
    with tempfile.TemporaryDirectory(prefix="sparsering-replay-") as tmp:
        for cluster in spec["clusters"]:
            for strategy in spec["strategies"]:
                part = os.path.join(tmp, "replay.csv")
                s.run([args.bin, "replay", rel(trace), "--cluster", cluster, "--strategy", strategy, "--csv", part])
                with open(part, newline="") as f:
                    r = list(csv.reader(f))
                header = header or r[0]
                rows += [[os.path.basename(trace), cluster, strategy] + x for x in r[1:]]
    s.notes.append("replay.csv: the rows of each command's --csv, in command order, after the columns "
                   "trace,cluster,strategy naming the command.")
    out = os.path.join(args.out, "replay.csv")
    with open(out + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trace", "cluster", "strategy"] + header)
        w.writerows(rows)
    os.replace(out + ".tmp", out)
    s.output(out)
    return s


# A line of `sparsering-exec attn` output (results/exec/*/*.log): one layer's measured attention wall time.
EXEC_LINE = re.compile(r"^attn (\S+) \| (\S+) \| (\S+): (\d+) ranks, (\S+), seq (\d+), 1 layer\(s\): "
                       r"fwd ([\d.]+) ms bwd ([\d.]+) ms")


def attention_spans(timeline_csv, layer=0):
    """Forward and backward attention wall time of one layer (s) from a simulated step's timeline: from the
    first to the last attention or KV/dK/dV transfer task of the layer, forward before the loss (the
    recomputed forward in the backward pass is left out), backward from its first attn_bwd task."""
    rows = []
    loss = None
    with open(timeline_csv, newline="") as f:
        for r in csv.DictReader(f):
            start, end = float(r["start_us"]), float(r["start_us"]) + float(r["dur_us"])
            if r["phase"] == "loss":
                loss = start if loss is None else min(loss, start)
            if int(r["layer"]) == layer:
                rows.append((r["phase"], start, end))
    fwd = [(a, b) for p, a, b in rows if p in ("attn", "kv_send") and loss is not None and a < loss]
    bwd0 = min(a for p, a, b in rows if p == "attn_bwd")
    bwd = [(a, b) for p, a, b in rows if p in ("attn_bwd", "dkv_send", "kv_send") and a >= bwd0]
    span = lambda v: (max(b for a, b in v) - min(a for a, b in v)) / 1e6
    return span(fwd), span(bwd)


def study_validation(args):
    s = Study("measured", "How close is the simulator to the executor's measured attention time per layer?",
              args.out)
    with open(os.path.join(args.out, "sweeps", "measured.json")) as f:
        spec = json.load(f)
    s.add_input(os.path.join(args.out, "sweeps", "measured.json"))
    s.add_grid_inputs({"clusters": [spec["cluster"]]})
    runs = []
    for path in sorted(glob.glob(os.path.join(ROOT, spec["results"], "*.log"))):
        with open(path) as f:
            for line in f:
                m = EXEC_LINE.match(line.strip())
                if m:
                    runs.append((path, m.groups()))
                    s.add_input(path)
    if not runs:
        print(f"studies[measured]: skipped: no executor results under {spec['results']}")
        return None
    rows = []
    with tempfile.TemporaryDirectory(prefix="sparsering-measured-") as tmp:
        for path, (layout, schedule, pattern, ranks, model, seq, fwd_ms, bwd_ms) in runs:
            tl = os.path.join(tmp, "timeline.csv")
            s.run([args.bin, "sim", "--model", model, "--cluster", spec["cluster"], "--seq", seq, "--layout", layout,
                   "--schedule", schedule, "--pattern", pattern, "--csv", tl])
            sim_f, sim_b = attention_spans(tl)
            name = f"{layout} {schedule} {pattern} {int(seq) >> 10}K"
            rows.append([name + " fwd", "fwd", os.path.basename(path), model, seq, round(sim_f, 6), round(float(fwd_ms) / 1e3, 6)])
            rows.append([name + " bwd", "bwd", os.path.basename(path), model, seq, round(sim_b, 6), round(float(bwd_ms) / 1e3, 6)])
    s.notes.append("measured_s: one layer's forward or backward attention wall time printed by `sparsering-exec "
                   "attn` (the log named in run); simulated_s: the same span of layer 0 in the simulated step's "
                   "timeline (first to last attention / transfer task of that layer), on the shipped, uncalibrated "
                   f"{spec['cluster']} cluster file.")
    out = os.path.join(args.out, "measured.csv")
    with open(out + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "pass", "run", "model", "seq", "simulated_s", "measured_s"])
        w.writerows(rows)
    os.replace(out + ".tmp", out)
    s.output(out)
    return s


def study_gated(args):
    s = Study("gated", "How do MTraining's vertical-slash patterns, MoBA's block gating and DeepSeek-style token "
              "top-k compare at 512K-4M tokens on the shipped clusters, gate or indexer included, and how evenly "
              "does each layout spread their work over ranks and ring steps?", args.out)
    run_sweep(s, args, "gated")
    s.notes.append("Layouts run as strategies with the same pattern: naive-sparse = contiguous (flat ring), "
                   "mtraining-zigzag = zigzag (flat ring), mtraining = striped G=128 (double ring). moba:4096:12 "
                   "draws the stand-in's 128-row unions at the fitted rho 4.1 (results/gating/"
                   "2026-11-27-cpu-moba-standin-fit), moba:4096:12:1 at rho 1 (a group's rows choose alike); "
                   "token-topk:2048 with DeepSeek-V3.2's indexer (64 heads of 128, FP8).")
    return s


STUDIES = {"strategies": study_strategies, "seqlen": study_seqlen, "imbalance": study_imbalance,
           "bandwidth": study_bandwidth, "timeline": study_timeline, "replay": study_replay,
           "measured": study_validation, "gated": study_gated}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "sparsering"), help="the sparsering binary")
    ap.add_argument("--out", default=os.path.join(ROOT, "notebooks-data"), help="where the CSVs go")
    ap.add_argument("--jobs", type=int, default=2, help="processes for `sparsering sweep` (mpirun -np)")
    ap.add_argument("studies", nargs="*", help="studies to run (default: all)")
    args = ap.parse_args()
    args.bin = rel(args.bin) if os.path.isabs(args.bin) else args.bin
    for name in args.studies:
        if name not in STUDIES:
            raise SystemExit(f"studies: unknown study '{name}' (known: {', '.join(STUDIES)})")
    global VERSION
    VERSION = git_version()
    t0 = time.time()
    for name in args.studies or list(STUDIES):
        s = STUDIES[name](args)
        if s:
            s.write_sidecars()
    print(f"studies: done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()

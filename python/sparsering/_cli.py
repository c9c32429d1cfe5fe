"""Running bin/sparsering and bin/sparsering-exec for the commands whose outputs are made in the command itself
(cli/, exec/) rather than in the library: a thin subprocess wrapper. Where the binaries are, first found wins:
  1. $SR_BIN (a folder; when set, the only place looked at), as the tests set it;
  2. the repository's bin/, two folders above this package (running from a checkout);
  3. the PATH.
A failure raises SparseringError with the binary's message (what follows "sparsering CMD: " on stderr); exit
status 2 is bad input (code 2, field the flag the message starts with, as "--seq"), any other is code 1.
"""
import io
import os
import re
import shutil
import subprocess
import tempfile

from ._lib import _REPO
from .errors import SparseringError


def bin_dirs():
    """The folders searched for the binaries, in order (None: the PATH)."""
    env = os.environ.get("SR_BIN")
    if env:
        return [env]
    return [os.path.join(_REPO, "bin"), None]


def find(name):
    """Path of the binary `name` ("sparsering", "sparsering-exec"), or raise SparseringError."""
    for d in bin_dirs():
        path = os.path.join(d, name) if d else shutil.which(name)
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    where = ", ".join(d or "the PATH" for d in bin_dirs())
    raise SparseringError(f"{name}: not found in {where} (build it with `make`, or set SR_BIN)", code=1, file=name,
                          field="", reason="not found")


def _error(prog, rc, stderr):
    """The SparseringError of a failed run: the last line naming the program, without the program."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    message = next((ln[len(prog) + 2:] for ln in reversed(lines) if ln.startswith(prog + ": ")),
                   lines[-1] if lines else f"exit status {rc}")
    if rc != 2:
        return SparseringError(message, code=1, reason=message)
    m = re.match(r"(--[a-z0-9-]+): (.*)", message, re.S)
    if m:
        return SparseringError(message, code=2, field=m.group(1), reason=m.group(2))
    m = re.match(r"([^:]+): ([^\s:]+): (.*)", message, re.S)  # "FILE: field: reason"
    if m:
        return SparseringError(message, code=2, file=m.group(1), field=m.group(2), reason=m.group(3))
    m = re.match(r"([^:\s]+): (.*)", message, re.S)  # "FILE: reason"
    if m:
        return SparseringError(message, code=2, file=m.group(1), reason=m.group(2))
    return SparseringError(message, code=2, reason=message)


def run(binary, command, args):
    """Run `binary command args...` (command: one word or a list, as ["trace", "stats"]); returns its stdout."""
    words = command if isinstance(command, list) else [command]
    p = subprocess.run([find(binary)] + words + [str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        raise _error(" ".join([binary] + words), p.returncode, p.stderr)
    return p.stdout


def run_ranks(binary, command, args, ranks):
    """Run `binary command args...` as `ranks` MPI processes: through mpirun (Open MPI, from the PATH) when ranks > 1,
    as one process otherwise. As root, Open MPI's launcher wants OMPI_ALLOW_RUN_AS_ROOT; it is set for the child
    only when this process is root. Returns its stdout (rank 0's lines and the others', as mpirun merges them)."""
    if int(ranks) <= 1:
        return run(binary, command, args)
    launcher = shutil.which("mpirun")
    if not launcher:
        raise SparseringError(f"{binary}: {ranks} ranks need Open MPI's mpirun on the PATH (openmpi-bin)", code=2,
                              field="ranks", reason="mpirun not found")
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    words = command if isinstance(command, list) else [command]
    cmd = [launcher, "--oversubscribe", "-np", str(int(ranks)), find(binary)] + words + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise _error(" ".join([binary] + words), p.returncode, p.stderr + p.stdout)
    return p.stdout


def run_csv(binary, command, args, flag="--csv", ranks=1):
    """Run a command that writes a CSV with `flag` FILE; returns (stdout, the CSV's text)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.csv")
        out = run_ranks(binary, command, list(args) + [flag, path], ranks)
        if not os.path.exists(path):
            words = command if isinstance(command, list) else [command]
            raise SparseringError(f"{' '.join([binary] + words)} wrote no {flag} file: {out[-500:]!r}")
        with open(path) as f:
            return out, f.read()


def frame(text):
    """A CSV's text as a pandas DataFrame."""
    import pandas as pd

    return pd.read_csv(io.StringIO(text))

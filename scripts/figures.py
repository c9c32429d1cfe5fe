#!/usr/bin/env python3
"""figures.py — execute the notebooks of notebooks-data/ headless (nbclient, one Python 3 kernel per
notebook, all in this one process) and report the PNG files each one wrote. `make figures` runs it.

    python3 scripts/figures.py [--dir notebooks-data] [--out DIR] [NOTEBOOK.ipynb ...]

The notebooks read only the CSVs beside them and write their PNGs to $SR_FIGURES_DIR (default: their
own folder); --out sets it, so tests can draw into a scratch folder. Exits 1 naming the notebook and
the failing cell when a notebook raises, 2 when pandas, matplotlib or nbclient are missing (run
scripts/install-deps.sh). The notebooks themselves are not rewritten: outputs stay out of git.
"""
import argparse
import glob
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(ROOT, "notebooks-data"), help="folder of the notebooks and CSVs")
    ap.add_argument("--out", default=None, help="folder for the PNG files (default: --dir)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a cell may run")
    ap.add_argument("notebooks", nargs="*", help="notebooks to run (default: every *.ipynb in --dir)")
    args = ap.parse_args()
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
        import matplotlib  # noqa: F401  (the kernels import them; fail here with a clear message)
        import pandas  # noqa: F401
    except ImportError as err:
        print(f"figures: {err.name} is missing: run scripts/install-deps.sh (pip install pandas matplotlib "
              "nbclient nbformat ipykernel)", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or args.dir)
    os.makedirs(out, exist_ok=True)
    # The kernels inherit this environment: headless matplotlib and where the figures go.
    os.environ["SR_FIGURES_DIR"] = out
    os.environ["MPLBACKEND"] = "Agg"
    paths = [os.path.join(args.dir, n) if not os.path.exists(n) else n for n in args.notebooks]
    paths = paths or sorted(glob.glob(os.path.join(args.dir, "*.ipynb")))
    if not paths:
        print(f"figures: no notebooks in {args.dir}", file=sys.stderr)
        return 1
    failed = 0
    # One kernel for all the notebooks (starting a kernel and importing pandas and matplotlib costs
    # seconds each time); each notebook starts from an empty namespace in its own folder, through a
    # reset cell run before its first cell, so no notebook can lean on another's variables.
    km = kc = None
    for i, path in enumerate(paths):
        before = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(out, "*.png"))}
        t0 = time.time()
        nb = nbformat.read(path, as_version=4)
        folder = os.path.dirname(os.path.abspath(path))
        reset = nbformat.v4.new_code_cell('get_ipython().run_line_magic("reset", "-f")\n'
                                          f'import os; os.chdir({folder!r}); del os\n'
                                          'import matplotlib.pyplot; matplotlib.pyplot.close("all")')
        nb.cells.insert(0, reset)
        client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3", km=km,
                                resources={"metadata": {"path": folder}})
        client.kc = kc
        try:
            client.execute(cleanup_kc=i == len(paths) - 1)  # the last notebook shuts the kernel down
        except CellExecutionError as err:
            failed += 1
            print(f"figures: {os.path.basename(path)}: FAILED\n{err}", file=sys.stderr, flush=True)
            continue
        finally:
            km, kc = client.km, client.kc
        wrote = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*.png"))
                       if before.get(p) != os.path.getmtime(p))
        print(f"figures: {os.path.basename(path)}: ok in {time.time() - t0:.1f} s, wrote "
              f"{', '.join(wrote) if wrote else 'nothing'}", flush=True)
    print(f"figures: {len(paths) - failed} of {len(paths)} notebooks ran, {failed} failed; PNGs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

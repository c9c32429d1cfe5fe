"""sparsering from Python: the planner, the simulator and the tuner (ctypes over libsparsering.so), the other
CPU commands (sparsering.commands: model, cluster, compare, show, pattern, replay, sweep, trace_*, predict,
repredict), the sparse attention kernels as a PyTorch autograd function (sparsering.torch) and a Hugging Face
attention backend (sparsering.hf). Functions take the command line's flags as keyword arguments; failures raise
SparseringError with the C library's file, field and reason.

    import sparsering
    p = sparsering.plan(model="qwen2.5-3b", cluster="a100-4x8", seq="512K", strategy="mtraining")
    report, timeline = p.simulate()
    table = sparsering.whatif(model="qwen2.5-3b", cluster="h200-1x8", seq="256K")
    sparsering.model("qwen2.5-3b")["params"]

The commands that need MPI or a GPU (sparsering-exec attn, train, calibrate) stay on the command line.
"""
from ._lib import version
from .attention import Attention, VSPattern, attention_reference
from .commands import (Prediction, cluster, compare, model, pattern, predict, replay, repredict, show, sweep,
                       trace_fit, trace_gen, trace_import_minference, trace_stats)
from .errors import SparseringError
from .planner import Plan, Simulation, Tuning, load_plan, plan, tune, whatif

__all__ = ["Attention", "Plan", "Prediction", "Simulation", "SparseringError", "Tuning", "VSPattern",
           "attention_reference", "cluster", "compare", "load_plan", "model", "pattern", "plan", "predict", "replay",
           "repredict", "show", "sweep", "trace_fit", "trace_gen", "trace_import_minference", "trace_stats", "tune",
           "version", "whatif"]
__version__ = "0.1.0"

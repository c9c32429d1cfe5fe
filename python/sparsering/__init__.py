"""sparsering from Python: the planner, the simulator and the tuner (ctypes over libsparsering.so), the other
CPU commands (sparsering.commands: model, cluster, compare, show, pattern, replay, sweep, trace_*, predict,
repredict), the executor's MPI jobs (attn, train, calibrate: mpirun -np ranks sparsering-exec), the sparse attention kernels as a PyTorch autograd function (sparsering.torch) and a Hugging Face
attention backend (sparsering.hf). Functions take the command line's flags as keyword arguments; failures raise
SparseringError with the C library's file, field and reason.

    import sparsering
    p = sparsering.plan(model="qwen2.5-3b", cluster="a100-4x8", seq="512K", strategy="mtraining")
    report, timeline = p.simulate()
    table = sparsering.whatif(model="qwen2.5-3b", cluster="h200-1x8", seq="256K")
    sparsering.model("qwen2.5-3b")["params"]

    steps = sparsering.train(model="tiny-test", cluster="h200-1x2", seq=2048, steps=4,
                            strategy="dense-ring")  # 2 ranks, CPU backend
    sparsering.attn(model="qwen2.5-3b", cluster="h200-1x2", seq="128K", strategy="mtraining", backend="cuda").runs
"""
from ._lib import version
from .attention import Attention, VSPattern, attention_reference
from .commands import (Attn, Prediction, attn, calibrate, cluster, compare, model, pattern, predict, replay, repredict,
                       show, sweep, trace_fit, trace_gen, trace_import_minference, trace_stats, train)
from .errors import SparseringError
from .planner import Plan, Simulation, Tuning, load_plan, plan, tune, whatif

__all__ = ["Attention", "Attn", "Plan", "Prediction", "Simulation", "SparseringError", "Tuning", "VSPattern",
           "attention_reference", "attn", "calibrate", "cluster", "compare", "load_plan", "model", "pattern", "plan",
           "predict", "replay", "repredict", "show", "sweep", "trace_fit", "trace_gen", "trace_import_minference",
           "trace_stats", "train", "tune", "version", "whatif"]
__version__ = "0.1.0"

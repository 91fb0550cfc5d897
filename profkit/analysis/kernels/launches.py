"""How a trace's kernels were launched: one by one, or inside CUDA graphs, and whether
torch.compile made them.  What launch advice must know so that it never recommends what
the trace shows is done already (a CUDA graph where kernels run inside graphs, torch.compile
where Inductor made the kernels).

``launch_profile(trace, window)`` counts, over the kernels that start inside ``window``
(the steady state, where given):

- ``in_graphs``: kernels launched by a graph launch (``cudaGraphLaunch``: a node-level
  trace, nsys ``graphNodeId`` set, or torch.profiler), and ``graph_replays``: graph launches
  whose kernels were not recorded (graph level: rows of the ``graphs`` table);
- ``one_by_one``: the other kernels, each its own launch call; ``short_one_by_one``: those
  that ran under ``short_ns`` (the launch cost, a few µs, is then comparable to the work);
- ``compiled``: torch.compile's traces in the trace: Inductor's kernel names (``triton_``
  ``poi``/``red``/``per``/``tem``...), or the ranges and operators it records around a compiled
  graph's call (``CompiledFxGraph``, ``Torch-Compiled Region``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profkit.analysis.kernels.graphs import LAUNCH_CALLS, _call_rows
from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.model import Trace

# Inductor names its Triton kernels triton_<kind>_fused_... (poi: pointwise, red: reduction,
# per: persistent reduction, tem: template, for: foreach)
INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|tem|for|fused)_")
COMPILED_MARKERS = ("CompiledFxGraph", "Torch-Compiled Region", "CompiledFunction")


def launch_profile(trace: Trace, window: tuple[int, int] | None = None, short_ns: int = 10_000) -> dict[str, Any]:
    """The counts of the module docstring, over kernels starting in ``[window)`` (all where None)."""
    out = {"kernels": 0, "in_graphs": 0, "one_by_one": 0, "short_one_by_one": 0, "graph_replays": 0,
           "compiled": torch_compiled(trace)}
    if trace.has("graphs") and trace.count("graphs"):
        start = trace.array("graphs", "start")
        out["graph_replays"] = int(_inside(start, window).sum())
    if not (trace.has("kernels") and trace.count("kernels")):
        return out
    start, end = trace.array("kernels", "start"), trace.array("kernels", "end")
    inside = _inside(start, window)
    graph_call = np.zeros(len(trace.array("api", "start")) if trace.has("api") else 0, dtype=bool)
    graph_call[_call_rows(trace, LAUNCH_CALLS)] = True
    call = launch_calls(trace, "kernels").call if len(graph_call) else np.full(len(start), -1)
    in_graph = (call >= 0) & graph_call[np.maximum(call, 0)] if len(graph_call) else np.zeros(len(start), bool)
    alone = inside & ~in_graph
    out.update(kernels=int(inside.sum()), in_graphs=int((inside & in_graph).sum()), one_by_one=int(alone.sum()),
               short_one_by_one=int((alone & ((end - start) < short_ns)).sum()))
    return out


def torch_compiled(trace: Trace) -> bool:
    """Whether torch.compile made kernels of this trace (see the module docstring)."""
    if trace.has("kernels") and trace.count("kernels"):
        if any(INDUCTOR_KERNEL.match(name or "") for name in trace.codes("kernels", "short_name").categories):
            return True
    for table in ("ranges", "cpu_ops"):
        if trace.has(table) and trace.count(table):
            if any(marker in (name or "") for name in trace.codes(table, "name").categories
                   for marker in COMPILED_MARKERS):
                return True
    return False


def _inside(start: np.ndarray, window: tuple[int, int] | None) -> np.ndarray:
    if window is None:
        return np.ones(len(start), dtype=bool)
    return (start >= window[0]) & (start < window[1])

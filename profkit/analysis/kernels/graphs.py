"""CUDA graphs: what was replayed, how much of the GPU's time it holds, and what it saved the host.

A trace records graphs at one of two levels:

- **graph level** (nsys's default ``--cuda-graph-trace=graph``): each replay is
  one row of the ``graphs`` table, the graph's whole execution on its stream,
  and the kernels inside it are not recorded;
- **node level** (nsys ``--cuda-graph-trace=node``, torch.profiler): every
  kernel (and copy, and memset) of every replay is recorded, launched by the
  replay's ``cudaGraphLaunch`` (same correlation id).

``cuda_graphs(trace)`` reads either into one plain summary.  Definitions:

- a **replay** is one ``cudaGraphLaunch``: a ``graphs`` row (graph level), or
  the GPU operations that launch's correlation id names (node level);
- a **graph** is what was replayed: nsys's ``graphId`` at graph level; at node
  level the replays whose kernels have the same graph node ids (nsys
  ``graphNodeId``: a graph captured again gets new node ids, so each capture is
  a graph of its own even where it runs the same kernels), else (Kineto records
  no node ids) the replays that ran the same sequence of kernel names, in order;
- **GPU time** is the sum of the operations' durations (replays at graph level;
  the operations inside replays at node level), as the kernel summary sums
  kernel time; ``in_graphs_pct`` is the share of all GPU work's time that ran
  inside graphs;
- **per step**: over the steady-state steps of ``steps.find_steps``; a replay
  belongs to the step its GPU start falls in;
- **host cost**: the CPU time of the ``cudaGraphLaunch`` calls, against the
  launches a replay replaced: its kernels times the median CPU time of one
  kernel launch call (``cudaLaunchKernel``, ``cuLaunchKernel`` ...) of the same
  trace (node level only: a graph-level trace does not say how many kernels a
  replay ran);
- **set-up**: the CPU time of the calls that capture and instantiate graphs
  (``cudaStreamBeginCapture``/``EndCapture``, ``cudaGraphInstantiate``,
  ``cudaGraphUpload``), and how much of it came before the first steady-state
  step (start-up and warm-up, where it belongs) rather than inside it;
- **captures** and **instantiations**: the calls that begin a stream capture
  (``cudaStreamBeginCapture``) and that instantiate a graph
  (``cudaGraphInstantiate*``), in all and inside the steady state.  A program that
  captures its graph again on every call (HF ``generate()`` with a static cache)
  replays one kernel sequence from several instantiated graphs: "1 graph replayed
  188 times" hides that; the counts say it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profkit.analysis.timeline.launch_calls import launch_calls
from profkit.model import Trace, schema

GRAPH_LEVEL = "graph"
NODE_LEVEL = "node"

LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
SETUP_CALL_PREFIXES = ("cudaStreamBeginCapture", "cudaStreamEndCapture", "cuStreamBeginCapture",
                       "cuStreamEndCapture", "cudaGraphInstantiate", "cuGraphInstantiate", "cudaGraphUpload",
                       "cuGraphUpload", "cudaGraphExecUpdate", "cuGraphExecUpdate")
CAPTURE_CALLS = ("cudaStreamBeginCapture", "cuStreamBeginCapture", "cudaStreamBeginCaptureToGraph",
                 "cuStreamBeginCaptureToGraph")
INSTANTIATE_CALL_PREFIXES = ("cudaGraphInstantiate", "cuGraphInstantiate")
KERNEL_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                       "cudaLaunchCooperativeKernel")
NODE_TRACE_HINT = ("kernels inside CUDA graphs were not recorded one by one (nsys --cuda-graph-trace=graph, "
                   "its default and profkit trace's, the cheaper): capture with `nsys profile "
                   "--cuda-graph-trace=node` (profkit trace --full) to see each kernel of each replay")


# nsys keeps a version suffix cuda_api_sum does not strip: cudaGraphLaunch_v10000
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def _call_rows(trace: Trace, names: tuple[str, ...], prefix: bool = False) -> np.ndarray:
    """API rows whose call name, without a version suffix, is one of ``names`` (or starts
    with one, ``prefix``)."""
    if not trace.has("api"):
        return np.zeros(0, dtype=np.int64)
    coded = trace.codes("api", "name")
    bases = [_VERSION_SUFFIX.sub("", name) for name in coded.categories]
    wanted = [i for i, name in enumerate(bases) if (name.startswith(names) if prefix else name in names)]
    if not wanted:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.isin(coded.codes, wanted))


def unrecorded_kernels_note(trace: Trace) -> str | None:
    """The kernel tables' note where graph replays hold GPU time their kernels do not show; else None."""
    if not (trace.has("graphs") and trace.count("graphs")):
        return None
    start, end = trace.array("graphs", "start"), trace.array("graphs", "end")
    graph_ns = int(np.maximum(end - start, 0).sum())
    total = _gpu_work_ns(trace)
    graphs = len(np.unique(trace.array("graphs", "graph_id")))
    return (f"Not in this table: {len(start):,} replays of {graphs} CUDA graphs, "
            f"{graph_ns / 1e6:,.3f} ms of GPU time ({100.0 * graph_ns / total if total else 0:.1f}% of all GPU work); "
            f"{NODE_TRACE_HINT}.")


def has_graphs(trace: Trace) -> bool:
    """Whether the trace replayed any CUDA graph (a graph row, or a graph launch call)."""
    return bool(trace.has("graphs") and trace.count("graphs")) or bool(len(_call_rows(trace, LAUNCH_CALLS)))


def cuda_graphs(trace: Trace, steps: Any = None) -> dict[str, Any] | None:
    """The CUDA graphs of a trace (see the module docstring); None when it replayed none.

    ``steps``: a ``StepResult`` for the per-step figures (default: ``find_steps(trace)``)."""
    if not has_graphs(trace):
        return None
    if steps is None:
        from profkit.analysis.steps import find_steps

        steps = find_steps(trace)
    api_start, api_end = trace.array("api", "start"), trace.array("api", "end")
    launch_rows = _call_rows(trace, LAUNCH_CALLS)
    graph_level = bool(trace.has("graphs") and trace.count("graphs"))
    if graph_level:
        replays = _graph_level_replays(trace)
    else:
        replays = _node_level_replays(trace, launch_rows)
    total_ns = _gpu_work_ns(trace)
    in_graphs_ns = int(replays["gpu_ns"].sum())
    window = steps.steady_window if steps is not None and steps.found else None
    steady_count = int(steps.summary.get("steady_count") or 0) if window is not None else 0
    in_steady = ((replays["start"] >= window[0]) & (replays["start"] < window[1])) if window else \
        np.zeros(len(replays["start"]), dtype=bool)

    graphs = []
    for graph in np.unique(replays["graph"]).tolist():
        mine = replays["graph"] == graph
        kernels = replays["kernels"][mine]
        graphs.append({
            "graph": replays["labels"][graph],
            "replays": int(mine.sum()),
            "gpu_ns": int(replays["gpu_ns"][mine].sum()),
            "mean_replay_ns": float(replays["span_ns"][mine].mean()),
            "kernels_per_replay": None if graph_level else float(kernels.mean()),
            "replays_per_step": float((mine & in_steady).sum() / steady_count) if steady_count else None,
        })
    graphs.sort(key=lambda g: -g["gpu_ns"])

    launch_ns = (api_end[launch_rows] - api_start[launch_rows]).astype(np.int64)
    kernel_launch_rows = _call_rows(trace, KERNEL_LAUNCH_CALLS)
    one_launch_ns = float(np.median(api_end[kernel_launch_rows] - api_start[kernel_launch_rows])) \
        if len(kernel_launch_rows) else None
    replaced = int(replays["kernels"].sum()) if not graph_level else None
    setup_rows = _call_rows(trace, SETUP_CALL_PREFIXES, prefix=True)
    setup_ns = (api_end[setup_rows] - api_start[setup_rows]).astype(np.int64)
    before_steady = api_start[setup_rows] < window[0] if window else np.ones(len(setup_rows), dtype=bool)

    capture_rows = _call_rows(trace, CAPTURE_CALLS)
    instantiate_rows = _call_rows(trace, INSTANTIATE_CALL_PREFIXES, prefix=True)

    def calls_in_steady(rows: np.ndarray) -> int:
        return int(((api_start[rows] >= window[0]) & (api_start[rows] < window[1])).sum()) if window else 0

    per_step = None
    if steady_count:
        steady_lo, steady_hi = window
        in_graphs_steady = int(replays["gpu_ns"][in_steady].sum())
        per_step = {
            "steady_steps": steady_count,
            "replays_per_step": float(in_steady.sum() / steady_count),
            "in_graphs_ns_per_step": in_graphs_steady / steady_count,
            "outside_graphs_ns_per_step": (_gpu_work_ns(trace, steady_lo, steady_hi) - in_graphs_steady)
            / steady_count,
        }
        steady_work = per_step["in_graphs_ns_per_step"] + per_step["outside_graphs_ns_per_step"]
        # the steady state's share: start-up's one-time work (compiling, autotuning) is in_graphs_pct's too
        per_step["in_graphs_pct"] = 100.0 * per_step["in_graphs_ns_per_step"] / steady_work if steady_work > 0 else 0.0
    return {
        "level": GRAPH_LEVEL if graph_level else NODE_LEVEL,
        "graphs": graphs,
        "replays": len(replays["start"]),
        "gpu_ns": total_ns,
        "in_graphs_ns": in_graphs_ns,
        "outside_graphs_ns": total_ns - in_graphs_ns,
        "in_graphs_pct": 100.0 * in_graphs_ns / total_ns if total_ns else 0.0,
        "kernels_in_replays": replaced,
        "per_step": per_step,
        "launch": {
            "calls": len(launch_rows),
            "host_ns": int(launch_ns.sum()),
            "mean_ns": float(launch_ns.mean()) if len(launch_ns) else None,
            "kernel_launch_median_ns": one_launch_ns,
            # what the replays' kernels would have cost the CPU launched one by one
            "replaced_launches_host_ns": replaced * one_launch_ns if replaced is not None and one_launch_ns
            else None,
        },
        "captures": len(capture_rows),
        "instantiations": len(instantiate_rows),
        "captures_in_steady": calls_in_steady(capture_rows),
        "instantiations_in_steady": calls_in_steady(instantiate_rows),
        "setup": {
            "calls": len(setup_rows),
            "host_ns": int(setup_ns.sum()),
            "before_steady_ns": int(setup_ns[before_steady].sum()),
            "in_steady_ns": int(setup_ns[~before_steady].sum()),
        },
        "note": NODE_TRACE_HINT if graph_level else None,
    }


def _graph_level_replays(trace: Trace) -> dict[str, Any]:
    start, end = trace.array("graphs", "start"), trace.array("graphs", "end")
    graph_id = trace.array("graphs", "graph_id")
    ids, graph = np.unique(graph_id, return_inverse=True)
    duration = np.maximum(end - start, 0).astype(np.int64)
    return {"start": start, "graph": graph, "labels": [f"CUDA graph {int(i)}" for i in ids],
            "gpu_ns": duration, "span_ns": duration, "kernels": np.zeros(len(start), dtype=np.int64)}


def _node_level_replays(trace: Trace, launch_rows: np.ndarray) -> dict[str, Any]:
    """One replay per graph launch call that ran GPU work, from the operations it launched."""
    is_launch = np.zeros(len(trace.array("api", "start")), dtype=bool)
    is_launch[launch_rows] = True
    calls, starts, ends, kinds, names, nodes = [], [], [], [], [], []
    name_codes: list[str] = []
    for table in schema.GPU_WORK_TABLES:
        if table == "graphs" or not trace.has(table) or not trace.count(table):
            continue
        call = launch_calls(trace, table).call
        inside = np.flatnonzero(call >= 0)
        inside = inside[is_launch[call[inside]]]
        if not len(inside):
            continue
        calls.append(call[inside].astype(np.int64))
        starts.append(trace.array(table, "start")[inside])
        ends.append(trace.array(table, "end")[inside])
        kinds.append(np.full(len(inside), table == "kernels", dtype=bool))
        nodes.append(trace.array(table, "graph_node_id")[inside].astype(np.int64) if table == "kernels"
                     else np.full(len(inside), -1, dtype=np.int64))
        if table == "kernels":
            coded = trace.codes("kernels", "short_name")
            names.append(coded.codes[inside].astype(np.int64) + len(name_codes))
            name_codes += coded.categories
        else:
            names.append(np.full(len(inside), len(name_codes), dtype=np.int64))
            name_codes.append(table)
    if not calls:
        empty = np.zeros(0, dtype=np.int64)
        return {"start": empty, "graph": empty, "labels": [], "gpu_ns": empty, "span_ns": empty, "kernels": empty}
    call, start, end = np.concatenate(calls), np.concatenate(starts), np.concatenate(ends)
    is_kernel, name, node = np.concatenate(kinds), np.concatenate(names), np.concatenate(nodes)
    order = np.lexsort((start, call))  # each replay's operations together, in GPU order
    call, start, end, is_kernel, name, node = (call[order], start[order], end[order], is_kernel[order], name[order],
                                               node[order])
    first = np.flatnonzero(np.r_[True, call[1:] != call[:-1]])
    bounds = np.r_[first, len(call)]
    duration = np.maximum(end - start, 0).astype(np.int64)
    gpu_ns = np.add.reduceat(duration, first)
    span = np.maximum.reduceat(end, first) - start[first]
    kernels = np.add.reduceat(is_kernel.astype(np.int64), first)
    # a graph: the replays of the same captured nodes (their smallest node id), else of the same
    # sequence of operations; numbered by first replay
    first_node = np.maximum.reduceat(node, first)  # -1 where no operation has a node id
    known = np.where(node >= 0, node, np.iinfo(np.int64).max)
    first_node = np.where(first_node >= 0, np.minimum.reduceat(known, first), -1)
    signatures: dict[Any, int] = {}
    graph = np.array([signatures.setdefault(int(n) if n >= 0 else name[a:b].tobytes(), len(signatures))
                      for n, a, b in zip(first_node.tolist(), bounds[:-1], bounds[1:])], dtype=np.int64)
    labels = []
    for signature_index, (a, b) in enumerate(_first_replay_bounds(graph, bounds)):
        first_name = name_codes[int(name[a])]
        labels.append(f"graph {signature_index + 1}: {int(is_kernel[a:b].sum())} kernels from {first_name}")
    return {"start": start[first], "graph": graph, "labels": labels, "gpu_ns": gpu_ns,
            "span_ns": span.astype(np.int64), "kernels": kernels}


def _first_replay_bounds(graph: np.ndarray, bounds: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) operation rows of each graph's first replay, by graph number."""
    out: dict[int, tuple[int, int]] = {}
    for i, g in enumerate(graph.tolist()):
        out.setdefault(g, (int(bounds[i]), int(bounds[i + 1])))
    return [out[g] for g in sorted(out)]


def _gpu_work_ns(trace: Trace, lo: int | None = None, hi: int | None = None) -> int:
    """Summed duration of every GPU operation (starting inside [lo, hi) when given)."""
    total = 0
    for table in schema.GPU_WORK_TABLES:
        if not trace.has(table):
            continue
        start, end = trace.array(table, "start"), trace.array(table, "end")
        duration = np.maximum(end - start, 0)
        if lo is not None:
            duration = duration[(start >= lo) & (start < hi)]
        total += int(duration.sum())
    return total

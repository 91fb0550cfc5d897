"""A step's verdict in plain words: what bounds it, and which causes, named, make up how much of the step.

The step time (steady state, per step) splits into GPU busy time and GPU idle
time (``attribution``).  The idle time is split further by what the main
thread was doing at each idle instant, first match wins:

- **sync**: inside a blocking CUDA call (``calls.api_role``: a
  synchronize, a synchronous copy or memset): *sync-bound*, named by the Python
  functions those calls were made from;
- **launch**: inside a launch call (``breakdown.launch`` APIs): the GPU drains
  while the CPU issues work: *launch-bound*;
- **data loading**: with a data-loading frame on the stack (``data_loading``: a
  DataLoader, or a loader/batch-building function of the user's loop):
  *data-loading-bound*, named by the loading function holding the most of it;
- **python**: anywhere else in Python: *bound by Python/framework overhead*,
  named by the host table's top rows (the functions the GPU waited in most).

Before that split, idle with work already launched and not yet started
(``timeline.queued``: a cross-stream dependency, an event, the
launch path) is set apart as **queued**: no host code held the GPU up then,
whatever the host was doing (a final synchronize while the queued steps run).

Busy time is *GPU-bound*, or *communication-bound* where NCCL kernels run most
of it.  The verdict is the largest part.  A CPU-only trace (``profkit.analysis.cpu_only``)
has no GPU to wait for: its verdict is *host time only*, named by the host table's top rows.

Every figure is per steady step: a total over the steps divided by their
number, as in the host table, so a cause's time is its table row's and shares
are of the step time (the steps' total).  The one step length the sentence
states is the steps' median (``profkit steps``).  ``causes``: the named causes,
disjoint, each with its time and share; ``explained_pct`` is their sum: what
the sentence claims they explain.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.analysis.breakdown.launch import LAUNCH_APIS, MEMORY_LAUNCH_APIS
from profkit.analysis.cpu_only import CPU_ONLY, is_cpu_only
from profkit.analysis.host.attribution import HostResult, function_label
from profkit.analysis.timeline.intervals import covered_within, difference, intersection, union
from profkit.analysis.steps.result import format_duration
from profkit.analysis.sync.calls import api_role, base_api_name
from profkit.model import Trace

TOP = 3
HOST_LEAD = 0.2  # a GPU-bound step that idles at least this share of its time also names the host's top rows
WORDS = {"gpu": "GPU-bound", "communication": "communication-bound", "sync": "sync-bound",
         "launch": "launch-bound", "data": "data-loading-bound", "python": "bound by Python/framework overhead",
         "queued": "waiting inside the GPU's queue", "host": "host time only"}


def verdict(trace: Trace, result: HostResult) -> dict[str, Any]:
    """``kind`` (a key of ``WORDS``), ``parts_ns_per_step``, ``causes``, ``explained_pct``, ``sentence``."""
    s = result.summary
    n = s["steps"]  # the steps the per-step figures are over
    windows = result.step_windows
    step_ns = float((windows[:, 1] - windows[:, 0]).sum()) / n  # per step: the steps' total over their number
    idle_ns = float(s["gpu_idle_ns_per_step"])
    busy_ns = step_ns - idle_ns
    comm_ns = _communication(trace, windows) / n
    idle_s, idle_e = result.idle
    seg_s, seg_e, labels = result.segments or (np.empty(0, np.int64), np.empty(0, np.int64), [])
    pid, tid = result.main
    sync_s, sync_e, launch_s, launch_e = _calls(trace, pid, tid)
    # idle instants by cause, first match wins: sync, then launch, then data loading, then Python
    sync_iv = intersection(idle_s, idle_e, sync_s, sync_e)
    rest = difference(idle_s, idle_e, *sync_iv)
    launch_iv = intersection(*rest, launch_s, launch_e)
    rest = difference(*rest, *launch_iv)
    loading = result.loading
    if loading:
        load_s, load_e = union(np.concatenate([v[0] for v in loading.values()]),
                               np.concatenate([v[1] for v in loading.values()]))
    else:
        load_s, load_e = np.empty(0, np.int64), np.empty(0, np.int64)
    data_iv = intersection(*rest, load_s, load_e)
    sync_by_function: dict[str, float] = {}
    for lab, t_sync in zip(labels, covered_within(*sync_iv, seg_s, seg_e).tolist()):
        if t_sync:
            sync_by_function[lab] = sync_by_function.get(lab, 0) + t_sync / n
    parts = {
        "gpu": busy_ns - comm_ns, "communication": comm_ns, "queued": float(s.get("gpu_idle_queued_ns_per_step") or 0),
        "sync": _length(*sync_iv) / n, "launch": _length(*launch_iv) / n, "data": _length(*data_iv) / n,
    }
    parts["python"] = max(idle_ns - parts["queued"] - parts["sync"] - parts["launch"] - parts["data"], 0.0)
    kind = max(parts, key=lambda k: parts[k])
    if is_cpu_only(trace):  # nothing runs on a GPU: the whole step is host time
        kind = "host"
    causes = _causes(kind, parts, result, sync_by_function, data_iv, n)
    pct = (lambda v: 100.0 * v / step_ns) if step_ns else (lambda v: 0.0)
    causes = [{**c, "pct": round(pct(c["ns_per_step"]), 1)} for c in causes]
    explained = pct(sum(c["ns_per_step"] for c in causes)) if step_ns else None
    explained_pct = round(explained, 1) if explained is not None else None
    median = s.get("step_median_ns")
    # the sentence rounds the unrounded sum once (80.54% is "81%", not 80.5 -> "80%")
    sentence = _sentence(kind, parts, step_ns, idle_ns, median, causes, explained)
    return {"kind": kind, "words": WORDS[kind], "step_median_ns": median, "mean_step_ns": step_ns,
            "parts_ns_per_step": {k: round(v, 1) for k, v in parts.items()},
            "parts_pct": {k: round(pct(v), 1) for k, v in parts.items()}, "idle_pct": round(pct(idle_ns), 1),
            "causes": causes, "explained_pct": explained_pct, "sentence": sentence}


def _causes(kind: str, parts: dict[str, float], result: HostResult, sync_by_function: dict[str, float],
            data_iv: tuple[np.ndarray, np.ndarray], n: int) -> list[dict[str, Any]]:
    """The named causes of the verdict's kind, disjoint: their times add up to what they explain."""
    if kind == "queued":  # no host code to name: the GPU held itself up
        return []
    if kind in ("gpu", "communication"):
        busy = [{"cause": kind, "label": "NCCL kernels" if kind == "communication" else "GPU work",
                 "ns_per_step": parts[kind]}]
        # where the GPU also idles a good part of the step, what the host does then is the next lead
        idle = parts["sync"] + parts["launch"] + parts["data"] + parts["python"]
        step = sum(parts.values())
        return busy + (_python_rows(result) if step and idle >= HOST_LEAD * step else [])
    if kind == "launch":
        return [{"cause": "launch", "label": "launch calls", "ns_per_step": parts["launch"]}]
    if kind == "sync":
        top = sorted(sync_by_function.items(), key=lambda kv: -kv[1])[:TOP]
        return [{"cause": "sync", "label": k, "ns_per_step": v} for k, v in top]
    if kind == "data":
        # named by the loading function that holds the most of it (the outermost: a DataLoader's
        # __next__, or the user's load_batch), with the whole data-loading time
        held = {k: float(covered_within(*data_iv, *iv).sum()) for k, iv in result.loading.items()}
        name = max(held, key=lambda k: held[k]) if held else "data loading"
        return [{"cause": "data", "label": name, "ns_per_step": parts["data"]}]
    return _python_rows(result)


def _python_rows(result: HostResult) -> list[dict[str, Any]]:
    """The host table's top rows, with the table's GPU idle per step (innermost frames: disjoint)."""
    rows = [r for r in result.functions if r["gpu_idle_ns_per_step"] > 0][:TOP]
    return [{"cause": "python", "label": function_label(r["function"], r["file"], r["line"]),
             "ns_per_step": float(r["gpu_idle_ns_per_step"])} for r in rows]


def _sentence(kind: str, parts: dict[str, float], step_ns: float, idle_ns: float, median_ns: float | None,
              causes: list[dict[str, Any]], explained_pct: float | None) -> str:
    pct = (lambda v: f"{100.0 * v / step_ns:.0f}%") if step_ns else (lambda v: "?")
    text = f"{WORDS[kind][0].upper()}{WORDS[kind][1:]}: "
    median = f" ({format_duration(median_ns)} median step)" if median_ns else ""
    host = [c for c in causes if c["cause"] == "python"]
    if kind == "host":
        text += f"{CPU_ONLY}{median}"
        if host:
            text += "; the host is in " + \
                ", ".join(f"{c['label']} {format_duration(c['ns_per_step'])}" for c in host) + " per step"
            text += f"; {'these causes explain' if len(host) > 1 else 'that is'} {explained_pct:.0f}% of the step time"
        return text
    if kind in ("gpu", "communication"):
        text += f"the GPU works {pct(step_ns - idle_ns)} of the step time{median}"
        if kind == "communication":
            text += f", NCCL kernels {pct(parts['communication'])}"
        if host:
            text += f"; in the {pct(idle_ns)} it idles, the host is in " + \
                ", ".join(f"{c['label']} {format_duration(c['ns_per_step'])}" for c in host) + " per step"
            text += f"; these causes explain {explained_pct:.0f}% of the step time"
    elif kind == "queued":
        text += (f"the GPU idles {pct(idle_ns)} of the step time{median}, {pct(parts['queued'])} of the step with "
                 "work already launched (waiting on another stream, an event or the launch path), which no host code "
                 "holds up")
    else:
        text += f"the GPU idles {pct(idle_ns)} of the step time{median}"
        lead = {"sync": "waiting in", "data": "loading data in", "launch": "in",
                "python": "the host meanwhile in"}[kind]
        named = ", ".join(f"{c['label']} {format_duration(c['ns_per_step'])}" for c in causes)
        if named:
            text += f", {lead} {named} per step"
        if explained_pct is not None and causes:
            text += f"; {'these causes explain' if len(causes) > 1 else 'that is'} {explained_pct:.0f}% " \
                    f"of the step time"
    if parts["queued"] >= 0.05 * step_ns and kind != "queued":
        text += (f"; for {pct(parts['queued'])} of the step the GPU idles with work already launched, "
                 "which no host code holds up")
    if parts["sync"] >= 0.01 * step_ns and kind != "sync":
        text += f"; blocking syncs take {pct(parts['sync'])} of the step time, within that idle"
    return text


def idle_text(summary: dict[str, Any], idle_pct: float) -> str:
    """The table's GPU idle line: its share and mean per step, the part with work already
    launched, and how much of the rest a named Python function holds."""
    text = (f"GPU idle {idle_pct:.0f}% of the step time (mean {format_duration(summary['gpu_idle_ns_per_step'])} "
            "per step")
    queued = summary.get("gpu_idle_queued_ns_per_step") or 0
    if queued:
        text += f"; {format_duration(queued)} of it with work already launched, charged to no function"
    text += ")"
    explained = summary.get("explained_idle_pct")
    if explained is not None:
        rest = "of the rest" if queued else "of it"
        return text + f", {explained}% {rest} in a named Python function ({summary['source']})"
    return text + f", none of it waiting on the host ({summary['source']})" if queued else text


def _communication(trace: Trace, windows: np.ndarray) -> float:
    """NCCL kernel time (union) inside the windows, ns in all."""
    names = trace.codes("kernels", "name")
    if not len(names.codes):
        return 0.0
    nccl = np.array(["nccl" in c.lower() for c in names.categories], dtype=bool)
    mask = nccl[names.codes] if len(nccl) else np.zeros(0, bool)
    if not mask.any():
        return 0.0
    ms, me = union(trace.array("kernels", "start")[mask], trace.array("kernels", "end")[mask])
    return float(covered_within(ms, me, windows[:, 0], windows[:, 1]).sum())


def _calls(trace: Trace, pid: int, tid: int) -> tuple[np.ndarray, ...]:
    """The main thread's blocking CUDA calls and launch calls as merged intervals."""
    api = trace.table("api", ["start", "end", "pid", "tid", "name"])
    api = api[(api["pid"].to_numpy(np.int64) == pid) & (api["tid"].to_numpy(np.int64) == tid)]
    role = {c: api_role(base_api_name(str(c))) for c in api["name"].cat.categories}
    launch_names = set(LAUNCH_APIS + MEMORY_LAUNCH_APIS + ("cudaGraphLaunch",))
    base = api["name"].map(lambda c: base_api_name(str(c))).astype(str).to_numpy()
    blocking = np.array([role.get(c) in ("sync", "copy", "memset") and not str(c).startswith(("cudaMemcpyAsync",
                         "cudaMemsetAsync", "cudaStreamWaitEvent", "cuStreamWaitEvent"))
                         for c in api["name"]], dtype=bool)
    launching = np.isin(base, list(launch_names))
    start, end = api["start"].to_numpy(np.int64), api["end"].to_numpy(np.int64)
    return (*union(start[blocking], end[blocking]), *union(start[launching], end[launching]))


def _length(s: np.ndarray, e: np.ndarray) -> float:
    return float((e - s).sum())


__all__ = ["WORDS", "verdict"]

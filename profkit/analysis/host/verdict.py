"""A step's verdict in plain words: what bounds it, and how much of the step the named causes explain.

The step time (steady state, per step) splits into GPU busy time and GPU idle
time (``attribution``).  The idle time is split further by what the main
thread was doing at each idle instant, first match wins:

- **sync**: inside a blocking CUDA call (``calls.api_role``: a
  synchronize, a synchronous copy or memset): *sync-bound*, named by the Python
  lines those calls were made from;
- **launch**: inside a launch call (``breakdown.launch`` APIs): the GPU drains
  while the CPU issues work: *launch-bound*;
- **data loading**: in a frame of ``torch/utils/data`` (a DataLoader): *data-loading-bound*;
- **python**: anywhere else in Python: *bound by Python/framework overhead*,
  named by the functions holding the most of it.

Busy time is *GPU-bound*, or *communication-bound* where NCCL kernels run most
of it.  The verdict is the largest part.  ``explained_pct``: the busy time plus
the idle time of the named causes (the sync lines, launch and data loading, and
the top Python functions, at most ``TOP``), as a share of the step time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.analysis.breakdown.launch import LAUNCH_APIS, MEMORY_LAUNCH_APIS
from profkit.analysis.host.attribution import HostResult
from profkit.analysis.timeline.intervals import covered_within, difference, intersection, union
from profkit.analysis.steps.result import format_duration
from profkit.analysis.sync.calls import api_role, base_api_name
from profkit.model import Trace

TOP = 5
DATA_LOADING_FILES = ("torch/utils/data/",)
WORDS = {"gpu": "GPU-bound", "communication": "communication-bound", "sync": "sync-bound",
         "launch": "launch-bound", "data": "data-loading-bound", "python": "bound by Python/framework overhead"}


def verdict(trace: Trace, result: HostResult) -> dict[str, Any]:
    """``kind`` (a key of ``WORDS``), ``parts_ns_per_step``, ``named`` causes, ``explained_pct``, ``sentence``."""
    s = result.summary
    n = s["steady_steps"]
    windows = result.step_windows
    step_ns = float((windows[:, 1] - windows[:, 0]).sum()) / n
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
    seg_in_rest = covered_within(*rest, seg_s, seg_e)
    seg_in_sync = covered_within(*sync_iv, seg_s, seg_e)
    data_mask = np.array([any(d in lab for d in DATA_LOADING_FILES) for lab in labels], dtype=bool)
    per_label: dict[str, float] = {}
    sync_lines: dict[str, float] = {}
    for lab, t_rest, t_sync, is_data in zip(labels, seg_in_rest.tolist(), seg_in_sync.tolist(), data_mask.tolist()):
        if not is_data and t_rest:
            per_label[lab] = per_label.get(lab, 0) + t_rest / n
        if t_sync:
            sync_lines[lab] = sync_lines.get(lab, 0) + t_sync / n
    parts = {
        "gpu": busy_ns - comm_ns, "communication": comm_ns,
        "sync": _length(*sync_iv) / n, "launch": _length(*launch_iv) / n,
        "data": float(seg_in_rest[data_mask].sum()) / n if len(data_mask) else 0.0,
    }
    parts["python"] = max(idle_ns - parts["sync"] - parts["launch"] - parts["data"], 0.0)
    kind = max(parts, key=lambda k: parts[k])
    top = sorted(per_label.items(), key=lambda kv: -kv[1])[:TOP]
    top_sync = sorted(sync_lines.items(), key=lambda kv: -kv[1])[:TOP]
    explained = parts["gpu"] + parts["communication"] + parts["sync"] + parts["launch"] + parts["data"] + \
        sum(t for _, t in top)
    explained_pct = round(100.0 * explained / step_ns, 1) if step_ns else None
    sentence = _sentence(kind, parts, step_ns, idle_ns, top, top_sync, explained_pct)
    return {"kind": kind, "words": WORDS[kind], "step_ns": step_ns,
            "parts_ns_per_step": {k: round(v, 1) for k, v in parts.items()},
            "named": {"python": [{"function": k, "gpu_idle_ns_per_step": v} for k, v in top],
                      "sync": [{"function": k, "gpu_idle_ns_per_step": v} for k, v in top_sync]},
            "explained_pct": explained_pct, "sentence": sentence}


def _sentence(kind: str, parts: dict[str, float], step_ns: float, idle_ns: float, top: list[tuple[str, float]],
              top_sync: list[tuple[str, float]], explained_pct: float | None) -> str:
    pct = (lambda v: f"{100.0 * v / step_ns:.0f}%") if step_ns else (lambda v: "?")
    text = f"{WORDS[kind][0].upper()}{WORDS[kind][1:]}: "
    if kind in ("gpu", "communication"):
        text += f"the GPU works {pct(step_ns - idle_ns)} of the {format_duration(step_ns)} step"
    else:
        text += f"the GPU idles {format_duration(idle_ns)} of the {format_duration(step_ns)} step ({pct(idle_ns)})"
    if kind == "sync" and top_sync:
        text += ", waiting in " + ", ".join(f"{k} {format_duration(v)}" for k, v in top_sync[:3])
    elif top:
        text += ", the host meanwhile in " + ", ".join(f"{k} {format_duration(v)}" for k, v in top[:3])
    if parts["sync"] >= 0.01 * step_ns and kind != "sync":
        text += f"; syncs {format_duration(parts['sync'])}"
    if explained_pct is not None:
        text += f"; these causes explain {explained_pct:.0f}% of the step time"
    return text


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

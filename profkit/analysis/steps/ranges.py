"""Steps from the user's annotations: NVTX ranges, ``record_function`` names, ``ProfilerStep#N``.

Which ranges can be steps:

- never a library's or the framework's own range (``is_library_range``):
  CUB/Thrust (``CCCL:cub::DeviceRadixSort``), NCCL (``NCCL:ncclAllReduce``),
  cuBLAS, cuDNN, PyTorch's ``aten::``/``autograd::``/``Optimizer.step#...``/
  ``c10d::``/compile ranges, and profkit's own sync-site ranges;
- never GPU-side copies of CPU ranges (kind ``gpu_user_annotation``) or
  ranges that were never closed.

Names are grouped with their digits folded ("step 7" and "step 8" are one
name), per thread.  Among the groups that repeat (at least twice) without
overlapping themselves, the step is the one that looks most like an outer
loop:

1. it launches a fair share of the GPU work (at least half of what the
   best-covering group launches; work is GPU time, by launch time on the CPU);
2. ``ProfilerStep#N`` (torch.profiler's ``prof.step()``) first, then names
   saying step/iter, then batch/train, then any other name; names saying
   epoch, eval, warm-up, setup, ... last;
3. then the larger share of GPU work (to one decimal: an outer "step"
   beats a "forward" inside it), then more repeats.

Only when no group repeats does a single range named like a step count (one step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.steps.activity import Activity
from profkit.errors import ProfkitError
from profkit.model import Trace

NVTX = "nvtx"
PROFILER_STEP = "profiler_step"

# Lower-cased prefixes of range names (or "domain:name") that libraries and
# frameworks write: work inside the user's step, never the step itself.
LIBRARY_PREFIXES = (
    "cccl:", "cub::", "thrust::", "nccl", "cublas", "cudnn", "cufft", "curand", "cusparse", "cusolver",
    "cutlass", "nvjet", "nvshmem", "npp", "nvjpeg", "tensorrt", "trt", "dali", "ucx", "mpi_",
    "aten::", "autograd::", "torch::", "torch.", "optimizer.", "c10d::", "record_param_comms",
    "nccl:", "gloo:", "hccl:", "rccl:", "mpi:", "ucc:", "xccl:", "processgroup", "distributeddataparallel", "fullyshardeddataparallel", "fsdp::",
    "## ", "torch-compiled region", "compiledfunction", "torchdynamo", "lazy compilation",
    "inductor", "triton", "cudagraph", "cuda graph", "memcpy", "memset", "enumerate(dataloader)",
    "profkit.sync", "profkit:",
)
LIBRARY_DOMAINS = {
    "nccl", "cccl", "cub", "thrust", "cublas", "cublaslt", "cudnn", "cufft", "curand", "cusparse", "cusolver",
    "npp", "nvjpeg", "tensorrt", "dali", "nvshmem", "ucx", "mpi", "profkit.sync", "cuda", "cupti",
}
KINETO_CATEGORIES = ("user_annotation", "gpu_user_annotation", "cpu_instant_event", "python_function")
PROFILER_STEP_NAME = re.compile(r"ProfilerStep#\d+")

_NOT_A_STEP = re.compile(r"epoch|eval|valid|test|warm[-_ ]?up|setup|init|load|save|checkpoint|compile")
_STEP_WORD = re.compile(r"step|iter")
_BATCH_WORD = re.compile(r"batch|train")


def is_library_range(name: str, domain: str = "", kind: str = "") -> bool:
    """Whether a range was written by a library or the framework (never a step)."""
    if kind == "sync_site":
        return True
    lower = name.lstrip().lower()
    if domain and domain.lower() in LIBRARY_DOMAINS:
        return True
    return lower.startswith(LIBRARY_PREFIXES)


def fold_digits(name: str) -> str:
    return re.sub(r"\d+", "N", name)


def name_rank(label: str, kind: str) -> int:
    """How much a range name says "one iteration of the outer loop" (higher is more)."""
    if kind == PROFILER_STEP or PROFILER_STEP_NAME.fullmatch(label.replace("N", "0")):
        return 4
    lower = label.lower()
    if _NOT_A_STEP.search(lower):
        return 0
    if _STEP_WORD.search(lower):
        return 3
    if _BATCH_WORD.search(lower):
        return 2
    return 1


@dataclass
class RangeSteps:
    """The chosen step ranges (CPU times, sorted by start) and what they were."""

    source: str           # NVTX or PROFILER_STEP
    label: str            # e.g. "step", "samples:step", "ProfilerStep#N"
    pid: int
    tid: int
    start: np.ndarray
    end: np.ndarray
    names: np.ndarray       # each range's own text ("step 7")
    candidates: list[dict]  # every group considered, for --format json and debugging


def find_range_steps(trace: Trace, act: Activity, step_range: str | None = None) -> tuple[RangeSteps | None, str]:
    """The user's step ranges, or None and a sentence saying what was seen instead.

    ``step_range``: take the ranges of that name (digits folded, with or without
    its domain) instead of choosing; a ``ProfkitError`` when there are none."""
    ranges = trace.table("ranges", ["start", "end", "pid", "tid", "name", "domain", "kind"])
    if ranges.empty:
        return None, "no NVTX or record_function ranges in the trace"
    kind = ranges["kind"].astype(str).to_numpy()
    closed = (ranges["end"].to_numpy() >= ranges["start"].to_numpy()) & (kind != "gpu_user_annotation")
    ranges = ranges[closed]
    kind = kind[closed]
    if ranges.empty:
        return None, "no closed CPU-side ranges in the trace"
    names = ranges["name"].astype(str).to_numpy()
    domains = ranges["domain"].astype(str).to_numpy()
    # decide per distinct (name, domain, kind), not per row
    keys = pd.DataFrame({"name": names, "domain": domains, "kind": kind})
    distinct = keys.drop_duplicates()
    library = {(n, d, k) for n, d, k in distinct.itertuples(index=False) if is_library_range(n, d, k)}
    is_lib = np.fromiter(((n, d, k) in library for n, d, k in zip(names, domains, kind)), bool, len(names))
    # once per distinct name (a few hundred), not per range (tens of thousands)
    name_codes, distinct_names = pd.factorize(names)
    folded = np.array([fold_digits(n) for n in distinct_names], dtype=object)[name_codes]
    # an NVTX domain names the range ("samples:step"); Kineto's "domain" is the event category
    plain = (domains == "") | (domains == kind) | np.isin(domains, KINETO_CATEGORIES)
    label = np.where(plain, folded, np.char.add(np.char.add(domains.astype(str), ":"), folded.astype(str)))
    frame = pd.DataFrame({"start": ranges["start"].to_numpy(), "end": ranges["end"].to_numpy(), "name": names,
                          "pid": ranges["pid"].to_numpy(), "tid": ranges["tid"].to_numpy(),
                          "label": label, "kind": np.where(_is_profiler_step(name_codes, distinct_names, kind), PROFILER_STEP, NVTX)})
    libraries = sorted(set(label[is_lib]))
    frame = frame[~is_lib]
    work = _launched_work(act)
    candidates = [_describe(g, key, act, work) for key, g in frame.groupby(["label", "kind", "pid", "tid"], sort=False)]
    if step_range is not None:
        wanted = fold_digits(step_range.strip())
        named = [c for c in candidates if _named(c["label"], wanted)]
        if not named:
            seen = ", ".join(sorted({c["label"] for c in candidates})[:10]) or "none"
            raise ProfkitError(f"no range named {step_range!r} in this trace", hint=f"ranges: {seen}")
        candidates = named
    chosen = max(candidates, key=lambda c: (c["count"], c["gpu_share"])) if step_range else \
        _pick(candidates, cpu_only=len(act) == 0)
    if chosen is None:
        seen = ", ".join(sorted({c["label"] for c in candidates})[:8]) or "none"
        lib = f"; library ranges (never steps): {', '.join(libraries[:5])}" if libraries else ""
        return None, f"no range repeats like a step (user ranges: {seen}{lib})"
    g = frame[(frame["label"] == chosen["label"]) & (frame["kind"] == chosen["kind"]) &
              (frame["pid"] == chosen["pid"]) & (frame["tid"] == chosen["tid"])].sort_values("start")
    return RangeSteps(chosen["kind"], chosen["label"], chosen["pid"], chosen["tid"],
                      g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64), g["name"].to_numpy(object),
                      candidates), ""


def _named(label: str, wanted: str) -> bool:
    """Whether a folded label ("samples:step N") is the range the user named ("step", "samples:step")."""
    bare = label.rpartition(":")[2] if ":" in label and not label.startswith(wanted) else label
    return any(x == wanted or re.sub(r"[\s_:#=-]*N$", "", x) == wanted for x in (label, bare))


def _is_profiler_step(name_codes: np.ndarray, distinct_names: Any, kind: np.ndarray) -> np.ndarray:
    """Per range: torch.profiler's step, by kind or by name (matched once per distinct name)."""
    by_name = np.array([PROFILER_STEP_NAME.fullmatch(n) is not None for n in distinct_names], dtype=bool)
    return (kind == PROFILER_STEP) | by_name[name_codes]


def _describe(g: pd.DataFrame, key: tuple, act: Activity, work: np.ndarray) -> dict:
    label, kind, pid, tid = key
    g = g.sort_values("start")
    s, e = g["start"].to_numpy(np.int64), g["end"].to_numpy(np.int64)
    overlaps = int((s[1:] < e[:-1]).sum()) if len(s) > 1 else 0
    return {"label": str(label), "kind": str(kind), "pid": int(pid), "tid": int(tid), "count": len(s),
            "overlapping": overlaps, "gpu_share": _launched_share(s, e, int(pid), act, work),
            "rank": name_rank(str(label).rpartition(":")[2] if kind != PROFILER_STEP else "ProfilerStep#N", str(kind))}


def _launched_work(act: Activity) -> np.ndarray:
    """0, then the running sum of the activity's GPU time in launch order (int64 ns)."""
    work = np.zeros(len(act) + 1, dtype=np.int64)
    np.cumsum(act.end - act.start, out=work[1:])
    return work


def _launched_share(s: np.ndarray, e: np.ndarray, pid: int, act: Activity, work: np.ndarray) -> float:
    """Share of the process's GPU time launched inside the ranges (by launch time): a launch
    belongs to the last range starting at or before it, when that range has not ended.

    ``act.launch`` is sorted, so each range's launches are one slice of it (binary searches,
    not a pass over every launch per candidate); ``work`` is ``_launched_work(act)``."""
    if len(act) == 0 or act.pid != pid:
        return 0.0
    first = np.searchsorted(act.launch, s, side="left")
    next_range = np.append(first[1:], len(act))  # launches from the next range's start belong to it
    last = np.minimum(next_range, np.searchsorted(act.launch, e, side="right"))
    last = np.maximum(last, first)
    total = int(work[-1])
    if total > 0:
        return float(int((work[last] - work[first]).sum()) / total)
    return float(int((last - first).sum()) / len(act))


def _pick(candidates: list[dict], cpu_only: bool = False) -> dict | None:
    """``cpu_only``: the trace holds no GPU work (a CPU training loop), so no range launches
    any; the step is then told by its name and repeats alone."""
    repeating = [c for c in candidates if c["count"] >= 2 and c["overlapping"] <= 0.1 * c["count"]
                 and (c["gpu_share"] > 0 or cpu_only)]
    if repeating:
        best_share = max(c["gpu_share"] for c in repeating)
        fair = [c for c in repeating if c["gpu_share"] >= 0.5 * best_share]
        return max(fair, key=lambda c: (c["rank"], round(c["gpu_share"], 1), c["count"]))
    single = [c for c in candidates if c["count"] == 1 and c["rank"] >= 2 and (c["gpu_share"] > 0 or cpu_only)]
    return max(single, key=lambda c: (c["rank"], c["gpu_share"])) if single else None

"""The interactive timeline of report.html: zoom, pan and hover over the GPU streams.

``build_interactive_timeline(trace)`` picks the window to show in detail
(the steady-state steps, where ``profkit.analysis.steps`` finds them, else
the whole GPU span, cut to ``MAX_OPERATIONS`` around its middle) and packs
its kernels, memcpys and memsets as compact columns; the full capture stays
as an overview strip (GPU busy % per bin) above it.  ``timeline.js`` draws
both on canvases.

Why a small hand-written canvas and not plotly or bokeh (measured, with the
same data of an ~18k-kernel run, ~0.4 MB as JSON):
- size: plotly.min.js is 4.8 MB (over the 3 MB budget of the whole report
  on its own), bokeh.min.js 1.27 MB; timeline.js is ~12 KB;
- speed: one canvas pass over the visible operations (binary search per
  stream for the first one in view) redraws 18k kernels in a few ms, with
  no DOM node per kernel (SVG would need 18k);
- safety: the report's Content-Security-Policy allows exactly one script,
  by its sha256; no eval, no remote load (bokeh and plotly need
  'unsafe-eval' for parts of their code).  Names reach the page as JSON
  data and are shown with textContent, never as HTML.

The static matplotlib figures stay for report.md.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals

from profkit.analysis.timeline.busy import gpu_busy_per_bin
from profkit.model import Trace
from profkit.model.clock import session_zero

MAX_OPERATIONS = 60_000   # ~1.2 MB of JSON at most: the report of a 1M-kernel run stays small
OVERVIEW_BINS = 800
GPU_TABLES = (("kernels", 0), ("memcpy", 1), ("memset", 2), ("graphs", 3))  # (table, kind code in the page)
SCRIPT = Path(__file__).with_name("templates") / "timeline.js"


@dataclass(frozen=True)
class InteractiveTimeline:
    data_json: str        # safe inside <script type="application/json"> (no '<', '>' or '&')
    script: str           # timeline.js
    script_hash: str      # "'sha256-...'" for the page's Content-Security-Policy
    operations: int       # GPU operations in the detailed window
    total_operations: int
    window_ns: tuple[int, int]
    window_source: str    # "steady-state steps", "GPU span", "middle of the GPU span"


@lru_cache(maxsize=1)
def _script() -> tuple[str, str]:
    text = SCRIPT.read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return text, f"'sha256-{digest}'"


def _gpu_tables(trace: Trace) -> list[tuple[int, pd.DataFrame]]:
    """(kind code, frame) of each GPU table with rows: start, end, device, stream and what names
    its operations (kernels and graph replays: name, memcpy: copy_kind), in GPU_TABLES order."""
    out = []
    for table, kind in GPU_TABLES:
        if not trace.has(table):
            continue
        extra = {"kernels": ["name"], "graphs": ["name"], "memcpy": ["copy_kind"]}.get(table, [])
        frame = trace.table(table, ["start", "end", "device", "stream", *extra])
        if not frame.empty:
            out.append((kind, frame))
    return out


def _names(kind: int, frame: pd.DataFrame, rows: np.ndarray) -> pd.Categorical:
    """The names of ``rows`` of one table, categorical: a few hundred names never become
    a Python string per operation."""
    if kind in (0, 3):  # kernels, graph replays
        return frame["name"].array[rows]
    if kind == 1:
        kinds = frame["copy_kind"].array
        return pd.Categorical.from_codes(kinds.codes[rows], [f"Memcpy {c}" for c in kinds.categories])
    return pd.Categorical.from_codes(np.zeros(len(rows), dtype=np.int8), ["Memset"])


def _operations_in(tables: list[tuple[int, pd.DataFrame]], keep: np.ndarray) -> pd.DataFrame:
    """start, end, device, stream, kind, name of the operations ``keep`` selects (a mask over the
    tables' rows one after the other), by start; equal starts keep the tables' order.

    Only the chosen ones are gathered and sorted: the window holds at most MAX_OPERATIONS."""
    columns: dict[str, list[Any]] = {c: [] for c in ("start", "end", "device", "stream", "kind")}
    names: list[pd.Categorical] = []
    offset = 0
    for kind, frame in tables:
        rows = np.flatnonzero(keep[offset:offset + len(frame)])
        offset += len(frame)
        for column in ("start", "end", "device", "stream"):
            columns[column].append(frame[column].to_numpy()[rows])
        columns["kind"].append(np.full(len(rows), kind, dtype=np.int64))
        names.append(_names(kind, frame, rows))
    ops = pd.DataFrame({c: np.concatenate(v) for c, v in columns.items()})
    ops["name"] = union_categoricals(names, ignore_order=True)
    return ops.sort_values("start", kind="stable").reset_index(drop=True)


def _steady_window(steps: pd.DataFrame | None) -> tuple[int, int] | None:
    if steps is None or steps.empty:
        return None
    steady = steps[np.array([str(phase).startswith("steady") for phase in steps["phase"].tolist()], dtype=bool)]
    chosen = steady if len(steady) else steps
    return int(chosen["start_ns"].min()), int(chosen["end_ns"].max())


def _choose_window(start: np.ndarray, end: np.ndarray, steps: pd.DataFrame | None) -> tuple[int, int, str]:
    """The detailed window over the operations ``start``/``end`` (any order): the steady-state
    steps, else the GPU span, cut to about MAX_OPERATIONS operations (by start) where needed."""
    window = _steady_window(steps)
    if window is not None:
        lo, hi = window
        inside = start[(start < hi) & (end > lo)]
        if len(inside) <= MAX_OPERATIONS:
            return lo, hi, "steady-state steps"
        # too many: the first steady steps that fit
        cut = int(np.partition(inside, MAX_OPERATIONS - 1)[MAX_OPERATIONS - 1])
        fitting = steps[(steps["start_ns"] >= lo) & (steps["end_ns"] <= cut)]
        if len(fitting):
            return lo, int(fitting["end_ns"].max()), "first steady-state steps"
        return lo, cut, "start of the steady state"
    if len(start) <= MAX_OPERATIONS:
        return int(start.min()), int(end.max()), "GPU span"
    order = np.argsort(start, kind="stable")  # equal starts in the tables' order
    middle = len(start) // 2
    first, last = middle - MAX_OPERATIONS // 2, middle + MAX_OPERATIONS // 2 - 1
    return int(start[order[first]]), int(end[order[first:last + 1]].max()), "middle of the GPU span"


def _stream_rows(device: np.ndarray, stream: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The (device, stream) pairs in order, and each operation's row among them: one int64 key
    per operation (device major), so one 1-D unique does it."""
    if not len(device):
        return [], np.empty(0, np.int64)
    low = int(stream.min())
    span = int(stream.max()) - low + 1
    keys, rows = np.unique(device * span + (stream - low), return_inverse=True)
    pairs = [(int(k) // span, int(k) % span + low) for k in keys.tolist()]
    return pairs, rows.reshape(-1).astype(np.int64, copy=False)


def _safe_json(value: Any) -> str:
    # In an HTML <script> data block the text must never close the element or open
    # a comment: '<', '>' and '&' become JSON escapes (still the same strings).
    text = orjson.dumps(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_interactive_timeline(trace: Trace, steps: pd.DataFrame | None = None) -> InteractiveTimeline | None:
    """The page data of the interactive timeline; None when the trace has no GPU operations.

    ``steps``: columns index, start_ns, end_ns, phase (``profkit.export.tracks.step_table``)."""
    tables = _gpu_tables(trace)
    if not tables:
        return None
    start = np.concatenate([frame["start"].to_numpy() for _, frame in tables])
    end = np.concatenate([frame["end"].to_numpy() for _, frame in tables])
    lo, hi, source = _choose_window(start, end, steps)
    shown = _operations_in(tables, (start < hi) & (end > lo))
    span_lo, span_hi = int(start.min()), int(end.max())
    total_operations = len(start)
    del start, end
    if steps is not None and len(steps):
        span_lo, span_hi = min(span_lo, int(steps["start_ns"].min())), max(span_hi, int(steps["end_ns"].max()))
    # times in the page count from the session start, as every time profkit prints or takes
    origin = session_zero(trace)
    tracks, rows = _stream_rows(shown["device"].to_numpy(np.int64), shown["stream"].to_numpy(np.int64))
    names = pd.Categorical(shown["name"]).remove_unused_categories()
    names = names.reorder_categories(sorted(names.categories))
    relative = shown["start"].to_numpy() - origin
    busy = gpu_busy_per_bin(trace, span_lo, span_hi, OVERVIEW_BINS)
    overview = np.zeros(len(busy.edges) - 1)
    for device in busy.busy_ns:  # all GPUs together: the mean busy % of the devices
        overview += busy.percent(device) / len(busy.busy_ns)
    data = {
        "origin_ns": origin,
        "window": [lo - origin, hi - origin],
        "window_source": source,
        "span": [span_lo - origin, span_hi - origin],
        "rows": [f"GPU {d} · stream {s}" for d, s in tracks],
        "names": [str(n) for n in names.categories],
        "kinds": ["kernel", "memcpy", "memset", "graph"],
        # starts as differences from the previous one: short numbers, a third of the size
        "start_delta": np.diff(relative, prepend=0).tolist(),
        "duration": (shown["end"].to_numpy() - shown["start"].to_numpy()).tolist(),
        "row": rows.tolist(),
        "name": np.asarray(names.codes, dtype=np.int64).tolist(),
        "kind": shown["kind"].to_numpy(dtype=np.int64).tolist(),
        "steps": [] if steps is None else list(map(list, zip(
            (steps["start_ns"].to_numpy(np.int64) - origin).tolist(),
            (steps["end_ns"].to_numpy(np.int64) - origin).tolist(),
            steps["index"].to_numpy(np.int64).tolist(), [str(phase) for phase in steps["phase"].tolist()]))),
        "overview": {"start": span_lo - origin, "bin_ns": (span_hi - span_lo) / max(len(busy.edges) - 1, 1),
                     "busy_pct": np.round(overview, 1).tolist()},
    }
    script, digest = _script()
    return InteractiveTimeline(data_json=_safe_json(data), script=script, script_hash=digest,
                               operations=len(shown), total_operations=total_operations, window_ns=(lo, hi),
                               window_source=source)

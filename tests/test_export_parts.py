"""The export's parts on hand-built inputs (bad-input and property tests, named synthetic):
nesting lanes, binned GPU busy time, and no environment block in any exported string.
(The interval algebra under the busy time: tests/test_intervals.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from profkit.analysis.timeline.busy import gpu_busy_per_bin
from profkit.export.lanes import nesting_lanes
from profkit.export.perfetto import export_perfetto
from profkit.model import Trace, TraceMeta, empty_table, from_columns

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40)


def nests(s: np.ndarray, e: np.ndarray) -> bool:
    order = np.lexsort((-(e - s), s))
    stack: list[int] = []
    for a, b in zip(s[order].tolist(), e[order].tolist()):
        while stack and stack[-1] <= a:
            stack.pop()
        if stack and b > stack[-1]:
            return False
        stack.append(b)
    return True


@given(intervals)
@settings(max_examples=200, deadline=None)
def test_lanes_nest(pairs) -> None:  # noqa: ANN001
    s = np.array([p[0] for p in pairs], dtype=np.int64)
    e = s + np.array([p[1] for p in pairs], dtype=np.int64)
    lanes = nesting_lanes(s, e)
    for lane in np.unique(lanes):
        assert nests(s[lanes == lane], e[lanes == lane])
    if nests(s, e):
        assert not lanes.any()  # properly nested input stays on one track


class SyntheticSource:
    """A hand-built trace: two kernels, a launch, a range, in memory."""

    def __init__(self, tables: dict[str, pd.DataFrame], path: Path) -> None:
        self.tables = tables
        self.meta = TraceMeta(source="nsys", path=path, capture_start_ns=0)

    def has(self, table: str) -> bool:
        return table in self.tables

    def load(self, table: str, columns) -> pd.DataFrame:  # noqa: ANN001
        frame = self.tables[table]
        return pd.DataFrame({c: frame[c] if c in frame else empty_table(table, [c])[c].reindex(range(len(frame)),
                             fill_value=-1) for c in columns})

    def close(self) -> None:
        pass


SECRET = "HOME=/root\x00API_TOKEN=synthetic-secret-123\x00"


def synthetic_trace(tmp_path: Path, clock: int = 0) -> Trace:
    """``clock``: added to every time (an epoch clock, as older Kineto traces have)."""
    n = 2
    kernels = from_columns("kernels", {
        "start": [clock + 1000, clock + 5000], "end": [clock + 3000, clock + 9000], "device": [0] * n, "stream": [7] * n, "pid": [42] * n,
        "correlation": [1, 2], "name": [f"k\x00{SECRET}", "gemm"], "short_name": ["k", "gemm"],
        **{c: [1] * n for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")},
        "registers_per_thread": [32] * n, "static_smem_bytes": [0] * n, "dynamic_smem_bytes": [0] * n,
        "smem_config_bytes": [0] * n})
    api = from_columns("api", {"start": [clock + 500, clock + 4000], "end": [clock + 900, clock + 4500], "pid": [42] * n, "tid": [43] * n,
                               "correlation": [1, 2], "name": ["cudaLaunchKernel"] * n, "layer": ["runtime"] * n})
    ranges = from_columns("ranges", {"start": [clock], "end": [-1], "pid": [42], "tid": [43], "device": [-1],
                                     "stream": [-1], "name": [f"step\x00{SECRET}"], "domain": [""],
                                     "style": ["PushPop"], "kind": ["nvtx"]})
    processes = from_columns("processes", {"pid": [42], "name": [f"python\x00{SECRET}"]})
    path = tmp_path / "synthetic.sqlite"
    path.write_bytes(b"")
    return Trace(SyntheticSource({"kernels": kernels, "api": api, "ranges": ranges, "processes": processes}, path))


def test_synthetic_no_environment_in_export(tmp_path: Path) -> None:
    trace = synthetic_trace(tmp_path)
    out = tmp_path / "out.json"
    result = export_perfetto(trace, out)
    raw = out.read_bytes()
    assert b"synthetic-secret" not in raw and b"API_TOKEN" not in raw and b"\\u0000" not in raw
    doc = json.loads(raw)
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert {"k", "gemm", "step", "cudaLaunchKernel"} <= names
    assert result.flows == 2
    # the open range (end -1) is closed at the end of the export
    step = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "step")
    assert round((step["ts"] + step["dur"]) * 1000) == 9000


def test_synthetic_busy_bins_of_two_kernels(tmp_path: Path) -> None:
    busy = gpu_busy_per_bin(synthetic_trace(tmp_path), 0, 10_000, 10)
    assert busy.busy_ns[0].tolist() == [0, 1000, 1000, 0, 0, 1000, 1000, 1000, 1000, 0]


def test_synthetic_epoch_clock_is_written_from_a_base(tmp_path: Path) -> None:
    """Times past 2**52 ns would lose nanoseconds as doubles: they are written from
    "baseTimeNanoseconds" (Kineto's key), and base + ts gives back every nanosecond."""
    clock = 1_712_195_495_502_094_592  # an epoch time in ns, as in a real Kineto trace
    out = tmp_path / "out.json"
    export_perfetto(synthetic_trace(tmp_path, clock), out)
    doc = json.loads(out.read_bytes())
    base = doc["baseTimeNanoseconds"]
    assert base % 1_000_000_000 == 0 and clock - 1_000_000_000 < base <= clock
    kernels = sorted((base + round(e["ts"] * 1000), round(e["dur"] * 1000))
                     for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel")
    assert kernels == [(clock + 1000, 2000), (clock + 5000, 4000)]
    assert all(abs(e["ts"]) < 2**52 / 1000 for e in doc["traceEvents"] if "ts" in e)

"""Hand-built traces for tests of algorithms on shapes no capture gives on demand
(irregular steps, no repetition at all, ...).  Named synthetic on purpose:
real behaviour is tested on the captures in tests/data."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profkit.model import TraceMeta, from_columns, schema
from profkit.model.trace import Trace


class SyntheticSource:
    """A ``TraceSource`` over in-memory tables (any table not given is empty)."""

    def __init__(self, tables: dict[str, dict[str, Any]], name: str = "synthetic") -> None:
        self.meta = TraceMeta(source="synthetic", path=Path(f"{name}.synthetic"))
        self.tables = {t: from_columns(t, cols) for t, cols in tables.items()}

    def has(self, table: str) -> bool:
        return table in self.tables

    def load(self, table: str, columns: Sequence[str]) -> pd.DataFrame:
        frame = self.tables[table]
        n = len(frame)
        data: dict[str, Any] = {}
        for c in columns:
            if c in frame.columns:
                data[c] = frame[c].to_numpy() if schema.column_kind(table, c) != schema.CATEGORY else frame[c].array
            elif schema.column_kind(table, c) == schema.CATEGORY:
                data[c] = pd.Categorical([""] * n)
            else:
                data[c] = np.full(n, schema.MISSING_INT, dtype=np.int64)
        return pd.DataFrame(data)

    def close(self) -> None:
        pass


def synthetic_trace(kernels: Sequence[tuple[str, int, int]], *, ranges: Sequence[tuple[str, int, int]] = (),
                    launch_lead_ns: int = 5_000, pid: int = 1, tid: int = 1, name: str = "synthetic",
                    range_kind: str = "nvtx", range_domain: str = "") -> Trace:
    """A trace of kernels ``(name, start, end)`` each launched ``launch_lead_ns`` before it
    starts (one cudaLaunchKernel per kernel, matched by correlation), plus CPU ranges
    ``(name, start, end)`` on the same thread."""
    n = len(kernels)
    tables: dict[str, dict[str, Any]] = {
        "kernels": {
            "name": [k[0] for k in kernels], "start": [k[1] for k in kernels], "end": [k[2] for k in kernels],
            "pid": [pid] * n, "device": [0] * n, "stream": [7] * n, "correlation": list(range(1, n + 1)),
        },
        "api": {
            "name": ["cudaLaunchKernel"] * n, "start": [k[1] - launch_lead_ns for k in kernels],
            "end": [k[1] - launch_lead_ns + 1_000 for k in kernels], "pid": [pid] * n, "tid": [tid] * n,
            "correlation": list(range(1, n + 1)),
        },
    }
    if ranges:
        m = len(ranges)
        tables["ranges"] = {
            "name": [r[0] for r in ranges], "start": [r[1] for r in ranges], "end": [r[2] for r in ranges],
            "pid": [pid] * m, "tid": [tid] * m, "device": [-1] * m, "stream": [-1] * m,
            "domain": [range_domain] * m, "style": ["PushPop"] * m, "kind": [range_kind] * m,
        }
    return Trace(SyntheticSource(tables, name))


def loop(step_kernels: Sequence[Sequence[str]], *, kernel_ns: int = 10_000, gap_ns: int = 1_000,
         step_gap_ns: int = 50_000, start_ns: int = 1_000_000, step_gaps: Sequence[int] | None = None,
         kernel_ns_per_step: Sequence[int] | None = None) -> tuple[list[tuple[str, int, int]], list[tuple[int, int]]]:
    """Kernels of consecutive iterations, back to back on one stream.

    Returns the kernels and each iteration's (first kernel start, last kernel end)."""
    kernels: list[tuple[str, int, int]] = []
    spans: list[tuple[int, int]] = []
    t = start_ns
    for i, names in enumerate(step_kernels):
        t += step_gaps[i] if step_gaps is not None else step_gap_ns
        begin = t
        length = kernel_ns_per_step[i] if kernel_ns_per_step is not None else kernel_ns
        for name in names:
            kernels.append((name, t, t + length))
            t += length + gap_ns
        spans.append((begin, t - gap_ns))
    return kernels, spans

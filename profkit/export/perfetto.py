"""Any trace -> Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) opens.

    from profkit.export.perfetto import export_perfetto
    export_perfetto(trace, "out.json.gz", window_ns=(t0, t1))

What goes in (see ``chrome_events`` for the shapes):
- per device, a track per stream with kernels, memcpys and memsets, and a
  "GPU busy %" counter track (busy time per bin, overlaps counted once);
- per process, each CPU thread's CUDA runtime/driver calls, and beside it its
  NVTX / record_function ranges (split into lanes that nest properly);
- profkit's Python sync sites as instant events named by their file:line, on
  the thread that synchronized;
- launch -> kernel/memcpy/memset flow arrows, paired by (process, correlation id);
- the training steps (``profkit.analysis.steps``) as a track of their own.

Why JSON and not Perfetto's protobuf (TracePacket) format: the protobuf is
2-4x smaller and loads faster in Perfetto, but only Perfetto reads it.  The
JSON is read by Perfetto, chrome://tracing, HTA, TensorBoard and profkit's own
Kineto reader (so an export round-trips: same kernel summary), and it can be
written with orjson and string formatting, no protobuf dependency.  Gzip
(``.json.gz``, which Perfetto opens directly) takes back most of the size.

Nothing from the recorded environment is written: the model holds none, and
every string is cut at its first NUL (``chrome_events.clean_text``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import orjson
import pandas as pd

from profkit.errors import ProfkitError
from profkit.export import chrome_events as ev
from profkit.export import tracks
from profkit.export.sink import open_output
from profkit.model import Trace
from profkit.model.clock import SESSION_START, seconds_text, session_zero

BUSY_BINS = 1000
MIN_BUSY_BIN_NS = 10_000


@dataclass(frozen=True)
class ExportResult:
    path: Path
    events: int
    kernels: int
    flows: int
    window_ns: tuple[int, int]


class _EventStream:
    """Writes the ``traceEvents`` array: chunks of serialised events, comma-separated."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.count = 0

    def write(self, lines: Iterable[str]) -> None:
        lines = list(lines)
        if not lines:
            return
        text = ",\n".join(lines)
        self.out.write(((",\n" if self.count else "\n") + text).encode())
        self.count += len(lines)

    def write_all(self, chunks: Iterator[list[str]]) -> None:
        for chunk in chunks:
            self.write(chunk)


def export_perfetto(trace: Trace, out: str | os.PathLike[str], *, window_ns: tuple[int, int] | None = None,
                    steps: pd.DataFrame | None = None) -> ExportResult:
    """Write ``trace`` (or the part overlapping ``window_ns``) as Chrome trace JSON to ``out``
    (gzip when it ends in ``.gz``).  ``steps`` (``tracks.step_table``) adds a steps track.

    Raises ProfkitError for an empty window or an unwritable output; ``out``
    then does not exist (or keeps its old content)."""
    span = tracks.trace_span(trace)
    if span is None:
        raise ProfkitError(f"{trace.name} has no events to export (no kernels, memory operations, "
                           "API calls or ranges)")
    lo, hi = window_ns if window_ns is not None else span
    if hi <= lo:
        raise ProfkitError(f"the window is empty: its end ({hi / 1e9:.6f} s) is not after its start "
                           f"({lo / 1e9:.6f} s)")
    tables = tracks.load_tables(trace, lo, hi, whole=window_ns is None)
    if window_ns is not None and not any(len(t) for t in tables.values()):
        zero = session_zero(trace)
        raise ProfkitError(f"no events between {seconds_text(lo - zero)} and {seconds_text(hi - zero)} "
                           f"{SESSION_START} (the trace spans {seconds_text(span[0] - zero)} to "
                           f"{seconds_text(span[1] - zero)})")
    gpu_base = tracks.gpu_pid_base(tables)
    # Times are written as microseconds with 3 decimals, which readers parse as doubles: exact
    # only below 2**53 ns.  An epoch clock (older Kineto traces) is written from a base instead,
    # named in the header as Kineto names it ("baseTimeNanoseconds").
    shift = tracks.time_base(span)
    if shift:
        tables = tracks.shifted(tables, shift)
        steps = None if steps is None else steps.assign(start_ns=steps["start_ns"] - shift,
                                                        end_ns=steps["end_ns"] - shift)
    with open_output(out, inputs=(trace.path,)) as fh:
        fh.write(_header(trace, shift))
        stream = _EventStream(fh)
        stream.write(tracks.metadata_events(trace, tables, gpu_base))
        k = tables["kernels"]
        stream.write_all(ev.kernel_events(k, k["device"].to_numpy() + gpu_base))
        for table, cat in (("memcpy", "gpu_memcpy"), ("memset", "gpu_memset")):
            stream.write_all(ev.memory_events(tables[table], tables[table]["device"].to_numpy() + gpu_base, cat))
        g = tables["graphs"]
        stream.write_all(ev.graph_events(g, g["device"].to_numpy() + gpu_base))
        api_tid = tracks.api_tids(tables["api"])
        stream.write_all(ev.api_events(tables["api"].assign(tid=api_tid)))
        chunks, names = tracks.range_events(tables["ranges"], tables["cpu_ops"], gpu_base)
        stream.write_all(chunks)
        stream.write(names)
        stream.write(tracks.sync_site_events(tables["ranges"]))
        flows = tracks.flow_pairs(tables, gpu_base, api_tid)
        stream.write_all(ev.flow_events(*flows))
        if steps is not None and len(steps):
            stream.write(tracks.step_events(steps, lo - shift, hi - shift))
        stream.write(_busy_counters(trace, lo, hi, gpu_base, shift))
        fh.write(b"\n]}\n")
    return ExportResult(path=Path(out), events=stream.count, kernels=len(k), flows=len(flows[0]),
                        window_ns=(int(lo), int(hi)))


def _header(trace: Trace, shift: int) -> bytes:
    """Top-level keys before ``traceEvents``, as Kineto writes them: a schema
    version, the devices (so occupancy still works on the export), the rank."""
    meta = trace.meta
    head: dict = {"schemaVersion": 1, "displayTimeUnit": "ns",
                  "deviceProperties": tracks.device_properties(trace),
                  "profkit": {"exported_from": meta.source, "file": ev.clean_text(trace.name),
                              "tool_version": meta.tool_version, "schema_version": meta.schema_version}}
    if shift:
        head["baseTimeNanoseconds"] = shift
    if meta.rank is not None:
        head["distributedInfo"] = {"rank": meta.rank, "world_size": meta.world_size}
    text = orjson.dumps(head).decode()
    return (text[:-1] + ',"traceEvents":[').encode()


def _busy_counters(trace: Trace, lo: int, hi: int, gpu_base: int, shift: int) -> list[str]:
    from profkit.analysis.timeline.busy import gpu_busy_per_bin

    bins = int(max(1, min(BUSY_BINS, (hi - lo) // MIN_BUSY_BIN_NS)))
    busy = gpu_busy_per_bin(trace, lo, hi, bins)
    lines: list[str] = []
    for device in busy.busy_ns:
        pct = busy.percent(device)
        # a last sample at the window's end closes the final bin
        lines += ev.counter_events("GPU busy %", device + gpu_base, busy.edges - shift, np.append(pct, 0.0),
                                   "busy %")
    return lines

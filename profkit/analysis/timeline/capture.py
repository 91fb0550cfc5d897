"""The capture: what was traced, on what, and how busy the GPU was (``profkit info``, the report header).

Everything comes from the trace model (devices, GPU activity, counts,
``TraceMeta``) except what only one source records: for nsys exports the
driver and runtime versions, launched command lines and the GPUs' chip and
bus come from ``profkit.readers.nsys.details`` through the trace's
``native`` handle; for other sources from ``TraceMeta.extra`` keys
``driver_version`` (or Kineto's ``cuda_driver_api_version``),
``cuda_runtime_version`` and ``launched`` where the reader set them (else
they are None).  Nothing here reads the profiled
process's environment.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.analysis.timeline.busy import gpu_busy
from profkit.model import NSYS, Trace

TOOL_NAMES = {"nsys": "Nsight Systems", "kineto": "PyTorch profiler (Kineto)"}
COUNTED = {"kernels": "kernels", "memcpys": "memcpy", "memsets": "memset", "graph_replays": "graphs",
           "api_calls": "api", "nvtx_ranges": "ranges"}


def capture_info(trace: Trace) -> dict[str, Any]:
    """Keys: export, source, tool, tool_version, nsys_version, export_schema_version,
    gpu_name, sm_count, memory_bandwidth_gbps, memory_total_bytes,
    compute_capability, driver_version, cuda_runtime_version, gpus (every
    device of the trace), session_start_utc, span_ns (capture duration),
    gpu_span_ns (first to last GPU operation), gpu_busy_ns (union of kernel,
    memcpy and memset intervals), gpu_busy_pct (of the GPU span),
    gpu_busy_pct_of_capture, per_device_busy, counts, traced, processes
    (pid and name of the processes that ran kernels, then each launched
    command line), rank and world_size where the trace records them.
    """
    meta = trace.meta
    extras = _extras(trace)
    busy = gpu_busy(trace)
    gpus = _gpus(trace, extras.get("gpus") or {})
    primary = _primary_gpu(gpus, busy["per_device"])
    span = (meta.capture_end_ns - meta.capture_start_ns
            if meta.capture_start_ns is not None and meta.capture_end_ns is not None else None)
    return {
        "export": trace.name,
        "source": meta.source,
        "tool": TOOL_NAMES.get(meta.source, meta.source),
        "tool_version": meta.tool_version,
        "nsys_version": meta.tool_version if meta.source == NSYS else None,
        "export_schema_version": meta.schema_version,
        "gpu_name": primary.get("name"),
        "sm_count": primary.get("sm_count"),
        "memory_bandwidth_gbps": primary.get("memory_bandwidth_gbps"),
        "memory_total_bytes": primary.get("memory_total_bytes"),
        "compute_capability": primary.get("compute_capability"),
        "driver_version": extras.get("driver_version"),
        "cuda_runtime_version": extras.get("cuda_runtime_version"),
        "session_start_utc": meta.session_start_utc,
        "span_ns": span,
        "gpu_span_ns": busy["span_ns"],
        "gpu_busy_ns": busy["busy_ns"],
        "gpu_busy_pct": busy["busy_pct"],
        "gpu_busy_pct_of_capture": round(100.0 * busy["busy_ns"] / span, 2) if span else None,
        "per_device_busy": busy["per_device"],
        "counts": {key: trace.count(table) if trace.has(table) else 0 for key, table in COUNTED.items()
                   # graph replays whose kernels were not traced: only where there are any
                   if table != "graphs" or (trace.has(table) and trace.count(table))},
        "traced": list(meta.traced),
        "processes": _processes(trace, extras.get("launched") or []),
        "rank": meta.rank,
        "world_size": meta.world_size,
        "gpus": gpus,
    }


def _extras(trace: Trace) -> dict[str, Any]:
    details = getattr(trace.source, "details", None)
    if callable(details):  # the nsys reader's (or a rank view's, its whole job's)
        return dict(details())
    extra = trace.meta.extra
    out = {key: extra.get(key) for key in ("driver_version", "cuda_runtime_version", "launched")}
    # Kineto records the CUDA version of the driver's API ("13.0"), not the driver's release
    if out["driver_version"] is None and extra.get("cuda_driver_api_version"):
        out["driver_version"] = f"CUDA {extra['cuda_driver_api_version']} (driver API)"
    return out


def _gpus(trace: Trace, more: dict[Any, dict[str, Any]]) -> list[dict[str, Any]]:
    if not trace.has("devices"):
        return []
    out = []
    for row in trace.devices.to_dict("records"):
        def known(key: str) -> Any:
            value = row.get(key)
            return None if value is None or value == -1 or value == "" else value

        device = int(row["device"])
        major, minor = known("cc_major"), known("cc_minor")
        bandwidth = known("memory_bandwidth_bps")
        out.append({
            "id": device, "name": known("name"), "sm_count": known("sm_count"),
            "memory_bandwidth_gbps": round(bandwidth / 1e9, 1) if bandwidth else None,
            "memory_total_bytes": known("memory_total_bytes"),
            "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None,
            **more.get(device, {}),
        })
    return out


def _primary_gpu(gpus: list[dict], per_device: list[dict]) -> dict:
    """The GPU that did the most work."""
    if not gpus:
        return {}
    if per_device:
        busiest = max(per_device, key=lambda d: d["busy_ns"])["device"]
        for g in gpus:
            if g.get("id") == busiest:
                return g
    return gpus[0]


def _processes(trace: Trace, launched: list[str]) -> list[dict[str, Any]]:
    pids: list[int] = []
    if trace.has("kernels"):
        column = trace.table("kernels", ["pid"])["pid"].to_numpy()
        pids = [int(p) for p in np.unique(column) if p >= 0] if len(column) else []
    names: dict[int, str] = {}
    if pids and trace.has("processes"):
        table = trace.table("processes", ["pid", "name"])
        names = {int(p): str(n) for p, n in zip(table["pid"], table["name"]) if n}
    out: list[dict[str, Any]] = [{"pid": pid, "name": names.get(pid), "ran_kernels": True} for pid in pids]
    out += [{"pid": None, "name": None, "command_line": command, "launched": True} for command in launched]
    return out

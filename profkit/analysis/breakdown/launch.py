"""Kernel launches: CPU launch time against GPU time, launch delays, queue depth.

Like HTA's ``get_cuda_kernel_launch_stats`` (``cuda_kernel_analysis.py``):
for every GPU event launched by ``cudaLaunchKernel``/``cudaLaunchKernelExC``
(and ``cudaMemcpyAsync``/``cudaMemsetAsync``), ``cpu_duration`` is the
launch call's duration, ``gpu_duration`` the event's, and ``launch_delay``
the time from the call's end to the event's start, clipped at 0.  profkit
also counts the driver's ``cuLaunchKernel``/``cuLaunchKernelEx``, which
launch Triton kernels; HTA 0.5.0 leaves them out of these statistics.
Outliers use HTA's defaults: a launch call longer than 50 µs, a launch delay
longer than 100 µs.

Queue depth, like HTA's ``get_queue_length_time_series``: per stream, +1
when a launch call starts and -1 when its GPU event starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
MEMORY_LAUNCH_APIS = ("cudaMemcpyAsync", "cudaMemsetAsync")
# HTA's get_runtime_launch_events_query: the calls that enqueue work on a stream.
QUEUE_LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync",
                     "cudaMemsetAsync")
RUNTIME_OUTLIER_NS = 50_000
LAUNCH_DELAY_OUTLIER_NS = 100_000
# The verdict: at least this share of launches run shorter on the GPU than
# their launch call takes on the CPU, and the GPU idles for lack of work.
LAUNCH_BOUND_SHORT_SHARE = 0.5
LAUNCH_BOUND_MIN_IDLE_PCT = 10.0
# ...and the idle time is made of short gaps.  A launch costs 5-20 µs; a gap of
# 1 ms or more is the host doing something else (start-up, loading data, sleeping,
# a sync).  Measured over the steady state of the committed traces: launch-bound
# loops have 0-18% of their idle time in such gaps, a loop whose host sleeps 5 ms
# a step (nsys2025_mlp_sleep) 89%.
LONG_GAP_NS = 1_000_000
LAUNCH_BOUND_MAX_LONG_GAP_SHARE = 0.5


def long_gap_share(gap_start: np.ndarray, gap_end: np.ndarray) -> float | None:
    """The share (0..1) of GPU idle time in gaps of at least LONG_GAP_NS; None without idle time."""
    length = gap_end - gap_start
    total = int(length.sum())
    return float(length[length >= LONG_GAP_NS].sum()) / total if total > 0 else None


def launches(events: pd.DataFrame, include_memory: bool = True) -> pd.DataFrame:
    """One row per launched GPU event: correlation, stream, name, launch_start,
    cpu_duration_ns, gpu_duration_ns, launch_delay_ns."""
    apis = LAUNCH_APIS + (MEMORY_LAUNCH_APIS if include_memory else ())
    launched = events[events["launch_api"].isin(apis) & (events["source"] != "sync")]
    start = launched["start"].to_numpy()
    return pd.DataFrame({
        "correlation": launched["correlation"].to_numpy(),
        "stream": launched["stream"].to_numpy(),
        "name": launched["name"].to_numpy(),
        "launch_start": launched["launch_start"].to_numpy(),
        "cpu_duration_ns": launched["launch_end"].to_numpy() - launched["launch_start"].to_numpy(),
        "gpu_duration_ns": launched["end"].to_numpy() - start,
        "launch_delay_ns": np.maximum(start - launched["launch_end"].to_numpy(), 0),
    })


def launch_summary(rows: pd.DataFrame, idle_pct: float | None, host_wait_share: float | None,
                   long_gaps: float | None = None, graphs_launched: bool = False) -> dict[str, Any]:
    """Totals, medians, outlier counts and a launch-bound verdict in words.

    ``host_wait_share``: the share of idle time that is host wait (0..1);
    ``long_gaps``: the share of idle time in gaps of LONG_GAP_NS or more (``long_gap_share``);
    ``graphs_launched``: the trace replays CUDA graphs already, so the advice is about the
    kernels still launched one by one, not to start using graphs."""
    n = len(rows)
    if n == 0:
        return {"launches": 0, "launch_bound": False, "verdict": "no kernels recorded in the trace"}
    cpu = rows["cpu_duration_ns"].to_numpy()
    gpu = rows["gpu_duration_ns"].to_numpy()
    delay = rows["launch_delay_ns"].to_numpy()
    short = gpu < cpu
    short_share = float(short.mean())
    idle_enough = idle_pct is not None and idle_pct >= LAUNCH_BOUND_MIN_IDLE_PCT
    host_waits = host_wait_share is not None and host_wait_share >= 0.5
    elsewhere = long_gaps is not None and long_gaps >= LAUNCH_BOUND_MAX_LONG_GAP_SHARE
    bound = short_share >= LAUNCH_BOUND_SHORT_SHARE and idle_enough and host_waits and not elsewhere
    if bound:
        verdict = (f"launch-bound: {short_share:.0%} of kernels run shorter on the GPU than their launch takes "
                   f"on the CPU (median launch {np.median(cpu) / 1000:.1f} µs, median kernel "
                   f"{np.median(gpu) / 1000:.1f} µs) and the GPU is idle {idle_pct:.0f}% of the time, "
                   "mostly waiting for the host: "
                   + ("fuse the kernels still launched one by one, or bring them into the graphs this program "
                      "already replays" if graphs_launched else "fuse kernels or capture a CUDA graph"))
    elif short_share >= LAUNCH_BOUND_SHORT_SHARE and idle_enough and host_waits:
        verdict = (f"not launch-bound: the GPU is idle {idle_pct:.0f}% of the time, but {long_gaps:.0%} of that "
                   f"in stretches of {LONG_GAP_NS / 1e6:.0f} ms or more, far longer than a launch: the host was busy "
                   "with something else then (start-up, loading data, sleeping, a sync); the longest idle "
                   "stretches say what the launching thread did")
    elif short_share >= LAUNCH_BOUND_SHORT_SHARE:
        verdict = (f"not launch-bound: {short_share:.0%} of kernels are shorter than their launch, "
                   "but the CPU keeps enough work queued")
    else:
        verdict = (f"not launch-bound: kernels run longer than their launches "
                   f"(median kernel {np.median(gpu) / 1000:.1f} µs, median launch {np.median(cpu) / 1000:.1f} µs)")
    return {
        "launches": n,
        "cpu_launch_total_ns": int(cpu.sum()), "gpu_total_ns": int(gpu.sum()),
        "cpu_launch_median_ns": float(np.median(cpu)), "gpu_median_ns": float(np.median(gpu)),
        "launch_delay_median_ns": float(np.median(delay)),
        "short_kernels": int(short.sum()), "short_kernel_pct": 100.0 * short_share,
        "runtime_outliers": int((cpu > RUNTIME_OUTLIER_NS).sum()),
        "launch_delay_outliers": int((delay > LAUNCH_DELAY_OUTLIER_NS).sum()),
        "long_gap_pct": None if long_gaps is None else 100.0 * long_gaps,
        "launch_bound": bool(bound), "verdict": verdict,
    }


def launch_delay_outliers(rows: pd.DataFrame, top: int = 10) -> list[dict[str, Any]]:
    """The launches that waited longest for the GPU, longest first."""
    worst = rows[rows["launch_delay_ns"] > LAUNCH_DELAY_OUTLIER_NS].nlargest(top, "launch_delay_ns")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in worst.to_dict("records")]


def queue_depth(events: pd.DataFrame) -> pd.DataFrame:
    """Queue depth per stream over time, as a step function.

    Columns: ts (ns), stream, queue_length (the value from ts until the
    stream's next row).  Only work enqueued by the calls HTA counts
    (``QUEUE_LAUNCH_APIS``) takes part."""
    launch = events["launch_start"].to_numpy()
    mask = (launch >= 0) & (events["source"] != "sync").to_numpy() & \
        events["launch_api"].isin(QUEUE_LAUNCH_APIS).to_numpy()
    n = int(mask.sum())
    stream = np.tile(events["stream"].to_numpy()[mask], 2)
    ts = np.concatenate([launch[mask], events["start"].to_numpy()[mask]])
    delta = np.concatenate([np.ones(n, np.int8), -np.ones(n, np.int8)])
    # per stream, in time order; at equal times an enqueue comes before the dequeue it allows
    order = np.lexsort((-delta, ts, stream))
    ts, stream, delta = ts[order], stream[order], delta[order]
    depth = np.cumsum(delta, dtype=np.int64)
    first = np.flatnonzero(np.r_[True, stream[1:] != stream[:-1]]) if stream.size else np.empty(0, np.int64)
    # restart the running sum at each stream's first row
    before = np.repeat(depth[first] - delta[first], np.diff(np.r_[first, stream.size]))
    return pd.DataFrame({"ts": ts, "stream": stream, "queue_length": depth - before}, copy=False)


def queue_summary(series: pd.DataFrame) -> list[dict[str, Any]]:
    """Per stream: the largest queue depth, its time-weighted mean, and the
    share of time (between its first and last change) with nothing queued."""
    rows = []
    for stream, g in series.groupby("stream", sort=True):
        ts = g["ts"].to_numpy()
        q = g["queue_length"].to_numpy()
        span = np.diff(ts)
        total = int(span.sum())
        rows.append({
            "stream": int(stream), "max_queue": int(q.max()),
            "mean_queue": float((q[:-1] * span).sum() / total) if total else float(q.mean()),
            "empty_pct": 100.0 * float(span[q[:-1] <= 0].sum()) / total if total else None,
        })
    return rows

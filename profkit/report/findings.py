"""Plain-language findings for the top of the report, from the report's own figures.

Each rule reads data the report already holds (summaries, utilization,
occupancy, ncu) and says what it shows, with the numbers; none guesses
beyond them.  Thresholds are named here so the wording and the rule stay
together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profkit.analysis.timeline.busy import Utilization
from profkit.model.clock import SESSION_START, seconds_text
from profkit.report.text import duration, short_kernel_name, size_or_unknown

Row = dict[str, Any]

LOW_BUSY_PCT = 50.0  # below this the GPU mostly waited for work
DOMINANT_KERNEL_PCT = 30.0
SHORT_KERNEL_NS = 10_000  # launch overhead is a few µs: kernels this short are dominated by it
SHORT_LAUNCH_SHARE = 0.5
MIN_LAUNCHES_FOR_SHORT = 100
SYNC_API_SHARE = 0.10
MEMCPY_VS_WORK = 0.15  # copies' share of all GPU work (kernels, graph replays, copies)
LOW_OCCUPANCY_PCT = 50.0
HEAVY_KERNEL_PCT = 10.0
DRAM_BOUND_PCT = 70.0
ACHIEVED_VS_THEORETICAL = 0.6
NVTX_RANGE_PCT = 20.0

# Calls that block the calling CPU thread until the GPU has caught up.
BLOCKING_APIS = {
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyHtoD",
}


def findings(*, capture: Row | None = None, kernels: Sequence[Row] | None = None,
             api: Sequence[Row] | None = None, memory: Sequence[Row] | None = None,
             utilization: Sequence[Utilization] | None = None, longest_gap_ranges: Sequence[str] = (),
             occupancy: Sequence[Row] | None = None, nvtx_ranges: Sequence[Row] | None = None,
             ncu: Sequence[Row] | None = None, time_origin_ns: int = 0, steps_found: bool = False,
             longest_gap_cpu: str = "", steady_kernels: Sequence[Row] | None = None,
             launches: Row | None = None, graph_replay_ns: int = 0) -> list[str]:
    """Findings in order of weight; empty inputs give none.

    ``longest_gap_ranges``: the NVTX ranges enclosing the longest idle gap, innermost first;
    ``longest_gap_cpu``: what its launching thread did meanwhile (``text.cpu_activity``);
    ``time_origin_ns``: the trace time that reads as 0 s (``profkit.model.clock.session_zero``);
    ``steps_found``: the steady-state findings (``steps_section``) lead; the
    whole-capture busy figure then says it includes start-up and blames nobody;
    ``steady_kernels``: kernel time by name over the steady-state steps
    (``steps.windows.kernels_in_window``): the kernel findings then speak of the
    steady state, not of start-up's kernels (a compile's autotuning, warm-up);
    ``launches``: ``analysis.kernels.launches.launch_profile`` over the steady state (else the
    capture): the launch advice counts only kernels launched one by one and names no remedy
    the trace shows in use (CUDA graphs, torch.compile);
    ``graph_replay_ns``: GPU time of graph replays whose kernels the kernel rows lack (graph
    level): all GPU work is the copies' denominator.
    """
    out: list[str] = []
    out += _busy(capture, utilization, longest_gap_ranges, time_origin_ns, steps_found, longest_gap_cpu)
    graph_level = graph_replay_ns > 0
    out += _kernels(steady_kernels, steady=True, profile=launches, graph_level=graph_level) if steady_kernels \
        else _kernels(kernels, profile=launches, graph_level=graph_level)
    out += _blocking_calls(api)
    out += _memory(memory, kernels, graph_replay_ns)
    out += _nvtx(nvtx_ranges)
    out += _occupancy(occupancy)
    out += _ncu(ncu)
    return out


def longest_gap(utilization: Sequence[Utilization] | None) -> tuple[int, int, int] | None:
    """(start, end, device) of the longest idle gap over all devices."""
    gaps = [(end - start, start, end, util.device_id) for util in utilization or () for start, end in util.gaps]
    if not gaps:
        return None
    _, start, end, device = max(gaps, key=lambda g: (g[0], -g[1]))
    return start, end, device


def _busy(capture: Row | None, utilization: Sequence[Utilization] | None,
          gap_ranges: Sequence[str], origin: int = 0, steps_found: bool = False, gap_cpu: str = "") -> list[str]:
    out = []
    if capture and capture.get("gpu_busy_pct") is not None and capture.get("gpu_span_ns"):
        pct = capture["gpu_busy_pct"]
        whole = "Over the whole capture, start-up included, the GPU" if steps_found else "The GPU"
        text = (f"{whole} was busy {_pct(pct)} of the time from its first to its last operation "
                f"({duration(capture['gpu_busy_ns'])} of {duration(capture['gpu_span_ns'])}).")
        if pct < LOW_BUSY_PCT and not steps_found:
            text += f" For the other {_pct(100 - pct)} it had no kernel or copy to run: it waited for the host."
        out.append(text)
    gap = longest_gap(utilization)
    if gap:
        start, end, device = gap
        where = f" on GPU {device}" if len(utilization or ()) > 1 else ""
        inside = f", inside the range {gap_ranges[0]!r}" if gap_ranges else ""
        out.append(f"The longest idle stretch{where} lasted {duration(end - start)}, from "
                   f"{seconds_text(start - origin)} to {seconds_text(end - origin)} {SESSION_START}{inside}."
                   + (f" The launching thread meanwhile: {gap_cpu}." if gap_cpu else ""))
    return out


def _kernels(kernels: Sequence[Row] | None, steady: bool = False, profile: Row | None = None,
             graph_level: bool = False) -> list[str]:
    """``graph_level``: graph replays ran kernels the rows lack, so the shares are of the kernel
    time outside CUDA graphs, and say so."""
    if not kernels:
        return []
    out = []
    of = "the kernel time outside CUDA graphs (their replays' kernels were not recorded one by one)" \
        if graph_level else "all kernel time"
    total = sum(k["total_ns"] for k in kernels)
    top = kernels[0]
    where = "In the steady state, one kernel takes" if steady else "One kernel takes"
    launches = (f"{top['per_step']:,.4g} launches per step" if steady and "per_step" in top
                else f"{top['instances']:,} launches")
    if total and 100.0 * top["total_ns"] / total >= DOMINANT_KERNEL_PCT:
        out.append(f"{where} {100.0 * top['total_ns'] / total:.1f}% of {of}: "
                   f"{short_kernel_name(top['name'])} ({launches}, {duration(top['avg_ns'])} on average).")
    elif total and len(kernels) > 3:
        share = 100.0 * sum(k["total_ns"] for k in kernels[:3]) / total
        spread = "In the steady state, kernel time" if steady else "Kernel time"
        it = "it" if not graph_level else "it, outside CUDA graphs"
        out.append(f"{spread} is spread out: the top 3 of {len(kernels)} kernels take {share:.1f}% of {it}.")
    if profile is not None:
        return out + _short_launches(profile, steady)
    count = sum(k["instances"] for k in kernels)
    short = sum(k["instances"] for k in kernels if k["avg_ns"] < SHORT_KERNEL_NS)
    if count >= MIN_LAUNCHES_FOR_SHORT and short / count >= SHORT_LAUNCH_SHARE:
        out.append(f"{short:,} of {count:,} kernel launches ({100.0 * short / count:.0f}%) are of kernels "
                   f"that run under {duration(SHORT_KERNEL_NS)} on average; at that size the launch cost "
                   "(a few µs each) is comparable to the work. Fusing them (torch.compile) or replaying them "
                   "as a CUDA graph removes most of it.")
    return out


def _short_launches(launches: Row, steady: bool) -> list[str]:
    """Short kernels launched one by one, and only the remedies the trace shows unused: a kernel
    inside a CUDA graph costs no launch of its own, and Inductor's kernels are fused already."""
    count, short = launches["one_by_one"], launches["short_one_by_one"]
    if count < MIN_LAUNCHES_FOR_SHORT or short / count < SHORT_LAUNCH_SHARE:
        return []
    where = " in the steady state" if steady else ""
    text = (f"{short:,} of the {count:,} kernels launched one by one{where} ({100.0 * short / count:.0f}%) ran "
            f"under {duration(SHORT_KERNEL_NS)}; at that size the launch cost (a few µs each) is comparable "
            "to the work.")
    in_graphs = launches["in_graphs"] or launches["graph_replays"]
    if launches["in_graphs"]:
        text += f" {launches['in_graphs']:,} more ran inside CUDA graphs (no launch each)."
    remedies = ([] if launches["compiled"] else ["fusing them (torch.compile)"]) + \
        ([] if in_graphs else ["replaying them as a CUDA graph"])
    if remedies:
        remedy = " or ".join(remedies)
        text += f" {remedy[0].upper()}{remedy[1:]} removes most of it."
    return [text]


def _blocking_calls(api: Sequence[Row] | None) -> list[str]:
    if not api:
        return []
    total = sum(r["total_ns"] for r in api)
    blocking = [r for r in api if r["name"] in BLOCKING_APIS]
    spent = sum(r["total_ns"] for r in blocking)
    if not total or not blocking or spent / total < SYNC_API_SHARE:
        return []
    worst = max(blocking, key=lambda r: r["total_ns"])
    return [(f"The CPU spent {duration(spent)} ({100.0 * spent / total:.0f}% of its CUDA API time) in calls that "
             f"wait for the GPU; most in {worst['name']} ({worst['instances']:,} calls, "
             f"{duration(worst['total_ns'])}).")]


def _memory(memory: Sequence[Row] | None, kernels: Sequence[Row] | None, graph_replay_ns: int = 0) -> list[str]:
    """Copies and sets as a share of all GPU work: kernels, graph replays whose kernels were not
    recorded one by one (nsys's default, graph level) and the copies themselves."""
    if not memory:
        return []
    copy_ns = sum(r["total_ns"] for r in memory)
    work_ns = sum(k["total_ns"] for k in kernels or ()) + graph_replay_ns + copy_ns
    if not work_ns or copy_ns / work_ns < MEMCPY_VS_WORK:
        return []
    biggest = max(memory, key=lambda r: r["total_ns"])
    compared = f"{100.0 * copy_ns / work_ns:.0f}% of all GPU work"
    return [(f"Memory copies and sets took {duration(copy_ns)} of GPU time, {compared}; the most in "
             f"{biggest['direction']} ({biggest['instances']:,} operations, "
             f"{size_or_unknown(biggest.get('total_bytes'))}, {duration(biggest['total_ns'])}).")]


def _nvtx(nvtx_ranges: Sequence[Row] | None) -> list[str]:
    named = [r for r in nvtx_ranges or () if r.get("range") is not None and r.get("time_pct") is not None]
    if not named or named[0]["time_pct"] < NVTX_RANGE_PCT:
        return []
    top = named[0]
    return [(f"The NVTX range {top['range']!r} holds {top['time_pct']:.1f}% of kernel time "
             f"({top['instances']:,} kernel launches of {_count(top['kernels'], 'kernel')}).")]


def _occupancy(rows: Sequence[Row] | None) -> list[str]:
    out = []
    for row in rows or ():
        if (row.get("time_pct") or 0) < HEAVY_KERNEL_PCT:
            continue
        if row.get("user_code") is False:
            continue  # a vendor kernel (cuBLAS, NCCL, ...): nothing the user can tune, so no finding
        name = short_kernel_name(row.get("short_name") or row.get("name"))
        if row.get("theoretical_occupancy_pct") is not None and row["theoretical_occupancy_pct"] < LOW_OCCUPANCY_PCT:
            text = (f"{name} ({row['time_pct']:.0f}% of kernel time) can keep at most "
                    f"{row['theoretical_occupancy_pct']:.0f}% of an SM's warps resident, limited by "
                    f"{row['limiter'].replace('_', ' ')}.")
            if row.get("advice"):
                text += f" {row['advice'][0].upper()}{row['advice'][1:]}."
            out.append(text)
        elif row.get("spills"):
            out.append(f"{name} ({row['time_pct']:.0f}% of kernel time) uses {row['local_mem_per_thread']} B of "
                       "local memory per thread: registers spill.")
    return out


NCU_KERNELS = 3  # findings for the kernels ncu spent the most time in


def _ncu(rows: Sequence[Row] | None) -> list[str]:
    out = []
    for row in list(rows or ())[:NCU_KERNELS]:
        name = short_kernel_name(row["name"])
        dram = row.get("dram_throughput_pct")
        if dram is not None and dram >= DRAM_BOUND_PCT:
            out.append(f"ncu: {name} moves data at {dram:.0f}% of the peak DRAM bandwidth: it is memory-bound, "
                       "so only fewer bytes (fusion, lower precision, better reuse) make it faster.")
        achieved, theoretical = row.get("achieved_occupancy_pct"), row.get("theoretical_occupancy_pct")
        if achieved is not None and theoretical and achieved < ACHIEVED_VS_THEORETICAL * theoretical:
            out.append(f"ncu: {name} reaches {achieved:.0f}% occupancy of a possible {theoretical:.0f}%: "
                       "warps finish unevenly or the grid leaves SMs idle (tail effect, too few blocks).")
    return out


def _pct(value: float) -> str:
    return f"{value:.2f}%" if value < 1 or value > 99 else f"{value:.1f}%"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")

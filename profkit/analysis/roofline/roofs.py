"""Per launch and per kernel name: intensity, achieved rates, the binding roof, a verdict.

The binding roof is the one the kernel runs closest to: every roof this
capture measured (each CUDA-core and tensor-core pipe the kernel used, DRAM,
L2) gets ``achieved / peak``, and the highest fraction wins.  A kernel at 90%
of DRAM bandwidth and 2% of FP32 is memory-bound; a bf16 GEMM at 93% of the
bf16 tensor roof and 30% of DRAM is compute-bound on tensor cores.  This is
the classic roofline's "which ceiling is under the point" read per pipe, and
it needs no choice of which bytes the intensity divides by.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from profkit.analysis.roofline.counters import Counters, read_counters

MEMORY_ROOFS = ("DRAM", "L2")
NEAR_ROOF_PCT = 80.0  # at or above: "near the roof"; below: the headroom is worth a look


@dataclass
class RooflineRow:
    """One kernel launch (``launches`` = 1) or one kernel name's launches together.
    Rates per second, bytes in bytes, FLOPs counted as ncu counts them (FMA = 2)."""

    kernel: str
    launches: int
    id: int | None
    duration_ns: float | None
    flops: float | None
    dram_bytes: float | None
    l2_bytes: float | None
    l1_bytes: float | None
    arithmetic_intensity: float | None  # FLOP per DRAM byte
    l2_intensity: float | None
    l1_intensity: float | None
    achieved_flops_per_s: float | None
    achieved_dram_bytes_per_s: float | None
    roof: str | None  # the binding roof: "bf16 tensor", "fp32", "DRAM", ...
    bound: str | None  # "memory" | "compute"
    pct_of_roof: float | None
    verdict: str
    pct_of_peak: dict[str, float] = field(default_factory=dict)  # every measured roof -> % of its peak
    peaks: dict[str, float] = field(default_factory=dict)  # roof -> FLOP/s or bytes/s, from this capture
    peak_sources: dict[str, str] = field(default_factory=dict)  # roof -> how its peak was obtained
    flops_by_roof: dict[str, float] = field(default_factory=dict)
    device: int | None = None
    # tensor roofs whose peak may be the 2:4-sparse rate (``counters.TensorWork.peak_may_be_sparse``)
    sparse_peak_roofs: list[str] = field(default_factory=list)
    # the kernel's machine code where it is known (``profkit.analysis.roofline.code``), else None
    vector_grade: str | None = None
    code_verdict: str | None = None
    code_source: str | None = None
    # roofs this capture has a peak for but no counter of the work done: no bound can be named
    # (the kernel may be nearer that roof than any other), never one read from a zero
    missing_counters: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def launch_row(launch: Any) -> RooflineRow:
    """The roofline of one ``NcuLaunch``."""
    c = read_counters(launch.metrics, launch.duration_ns)
    return _row(launch.kernel_name, 1, launch.id, c.duration_ns, _work(c), _peaks(c), launch.device,
                _sparse_peak_roofs(c, getattr(launch, "cc", "")), c.missing)


def _sparse_peak_roofs(c: Counters, cc: str) -> list[str]:
    """The tensor roofs whose peak may count 2:4 sparsity: none before Ampere (sm_80), which
    has no sparse tensor instructions; on Ampere and later (or an unknown GPU) those read
    from the source's own peak."""
    major = cc.split(".", 1)[0]
    if major.isdigit() and int(major) < 8:
        return []
    return sorted(roof for roof, t in c.tensor.items() if t.peak_may_be_sparse)


def _work(c: Counters) -> dict[str, float | None]:
    """roof -> FLOPs or bytes done; FLOP roofs only where the kernel did some of that work."""
    work: dict[str, float | None] = {}
    for roof, flops in c.cuda_flops.items():
        work[roof] = flops
    for roof, t in c.tensor.items():
        work[roof] = t.flops
    for level in ("DRAM", "L2", "L1"):
        work[level] = c.bytes.get(level)
    return work


def _peaks(c: Counters) -> dict[str, tuple[float | None, str]]:
    """roof -> (peak per second at this launch's clock, how it was obtained)."""
    out: dict[str, tuple[float | None, str]] = {}
    clock = c.sm_clock_hz
    for roof, per_cycle in c.cuda_peak_per_cycle.items():
        out[roof] = (per_cycle * clock if clock else None,
                     f"2 x sm__sass_thread_inst_executed_op_{roof_fma(roof)}_pred_on.sum.peak_sustained x {c.sm_clock_metric}")
    for roof, t in c.tensor.items():
        out[roof] = (t.peak_per_cycle * clock if t.peak_per_cycle and clock else None,
                     f"{t.peak_metric} x {c.sm_clock_metric}")
    for level, clock_name in (("DRAM", "dram__cycles_elapsed.avg.per_second"), ("L2", "lts__cycles_elapsed.avg.per_second"),
                              ("L1", "l1tex__cycles_elapsed.avg.per_second")):
        metric = {"DRAM": "dram__bytes", "L2": "lts__t_bytes", "L1": "l1tex__t_bytes"}[level]
        out[level] = (c.bytes_peak_per_s.get(level), f"{metric}.sum.peak_sustained x {clock_name}")
    return out


def roof_fma(roof: str) -> str:
    return {"fp64": "dfma", "fp32": "ffma", "fp16": "hfma"}[roof]


def _row(kernel: str, launches: int, launch_id: int | None, duration_ns: float | None,
         work: dict[str, float | None], peaks: dict[str, tuple[float | None, str]], device: int | None,
         sparse_peak_roofs: Sequence[str] = (), missing: dict[str, str] | None = None) -> RooflineRow:
    flop_roofs = [r for r in work if r not in ("DRAM", "L2", "L1")]
    flops_by_roof = {r: work[r] for r in flop_roofs if work[r] is not None}
    flops = sum(flops_by_roof.values()) if flop_roofs else None
    seconds = duration_ns / 1e9 if duration_ns else None
    dram, l2, l1 = work.get("DRAM"), work.get("L2"), work.get("L1")
    pct: dict[str, float] = {}
    peak_values: dict[str, float] = {}
    peak_sources: dict[str, str] = {}
    for roof, (peak, how) in peaks.items():
        if peak:
            peak_values[roof] = peak
            peak_sources[roof] = how
        done = work.get(roof)
        if peak and seconds and done is not None and roof != "L1":
            # a FLOP roof the kernel never touched is no candidate; a memory roof always is
            if roof in MEMORY_ROOFS or done > 0:
                pct[roof] = 100.0 * done / seconds / peak
    roof = max(pct, key=lambda r: pct[r]) if pct and flops is not None and not missing else None
    row = RooflineRow(
        kernel=kernel, launches=launches, id=launch_id, duration_ns=duration_ns, flops=flops,
        dram_bytes=dram, l2_bytes=l2, l1_bytes=l1,
        arithmetic_intensity=_ratio(flops, dram), l2_intensity=_ratio(flops, l2), l1_intensity=_ratio(flops, l1),
        achieved_flops_per_s=flops / seconds if flops is not None and seconds else None,
        achieved_dram_bytes_per_s=dram / seconds if dram is not None and seconds else None,
        roof=roof, bound=None if roof is None else "memory" if roof in MEMORY_ROOFS else "compute",
        pct_of_roof=pct.get(roof) if roof else None, verdict="",
        pct_of_peak=pct, peaks=peak_values, peak_sources=peak_sources, flops_by_roof=flops_by_roof, device=device,
        sparse_peak_roofs=[r for r in sparse_peak_roofs if r in pct], missing_counters=dict(missing or {}))
    row.verdict = verdict(row)
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def aggregate(rows: Sequence[RooflineRow], key: Any = None) -> list[RooflineRow]:
    """One row per kernel name (or per ``key(row)``): work and time summed; each peak
    weighted by the time spent at it, so % of peak = total work / sum(peak x duration)."""
    groups: dict[str, list[RooflineRow]] = {}
    for row in rows:
        groups.setdefault(key(row) if key else row.kernel, []).append(row)
    out = []
    for name, group in groups.items():
        timed = [r for r in group if r.duration_ns]
        duration = sum(r.duration_ns for r in timed) if timed else None
        work: dict[str, float | None] = {}
        for roof in {k for r in group for k in r.flops_by_roof}:
            work[roof] = sum(r.flops_by_roof.get(roof, 0.0) for r in group)
        for level, attr in (("DRAM", "dram_bytes"), ("L2", "l2_bytes"), ("L1", "l1_bytes")):
            values = [getattr(r, attr) for r in group]
            work[level] = sum(values) if all(x is not None for x in values) else None
        peaks: dict[str, tuple[float | None, str]] = {}
        for roof in {k for r in group for k in r.peaks}:
            if all(roof in r.peaks for r in timed) and duration:
                weighted = sum(r.peaks[roof] * r.duration_ns for r in timed) / duration
                peaks[roof] = (weighted, group[0].peak_sources[roof] + " (time-weighted over launches)")
        if all(r.flops is None for r in group):
            work = {k: v for k, v in work.items() if k in ("DRAM", "L2", "L1")}
        devices = {r.device for r in group}
        sparse = sorted({roof for r in group for roof in r.sparse_peak_roofs})
        missing = {roof: counter for r in group for roof, counter in r.missing_counters.items()}
        out.append(_row(name, sum(r.launches for r in group), None, duration, work, peaks,
                        devices.pop() if len(devices) == 1 else None, sparse, missing))
    out.sort(key=lambda r: (-(r.duration_ns or 0), r.kernel))
    return out


def verdict(row: RooflineRow, code_note: str | None = None) -> str:
    """The row in plain words, e.g. "memory-bound at 47% of DRAM bandwidth: up to 2.1x from
    better access (vectorized loads, fewer passes)".  ``code_note``: what the kernel's
    machine code says (scalar loads), joined where the kernel is memory-bound.  A tensor
    roof whose peak may be the 2:4-sparse rate gets the caveat (``sparse_caveat``)."""
    if row.missing_counters:
        roofs = ", ".join(f"{roof} ({counter})" for roof, counter in sorted(row.missing_counters.items()))
        return f"no bound: this capture lacks counters for {roofs}"
    if row.roof is None or row.pct_of_roof is None:
        if row.flops is None:
            return "no roofline metrics in this capture"
        return "no peak for any roof in this capture"
    text = _verdict(row, code_note)
    caveat = sparse_caveat(row)
    return f"{text}; {caveat}" if caveat else text


# Why a details page alone can read a dense GEMM at half its tensor roof: ncu's per-source peak
# (sm__ops_path_tensor_src_X.sum.peak_sustained) is the fastest instruction's, and on Ampere and
# later that is the 2:4-sparse one.  On the H100 of tests/data/roofline, the bf16 source peak is
# 1,081,344 ops/cycle: fp8's _sparsity_off peak, and twice the dense HGMMA peak of the
# hierarchical tensor chart (raw page), so its bf16 GEMM reads 46% there against 93% on the
# raw page and ncu's own 93% tensor-pipe activity (tests/test_roofline.py pins this).
SPARSE_PEAK_HINT = "the raw page (ncu --page raw; profkit trace --ncu-top writes it) has the dense peak"


def sparse_caveat(row: RooflineRow) -> str | None:
    """"the bf16 tensor peak here counts 2:4 sparsity: a dense kernel is at 93% (...)" for the
    tensor roofs the kernel used whose peak may be the sparse rate; None when there are none."""
    parts = []
    for roof in row.sparse_peak_roofs:
        pct = row.pct_of_peak.get(roof)
        if pct is None:
            continue
        dense = 2 * pct
        near = "near the roof" if dense >= NEAR_ROOF_PCT else f"up to {100.0 / dense:.1f}x below it"
        parts.append(f"the {roof} peak of this CSV is ncu's source peak, which counts 2:4 sparsity: "
                     f"a dense kernel is at {dense:.0f}% of its roof ({near})")
    if not parts:
        return None
    return "; ".join(parts) + f"; {SPARSE_PEAK_HINT}"


def _verdict(row: RooflineRow, code_note: str | None) -> str:
    pct = row.pct_of_roof
    headroom = 100.0 / pct if pct > 0 else float("inf")
    near = pct >= NEAR_ROOF_PCT
    if row.bound == "memory":
        what = "DRAM bandwidth" if row.roof == "DRAM" else "L2 bandwidth"
        text = f"memory-bound at {pct:.0f}% of {what}"
        if near:
            text += ": near the roof; only fewer bytes (fusion, lower precision) make it faster"
        else:
            text += f": up to {headroom:.1f}x from better access (vectorized loads, fewer passes)"
        if code_note:
            text += f"; {code_note}"
        return text
    pipe = f"tensor cores ({row.roof.replace(' tensor', '')})" if "tensor" in row.roof else f"{row.roof} CUDA cores"
    text = f"compute-bound on {pipe} at {pct:.0f}%"
    if row.roof in row.sparse_peak_roofs:  # how far below is for sparse_caveat to say
        return text + " of ncu's peak for them"
    return text + (": near the roof" if near else f": up to {headroom:.1f}x below the roof")


def roofline_rows(launches: Iterable[Any]) -> list[RooflineRow]:
    return [launch_row(launch) for launch in launches]

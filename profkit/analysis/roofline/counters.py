"""The roofline's inputs, read out of one ncu launch: work done, bytes moved, peaks, clocks.

Every figure comes from the capture itself, as ncu's own roofline charts do:
a peak is a ``.peak_sustained`` metric (work per cycle) times the clock the
launch actually ran at (``*__cycles_elapsed.avg.per_second``), never a
datasheet number.  ``None`` wherever the CSV lacks the metric.

Names are looked up by metric id.  On the raw page that is the column name;
on the details page, metrics asked for with ``--metrics`` sit under "Command
line profiler metrics" by id, and a few section rows (``SM Frequency``,
``DRAM Frequency``, ``Duration``) stand in for ids the page lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from profkit.model.quantity import Quantity

# CUDA-core pipes: (roof, fma op, the other ops); an FMA counts 2 FLOPs, as in ncu's roofline.
CUDA_CORE_PIPES = (("fp64", "dfma", ("dadd", "dmul")),
                   ("fp32", "ffma", ("fadd", "fmul")),
                   ("fp16", "hfma", ("hadd", "hmul")))
# tensor-core source type in ncu's metric names -> roof name
TENSOR_SOURCES = {"fp64": "fp64 tensor", "tf32": "tf32 tensor", "fp16": "fp16 tensor", "bf16": "bf16 tensor",
                  "fp8": "fp8 tensor", "int8": "int8 tensor", "int4": "int4 tensor"}

# sm__ops_path_tensor_src_bf16_dst_fp32.sum, ..._src_fp8_sparsity_off.sum.peak_sustained
_SRC = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_[a-z0-9]+)?(?:_sparsity_(on|off))?"
                  r"\.sum(\.peak_sustained)?$")
# the hierarchical tensor chart's per-instruction counters: ..._op_hgmma_src_bf16_dst_fp32_sparsity_off.sum
_OP = re.compile(r"^sm__ops_path_tensor_op_[a-z0-9]+_src_([a-z0-9]+?)(?:_dst_[a-z0-9]+)?(?:_sparsity_(on|off))?"
                 r"\.sum(\.peak_sustained)?$")

# The clock each peak is multiplied by, best first; details-page display names last.
SM_CLOCK = ("smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second", "SM Frequency")
DRAM_CLOCK = ("dram__cycles_elapsed.avg.per_second", "DRAM Frequency")
L2_CLOCK = ("lts__cycles_elapsed.avg.per_second",)
L1_CLOCK = ("l1tex__cycles_elapsed.avg.per_second",)


@dataclass
class TensorWork:
    """One tensor-core source type: FLOPs (ncu counts a multiply-add as 2 ops) and the
    peak in ops per cycle that applies to them."""

    flops: float
    peak_per_cycle: float | None
    peak_metric: str  # which metric gave the peak, or why it is approximate
    sparse: bool = False
    # the peak is the source's own (``sm__ops_path_tensor_src_X.sum.peak_sustained``), which on
    # GPUs with 2:4 sparsity is the sparse rate: twice what a dense kernel can reach
    peak_may_be_sparse: bool = False


@dataclass
class Counters:
    """What one launch did and what its GPU could have done, in base units."""

    duration_ns: float | None
    cuda_flops: dict[str, float] = field(default_factory=dict)  # roof -> FLOPs
    cuda_peak_per_cycle: dict[str, float] = field(default_factory=dict)  # roof -> FLOP/cycle (2 x FMA rate)
    tensor: dict[str, TensorWork] = field(default_factory=dict)  # roof -> work
    sm_clock_hz: float | None = None
    sm_clock_metric: str = ""
    bytes: dict[str, float | None] = field(default_factory=dict)  # DRAM / L2 / L1 -> bytes
    bytes_peak_per_s: dict[str, float | None] = field(default_factory=dict)
    dram_bytes_per_s_ncu: float | None = None  # ncu's own dram__bytes.sum.per_second, for checks
    # roofs with a peak in this capture but no counter of the work done: roof -> the counter lacking
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def has_flop_counters(self) -> bool:
        return bool(self.cuda_flops) or bool(self.tensor)


def metric_values(metrics: dict[str, Any]) -> dict[str, float]:
    """metric id (or details display name) -> value in base units, numeric cells only."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(value, Quantity):
            continue
        # details keys are "Section/Name"; metric ids never hold a "/", display names may ("L1/TEX ...")
        name = key.split("/", 1)[1] if "/" in key and "__" not in key.split("/", 1)[0] else key
        out.setdefault(name, value.value)
    return out


def _first(values: dict[str, float], names: tuple[str, ...]) -> tuple[float | None, str]:
    for name in names:
        if values.get(name) is not None:
            return values[name], name
    return None, ""


# Elapsed cycles of an SM (or SM sub-partition: the same clock), which a ``.per_cycle_elapsed``
# rate is divided by; else the launch's duration times the SM clock.
SM_CYCLES = ("smsp__cycles_elapsed.avg", "sm__cycles_elapsed.avg")
PER_CYCLE = ".sum.per_cycle_elapsed"
PER_SECOND = ".sum.per_second"
BYTE_COUNTERS = ("dram__bytes", "lts__t_bytes", "l1tex__t_bytes")
TENSOR_PREFIXES = ("sm__ops_path_tensor_", "sm__inst_executed_pipe_tensor", "smsp__inst_executed_pipe_tensor")


def derive_sums(v: dict[str, float], duration_ns: float | None) -> dict[str, float]:
    """``v`` with each SM counter's ``.sum`` worked out where the capture gives only its rate
    ``.sum.per_cycle_elapsed``: rate x elapsed cycles.  A standard capture
    (``ncu --section SpeedOfLight_RooflineChart``) writes the FFMA/FADD/FMUL counters only that
    way; on the real captures of tests/data/roofline, which have both, rate x
    ``sm__cycles_elapsed.avg`` equals ``.sum`` to 8 digits."""
    # bytes per memory level given only as a rate per second (the standard capture's DRAM):
    # rate x the launch's duration
    per_second = {name[: -len(PER_SECOND)] + ".sum": rate * duration_ns * 1e-9 for name, rate in v.items()
                  if duration_ns and name.endswith(PER_SECOND) and name.startswith(BYTE_COUNTERS)}
    v = {**{k: x for k, x in per_second.items() if k not in v}, **v}
    cycles, _ = _first(v, SM_CYCLES)
    if cycles is None:
        clock, _ = _first(v, SM_CLOCK)
        cycles = duration_ns * 1e-9 * clock if duration_ns and clock else None
    if cycles is None:
        return v
    derived = {name[: -len(PER_CYCLE)] + ".sum": rate * cycles for name, rate in v.items()
               if name.endswith(PER_CYCLE) and name.startswith(("sm__", "smsp__"))}
    return {**{k: x for k, x in derived.items() if k not in v}, **v}


def read_counters(metrics: dict[str, Any], duration_ns: float | None) -> Counters:
    v = derive_sums(metric_values(metrics), duration_ns)
    c = Counters(duration_ns=duration_ns)
    c.sm_clock_hz, c.sm_clock_metric = _first(v, SM_CLOCK)
    for roof, fma, others in CUDA_CORE_PIPES:
        names = {op: f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in (fma, *others)}
        counts = {op: v.get(name) for op, name in names.items()}
        peak = v.get(f"sm__sass_thread_inst_executed_op_{fma}_pred_on.sum.peak_sustained")
        if counts[fma] is None and all(counts[o] is None for o in others):
            if peak is not None:  # a roof this capture can draw but not place the kernel under
                c.missing[roof] = names[fma]
            continue
        c.cuda_flops[roof] = 2 * (counts[fma] or 0) + sum(counts[o] or 0 for o in others)
        if peak is not None:
            c.cuda_peak_per_cycle[roof] = 2 * peak
    c.tensor = _tensor(v, c.missing)
    counted = sum(c.cuda_flops.values()) + sum(t.flops or 0 for t in c.tensor.values())
    if counted == 0 and not any(name.startswith(TENSOR_PREFIXES) for name in v):
        # no FLOP counted, and no tensor-core counter to say the FLOPs are not there (the standard
        # SpeedOfLight_RooflineChart capture has none): a tensor-core GEMM would read as memory-bound
        c.missing["tensor cores"] = "sm__ops_path_tensor_* (ncu --section SpeedOfLight_HierarchicalTensorRooflineChart)"
    dram = v.get("dram__bytes.sum")
    if dram is None and v.get("dram__bytes_read.sum") is not None and v.get("dram__bytes_write.sum") is not None:
        dram = v["dram__bytes_read.sum"] + v["dram__bytes_write.sum"]
    c.bytes = {"DRAM": dram, "L2": v.get("lts__t_bytes.sum"), "L1": v.get("l1tex__t_bytes.sum")}
    if dram is None and v.get("dram__bytes.sum.peak_sustained") is not None:  # a roof with a peak and no bytes
        c.missing["DRAM"] = "dram__bytes.sum (or its .per_second rate)"
    for level, peak_metric, clocks in (("DRAM", "dram__bytes.sum.peak_sustained", DRAM_CLOCK),
                                       ("L2", "lts__t_bytes.sum.peak_sustained", L2_CLOCK),
                                       ("L1", "l1tex__t_bytes.sum.peak_sustained", L1_CLOCK)):
        clock, _ = _first(v, clocks)
        peak = v.get(peak_metric)
        c.bytes_peak_per_s[level] = peak * clock if peak is not None and clock else None
    c.dram_bytes_per_s_ncu = v.get("dram__bytes.sum.per_second")
    return c


def _tensor(v: dict[str, float], missing: dict[str, str]) -> dict[str, TensorWork]:
    """Per tensor source: FLOPs and the peak that applies.

    ncu's per-source peak (``sm__ops_path_tensor_src_X.sum.peak_sustained``) is the
    fastest instruction's, which on Ampere and later is the 2:4-sparse one: twice the
    dense rate.  A dense kernel is measured against the dense peak: the source's
    ``_sparsity_off`` peak where the chip has one (fp8 on sm_90), else the fastest
    ``_sparsity_off`` instruction of the hierarchical tensor chart (raw page only).
    """
    src_total: dict[str, float] = {}
    src_sparse: dict[str, float] = {}
    src_dense: dict[str, float] = {}
    src_peak: dict[str, float] = {}
    src_dense_peak: dict[str, float] = {}
    op_total: dict[str, float] = {}
    op_sparse: dict[str, float] = {}
    op_dense_peak: dict[str, float] = {}
    for name, value in v.items():
        m = _SRC.match(name)
        if m:
            source, sparsity, is_peak = m.group(1), m.group(2), bool(m.group(3))
            if is_peak:
                if sparsity == "off":
                    src_dense_peak[source] = max(src_dense_peak.get(source, 0.0), value)
                elif sparsity is None:
                    src_peak[source] = max(src_peak.get(source, 0.0), value)
            elif sparsity is None:
                src_total[source] = src_total.get(source, 0.0) + value
            elif sparsity == "on":
                src_sparse[source] = src_sparse.get(source, 0.0) + value
            else:
                src_dense[source] = src_dense.get(source, 0.0) + value
            continue
        m = _OP.match(name)
        if m:
            source, sparsity, is_peak = m.group(1), m.group(2), bool(m.group(3))
            if is_peak:
                if sparsity in ("off", None):
                    op_dense_peak[source] = max(op_dense_peak.get(source, 0.0), value)
            else:
                op_total[source] = op_total.get(source, 0.0) + value
                if sparsity == "on":
                    op_sparse[source] = op_sparse.get(source, 0.0) + value
    out: dict[str, TensorWork] = {}
    for source, roof in TENSOR_SOURCES.items():
        flops = src_total.get(source)
        if flops is None and (source in src_dense or source in src_sparse):
            # a capture with the hierarchical chart's counters only (--ncu-top: fp8 on sm_90 comes as
            # ..._src_fp8_sparsity_off/_on rates): the source's work is its dense plus its sparse work
            flops = src_dense.get(source, 0.0) + src_sparse.get(source, 0.0)
        if flops is None:
            flops = op_total.get(source)
        if flops is None:
            if source in src_peak or source in src_dense_peak or source in op_dense_peak:
                missing[roof] = f"sm__ops_path_tensor_src_{source}.sum"
            continue
        sparse_flops = src_sparse.get(source, op_sparse.get(source, 0.0))
        sparse = sparse_flops > 0 and sparse_flops >= flops / 2
        if sparse and source in src_peak:
            peak, how = src_peak[source], "sparse peak (the kernel runs 2:4-sparse instructions)"
        elif source in src_dense_peak:
            peak, how = src_dense_peak[source], f"sm__ops_path_tensor_src_{source}_sparsity_off peak"
        elif source in op_dense_peak:
            peak, how = op_dense_peak[source], "fastest dense instruction of the hierarchical tensor chart"
        elif source in src_peak and source == "fp64":
            peak, how = src_peak[source], "sm__ops_path_tensor_src_fp64 peak (no sparse fp64 instructions)"
        elif source in src_peak:
            # may be the sparse rate: the % of this roof can read up to 2x too low
            peak, how = src_peak[source], "source peak (may count 2:4 sparsity; the raw page gives the dense one)"
        else:
            peak, how = None, "no peak in this CSV"
        suspect = peak is not None and how.startswith("source peak")
        out[roof] = TensorWork(flops=flops, peak_per_cycle=peak, peak_metric=how, sparse=sparse,
                               peak_may_be_sparse=suspect)
    return out

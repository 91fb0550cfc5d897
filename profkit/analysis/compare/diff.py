"""What a change did to a run: `profkit diff BASE NEW`.

Both traces are reduced to the same per-step figures, then compared:
- step time: steady-state step durations, compared by ``noise.compare``
  (bootstrap CI of the median change + Mann-Whitney), with a verdict;
- GPU kernel time per steady step, compared the same way: measured on the device, it moves far
  less with a busy host than step time does (two runs of one host-bound loop on a shared machine
  differed by 37% in step time and not in kernel time);
- kernels: GPU time per steady step, per kernel name: new, gone, slower,
  faster, same, or changed.  A kernel is slower/faster only when its per-step time
  changed by ``KERNEL_MIN_EFFECT_PCT`` and ``KERNEL_MIN_DELTA_NS`` and its
  per-step samples differ (Mann-Whitney p < ``KERNEL_MAX_P``) — so a kernel
  that merely jitters stays "same".  A kernel "changed" when only its template
  arguments did (a block size, a functor): the kernel that went and the one that
  came share a template (``kernel_names.template_base``, which lost as many
  instances as it gained) and are one row, with BASE's spelling in ``base_name``;
- sync sites (file:line, API) added or removed, and their counts;
- registers / shared memory / theoretical occupancy per kernel that changed;
- the compute / communication / idle breakdown, base vs new;
- peak memory per steady step, where both traces recorded the allocator
  (``profkit.analysis.compare.memory``).

Kernels are matched by ``canonical_kernel_name`` so an nsys trace and a
Kineto trace of the same program line up; rows show one original spelling.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from profkit.analysis.compare import noise
from profkit.analysis.compare.memory import memory_diff
from profkit.analysis.compare.same_program import ProgramCheck
from profkit.analysis.kernels.names import canonical_column
from profkit.analysis.steps.windows import step_of
from profkit.errors import ProfkitError
from profkit.model import Trace

KERNEL_MIN_EFFECT_PCT = 5.0
KERNEL_MIN_DELTA_NS = 1000.0
KERNEL_MAX_P = 0.01
KERNEL_LIMIT = 300  # kernels compared in detail (by the larger of their base and new time)


def step_samples(trace: Trace) -> tuple[Any, np.ndarray, list[tuple[int, int]]]:
    """(StepResult, steady-state step durations, steady windows) of a trace."""
    from profkit.analysis.steps import find_steps

    result = find_steps(trace)
    steps = result.steps
    if steps is None or len(steps) == 0:
        return result, np.empty(0), []
    steady = steps[steps["phase"] == "steady"]
    if len(steady) == 0:
        steady = steps
    windows = list(zip(steady["start_ns"].astype(np.int64), steady["end_ns"].astype(np.int64)))
    return result, steady["duration_ns"].to_numpy(dtype=np.float64), windows


def kernel_step_table(trace: Trace, windows: list[tuple[int, int]]) -> pd.DataFrame:
    """GPU time per (kernel, steady step): columns name (canonical), step, ns; ``attrs["display"]``
    maps each canonical name to an original spelling.

    Without steps the whole trace is one "step" (index 0).  A CUDA graph replay whose kernels
    were not traced counts as one kernel named "CUDA graph <id>"."""
    kernels = trace.table("kernels", ["name", "start", "end"])
    if trace.has("graphs") and trace.count("graphs"):
        kernels = pd.concat([kernels, trace.table("graphs", ["name", "start", "end"])], ignore_index=True)
        kernels["name"] = kernels["name"].astype("category")
    names, display = canonical_column(kernels["name"].array)
    start = kernels["start"].to_numpy()
    ns = (kernels["end"] - kernels["start"]).to_numpy()
    if windows:
        order = sorted(range(len(windows)), key=lambda i: windows[i])  # step numbers count in time order
        step = step_of(start, np.array([windows[i][0] for i in order]), np.array([windows[i][1] for i in order]))
        inside = step >= 0
        frame = pd.DataFrame({"name": names[inside], "step": step[inside], "ns": ns[inside]})
    else:
        frame = pd.DataFrame({"name": names, "step": 0, "ns": ns})
    table = frame.groupby(["name", "step"], sort=False, as_index=False)["ns"].sum()
    table.attrs["display"] = display
    return table


def kernel_time_per_step(table: pd.DataFrame, steps: int) -> np.ndarray:
    """The GPU kernel time of each steady step (ns; a step without kernels is 0) from
    ``kernel_step_table``; empty without steps."""
    per_step = np.zeros(steps)
    if steps and len(table):
        np.add.at(per_step, table["step"].to_numpy(), table["ns"].to_numpy(dtype=np.float64))
    return per_step


def kernel_time_change(base: pd.DataFrame, new: pd.DataFrame, base_steps: int, new_steps: int, *,
                       min_effect_pct: float = noise.MIN_EFFECT_PCT) -> dict[str, Any]:
    """The GPU kernel time per steady step, compared as step time is (``noise.step_change``).
    It is measured on the device, so a busy host moves it far less than the step time: the figure
    a kernel change is judged by (``--fail-on-kernel-regression``)."""
    a, b = kernel_time_per_step(base, base_steps), kernel_time_per_step(new, new_steps)
    if not a.size or not b.size:
        return noise.unknown_change("no steps to divide the kernel time by")
    return noise.step_change(a, b, min_effect_pct=min_effect_pct)


def kernel_changes(base: pd.DataFrame, new: pd.DataFrame, base_steps: int, new_steps: int) -> list[dict[str, Any]]:
    """Rows name, base_ns_per_step, new_ns_per_step, delta_ns_per_step, delta_pct, status."""
    base_total = base.groupby("name")["ns"].sum() / max(base_steps, 1)
    new_total = new.groupby("name")["ns"].sum() / max(new_steps, 1)
    names = sorted(set(base_total.index) | set(new_total.index),
                   key=lambda n: -max(base_total.get(n, 0.0), new_total.get(n, 0.0)))
    base_by_name = {n: g for n, g in base.groupby("name")} if len(base) else {}
    new_by_name = {n: g for n, g in new.groupby("name")} if len(new) else {}
    rows = []
    for i, name in enumerate(names):
        b, n = float(base_total.get(name, 0.0)), float(new_total.get(name, 0.0))
        if name not in base_total.index:
            status = "new"
        elif name not in new_total.index:
            status = "gone"
        elif i < KERNEL_LIMIT:
            status = _kernel_status(b, n, _per_step(base_by_name.get(name), base_steps),
                                    _per_step(new_by_name.get(name), new_steps))
        else:
            status = "same"
        shown = new.attrs.get("display", {}).get(name) or base.attrs.get("display", {}).get(name) or name
        rows.append({"name": shown, "key": name, "base_ns_per_step": b, "new_ns_per_step": n, "delta_ns_per_step": n - b,
                     "delta_pct": 100.0 * (n / b - 1.0) if b else None, "status": status})
    rows = _pair_template_changes(rows)
    rows.sort(key=lambda r: -abs(r["delta_ns_per_step"]))
    return rows


def _pair_template_changes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A "gone" and a "new" kernel of one template become one "changed" row.  Only where the
    template lost as many instances as it gained: each new one pairs with the gone one whose
    canonical name shares the most with it at both ends (a block size in the middle).  Where
    the counts differ (cuBLAS dropped two GEMM kernels of one wrapper template and picked one
    other), any pairing would be a guess: they stay gone and new."""
    from profkit.analysis.kernels.names import template_base

    gone: dict[str, list[dict[str, Any]]] = {}
    new_count: dict[str, int] = {}
    for row in rows:
        if row["status"] == "gone":
            gone.setdefault(template_base(row["key"]), []).append(row)
        elif row["status"] == "new":
            base = template_base(row["key"])
            new_count[base] = new_count.get(base, 0) + 1
    gone = {base: rows_ for base, rows_ in gone.items() if len(rows_) == new_count.get(base, 0)}
    paired: set[int] = set()
    out = []
    for row in rows:
        if row["status"] != "new" or not gone.get(template_base(row["key"])):
            out.append(row)
            continue
        candidates = gone[template_base(row["key"])]
        match = max(candidates, key=lambda g: _shared_ends(g["key"], row["key"]))
        candidates.remove(match)
        paired.add(id(match))
        b, n = match["base_ns_per_step"], row["new_ns_per_step"]
        out.append({**row, "key": row["key"], "base_key": match["key"], "base_name": match["name"],
                    "base_ns_per_step": b, "delta_ns_per_step": n - b,
                    "delta_pct": 100.0 * (n / b - 1.0) if b else None, "status": "changed"})
    return [row for row in out if id(row) not in paired]


def _shared_ends(a: str, b: str) -> int:
    """Characters two names share at their start plus at their end."""
    prefix = len(os.path.commonprefix([a, b]))
    suffix = len(os.path.commonprefix([a[prefix:][::-1], b[prefix:][::-1]]))
    return prefix + suffix


def _per_step(group: pd.DataFrame | None, steps: int) -> np.ndarray:
    """A kernel's time in each step, zeros for steps it did not run in."""
    values = np.zeros(max(steps, 1))
    if group is not None:  # one row per (name, step) already: order does not matter to the rank test
        values[: len(group)] = group["ns"].to_numpy(dtype=np.float64)
    return values


def _kernel_status(base_ns: float, new_ns: float, base_samples: np.ndarray, new_samples: np.ndarray) -> str:
    delta = new_ns - base_ns
    if abs(delta) < KERNEL_MIN_DELTA_NS or (base_ns and abs(delta) / base_ns * 100 < KERNEL_MIN_EFFECT_PCT):
        return "same"
    if min(base_samples.size, new_samples.size) >= noise.MIN_SAMPLES:
        if noise.mann_whitney_p(base_samples, new_samples) >= KERNEL_MAX_P:
            return "same"
    return "slower" if delta > 0 else "faster"


def sync_changes(base: Trace, new: Trace) -> list[dict[str, Any]]:
    """Sync sites of both runs: rows source, api, base_count, new_count, status."""
    from profkit.analysis.sync.stalls import analyze_stalls

    def sites(trace: Trace) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for site in analyze_stalls(trace).sites:
            key = (site.get("source") or "(source unknown)", site.get("api") or "")
            row = out.setdefault(key, {"count": 0, "code": site.get("code")})
            row["count"] += int(site.get("count") or 0)
        return out

    a, b = sites(base), sites(new)
    rows = []
    for key in sorted(set(a) | set(b)):
        ca, cb = a.get(key, {}).get("count", 0), b.get(key, {}).get("count", 0)
        status = "added" if not ca else "removed" if not cb else "same" if ca == cb else "changed"
        rows.append({"source": key[0], "api": key[1], "code": (b.get(key) or a.get(key) or {}).get("code"),
                     "base_count": ca, "new_count": cb, "status": status})
    return rows


def kernel_resources(trace: Trace) -> pd.DataFrame:
    """Per normalized kernel name: registers per thread and shared memory per block (the largest launch)."""
    k = trace.table("kernels", ["name", "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes"]).copy()
    k["name"], display = canonical_column(k["name"].array)
    k["smem"] = k["static_smem_bytes"].clip(lower=0) + k["dynamic_smem_bytes"].clip(lower=0)
    table = k.groupby("name").agg(registers=("registers_per_thread", "max"), smem=("smem", "max"))
    table.attrs["display"] = display
    return table


def resource_changes(base: pd.DataFrame, new: pd.DataFrame) -> list[dict[str, Any]]:
    """Kernels in both runs whose registers or shared memory per block changed."""
    both = base.merge(new, left_index=True, right_index=True, suffixes=("_base", "_new"))
    changed = both[(both["registers_base"] != both["registers_new"]) | (both["smem_base"] != both["smem_new"])]
    display = new.attrs.get("display", {})
    return [{"name": display.get(name, name), "base_registers": int(r.registers_base), "new_registers": int(r.registers_new),
             "base_smem_bytes": int(r.smem_base), "new_smem_bytes": int(r.smem_new)}
            for name, r in changed.iterrows()]


def _with_registers(rows: list[dict[str, Any]], base: pd.DataFrame, new: pd.DataFrame) -> list[dict[str, Any]]:
    """Each kernel row with its registers per thread (from NEW, or BASE for a kernel that is gone)."""
    for row in rows:
        source = base if row["status"] == "gone" else new
        value = source["registers"].get(row["key"]) if row["key"] in source.index else None
        row["registers"] = int(value) if value is not None and value >= 0 else None
    return rows


def breakdown_shift(base: Trace, new: Trace) -> dict[str, Any]:
    from profkit.analysis.breakdown import rank_breakdown

    a = rank_breakdown(base, steady=True)
    b = rank_breakdown(new, steady=True)
    keys = [k for k in a if k.endswith("_pct") and isinstance(a.get(k), (int, float))
            and isinstance(b.get(k), (int, float))]
    return {"base": {k: a[k] for k in keys}, "new": {k: b[k] for k in keys},
            "delta_pct_points": {k: b[k] - a[k] for k in keys}}


def diff_traces(base: Trace, new: Trace, *, min_effect_pct: float = noise.MIN_EFFECT_PCT) -> dict[str, Any]:
    """Everything `profkit diff` shows, as plain data (the JSON form)."""
    base_result, base_durations, base_windows = step_samples(base)
    new_result, new_durations, new_windows = step_samples(new)
    step: dict[str, Any]
    if base_durations.size and new_durations.size:
        step = {**noise.step_change(base_durations, new_durations, min_effect_pct=min_effect_pct),
                "base_step_source": base_result.source, "new_step_source": new_result.source}
    else:
        missing = base.name if not base_durations.size else new.name
        step = noise.unknown_change(
            f"no steps found in {missing} ({(base_result if not base_durations.size else new_result).message})")
    base_k = kernel_step_table(base, base_windows)
    new_k = kernel_step_table(new, new_windows)
    base_res, new_res = kernel_resources(base), kernel_resources(new)
    kernels = kernel_changes(base_k, new_k, len(base_windows), len(new_windows))
    return {
        "base": base.name, "new": new.name, "profilers": profilers(base, new), "step": step,
        "kernel_time": kernel_time_change(base_k, new_k, len(base_windows), len(new_windows),
                                          min_effect_pct=min_effect_pct),
        "notes": _capture_notes(base, new),
        "kernels": _with_registers(kernels, base_res, new_res),
        "syncs": sync_changes(base, new),
        "resources": resource_changes(base_res, new_res),
        "breakdown": breakdown_shift(base, new),
        "memory": memory_diff(base, new),
    }


def _profiler(trace: Trace) -> dict[str, Any]:
    """Which profiler made the trace, and the torch.profiler options that slow the profiled
    host, where the trace records them: with_stack (python_function events) and
    record_shapes (cpu_ops' 'Input Dims')."""
    from profkit.model import KINETO

    if trace.meta.source != KINETO:
        return {"profiler": "nsys", "overhead": []}
    traced = set(trace.meta.traced)
    return {"profiler": "torch.profiler",
            "overhead": [o for o, mark in (("with_stack", "python_stacks"), ("record_shapes", "shapes"))
                         if mark in traced]}


def profilers(base: Trace, new: Trace) -> dict[str, Any]:
    """Each side's profiler and overhead options, and ``note``: one sentence when the two
    differ (None when they match), which `profkit diff` prints first: step times under
    torch.profiler carry its host overhead (on the committed GPT captures, the same
    program's median step is 46% longer under torch.profiler with record_shapes than under nsys)."""
    sides = {"base": _profiler(base), "new": _profiler(new)}
    note = None
    if sides["base"] != sides["new"]:
        def say(side: str, trace: Trace) -> str:
            info = sides[side]
            options = f" with {' and '.join(info['overhead'])}" if info["overhead"] else ""
            return f"{side.upper()} ({trace.name}) is {'an nsys export' if info['profiler'] == 'nsys' else 'a torch.profiler trace'}{options}"

        slowed = [s.upper() for s in ("base", "new") if sides[s]["overhead"]]
        what = "Different profilers" if sides["base"]["profiler"] != sides["new"]["profiler"] else             "Different profiler options"
        note = f"{what}: {say('base', base)}, {say('new', new)}" + (
            f"; {' and '.join(slowed)} ran under torch.profiler's overhead, which slows the host: step times "
            "differ by more than the program" if slowed else "")
    return {**sides, "note": note}


def _capture_notes(base: Trace, new: Trace) -> list[str]:
    """What makes the two kernel lists differ beyond the program: one side recorded CUDA graph
    replays as one row each (nsys --cuda-graph-trace=graph), the other their kernels."""
    graph_level = [t.name for t in (base, new) if t.has("graphs") and t.count("graphs")]
    if len(graph_level) == 1:
        return [f"{graph_level[0]} recorded each CUDA graph replay as one row, the other trace its kernels: "
                "kernels inside graphs show as new or gone; capture both with --cuda-graph-trace=node"]
    return []


def regression_pct(result: dict[str, Any], figure: str = "step") -> float | None:
    """The change that counts against ``--fail-on-regression`` (``figure`` "step": step time) or
    ``--fail-on-kernel-regression`` ("kernel_time"): the change when the verdict is "slower",
    else None.  Raises when the verdict is unknown (too few steps): a gate that cannot decide
    says so rather than passing."""
    change = result.get(figure) or {}
    if change.get("verdict") in (noise.UNKNOWN, None):
        what = "step time" if figure == "step" else "GPU kernel time per step"
        raise ProfkitError(f"cannot gate on {what}: {change.get('why') or 'not measured'}",
                           hint="capture more steady steps (at least 3 in each run)")
    return change["delta_pct"] if change["verdict"] == noise.SLOWER else None


def check_comparable(base: Trace, new: Trace, *, force: bool = False) -> ProgramCheck:
    """How the two traces were found to be of one program, with the share of kernel names they
    have in common; raises for a trace without kernels, and for two traces of different programs
    (unless ``force``; ``profkit.analysis.compare.same_program``)."""
    from profkit.analysis.compare.same_program import compare_programs

    if base.count("kernels") == 0 or new.count("kernels") == 0:
        empty = base.name if base.count("kernels") == 0 else new.name
        raise ProfkitError(f"{empty} has no GPU kernels to compare")
    return compare_programs(base, new, force=force)

"""The calculator applied to a trace: one row per kernel name and launch
configuration, with limiter, next step, waves and advice.

Launch configurations and GPU limits are columns of the trace model
(``trace.kernels``: grid, block, registers, shared memory, carveout;
``trace.devices``: compute capability and per-SM limits), so nsys exports
and Kineto traces (whose kernel args carry the same figures) go through
the same code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from profkit.analysis.kernels import origin
from profkit.analysis.occupancy.calculator import (
    DeviceLimits,
    advice,
    device_limits,
    occupancy,
    register_steps,
)
from profkit.analysis.occupancy.waves import waves
from profkit.errors import ProfkitError
from profkit.model import Trace
from profkit.model.keys import FIRST, encode_row_codes, first_rows
from profkit.model.trace import DURATION, Coded
from profkit.model.schema import DEVICE_LIMIT_KEYS, LAUNCH_CONFIG_COLUMNS, MISSING_INT


# Kernel columns that make a launch configuration (with the name and device).
CONFIG_COLUMNS = LAUNCH_CONFIG_COLUMNS
# model column -> the row key (launch rows keep the names the occupancy rows always had)
_ROW_KEYS = {"device": "device_id", "local_memory_per_thread": "local_mem_per_thread"}


def launch_configs(trace: Trace) -> list[dict[str, Any]]:
    """One row per (kernel name, device, grid, block, registers, shared memory,
    local memory, carveout) with launch count and total, min and max GPU
    time, busiest first.  Values the trace did not record are None.

    Per-kernel data stays in columns: ``_launch_groups`` reduces them a chunk
    at a time to one slot per launch configuration, and only the distinct
    configurations become Python rows.  The config columns are
    dropped from the trace after (the report needs them only here)."""
    if not trace.has("kernels"):
        raise ProfkitError(f"{trace.name} has no CUDA kernel data", hint="re-run nsys profile with -t cuda, "
                           "or torch.profiler with ProfilerActivity.CUDA")
    names = trace.codes("kernels", "name")
    if not len(names.codes):
        return []
    shorts = trace.codes("kernels", "short_name")
    keys = ["device", *CONFIG_COLUMNS]
    columns = [trace.array("kernels", c) for c in keys]
    groups = _launch_groups([names.codes, *columns], trace.array("kernels", DURATION))
    first, launches, total, shortest, longest = groups
    values = {c: column[first].tolist() for c, column in zip(keys, columns)}
    del columns
    rows = []
    for i, row_index in enumerate(first.tolist()):
        name, short = _text(names, row_index), _text(shorts, row_index)
        row: dict[str, Any] = {"name": name or "<unknown kernel>", "short_name": short or name or "<unknown kernel>"}
        for column, config in values.items():
            row[_ROW_KEYS.get(column, column)] = None if config[i] == MISSING_INT else config[i]
        row["grid_size"] = _product(row, ("grid_x", "grid_y", "grid_z"))
        row["block_size"] = _product(row, ("block_x", "block_y", "block_z"))
        row.update(launches=int(launches[i]), total_time_ns=int(total[i]),
                   min_time_ns=int(shortest[i]), max_time_ns=int(longest[i]))
        rows.append(row)
    trace.forget("kernels", CONFIG_COLUMNS)  # the report needs them only here
    rows.sort(key=lambda r: (-r["total_time_ns"], -r["launches"], r["name"]))
    return rows


def _text(column: Coded, row: int) -> str:
    code = int(column.codes[row])
    return column.categories[code] if code >= 0 else ""  # -1: a Categorical's missing value


# Rows grouped at a time: pandas sizes a factorize's hash table by its input, ~40
# bytes a row (40 MB for a million kernels at once, ~2.5 MB a chunk).
_CHUNK_ROWS = 1 << 16


def _launch_groups(columns: list[np.ndarray], duration: np.ndarray) -> tuple[np.ndarray, ...]:
    """Group rows on several integer columns: (first row, count, total, min and max of
    ``duration``) per group, groups in order of first appearance.

    Rows go a chunk at a time, so no array of the whole table is made: each chunk's
    rows get dense codes (``model.keys.encode_row_codes``), and only the chunk's few
    distinct rows, as tuples, are matched to the groups found so far."""
    seen: dict[tuple[int, ...], int] = {}
    first = np.zeros(0, dtype=np.int64)
    launches, total = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    shortest, longest = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    for lo in range(0, len(duration), _CHUNK_ROWS):
        parts = [column[lo:lo + _CHUNK_ROWS] for column in columns]
        local = encode_row_codes(parts, FIRST)
        local_first = first_rows(local)
        distinct = zip(*(part[local_first].tolist() for part in parts))
        ids = np.array([seen.setdefault(row, len(seen)) for row in distinct], dtype=np.int64)
        grow = len(seen) - len(launches)
        if grow:
            new = ids >= len(launches)  # rows first seen in this chunk, in order of appearance
            first = np.concatenate([first, lo + local_first[new]])
            launches, total = np.pad(launches, (0, grow)), np.pad(total, (0, grow))
            shortest = np.pad(shortest, (0, grow), constant_values=np.iinfo(np.int64).max)
            longest = np.pad(longest, (0, grow), constant_values=np.iinfo(np.int64).min)
        d = duration[lo:lo + _CHUNK_ROWS]
        # ids are distinct within a chunk, so plain fancy-index updates are exact
        launches[ids] += np.bincount(local, minlength=len(ids))
        part = np.zeros(len(ids), dtype=np.int64)
        np.add.at(part, local, d)
        total[ids] += part
        part.fill(np.iinfo(np.int64).max)
        np.minimum.at(part, local, d)
        shortest[ids] = np.minimum(shortest[ids], part)
        part.fill(np.iinfo(np.int64).min)
        np.maximum.at(part, local, d)
        longest[ids] = np.maximum(longest[ids], part)
    return first, launches, total, shortest, longest


def _product(row: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    values = [row[k] for k in keys]
    return None if any(v is None for v in values) else values[0] * values[1] * values[2]


def device_limits_of(trace: Trace) -> dict[int, DeviceLimits]:
    """DeviceLimits per device id, from the trace's devices table (devices whose
    compute capability the trace does not record are left out)."""
    if not trace.has("devices"):
        return {}
    out = {}
    for row in trace.devices.to_dict("records"):
        info = {key: row[column] for column, key in DEVICE_LIMIT_KEYS.items()
                if row.get(column) is not None and row[column] != MISSING_INT and row[column] != ""}
        if info.get("cc_major") is not None and info.get("cc_minor") is not None:
            out[int(row["device"])] = device_from_info(info)
    return out


def trace_occupancy(trace: Trace | Sequence[Mapping[str, Any]],
                    device: DeviceLimits | None = None) -> list[dict[str, Any]]:
    """Occupancy of every kernel a trace recorded, one row per kernel name and
    launch configuration, sorted by GPU time.

    ``trace`` is a ``Trace`` (any source) or rows of ``launch_configs`` (then
    ``device`` must be given).  ``device`` overrides the trace's GPU.
    Launches whose block size or registers the trace did not record (some
    Kineto events) are left out.

    Each row has the launch_configs keys (name, short_name, device_id,
    grid_x/y/z, block_x/y/z, grid_size, block_size, registers_per_thread,
    static_smem_bytes, dynamic_smem_bytes, local_mem_per_thread,
    smem_config_bytes, launches, total_time_ns, ...) plus: arch,
    shared_mem_bytes, blocks_per_sm, active_warps_per_sm,
    theoretical_occupancy_pct, limiter ("registers", "warps, registers", ...),
    block_limit_{registers,shared_mem,warps,blocks}, registers_next_step and
    occupancy_next_step_pct (None when fewer registers would not help),
    registers_headroom (most registers that keep the occupancy), spills
    (local memory in use), waves, last_wave_fill_pct, wave_efficiency_pct,
    tail_effect, time_pct, library, origin ('user' or 'vendor'), user_code
    (bool), advice (sentences joined by "; ", "" if none).

    Register and shared-memory advice (next step, headroom) goes only to
    kernels whose code the user can change; a vendor kernel (cuBLAS, cuDNN,
    NCCL, ATen, ...) gets its figures and a plain verdict instead.
    """
    if isinstance(trace, Trace):
        rows, devices = launch_configs(trace), device_limits_of(trace)
    else:
        rows, devices = [dict(r) for r in trace], {}
    total_ns = sum(r.get("total_time_ns") or 0 for r in rows)
    out = []
    for r in rows:
        if not r.get("block_size") or r.get("registers_per_thread") is None:
            continue
        dev = device or devices.get(r.get("device_id"))
        if dev is None:
            raise ProfkitError("the trace does not say which GPU ran the kernels",
                               "re-export it with a recent nsys, or pass --arch")
        out.append(occupancy_row(r, dev, total_ns))
    out.sort(key=lambda r: (-(r.get("total_time_ns") or 0), r["name"]))
    return out


def device_from_info(info: Mapping[str, Any]) -> DeviceLimits:
    """DeviceLimits from a GPU description (keys of ``profkit.readers.nsys.launches.gpu_info``):
    the architecture's rules with the limits the trace recorded."""
    warp = info.get("warp_size") or 32
    threads_per_sm = info.get("max_threads_per_sm") or (
        info["max_warps_per_sm"] * warp if info.get("max_warps_per_sm") else None)
    return device_limits(
        (int(info["cc_major"]), int(info["cc_minor"])),
        max_threads_per_sm=threads_per_sm,
        max_blocks_per_sm=info.get("max_blocks_per_sm") or None,
        max_threads_per_block=info.get("max_threads_per_block") or None,
        warp_size=info.get("warp_size") or None,
        regs_per_sm=info.get("regs_per_sm") or None,
        regs_per_block=info.get("regs_per_block") or None,
        smem_per_sm=info.get("smem_per_sm") or None,
        smem_per_block=info.get("smem_per_block") or None,
        smem_per_block_optin=info.get("smem_per_block_optin") or None,
        reserved_smem_per_block=info.get("reserved_smem_per_block"),
        sm_count=info.get("sm_count") or None,
        name=info.get("name") or None,
    )


def occupancy_row(launch: Mapping[str, Any], device: DeviceLimits,
                  total_ns: int | None = None) -> dict[str, Any]:
    """The occupancy row for one grouped launch configuration (keys as in ``launch_configs``)."""
    row = dict(launch)
    library = origin.library(str(row.get("name") or ""))
    user_code = origin.origin(str(row.get("name") or "")) == origin.USER
    row.update(library=library, origin=origin.USER if user_code else origin.VENDOR, user_code=user_code)
    kwargs = {"smem_config_bytes": launch.get("smem_config_bytes") or None}
    occ = occupancy(device, row["block_size"], row["registers_per_thread"],
                    row.get("static_smem_bytes") or 0, row.get("dynamic_smem_bytes") or 0, **kwargs)
    step, headroom = register_steps(occ, device, **kwargs) if user_code else (None, None)
    row.update(
        arch=device.arch,
        shared_mem_bytes=occ.shared_mem_bytes,
        blocks_per_sm=occ.blocks_per_sm,
        active_warps_per_sm=occ.active_warps_per_sm,
        theoretical_occupancy_pct=occ.theoretical_occupancy_pct,
        limiter=occ.limiter,
        block_limit_registers=occ.block_limit_registers,
        block_limit_shared_mem=occ.block_limit_shared_mem,
        block_limit_warps=occ.block_limit_warps,
        block_limit_blocks=occ.block_limit_blocks,
        smem_per_sm_bytes=occ.smem_per_sm_bytes,
        registers_next_step=step.value if step else None,
        occupancy_next_step_pct=step.pct if step else None,
        registers_headroom=headroom,
        spills=bool(row.get("local_mem_per_thread")),
    )
    w = waves(row.get("grid_size", 0), occ.blocks_per_sm, device.sm_count or 0)
    row.update(waves=w.waves if w else None, last_wave_fill_pct=w.last_wave_fill_pct if w else None,
               wave_efficiency_pct=w.efficiency_pct if w else None, tail_effect=bool(w and w.tail_effect))
    if total_ns:
        row["time_pct"] = 100.0 * row.get("total_time_ns", 0) / total_ns
    if not user_code:
        row["advice"] = f"{library} library kernel: its launch shape is the library's, not yours to tune"
        return row
    notes = advice(occ, device, **kwargs)
    if row["spills"]:
        notes.append(f"{row['local_mem_per_thread']} B of local memory per thread: registers spill "
                     "(or arrays live in local memory)")
    if w and w.tail_effect:
        notes.append(f"{w.waves:.2f} waves: the last wave is {w.last_wave_fill_pct:.0f}% full, "
                     f"so {100 - w.efficiency_pct:.0f}% of the wave time leaves SMs idle")
    row["advice"] = "; ".join(notes)
    return row

"""The calculator applied to an nsys trace: one row per kernel name and
launch configuration, with limiter, next step, waves and advice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from profkit.analysis.occupancy.calculator import (
    DeviceLimits,
    advice,
    device_limits,
    occupancy,
    register_steps,
)
from profkit.analysis.occupancy.waves import waves
from profkit.errors import ProfkitError


def trace_occupancy(export: Any, device: DeviceLimits | None = None) -> list[dict[str, Any]]:
    """Occupancy of every kernel an nsys export recorded, one row per kernel
    name and launch configuration, sorted by GPU time.

    ``export`` is an opened export (``profkit.readers.nsys.open_export``), a sqlite3
    connection to one, or rows of ``profkit.readers.nsys.launches.launch_configs``
    (then ``device`` must be given).  ``device`` overrides the export's GPU.

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
    tail_effect, time_pct, advice (sentences joined by "; ", "" if none).
    """
    from profkit.readers.nsys import launches as nsys_launches

    if isinstance(export, Sequence):
        rows, devices = [dict(r) for r in export], {}
    else:
        rows = nsys_launches.launch_configs(export)
        devices = {dev_id: device_from_info(info) for dev_id, info in nsys_launches.gpu_info(export).items()
                   if info.get("cc_major") is not None}
    total_ns = sum(r.get("total_time_ns") or 0 for r in rows)
    out = []
    for r in rows:
        dev = device or devices.get(r.get("device_id"))
        if dev is None:
            raise ProfkitError("the export does not say which GPU ran the kernels",
                               "re-export it with a recent nsys, or pass --arch")
        out.append(occupancy_row(r, dev, total_ns))
    out.sort(key=lambda r: (-(r.get("total_time_ns") or 0), r["name"]))
    return out


def device_from_info(info: Mapping[str, Any]) -> DeviceLimits:
    """DeviceLimits from a trace's GPU description (``profkit.readers.nsys.launches.gpu_info``):
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
    """The occupancy row for one grouped launch configuration (keys as in
    ``profkit.readers.nsys.launches.launch_configs``)."""
    row = dict(launch)
    kwargs = {"smem_config_bytes": launch.get("smem_config_bytes") or None}
    occ = occupancy(device, row["block_size"], row["registers_per_thread"],
                    row.get("static_smem_bytes", 0), row.get("dynamic_smem_bytes", 0), **kwargs)
    step, headroom = register_steps(occ, device, **kwargs)
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
    notes = advice(occ, device, **kwargs)
    if row["spills"]:
        notes.append(f"{row['local_mem_per_thread']} B of local memory per thread: registers spill "
                     "(or arrays live in local memory)")
    if w and w.tail_effect:
        notes.append(f"{w.waves:.2f} waves: the last wave is {w.last_wave_fill_pct:.0f}% full, "
                     f"so {100 - w.efficiency_pct:.0f}% of the wave time leaves SMs idle")
    row["advice"] = "; ".join(notes)
    return row

"""Side by side with ncu: its block limits and occupancy against ours, and
ncu's achieved occupancy attached to trace rows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from profkit.analysis.occupancy.calculator import _pct, device_limits, occupancy
from profkit.analysis.occupancy.waves import waves
from profkit.errors import ProfkitError

NCU_LIMITS = (("block_limit_sm", "block_limit_blocks"), ("block_limit_registers", "block_limit_registers"),
              ("block_limit_shared_mem", "block_limit_shared_mem"), ("block_limit_warps", "block_limit_warps"),
              ("block_limit_barriers", "block_limit_barriers"))


def compare_ncu(launch: Any, exact_registers: int | None = None) -> dict[str, Any]:
    """profkit's occupancy for one ncu launch (``profkit.readers.ncu.NcuLaunch``),
    computed from the launch's inputs (block, registers, shared memory, the
    carveout the driver chose, barriers), next to ncu's own figures.

    ``differences`` names every figure where the two disagree.  The details
    page does not carry the barrier count: one barrier per block is assumed
    there (as cudaOccupancy* does), and the barrier limit is not compared.
    ``exact_registers`` (e.g. from ptxas -v) is shown next to ncu's count.
    """
    if not launch.cc or launch.block_size is None or launch.registers_per_thread is None:
        raise ProfkitError(f"ncu launch {launch.id} lacks the launch statistics occupancy needs",
                           "profile with --section LaunchStats --section Occupancy")
    device = device_limits(launch.cc, sm_count=launch.sm_count, reserved_smem_per_block=launch.driver_smem_bytes)
    barriers = 1 if launch.barrier_count is None else launch.barrier_count
    occ = occupancy(device, launch.block_size, launch.registers_per_thread, launch.static_smem_bytes or 0,
                    launch.dynamic_smem_bytes or 0, smem_config_bytes=launch.smem_config_bytes,
                    block_barriers=barriers)
    registers_allocated = occ.allocated_registers_per_block // (occ.warps_per_block * device.warp_size)
    row: dict[str, Any] = {
        "id": launch.id, "name": launch.kernel_name, "block_size": launch.block_size,
        "grid_size": launch.grid_size, "registers_per_thread": launch.registers_per_thread,
        "registers_allocated": registers_allocated, "registers_exact": exact_registers,
        "shared_mem_bytes": occ.shared_mem_bytes, "smem_allocated_bytes": occ.allocated_smem_per_block,
        "smem_config_bytes": launch.smem_config_bytes, "blocks_per_sm": occ.blocks_per_sm,
        "theoretical_occupancy_pct": occ.theoretical_occupancy_pct,
        "ncu_theoretical_occupancy_pct": launch.theoretical_occupancy_pct,
        "ncu_achieved_occupancy_pct": launch.achieved_occupancy_pct,
        "limiter": occ.limiter, "duration_ns": launch.duration_ns,
    }
    differences = []
    if launch.theoretical_occupancy_pct is not None:
        row["occupancy_diff_pct"] = occ.theoretical_occupancy_pct - launch.theoretical_occupancy_pct
        if abs(row["occupancy_diff_pct"]) > 0.006:  # ncu prints two decimals: 100 * 21/64 is "32.81"
            differences.append(f"theoretical occupancy {_pct(occ.theoretical_occupancy_pct)} vs ncu "
                               f"{_pct(launch.theoretical_occupancy_pct)}")
    for ncu_key, our_key in NCU_LIMITS:
        ours, theirs = getattr(occ, our_key), getattr(launch, ncu_key)
        row[f"ncu_{ncu_key}"], row[ncu_key] = theirs, ours
        if ncu_key == "block_limit_barriers" and launch.barrier_count is None:
            continue
        if theirs is not None and ours != theirs:
            differences.append(f"{ncu_key} {ours} vs ncu {theirs}")
    for key, ours in (("registers_allocated", registers_allocated),
                      ("smem_allocated_bytes", occ.allocated_smem_per_block)):
        theirs = getattr(launch, key)
        row[f"ncu_{key}"] = theirs
        if theirs is not None and ours != theirs:
            differences.append(f"{key} {ours} vs ncu {theirs}")
    notes = []
    if registers_allocated != launch.registers_per_thread:
        notes.append(f"{launch.registers_per_thread} registers per thread are allocated as {registers_allocated}")
    if exact_registers is not None and exact_registers != launch.registers_per_thread:
        exact = occupancy(device, launch.block_size, exact_registers, launch.static_smem_bytes or 0,
                          launch.dynamic_smem_bytes or 0, smem_config_bytes=launch.smem_config_bytes,
                          block_barriers=barriers)
        notes.append(f"the cubin uses {exact_registers} registers, ncu shows {launch.registers_per_thread}"
                     + ("" if exact.blocks_per_sm == occ.blocks_per_sm else
                        f"; with {exact_registers} occupancy would be {_pct(exact.theoretical_occupancy_pct)}"))
    w = waves(launch.grid_size or 0, occ.blocks_per_sm, launch.sm_count or 0)
    row["waves"] = w.waves if w else None
    row["ncu_waves_per_sm"] = launch.waves_per_sm
    if w and launch.waves_per_sm is not None and abs(w.waves - launch.waves_per_sm) > 0.006:
        differences.append(f"waves {w.waves:.2f} vs ncu {launch.waves_per_sm:.2f}")
    row["agrees"] = not differences
    row["differences"] = "; ".join(differences)
    row["notes"] = "; ".join(notes)
    return row


_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|bool)\)")
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|<unnamed>|unnamed>|[A-Za-z_]\w*)::")


def kernel_key(name: str) -> str:
    """A kernel name with namespaces, C casts and spaces removed, so that nsys's
    "void at::native::k<(int)4, at::native::F<float>>" and ncu's
    "void at::k<4, at::F<float>>" compare equal."""
    return "".join(_QUALIFIER.sub("", _CAST.sub("", name)).split())


def attach_ncu(rows: Sequence[dict[str, Any]], launches: Sequence[Any]) -> list[dict[str, Any]]:
    """Trace rows (``trace_occupancy``) with ncu's achieved and theoretical
    occupancy added where ncu profiled the same kernel with the same launch: block size,
    registers, and where both sides know them grid size and shared memory per block
    (ncu_launches = how many of its launches matched).  Achieved occupancy depends on the
    grid (32 blocks cannot fill 132 SMs), so a launch of another grid is not this row's."""
    groups: dict[tuple, list[Any]] = {}
    for launch in launches:
        groups.setdefault((kernel_key(launch.kernel_name), launch.block_size, launch.registers_per_thread),
                          []).append(launch)
    out = []
    for row in rows:
        match = [m for m in groups.get((kernel_key(row["name"]), row["block_size"], row["registers_per_thread"]), [])
                 if _same_shape(row, m)]
        achieved = [m.achieved_occupancy_pct for m in match if m.achieved_occupancy_pct is not None]
        theoretical = {m.theoretical_occupancy_pct for m in match} - {None}
        out.append(dict(row, ncu_launches=len(match),
                        ncu_achieved_occupancy_pct=sum(achieved) / len(achieved) if achieved else None,
                        ncu_theoretical_occupancy_pct=max(theoretical) if theoretical else None,
                        ncu_block_limit_registers=match[0].block_limit_registers if match else None,
                        ncu_block_limit_shared_mem=match[0].block_limit_shared_mem if match else None))
    return out


def _same_shape(row: dict[str, Any], launch: Any) -> bool:
    """Whether an ncu launch has the trace row's grid size and shared memory per block, where both
    sides record them (an unknown on either side does not part them)."""
    pairs = [(row.get("grid_size"), launch.grid_size)]
    row_smem = [row.get("static_smem_bytes"), row.get("dynamic_smem_bytes")]
    ncu_smem = [launch.static_smem_bytes, launch.dynamic_smem_bytes]
    if None not in row_smem and None not in ncu_smem and min(row_smem) >= 0:
        pairs.append((sum(row_smem), sum(ncu_smem)))
    return all(a is None or b is None or a < 0 or a == b for a, b in pairs)

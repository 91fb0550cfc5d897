"""Theoretical occupancy, exactly as CUDA computes it, and what it costs.

The calculator follows ``cuda_occupancy.h`` (CUDA 13.0) rule for rule:

* registers are allocated per warp in units of 256 (``numRegs * 32`` rounded
  up), and per SM sub-partition (4 per SM): warps per sub-partition =
  ``(regsPerSM / 4) // regsPerWarp``;
* shared memory is allocated per block in 128-byte units (256 on cc 7.x) and
  on cc >= 8 the driver reserves 1 KiB per block on top of what the kernel
  asks for;
* the per-SM shared memory is a carveout: one of a few sizes per
  architecture (sm_90: 0, 8, 16, 32, 64, 100, 132, 164, 196, 228 KiB).  A
  carveout preference is rounded up to the next size, and the driver takes a
  larger one if a single block would not fit;
* max resident blocks and warps per SM per architecture; on cc >= 9 block
  barriers (one per block, 2 x max blocks available on 9.x/10.0) also limit.

The answer for a launch that really ran depends on the carveout the driver
chose for it (nsys records it as ``sharedMemoryExecuted``, ncu as "Shared
Memory Configuration Size"): pass it as ``smem_config_bytes``.

Every result comes with the limiter(s) and the next occupancy step: the
register count and the shared-memory size at which one more block fits.

Checked against NVIDIA on an H200 (tests/test_occupancy_truth.py): equal to
cudaOccupancyMaxActiveBlocksPerMultiprocessor for 4,032 launch shapes
(carveouts included), and to ncu 2025.3's theoretical occupancy and every
block limit for every captured launch.

Sections: the calculator (``occupancy``); steps and advice (``register_steps``,
``shared_memory_step``, ``advice``, ``block_size_table``).  Waves are in
``waves``, the trace application in ``trace``, ncu side by side in ``ncu``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from profkit.errors import ProfkitError

KIB = 1024
UNLIMITED = 2**31 - 1  # cuda_occupancy.h's INT_MAX: "this resource does not limit"

# Limiter names, in the order cuda_occupancy.h tests them.
WARPS, REGISTERS, SHARED_MEMORY, BLOCKS, BARRIERS = "warps", "registers", "shared_memory", "blocks", "barriers"


@dataclass(frozen=True)
class DeviceLimits:
    """The device properties the occupancy rules need (cudaOccDeviceProp)."""

    cc_major: int
    cc_minor: int
    max_threads_per_sm: int
    smem_per_sm: int  # the largest carveout, bytes
    smem_per_block_optin: int
    reserved_smem_per_block: int
    max_blocks_per_sm: int
    smem_per_block: int = 48 * KIB
    regs_per_sm: int = 64 * KIB
    regs_per_block: int = 64 * KIB
    max_threads_per_block: int = 1024
    warp_size: int = 32
    sm_count: int | None = None
    name: str = ""

    @property
    def arch(self) -> str:
        return f"sm_{self.cc_major}{self.cc_minor}"

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


def _arch(threads: int, smem_kib: int, reserved: int = KIB) -> dict[str, int]:
    # Opt-in per block = per-SM carveout minus the driver's reserve (227 KiB on sm_90).
    return {"max_threads_per_sm": threads, "smem_per_sm": smem_kib * KIB,
            "smem_per_block_optin": smem_kib * KIB - reserved, "reserved_smem_per_block": reserved}


# Per-architecture defaults (CUDA Programming Guide, "Technical Specifications
# per Compute Capability").  A trace's TARGET_INFO_GPU overrides them.
ARCH_DEFAULTS: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): _arch(2048, 96, 0) | {"smem_per_block_optin": 96 * KIB},
    (7, 2): _arch(2048, 96, 0) | {"smem_per_block_optin": 96 * KIB},
    (7, 5): _arch(1024, 64, 0) | {"smem_per_block_optin": 64 * KIB},
    (8, 0): _arch(2048, 164),
    (8, 6): _arch(1536, 100),
    (8, 7): _arch(1536, 164),
    (8, 9): _arch(1536, 100),
    (9, 0): _arch(2048, 228),
    (10, 0): _arch(2048, 228),
    (10, 1): _arch(1536, 228),  # Thor before CUDA 13 renamed it 11.0
    (10, 3): _arch(2048, 228),
    (11, 0): _arch(1536, 228),
    (12, 0): _arch(1536, 100),
    (12, 1): _arch(1536, 100),
}


def _max_blocks_per_sm(major: int, minor: int) -> int:
    """cudaOccMaxBlocksPerMultiprocessor."""
    if major == 7:
        return 16 if minor == 5 else 32
    if major == 8:
        return {0: 32, 9: 24}.get(minor, 16)
    if major == 9:
        return 32
    if major == 10:
        return 24 if minor == 1 else 32
    if major == 11:
        return 24 if minor == 0 else 32
    if major == 12:
        return 24
    raise ProfkitError(f"compute capability {major}.{minor} is not supported",
                       "supported: 7.x, 8.x, 9.0, 10.x, 11.0, 12.x")


def _carveout_steps_kib(major: int, minor: int) -> tuple[int, ...]:
    """cudaOccAlignUpShmemSizeVoltaPlus: the shared-memory sizes an SM can be configured to."""
    if major == 7:
        return (32, 64) if minor == 5 else (0, 8, 16, 32, 64, 96)
    if major == 8:
        return (0, 8, 16, 32, 64, 100, 132, 164) if minor in (0, 7) else (0, 8, 16, 32, 64, 100)
    if major == 9 or (major in (10, 11) and minor in (0, 1, 3)):
        return (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)
    if major == 12 and minor in (0, 1):
        return (0, 8, 16, 32, 64, 100)
    raise ProfkitError(f"compute capability {major}.{minor} is not supported",
                       "supported: 7.x, 8.x, 9.0, 10.x, 11.0, 12.x")


def carveout_steps(device: DeviceLimits) -> tuple[int, ...]:
    """The supported per-SM shared-memory configurations, in bytes."""
    return tuple(k * KIB for k in _carveout_steps_kib(device.cc_major, device.cc_minor))


def _align_up_carveout(size: int, device: DeviceLimits) -> int | None:
    for step in carveout_steps(device):
        if size <= step:
            return step
    return None  # larger than any configuration: CUDA_OCC_ERROR_INVALID_INPUT


def parse_arch(arch: str | tuple[int, int]) -> tuple[int, int]:
    """'sm_90', 'sm_90a', '90', '9.0', 'compute_100a', (9, 0) -> (major, minor)."""
    if isinstance(arch, tuple):
        return int(arch[0]), int(arch[1])
    text = str(arch).strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.fullmatch(r"(?:sm_|compute_|sm|cc)?(\d{2,3})[af]?", text)
    if m:
        digits = m.group(1)
        return int(digits[:-1]), int(digits[-1])
    raise ProfkitError(f"cannot read architecture {arch!r}", "use sm_90, 9.0 or 90")


def device_limits(arch: str | tuple[int, int], **overrides: Any) -> DeviceLimits:
    """Limits for an architecture, with fields replaced by ``overrides``
    (e.g. the values a trace recorded; None values are ignored)."""
    major, minor = parse_arch(arch)
    base = ARCH_DEFAULTS.get((major, minor))
    if base is None:
        known = ", ".join(f"sm_{a}{b}" for a, b in ARCH_DEFAULTS)
        raise ProfkitError(f"no occupancy rules for sm_{major}{minor}", f"known: {known}")
    values: dict[str, Any] = dict(base, cc_major=major, cc_minor=minor,
                                  max_blocks_per_sm=_max_blocks_per_sm(major, minor))
    values.update({k: v for k, v in overrides.items() if v is not None})
    return DeviceLimits(**values)


@dataclass(frozen=True)
class Occupancy:
    """One answer of the calculator (cudaOccResult plus derived figures).

    Block limits are None where the resource does not limit at all.
    """

    arch: str
    block_size: int
    registers_per_thread: int
    static_smem_bytes: int
    dynamic_smem_bytes: int
    blocks_per_sm: int
    warps_per_block: int
    active_warps_per_sm: int
    max_warps_per_sm: int
    theoretical_occupancy_pct: float
    limiters: tuple[str, ...]
    block_limit_registers: int | None
    block_limit_shared_mem: int | None
    block_limit_warps: int
    block_limit_blocks: int
    block_limit_barriers: int | None
    allocated_registers_per_block: int
    allocated_smem_per_block: int  # kernel's + the driver's reserve, rounded to the granularity
    smem_per_sm_bytes: int  # the carveout the shared-memory limit was computed against

    @property
    def shared_mem_bytes(self) -> int:
        return self.static_smem_bytes + self.dynamic_smem_bytes

    @property
    def limiter(self) -> str:
        return ", ".join(self.limiters)

    def as_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["limiters"] = list(self.limiters)
        row["limiter"] = self.limiter
        row["shared_mem_bytes"] = self.shared_mem_bytes
        return row


def check_block_size(device: DeviceLimits, block_size: int) -> None:
    """A block size a user asks about must be one a launch can have: 1..1024 threads
    (cudaDevAttrMaxThreadsPerBlock).  ``occupancy`` itself answers 0 blocks for a bigger
    one, as cudaOccMaxActiveBlocksPerMultiprocessor does, which read like a real result."""
    if not 1 <= block_size <= device.max_threads_per_block:
        raise ProfkitError(f"--block {block_size}: a block has 1 to {device.max_threads_per_block} threads "
                           f"on {device.arch}")


def check_launch(device: DeviceLimits, block_size: int, registers_per_thread: int, static_smem: int,
                 dynamic_smem: int) -> None:
    """A launch a user asks about must be one that can be compiled and launched: its block size
    (``check_block_size``), at most MAX_REGISTERS_PER_THREAD registers (ptxas allocates no more), static
    shared memory within the 48 KiB a kernel may declare, and static + dynamic within the opt-in
    maximum per block.  Otherwise the answer would be "0 blocks", which reads like a result."""
    check_block_size(device, block_size)
    if not 0 <= registers_per_thread <= MAX_REGISTERS_PER_THREAD:
        raise ProfkitError(f"--regs {registers_per_thread}: a thread has 0 to {MAX_REGISTERS_PER_THREAD} registers")
    if static_smem > device.smem_per_block:
        raise ProfkitError(f"--smem {static_smem:,} B: static shared memory is at most {_kib(device.smem_per_block)} "
                           "per block", hint="larger tiles use dynamic shared memory: --dyn-smem")
    if static_smem + dynamic_smem > device.smem_per_block_optin:
        raise ProfkitError(f"{static_smem + dynamic_smem:,} B of shared memory per block: {device.arch} allows at "
                           f"most {_kib(device.smem_per_block_optin)} (opted in)")


def occupancy(
    device: DeviceLimits,
    block_size: int,
    registers_per_thread: int,
    static_smem: int = 0,
    dynamic_smem: int = 0,
    *,
    carveout: int = -1,
    smem_config_bytes: int | None = None,
    max_dynamic_smem: int | None = None,
    block_barriers: int = 1,
) -> Occupancy:
    """Active blocks per SM for one kernel launch (cudaOccMaxActiveBlocksPerMultiprocessor).

    carveout: cudaFuncAttributePreferredSharedMemoryCarveout, -1 (default) or 0..100 percent.
    smem_config_bytes: the per-SM shared memory the driver actually configured
        for the launch; when given it replaces the carveout preference.
    max_dynamic_smem: cudaFuncAttributeMaxDynamicSharedMemorySize; None means
        the launch was allowed whatever the device allows (true of any launch that ran).
    block_barriers: barriers a block uses (the runtime assumes 1).
    """
    if block_size <= 0 or registers_per_thread < 0 or static_smem < 0 or dynamic_smem < 0:
        raise ProfkitError(f"invalid launch: block {block_size}, {registers_per_thread} registers, "
                           f"{static_smem} + {dynamic_smem} B shared memory")
    if not -1 <= carveout <= 100:
        raise ProfkitError(f"carveout {carveout} is outside -1..100 (percent of shared memory)")
    d = device
    warps_per_block = -(-block_size // d.warp_size)

    # Registers (cudaOccMaxBlocksPerSMRegsLimit; partitioned global caching is off on cc >= 7).
    sub_partitions = 4
    regs_per_warp = -(-registers_per_thread * d.warp_size // 256) * 256
    regs_per_block = regs_per_warp * warps_per_block
    regs_assumed = regs_per_warp * (-(-warps_per_block // sub_partitions) * sub_partitions)
    if d.regs_per_block < regs_assumed or d.regs_per_block < regs_per_block or registers_per_thread > 256:
        limit_regs = 0
    elif regs_per_warp > 0:
        warps_per_sub_partition = (d.regs_per_sm // sub_partitions) // regs_per_warp
        limit_regs = warps_per_sub_partition * sub_partitions // warps_per_block
    else:
        limit_regs = UNLIMITED

    # Warps and blocks.
    limit_warps = 0 if block_size > d.max_threads_per_block else d.max_warps_per_sm // warps_per_block
    limit_blocks = d.max_blocks_per_sm

    # Shared memory (cudaOccMaxBlocksPerSMSmemLimit).
    granularity = 256 if d.cc_major == 7 else 128
    reserved = d.reserved_smem_per_block if d.cc_major >= 8 else 0
    smem_allocated = -(-(static_smem + reserved + dynamic_smem) // granularity) * granularity
    max_dyn = d.smem_per_block_optin - static_smem if max_dynamic_smem is None else max_dynamic_smem
    max_usage = static_smem + reserved + max_dyn
    per_block_limit = d.smem_per_block_optin if max_usage > d.smem_per_block else d.smem_per_block
    per_block_limit += reserved
    smem_per_sm = _smem_per_sm(d, carveout, smem_config_bytes, smem_allocated)
    if dynamic_smem > max_dyn or smem_allocated > per_block_limit or smem_per_sm is None:
        limit_smem = 0
        smem_per_sm = smem_per_sm or 0
    elif smem_allocated > 0:
        limit_smem = smem_per_sm // smem_allocated
    else:
        limit_smem = UNLIMITED

    limit_barriers = UNLIMITED
    if d.cc_major >= 9 and block_barriers > 0:  # Hopper onwards: block barriers are a resource too
        limit_barriers = limit_blocks * _barriers_per_block_slot(d) // block_barriers
    limits = {WARPS: limit_warps, REGISTERS: limit_regs, SHARED_MEMORY: limit_smem, BLOCKS: limit_blocks,
              BARRIERS: limit_barriers}
    blocks = min(limits.values())
    limiters = [name for name, value in limits.items() if value == blocks]
    if (SHARED_MEMORY in limiters and len(limiters) > 1 and smem_config_bytes is not None
            and 0 < smem_allocated and d.smem_per_sm // smem_allocated > blocks):
        # The driver sized the carveout to what the other limits allow (32 KiB
        # for 32 blocks of 1 KiB): shared memory ties, but it is not the cause.
        limiters.remove(SHARED_MEMORY)

    active_warps = blocks * warps_per_block
    return Occupancy(
        arch=d.arch, block_size=block_size, registers_per_thread=registers_per_thread,
        static_smem_bytes=static_smem, dynamic_smem_bytes=dynamic_smem,
        blocks_per_sm=blocks, warps_per_block=warps_per_block, active_warps_per_sm=active_warps,
        max_warps_per_sm=d.max_warps_per_sm,
        theoretical_occupancy_pct=100.0 * active_warps / d.max_warps_per_sm,
        limiters=tuple(limiters),
        block_limit_registers=None if limit_regs == UNLIMITED else limit_regs,
        block_limit_shared_mem=None if limit_smem == UNLIMITED else limit_smem,
        block_limit_warps=limit_warps, block_limit_blocks=limit_blocks,
        # shown as ncu does: never above the block limit (64 barriers for 32 blocks reads "32")
        block_limit_barriers=min(limit_barriers, limit_blocks) if d.cc_major >= 9 else None,
        allocated_registers_per_block=regs_per_block, allocated_smem_per_block=smem_allocated,
        smem_per_sm_bytes=smem_per_sm,
    )


def _barriers_per_block_slot(d: DeviceLimits) -> int:
    """cudaOccMaxBlocksPerSMBlockBarrierLimit: barriers available per block slot."""
    if d.cc_major == 12 or (d.cc_major == 10 and d.cc_minor == 1) or (d.cc_major == 11 and d.cc_minor == 0):
        return 1
    return 2


def _smem_per_sm(d: DeviceLimits, carveout: int, config: int | None, allocated: int) -> int | None:
    """The per-SM shared memory the limit divides (None: no configuration fits one block)."""
    if config is not None and config >= allocated:
        return config
    preference = d.smem_per_sm if carveout == -1 else carveout * d.smem_per_sm // 100
    preference = _align_up_carveout(preference, d)
    if preference is None:
        return None
    if preference >= allocated:
        return preference
    # The preference is ignored when one block would not fit: the driver takes a larger carveout.
    return _align_up_carveout(allocated, d)


# ---------------------------------------------------------------------------
# What the registers and shared memory cost: the next occupancy step.


@dataclass(frozen=True)
class Step:
    """A resource value at which occupancy changes."""

    resource: str  # "registers" | "shared_memory" | "block_size"
    current: int
    current_pct: float
    value: int  # registers per thread / shared memory bytes per block at the step
    pct: float  # occupancy at ``value``
    text: str


MAX_REGISTERS_PER_THREAD = 255  # what ptxas will allocate (the header's check allows 256)


def register_steps(occ: Occupancy, device: DeviceLimits, **launch: Any) -> tuple[Step | None, int]:
    """(the next occupancy step below the current register count, or None;
    the most registers per thread that keep today's occupancy).

    Registers are allocated per warp in units of 256, i.e. 8 per thread: only
    multiples of 8 can change the answer, so only they are tried.
    """
    def at(regs: int) -> Occupancy:
        return _again(occ, device, registers_per_thread=regs, **launch)

    unit = 256 // device.warp_size
    level = -(-occ.registers_per_thread // unit) * unit  # the count as allocated
    step = None
    for regs in range(level - unit, -1, -unit):
        better = at(regs)
        if better.blocks_per_sm > occ.blocks_per_sm:
            step = Step(REGISTERS, occ.registers_per_thread, occ.theoretical_occupancy_pct, regs,
                        better.theoretical_occupancy_pct,
                        f"at {occ.registers_per_thread} registers occupancy is "
                        f"{_pct(occ.theoretical_occupancy_pct)}; at {regs} it would be "
                        f"{_pct(better.theoretical_occupancy_pct)}")
            break
    headroom = min(level, MAX_REGISTERS_PER_THREAD)
    while headroom < MAX_REGISTERS_PER_THREAD:
        more = min(headroom + unit, MAX_REGISTERS_PER_THREAD)
        if at(more).blocks_per_sm != occ.blocks_per_sm:
            break
        headroom = more
    return step, max(headroom, occ.registers_per_thread)


def shared_memory_step(occ: Occupancy, device: DeviceLimits, **launch: Any) -> Step | None:
    """The largest shared memory per block (static + dynamic) at which one
    more block fits, with the carveout left to the driver."""
    total = occ.shared_mem_bytes
    launch = {k: v for k, v in launch.items() if k != "smem_config_bytes"}

    def blocks_at(smem: int) -> Occupancy:
        return _again(occ, device, static_smem=0, dynamic_smem=smem, **launch)

    now = blocks_at(total)
    granule = 128
    lo, hi = 0, total // granule  # candidates are multiples of the granularity (the reserve is one too)
    if hi == 0 or blocks_at(0).blocks_per_sm <= now.blocks_per_sm:
        return None
    while lo < hi:  # largest k with blocks_at(k * granule) > now
        mid = (lo + hi + 1) // 2
        if blocks_at(mid * granule).blocks_per_sm > now.blocks_per_sm:
            lo = mid
        else:
            hi = mid - 1
    value = lo * granule
    if value >= total:
        return None
    pct = blocks_at(value).theoretical_occupancy_pct
    return Step(SHARED_MEMORY, total, occ.theoretical_occupancy_pct, value, pct,
                f"at {_kib(total)} shared memory per block occupancy is {_pct(occ.theoretical_occupancy_pct)}; "
                f"at {_kib(value)} it would be {_pct(pct)}")


def advice(occ: Occupancy, device: DeviceLimits, **launch: Any) -> list[str]:
    """Plain sentences: what limits occupancy and the next step for each limiter."""
    lines: list[str] = []
    if occ.blocks_per_sm == 0:
        return [f"this launch cannot run: {occ.limiter} allow no block on an SM"]
    if REGISTERS in occ.limiters:
        step, headroom = register_steps(occ, device, **launch)
        if step:
            lines.append(step.text)
        elif headroom == occ.registers_per_thread and headroom < MAX_REGISTERS_PER_THREAD:
            worse = _again(occ, device, registers_per_thread=headroom + 1, **launch)
            lines.append(f"{headroom} registers is the most that keeps {_pct(occ.theoretical_occupancy_pct)}; "
                         f"at {headroom + 1} it would be {_pct(worse.theoretical_occupancy_pct)}")
    if SHARED_MEMORY in occ.limiters:
        step = shared_memory_step(occ, device, **launch)
        if step:
            lines.append(step.text)
    if BLOCKS in occ.limiters and occ.theoretical_occupancy_pct < 100:
        need = -(-device.max_warps_per_sm // device.max_blocks_per_sm) * device.warp_size
        bigger = _again(occ, device, block_size=need, **launch) if need <= device.max_threads_per_block else None
        said = (f"at most {device.max_blocks_per_sm} blocks fit on an SM: blocks of {occ.block_size} "
                f"threads reach {_pct(occ.theoretical_occupancy_pct)}")
        if bigger is not None and bigger.theoretical_occupancy_pct > occ.theoretical_occupancy_pct:
            lines.append(f"{said}; use at least {need} threads per block ({_pct(bigger.theoretical_occupancy_pct)})")
        else:  # another limiter caps it too: a bigger block alone changes nothing
            others = " and ".join(limit for limit in occ.limiters if limit != BLOCKS) or "the SM's warps"
            lines.append(f"{said}, and bigger blocks alone would not raise it: {others} cap it there too")
    if WARPS in occ.limiters and occ.theoretical_occupancy_pct < 100:
        lines.append(f"{occ.warps_per_block} warps per block leave "
                     f"{device.max_warps_per_sm - occ.active_warps_per_sm} warp slots unused: "
                     "pick a block size that divides the SM's warps")
    return lines


def _again(occ: Occupancy, device: DeviceLimits, **changes: Any) -> Occupancy:
    args: dict[str, Any] = {"block_size": occ.block_size, "registers_per_thread": occ.registers_per_thread,
                            "static_smem": occ.static_smem_bytes, "dynamic_smem": occ.dynamic_smem_bytes}
    args.update(changes)
    return occupancy(device, **args)


def _pct(value: float) -> str:
    return f"{value:.4g}%"


def _kib(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < KIB else f"{nbytes / KIB:g} KiB"


def block_size_table(device: DeviceLimits, registers_per_thread: int, static_smem: int = 0,
                     dynamic_smem: int = 0, block_sizes: Iterable[int] | None = None,
                     **launch: Any) -> list[Occupancy]:
    """Occupancy over block sizes (every multiple of the warp size by default)."""
    sizes = block_sizes or range(device.warp_size, device.max_threads_per_block + 1, device.warp_size)
    return [occupancy(device, bs, registers_per_thread, static_smem, dynamic_smem, **launch) for bs in sizes]

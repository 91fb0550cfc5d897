"""Theoretical occupancy, exactly as CUDA computes it, and what it costs.

* ``calculator``: the cuda_occupancy.h rules, per-architecture limits, the
  next occupancy step, advice and the block-size table;
* ``waves``: wave quantization of a grid and tail effects;
* ``trace``: the calculator applied to every kernel of a trace (any source);
* ``ncu``: profkit's figures next to ncu's, and ncu's achieved occupancy on
  trace rows.

Every public name is re-exported here, so ``from profkit.analysis.occupancy
import occupancy, trace_occupancy, compare_ncu`` keeps working.
"""

from __future__ import annotations

from profkit.analysis.occupancy.calculator import (
    ARCH_DEFAULTS,
    DeviceLimits,
    Occupancy,
    Step,
    advice,
    block_size_table,
    carveout_steps,
    check_block_size,
    check_launch,
    device_limits,
    occupancy,
    parse_arch,
    register_steps,
    shared_memory_step,
)
from profkit.analysis.occupancy.ncu import (
    attach_ncu,
    compare_ncu,
    kernel_key,
)
from profkit.analysis.occupancy.trace import (
    device_from_info,
    device_limits_of,
    launch_configs,
    occupancy_row,
    trace_occupancy,
)
from profkit.analysis.occupancy.waves import (
    Waves,
    waves,
)

__all__ = [
    "ARCH_DEFAULTS",
    "DeviceLimits",
    "Occupancy",
    "Step",
    "Waves",
    "advice",
    "check_block_size",
    "check_launch",
    "attach_ncu",
    "block_size_table",
    "carveout_steps",
    "compare_ncu",
    "device_from_info",
    "device_limits_of",
    "device_limits",
    "kernel_key",
    "launch_configs",
    "occupancy",
    "occupancy_row",
    "parse_arch",
    "register_steps",
    "shared_memory_step",
    "trace_occupancy",
    "waves",
]

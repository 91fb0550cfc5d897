"""Waves: how many rounds of resident blocks a grid takes, and when the last
round leaves SMs idle (a tail effect)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# A tail is flagged when the last wave is at most half full and the idle
# share of the wave time is at least this large (so 3 waves + a sliver is a
# tail, 60 waves + a sliver is not: the sliver costs under 1%).
TAIL_MIN_IDLE_PCT = 5.0


@dataclass(frozen=True)
class Waves:
    waves: float  # grid blocks / (SMs x blocks per SM)
    full_waves: int
    last_wave_fill_pct: float  # how full the last wave is (100 when the grid divides evenly)
    efficiency_pct: float  # waves / ceil(waves): the share of wave time that does work
    tail_effect: bool


def waves(grid_blocks: int, blocks_per_sm: int, sm_count: int) -> Waves | None:
    """Wave quantization of a grid: how many rounds of resident blocks it takes."""
    if blocks_per_sm <= 0 or sm_count <= 0 or grid_blocks <= 0:
        return None
    per_wave = blocks_per_sm * sm_count
    w = grid_blocks / per_wave
    rounds = math.ceil(w)
    fill = 100.0 * (grid_blocks - (rounds - 1) * per_wave) / per_wave
    efficiency = 100.0 * w / rounds
    tail = rounds >= 2 and fill <= 50.0 and 100.0 - efficiency >= TAIL_MIN_IDLE_PCT
    return Waves(waves=w, full_waves=grid_blocks // per_wave, last_wave_fill_pct=fill,
                 efficiency_pct=efficiency, tail_effect=tail)

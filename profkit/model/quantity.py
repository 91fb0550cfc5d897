"""A measured value in base units and the error its printed rounding allows.

The ncu reader parses every metric value into one (``profkit.readers.ncu.units``), and the
roofline reads them (``profkit.analysis.roofline.counters``): the type lives here, below
both, so that the analysis needs no reader.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Quantity:
    """A parsed value: ``value`` in base units (see ``base_unit``) and the
    largest error the printed rounding allows (``resolution``, same units)."""

    value: float
    base_unit: str
    resolution: float = 0.0

    def as_int(self) -> int:
        return round(self.value)

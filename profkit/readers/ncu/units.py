"""ncu metric values and units, as printed in its CSV.

ncu scales units to keep numbers short unless run with ``--print-units
base``: ``65.54 Kbyte`` (decimal prefixes: K = 1000), ``6.37 us`` or
``6.37 usecond``, ``1.23 Gbyte/second``.  Numbers carry thousands separators
(``16,384``) unless LC_ALL=C, and ``n/a`` where a metric does not apply.

``parse_value`` turns a (value, unit) pair into base units: nanoseconds,
bytes, bytes per second, plain counts, percent.
"""

from __future__ import annotations

import math
import re

from profkit.model.quantity import Quantity

# Decimal prefixes, as ncu uses them ("65.54 Kbyte" is 65,536 bytes).
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}

# Time units -> nanoseconds.  ncu has printed both spellings over the years.
_TIME_NS = {
    "ns": 1.0, "nsecond": 1.0, "nsec": 1.0,
    "us": 1e3, "usecond": 1e3, "usec": 1e3,
    "ms": 1e6, "msecond": 1e6, "msec": 1e6,
    "s": 1e9, "second": 1e9, "sec": 1e9,
}
_TIME_S = {k: v / 1e9 for k, v in _TIME_NS.items()}

# At most 40 digits on either side of the point and 3 in the exponent: ncu prints doubles (17
# significant digits, exponents to 308); longer text is no measurement, and int() of a long
# exponent costs (or refuses, past 4,300 digits).
_NUMBER = re.compile(r"^[+-]?(\d{1,40}(\.\d{0,40})?|\.\d{1,40})([eE][+-]?\d{1,3})?$")


def parse_number(text: str) -> tuple[float, float] | None:
    """'16,384' -> (16384.0, 0.5); '6.37' -> (6.37, 0.005); 'n/a' / '' -> None.  A value that is
    not a finite double ('1e400', 'inf', 'nan') is unknown: None, like 'n/a'."""
    if not text or text == "n/a":  # most cells of a wide raw page: no work for them
        return None
    s = text.strip().replace(",", "").replace("\u202f", "").replace("\xa0", "")
    if not s or len(s) > 100 or not _NUMBER.match(s):
        return None
    value = float(s)
    if not math.isfinite(value):
        return None
    if "e" in s.lower():
        mantissa, _, exp = s.lower().partition("e")
        decimals = len(mantissa.partition(".")[2]) - int(exp)
    else:
        decimals = len(s.partition(".")[2])
    return value, 0.5 * 10.0 ** max(-decimals, -400)


def parse_value(text: str, unit: str = "") -> Quantity | None:
    """Parse one CSV cell with its unit; None for empty and n/a cells, and for a value that is
    no finite number in base units ('1e308' Gbyte)."""
    parsed = parse_number(text)
    if parsed is None:
        return None
    number, half_step = parsed
    scale, base = unit_scale(unit)
    value, resolution = number * scale, half_step * scale
    if not (math.isfinite(value) and math.isfinite(resolution)):
        return None
    return Quantity(value, base, resolution)


def unit_scale(unit: str) -> tuple[float, str]:
    """(factor to base units, base unit name) for an ncu unit string."""
    u = unit.strip()
    if not u:
        return 1.0, ""
    if u == "%":
        return 1.0, "%"
    num, _, den = u.partition("/")
    if num in _TIME_NS and not den:
        return _TIME_NS[num], "ns"
    num_scale, num_base = _prefixed(num)
    if den:
        if den in _TIME_S:
            return num_scale / _TIME_S[den], f"{num_base}/second"
        den_scale, den_base = _prefixed(den)
        return num_scale / den_scale, f"{num_base}/{den_base}"
    return num_scale, num_base


def _prefixed(unit: str) -> tuple[float, str]:
    """'Kbyte' -> (1e3, 'byte'); 'Mcycle' -> (1e6, 'cycle'); 'register' -> (1, 'register')."""
    if len(unit) > 1 and unit[0] in _PREFIX and unit[1].islower():
        return _PREFIX[unit[0]], unit[1:]
    return 1.0, unit


def exact_bytes(q: Quantity | None) -> int | None:
    """The byte count a scaled, rounded value stands for.

    "232.45 Kbyte" means some integer in [232445, 232455]; sizes of buffers
    and carveouts are multiples of large powers of two, so take the printed
    value when it is a multiple of 128 (shared memory's granularity), else
    the multiple of the largest power of two (up to 1 KiB) inside that
    interval.  Exact bytes need ``ncu --print-units base``.
    """
    if q is None:
        return None
    if q.resolution < 0.5 or (q.value.is_integer() and int(q.value) % 128 == 0):
        return q.as_int()
    lo, hi = math.ceil(q.value - q.resolution), math.floor(q.value + q.resolution)
    for power in (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1):
        candidate = -(-lo // power) * power
        if candidate <= hi:
            return candidate
    return q.as_int()

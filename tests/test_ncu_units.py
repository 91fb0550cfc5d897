"""ncu value and unit parsing (the cell-level rules; whole files are in test_ncu_reader.py)."""

from __future__ import annotations

import pytest

from profkit.readers.ncu.units import exact_bytes, parse_number, parse_value, unit_scale


@pytest.mark.parametrize("text, expected", [
    ("16,384", 16384.0), ("1,234.5", 1234.5), ("6.37", 6.37), ("100", 100.0), ("1.5e+03", 1500.0),
    ("", None), ("n/a", None), ("(256, 1, 1)", None),
])
def test_parse_number(text, expected):
    parsed = parse_number(text)
    assert (parsed[0] if parsed else None) == expected


@pytest.mark.parametrize("value, unit, base, expected", [
    ("6.37", "us", "ns", 6370.0), ("6.37", "usecond", "ns", 6370.0), ("1.25", "msecond", "ns", 1.25e6),
    ("812", "nsecond", "ns", 812.0), ("2", "s", "ns", 2e9),
    ("65.54", "Kbyte", "byte", 65540.0), ("1.50", "Mbyte", "byte", 1.5e6), ("3.35", "Gbyte", "byte", 3.35e9),
    ("1.02", "Kbyte/block", "byte/block", 1020.0), ("2.87", "Tbyte/second", "byte/second", 2.87e12),
    ("812.4", "Gbyte/s", "byte/second", 812.4e9), ("84.35", "%", "%", 84.35),
    ("40", "register/thread", "register/thread", 40.0), ("1.98", "cycle/nsecond", "cycle/second", 1.98e9),
    ("103,168", "thread", "thread", 103168.0), ("1.20", "Mcycle", "cycle", 1.2e6),
])
def test_parse_value_scales_to_base_units(value, unit, base, expected):
    q = parse_value(value, unit)
    assert q is not None and q.base_unit == base
    assert q.value == pytest.approx(expected)


def test_unit_scale_is_decimal():
    assert unit_scale("Kbyte") == (1e3, "byte")  # ncu's K is 1000: 64 KiB prints as 65.54 Kbyte


@pytest.mark.parametrize("value, unit, expected", [
    ("65.54", "Kbyte", 65536), ("1.02", "Kbyte/block", 1024), ("49.15", "Kbyte/block", 49152),
    ("232.45", "Kbyte/block", 232448), ("102.40", "Kbyte/block", 102400), ("16.38", "Kbyte", 16384),
    ("233.47", "Kbyte", 233472), ("160", "Kbyte", 160000), ("4,096", "byte/block", 4096), ("0", "byte", 0),
])
def test_exact_bytes_recovers_sizes_from_rounded_values(value, unit, expected):
    assert exact_bytes(parse_value(value, unit)) == expected

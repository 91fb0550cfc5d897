"""Achieved DRAM bandwidth per kernel, from Nsight Compute, joined to a trace's kernels.

ncu measures what a trace cannot: the bytes a kernel moved to and from DRAM
(``dram__bytes_read.sum`` + ``dram__bytes_write.sum``, which `profkit trace
--ncu-top N` always collects) over its duration (``gpu__time_duration.sum``).
Bytes / duration is the achieved bandwidth; against the device's peak
(the trace's ``devices.memory_bandwidth_bps``) it says how close to the
memory roofline the kernel ran.  Over several profiled launches of one kernel
it is their total bytes over their total time.

ncu spells kernel names its own way: namespaces dropped (``void
vectorized_elementwise_kernel<4, AbsFunctor<float>, ...>`` for nsys's ``void
at::native::vectorized_elementwise_kernel<(int)4, at::native::AbsFunctor<float>,
...>``), ``unnamed>::`` for an anonymous namespace.  Both sides are reduced to
one key (``join_key``): qualifiers dropped, then
``names.canonical_kernel_name``.  A name with no match falls back to its
bare function name where that names exactly one kernel on each side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from profkit.analysis.kernels.names import NAME_CACHE, canonical_kernel_name, code_key, has_parameter_list
from profkit.model import Trace

# The keys every row gets from ``attach_bandwidth`` (None where ncu did not profile the kernel).
BANDWIDTH_KEYS = ("dram_bytes", "ncu_duration_ns", "ncu_launches", "dram_gbps", "dram_peak_pct")

# A qualifier is tried only where a word starts (the lookbehind), each word once: a
# pattern free to start inside a word rescans the rest of it from every letter,
# minutes on a long name.
_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|<unnamed>|unnamed>|(?<!\w)(\w++))::")


def _drop_qualifier(match: re.Match[str]) -> str:
    word = match.group(1)
    if word is None:
        return ""
    digits = len(word) - len(word.lstrip("0123456789"))  # a name starts at a letter or "_"
    return match.group(0) if digits == len(word) else word[:digits]


@lru_cache(maxsize=NAME_CACHE)
def join_key(name: str) -> str:
    """The key a kernel name of nsys, Kineto or ncu is joined on."""
    name = _QUALIFIER.sub(_drop_qualifier, str(name))
    # "()" keeps a C++ kernel apart from a Triton kernel of the same name (kernel_names.code_key)
    return canonical_kernel_name(name) + ("()" if has_parameter_list(name) else "")


def ncu_bandwidth(launches: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """join_key -> ncu's figures for that kernel: ``name`` (ncu's), ``ncu_launches``,
    ``dram_bytes`` and ``ncu_duration_ns`` (summed over the launches that have both)."""
    out: dict[str, dict[str, Any]] = {}
    for launch in launches:
        entry = out.setdefault(join_key(launch.kernel_name), {
            "name": launch.kernel_name, "device": launch.device, "ncu_launches": 0,
            "dram_bytes": None, "ncu_duration_ns": None})
        entry["ncu_launches"] += 1
        if None in (launch.dram_bytes_read, launch.dram_bytes_write, launch.duration_ns):
            continue
        entry["dram_bytes"] = (entry["dram_bytes"] or 0) + launch.dram_bytes_read + launch.dram_bytes_write
        entry["ncu_duration_ns"] = (entry["ncu_duration_ns"] or 0) + launch.duration_ns
    return out


def peak_bandwidth(trace: Trace) -> dict[int, int]:
    """Device id -> peak DRAM bandwidth in bytes/s, for the devices whose peak the trace records."""
    if not trace.has("devices"):
        return {}
    devices = trace.table("devices", ["device", "memory_bandwidth_bps"])
    return {int(d): int(b) for d, b in zip(devices["device"], devices["memory_bandwidth_bps"]) if b and b > 0}


def attach_bandwidth(rows: Sequence[dict[str, Any]], launches: Sequence[Any], peaks: dict[int, int],
                     name_key: str = "name") -> list[dict[str, Any]]:
    """Kernel rows with BANDWIDTH_KEYS: ``dram_gbps`` = DRAM bytes / duration (GB/s, 1e9 bytes),
    ``dram_peak_pct`` = that against the device's peak (None when the peak is unknown)."""
    measured = ncu_bandwidth(launches)
    keys = [join_key(str(r.get(name_key, ""))) for r in rows]
    by_function = _unique_functions(measured)
    row_functions: dict[str, int] = {}
    for row in rows:
        f = code_key(str(row.get(name_key, "")))
        row_functions[f] = row_functions.get(f, 0) + 1
    only_peak = next(iter(peaks.values())) if len(peaks) == 1 else None
    out = []
    for row, key in zip(rows, keys):
        entry = measured.get(key)
        if entry is None:
            f = code_key(str(row.get(name_key, "")))
            entry = by_function.get(f) if row_functions.get(f) == 1 else None
        new = dict(row, **{k: None for k in BANDWIDTH_KEYS})
        if entry is not None:
            new.update(ncu_launches=entry["ncu_launches"], dram_bytes=entry["dram_bytes"],
                       ncu_duration_ns=entry["ncu_duration_ns"])
            if entry["dram_bytes"] is not None and entry["ncu_duration_ns"]:
                new["dram_gbps"] = entry["dram_bytes"] / entry["ncu_duration_ns"]  # bytes per ns = GB/s
                peak = peaks.get(entry["device"], only_peak) if entry["device"] is not None else only_peak
                if peak:
                    new["dram_peak_pct"] = 100.0 * new["dram_gbps"] * 1e9 / peak
        out.append(new)
    return out


def _unique_functions(measured: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Bare function name -> ncu's entry, for the names that only one profiled kernel has."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for entry in measured.values():
        seen.setdefault(code_key(entry["name"]), []).append(entry)
    return {f: entries[0] for f, entries in seen.items() if len(entries) == 1}


def bandwidth_note(rows: Sequence[dict[str, Any]], launches: Sequence[Any] | None, peaks: dict[int, int]) -> str:
    """One sentence on where the bandwidth column comes from, or why it is empty."""
    if launches is None:
        return ("No Nsight Compute data: achieved DRAM bandwidth needs ncu's DRAM bytes per kernel "
                "(profkit trace --ncu-top N, or --ncu CSV).")
    matched = sum(1 for r in rows if r.get("ncu_launches"))
    text = (f"Achieved DRAM bandwidth from ncu (DRAM bytes read + written / duration) for {matched} of "
            f"{len(ncu_bandwidth(launches))} profiled kernels.")
    if not peaks:
        text += " The trace does not record the GPU's peak memory bandwidth, so no % of peak."
    return text

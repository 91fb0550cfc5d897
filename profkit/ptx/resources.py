"""Registers, spills, stack, local and shared memory: from the cubin and ptxas's log.

Two sources, both static (no GPU):
- ``cuobjdump --dump-resource-usage kernel.cubin``: per function
  ``REG:32 STACK:0 SHARED:0 LOCAL:0 ...``.  This is the cubin the driver would
  load, so registers and shared memory come from here.
- ``ptxas -v``: "N bytes stack frame, N bytes spill stores, N bytes spill
  loads" and "Used N registers".  Spill bytes exist only here.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.ptx.cache import Cache, make_key
from profkit.ptx.tools import file_digest, find_tool, run_tool


@dataclass(frozen=True)
class CubinResources:
    """One function's line of ``cuobjdump --dump-resource-usage``."""

    function: str
    registers: int
    stack_bytes: int
    shared_bytes: int
    local_bytes: int
    constant_bytes: int


@dataclass(frozen=True)
class PtxasInfo:
    """One function's block of ``ptxas -v`` output."""

    function: str
    arch: str | None
    registers: int | None
    stack_frame_bytes: int
    spill_stores_bytes: int
    spill_loads_bytes: int
    shared_bytes: int
    barriers: int | None


_FUNCTION_LINE = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_RESOURCE_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_resource_usage(text: str) -> dict[str, CubinResources]:
    """Parse ``cuobjdump --dump-resource-usage`` output."""
    found: dict[str, CubinResources] = {}
    current = None
    for line in text.splitlines():
        m = _FUNCTION_LINE.match(line)
        if m:
            current = m.group(1)
            continue
        if current and "REG:" in line:
            fields = {k: int(v) for k, v in _RESOURCE_FIELD.findall(line)}
            found[current] = CubinResources(
                current, fields.get("REG", 0), fields.get("STACK", 0), fields.get("SHARED", 0),
                fields.get("LOCAL", 0), fields.get("CONSTANT[0]", 0),
            )
            current = None
    return found


_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas_log(text: str) -> dict[str, PtxasInfo]:
    """Parse ``ptxas -v`` output (also as ``ptxas-blackwell info :`` from Triton's copy)."""
    found: dict[str, PtxasInfo] = {}
    entry: dict | None = None
    properties_for = None

    def close() -> None:
        if entry is not None:
            found[entry["function"]] = PtxasInfo(**entry)

    for line in text.splitlines():
        m = _COMPILING.search(line)
        if m:
            close()
            entry = {"function": m.group(1), "arch": m.group(2), "registers": None, "stack_frame_bytes": 0,
                     "spill_stores_bytes": 0, "spill_loads_bytes": 0, "shared_bytes": 0, "barriers": None}
            properties_for = None
            continue
        m = _PROPERTIES.search(line)
        if m:
            properties_for = m.group(1)
            continue
        if entry is None:
            continue
        m = _FRAME.search(line)
        # Non-entry functions (called device functions) print their own
        # properties block; only the entry's own frame counts here.
        if m and properties_for in (None, entry["function"]):
            entry["stack_frame_bytes"], entry["spill_stores_bytes"], entry["spill_loads_bytes"] = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m:
            entry["registers"] = int(m.group(1))
            if (s := _SMEM.search(line)):
                entry["shared_bytes"] = int(s.group(1))
            if (b := _BARRIERS.search(line)):
                entry["barriers"] = int(b.group(1))
    close()
    return found


def resource_usage_text(cubin: bytes, cache: Cache) -> str:
    """``cuobjdump --dump-resource-usage`` of a cubin, cached by content and tool."""
    cuobjdump = find_tool("cuobjdump")
    key = make_key({"cubin": file_digest(cubin), "tool": cuobjdump.identity, "what": "resource-usage"})
    hit = cache.get("resources", key)
    if hit is not None:
        return hit[1]["resources.txt"].decode()
    with tempfile.TemporaryDirectory(prefix="profkit-cuobjdump-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        text = run_tool(cuobjdump, ["--dump-resource-usage", str(path)], "the cubin").stdout.decode(errors="replace")
    if "REG:" not in text:
        raise ProfkitError("cuobjdump printed no resource usage for the cubin", hint=f"cuobjdump {cuobjdump.release}")
    cache.put("resources", key, {"tool": cuobjdump.identity}, {"resources.txt": text.encode()})
    return text

"""One kernel's machine code, assembled from a build: PTX, SASS and resources.

``load_kernels(target, cache)`` is the library entry point behind
``profkit ptx``: it compiles or reads the target and returns one KernelCode
per selected kernel.  Disassembly runs only when SASS is asked for.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.ptx import parse
from profkit.ptx.cache import Cache, make_key
from profkit.ptx.compile import Build, build
from profkit.ptx.resources import (
    CubinResources,
    PtxasInfo,
    parse_ptxas_log,
    parse_resource_usage,
    resource_usage_text,
)
from profkit.ptx.targets import Target
from profkit.ptx.tools import file_digest, find_tool, run_tool


@dataclass
class KernelCode:
    """A kernel with everything `profkit ptx` reports about it."""

    build: Build
    symbol: str  # the name in PTX and the cubin (mangled for C++)
    resources: CubinResources
    ptxas: PtxasInfo | None
    cache: Cache
    _sass_text: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return demangle(self.symbol)

    @property
    def label(self) -> str:
        return self.build.label

    @property
    def arch(self) -> str:
        return self.build.arch or parse.sass_target(self.sass_text()) or "?"

    @property
    def has_ptx(self) -> bool:
        return self.build.ptx is not None

    @property
    def dynamic_shared_bytes(self) -> int:
        return self.build.dynamic_shared_bytes.get(self.symbol, 0)

    def ptx(self, raw: bool = False) -> parse.Listing:
        if self.build.ptx is None:
            raise ProfkitError(f"{self.label} has no PTX (a cubin holds only SASS)", hint="use --sass")
        return parse.ptx_listing(self.build.ptx, self.symbol, raw=raw)

    def sass_text(self) -> str:
        if self._sass_text is None:
            self._sass_text = disassemble(self.build.cubin, self.cache)
        return self._sass_text

    def sass(self, raw: bool = False) -> parse.Listing:
        try:
            return parse.sass_listing(self.sass_text(), self.symbol, raw=raw)
        except KeyError:
            raise ProfkitError(f"no SASS for {self.symbol} in the cubin") from None

    def listing(self, sass: bool, raw: bool = False) -> parse.Listing:
        return self.sass(raw) if sass or not self.has_ptx else self.ptx(raw)


def demangle(symbol: str) -> str:
    """A readable name for an Itanium-mangled C++ symbol: ``_Z11gelu_kernelPKfPfi``
    -> ``gelu_kernel``, ``_ZN2ns3fooEv`` -> ``ns::foo``; others unchanged."""
    if not symbol.startswith("_Z"):
        return symbol
    rest = symbol[2:]
    nested = rest.startswith("N")
    if nested:
        rest = rest[1:]
        while rest[:1] in ("K", "V", "r"):
            rest = rest[1:]
    parts = []
    while (m := re.match(r"(\d+)", rest)):
        length = int(m.group(1))
        start = len(m.group(1))
        parts.append(rest[start:start + length])
        rest = rest[start + length:]
        if not nested:
            break
    return "::".join(parts) if parts else symbol


def symbol_matches(symbol: str, wanted: str) -> bool:
    readable = demangle(symbol)
    return wanted in (symbol, readable) or readable.endswith(f"::{wanted}")


def disassemble(cubin: bytes | None, cache: Cache) -> str:
    """``nvdisasm -c`` of a cubin, cached by content and tool version."""
    if cubin is None:
        raise ProfkitError("no cubin to disassemble")
    nvdisasm = find_tool("nvdisasm")
    key = make_key({"cubin": file_digest(cubin), "tool": nvdisasm.identity, "what": "nvdisasm -c"})
    hit = cache.get("sass", key)
    if hit is not None:
        return hit[1]["kernel.sass"].decode()
    with tempfile.TemporaryDirectory(prefix="profkit-nvdisasm-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        text = run_tool(nvdisasm, ["-c", str(path)], "the cubin").stdout.decode(errors="replace")
    cache.put("sass", key, {"tool": nvdisasm.identity}, {"kernel.sass": text.encode()})
    return text


def load_kernels(target: Target, cache: Cache, every: bool = False) -> list[KernelCode]:
    """Compile or read ``target``; one KernelCode for the kernel it names.

    A file with several kernels needs ``--kernel`` unless ``every`` is set.
    """
    result = build(target, cache)
    return kernels_of(result, cache, every=every)


def kernels_of(result: Build, cache: Cache, every: bool = False) -> list[KernelCode]:
    if result.cubin is None:
        raise ProfkitError(f"{result.label}: no cubin was produced")
    resources = parse_resource_usage(resource_usage_text(result.cubin, cache))
    symbols = parse.ptx_entries(result.ptx) if result.ptx is not None else list(resources)
    if not symbols:
        raise ProfkitError(f"{result.label} contains no kernel")
    wanted = result.kernel
    if wanted is not None:
        chosen = [s for s in symbols if symbol_matches(s, wanted)]
        if not chosen:
            listed = ", ".join(demangle(s) for s in symbols)
            raise ProfkitError(f"{result.label} has no kernel {wanted!r}", hint=f"its kernels: {listed}")
    elif len(symbols) > 1 and not every:
        listed = ", ".join(demangle(s) for s in symbols)
        raise ProfkitError(f"{result.label} has {len(symbols)} kernels ({listed})", hint="pick one with --kernel NAME")
    else:
        chosen = symbols
    ptxas = parse_ptxas_log(result.ptxas_log) if result.ptxas_log else {}
    kernels = []
    for symbol in chosen:
        if symbol not in resources:
            raise ProfkitError(f"the cubin of {result.label} has no function {symbol}")
        info = ptxas.get(symbol)
        if info is not None and info.registers is not None and info.registers != resources[symbol].registers:
            # A log from re-assembling PTX (inductor caches) that disagrees with
            # the cubin describes other machine code; its spill counts would lie.
            info = None
        kernels.append(KernelCode(result, symbol, resources[symbol], info, cache))
    return kernels

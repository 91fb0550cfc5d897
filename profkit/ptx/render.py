"""Terminal rendering of listings, summaries and diffs (rich, or plain text for pipes).

Global memory instructions are highlighted and marked with their width:
green for 128-bit and wider (vectorized), yellow for narrower ones.  The
plain form appends the same marks as ``//`` comments, so piped PTX stays PTX.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console
from rich.text import Text

from profkit.ptx.diff import KernelDiff
from profkit.ptx.parse import Instruction, Listing
from profkit.ptx.summary import VECTOR_BITS, KernelSummary, summary_rows

_CATEGORY_STYLE = {
    "shared_load": "magenta", "shared_store": "magenta", "shared_atomic": "magenta",
    "local_load": "bold red", "local_store": "bold red", "generic_load": "yellow", "generic_store": "yellow",
    "global_atomic": "bold yellow", "tma": "bold green",
    "fma": "cyan", "fp": "cyan", "sfu": "bright_magenta", "mma": "bold blue",
    "branch": "red", "barrier": "bright_red", "convert": "blue", "int": "white", "move": "white",
}
_TOKEN = re.compile(r"(//.*$)|(%[a-z]+\d*|\bU?R\d+\b|\bU?P[T\d]\b|\bRZ\b|\bPT\b)|(\$L__\w+|\.L_x_\d+)")


def is_global_memory(ins: Instruction | None) -> bool:
    return ins is not None and ins.category in ("global_load", "global_store") and ins.width_bits is not None


def memory_mark(ins: Instruction) -> str:
    """"global load 128-bit, vectorized" / "global store 32-bit, scalar"."""
    direction = "load" if ins.category == "global_load" else "store"
    quality = "vectorized" if ins.width_bits >= VECTOR_BITS else "scalar" if ins.width_bits <= 32 else "narrow"
    extras = [x for x, on in (("read-only path", ins.readonly), ("async to shared", ins.asynchronous)) if on]
    return f"global {direction} {ins.width_bits}-bit, {quality}" + "".join(f", {x}" for x in extras)


def styled_line(line: str, ins: Instruction | None) -> Text:
    text = Text()
    position = 0
    opcode_span = None
    if ins is not None:
        at = line.find(ins.opcode)
        if at >= 0:
            opcode_span = (at, at + len(ins.opcode))
    for m in _TOKEN.finditer(line):
        _append_plain(text, line, position, m.start(), opcode_span, ins)
        style = "dim" if m.group(1) else "bright_blue" if m.group(2) else "bright_cyan"
        text.append(m.group(0), style=style)
        position = m.end()
    _append_plain(text, line, position, len(line), opcode_span, ins)
    if is_global_memory(ins):
        wide = ins.width_bits >= VECTOR_BITS
        text.stylize("on #0c3a1e" if wide else "on #3d3200")
    return text


def _append_plain(text: Text, line: str, start: int, end: int, opcode_span: tuple[int, int] | None,
                  ins: Instruction | None) -> None:
    if start >= end:
        return
    if opcode_span and start <= opcode_span[0] < end:
        a, b = opcode_span
        text.append(line[start:a])
        text.append(line[a:min(b, end)], style=_opcode_style(ins))
        if b < end:
            text.append(line[b:end])
    else:
        text.append(line[start:end])


def _opcode_style(ins: Instruction | None) -> str:
    if ins is None:
        return ""
    if is_global_memory(ins):
        return "bold green" if ins.width_bits >= VECTOR_BITS else "bold yellow"
    return _CATEGORY_STYLE.get(ins.category, "")


def print_listing(console: Console, listing: Listing, plain: bool) -> None:
    by_line = listing.by_line()
    if plain:
        for i, line in enumerate(listing.lines):
            ins = by_line.get(i)
            console.out(f"{line}    // << {memory_mark(ins)}" if is_global_memory(ins) else line,
                        highlight=False)
        return
    width = len(str(len(listing.lines)))
    for i, line in enumerate(listing.lines):
        ins = by_line.get(i)
        row = Text()
        row.append(f"{i + 1:>{width}} ", style="dim")
        if is_global_memory(ins):
            wide = ins.width_bits >= VECTOR_BITS
            row.append(f"{'▲' if wide else '▼'}{ins.width_bits:>4} ", style="bold green" if wide else "bold yellow")
        else:
            row.append("      ")
        row.append_text(styled_line(line.expandtabs(8), ins))
        console.print(row, soft_wrap=True)


def plain_summary(summary: KernelSummary) -> list[str]:
    """The summary as PTX/SASS comments, for pipes."""
    return [f"// {row['metric']}: {row['value']}" for row in summary_rows(summary)]


def print_diff(console: Console, diff: KernelDiff, plain: bool) -> None:
    if diff.identical:
        console.print(f"no difference in the {diff.language.upper()} once registers and labels are normalized",
                      style=None if plain else "bold", highlight=False)
        return
    for line in diff.lines:
        if plain:
            console.out(line, highlight=False)
            continue
        style = ("bold" if line.startswith(("---", "+++")) else "green" if line.startswith("+")
                 else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else "")
        console.print(Text(line, style=style), soft_wrap=True)


def lines_to_console(console: Console, lines: Iterable[str]) -> None:
    for line in lines:
        console.out(line, highlight=False)

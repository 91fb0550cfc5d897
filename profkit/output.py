"""One output layer for every command that prints rows.

Like sqlite-utils' ``output_options``: each table-printing command takes the
same ``--format`` flag and hands its rows to ``emit_rows``.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import click

from profkit.errors import ProfkitError

FORMATS = ("table", "json", "csv", "md")


def format_option(default: str = "table") -> Callable:
    """The shared ``--format table|json|csv|md`` option."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=default,
        show_default=True,
        help="table: a table fitted to the terminal; json: every figure, for programs; csv: one line per "
             "table row, every column; md: Markdown tables, for a pull-request comment.",
    )


def wide_option() -> Callable:
    """The shared ``--wide`` flag: names whole in terminal tables."""
    return click.option("--wide", is_flag=True, default=False,
                        help="table: show names whole (full kernel names with template arguments, wrapped "
                             "onto several lines) instead of shortened with '…' to fit the terminal.  "
                             "json, csv and md always carry full names.")


def top_option(default: int | None = None, help: str = "Show at most N rows.", minimum: int = 1,
               old_names: Sequence[str] = ()) -> Callable:
    """The one row-limit flag, ``--top N``, of every command that can cut its table
    (``old_names``: hidden, deprecated spellings such as ``--limit``)."""
    def decorate(f: Callable) -> Callable:
        f = click.option("--top", "top", type=click.IntRange(min=minimum), default=default, metavar="N",
                         show_default=default is not None, help=help)(f)
        for old in old_names:
            f = deprecated_alias(old, "--top", "top", click.IntRange(min=minimum))(f)
        return f
    return decorate


def deprecated_alias(old: str, new: str, param: str, type: Any = None) -> Callable:
    """A hidden option ``old`` that sets the parameter ``param`` of the option ``new``
    (where ``new`` is not given too), with a one-line note on stderr."""
    dest = "_alias_" + old.lstrip("-").replace("-", "_")

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            value = kwargs.pop(dest, None)
            if value is not None:
                click.echo(f"profkit: {old} is deprecated, use {new}", err=True)
                from click.core import ParameterSource

                if click.get_current_context().get_parameter_source(param) is not ParameterSource.COMMANDLINE:
                    kwargs[param] = value
            return f(*args, **kwargs)

        return click.option(old, dest, type=type, default=None, hidden=True, expose_value=True)(wrapper)
    return decorate


@dataclass(frozen=True)
class Column:
    """A column of a printed table: the row key, its heading, how to show it."""

    key: str
    title: str
    # text | kernel (a kernel name) | int | ns | s (ns from the session start, shown as seconds) | pct | float
    # | bytes | si | widths
    kind: str = "text"
    missing: str = ""  # shown for an unknown value ("—" where a blank would read as zero)
    # How a narrow terminal fits it (profkit.terminal): "" a name, shortened with "…" at
    # its end; "left": shortened at its start (a path, file:line); "wrap": a sentence,
    # wrapped between words; "whole": never shortened nor hidden (a name the user types).
    fit: str = ""
    # Which columns a narrow terminal hides first: the highest ``drop`` first, then those
    # at 0 from the right; never one below 0, the first column or a kernel name.
    drop: int = 0

    def show(self, value: Any) -> str:
        if self.missing and (value is None or (isinstance(value, float) and math.isnan(value))):
            return self.missing
        return format_value(value, self.kind)


def format_value(value: Any, kind: str = "text") -> str:
    """Human formatting for tables (JSON and CSV keep raw values)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or type(value).__name__ == "bool_":  # Python or numpy bool
        return "yes" if value else "no"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "ns":
        return f"{int(round(value)):,}"
    if kind == "s":  # ns from the session start, as seconds to the ns (profkit.model.clock)
        from profkit.model.clock import seconds_text

        return seconds_text(value)
    if kind == "pct":
        return f"{value:.1f}"
    if kind == "float":
        return f"{value:,.2f}"
    if kind == "bytes":
        return human_bytes(value)
    if kind == "si":
        return si_number(value)
    if kind == "widths" and isinstance(value, dict):
        return memory_widths(value)
    return str(value)


def memory_widths(counts: dict[Any, int]) -> str:
    """``{"128": 30, "64": 0, "32": 1}`` (instructions per access width in bits) -> "30×128b, 1×32b"."""
    shown = [f"{n}×{w}b" for w, n in sorted(counts.items(), key=lambda item: -int(item[0])) if n]
    return ", ".join(shown) or "none"


def si_number(value: float) -> str:
    """1.117e12 -> "1.12 T": FLOPs and rates span 15 orders of magnitude, so a prefix, not commas."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}"
    return f"{value:.3g}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


# Units a size may be written in: SI (powers of 1000, as disks and `df -H` count) and IEC (powers
# of 1024, as PyTorch and profkit print memory).  Case matters: "mb" could be millibits.
BYTE_UNITS = {"": 1, "B": 1, "kB": 1000, "KB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3, "TB": 1000 ** 4,
              "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]*)")


def parse_bytes(text: str, what: str = "size") -> int:
    """"2GiB", "512MiB", "100MB", "1.5 GiB" or "4096" as a whole number of bytes.  Anything else
    (a negative, an unknown unit, a fraction of a byte) is a ProfkitError naming ``what``."""
    hint = "write bytes, or a number and a unit: 2GiB, 512MiB, 100MB; KiB, MiB, GiB count 1024s, kB, MB, GB 1000s"
    match = _SIZE.fullmatch(text.strip())
    if not match or match.group(2) not in BYTE_UNITS:
        raise ProfkitError(f"{what}: cannot read {text!r} as a size", hint=hint)
    value = Decimal(match.group(1)) * BYTE_UNITS[match.group(2)]  # Decimal: "0.1MB" is 100000 bytes exactly
    if value != value.to_integral_value():
        raise ProfkitError(f"{what}: {text!r} is not a whole number of bytes", hint=hint)
    return int(value)


def json_text(value: Any, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> str:
    """The one writer of every command's JSON output: strict JSON (``allow_nan=False``), a
    value that is no finite number (an overflow in a crafted input, an empty mean) written as
    null, "unknown", since ``NaN`` and ``Infinity`` are no JSON and break other readers.
    ``default``: how to write what json cannot (numpy scalars and dataclasses already are)."""
    convert = default or _json_default
    try:
        return json.dumps(value, indent=indent, default=convert, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: the one pass that finds them, only then
        return json.dumps(finite_json(value), indent=indent, allow_nan=False,
                          default=lambda v: finite_json(convert(v)))


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (numpy's too) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:  # numpy scalars
        return finite_json(value.item())
    return value


def rows_to_json(rows: Sequence[dict[str, Any]]) -> str:
    return json_text(list(rows))


def rows_to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """RFC 4180 CSV (``\r\n`` rows, a text cell quoted where it holds a comma, quote or
    line break), safe to open in a spreadsheet: a text cell that starts with ``=``,
    ``+``, ``-``, ``@``, tab or CR gets a leading ``'`` (OWASP's rule against formula
    injection: names come from the profiled program).  Numbers stay numbers."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow([csv_cell(c.key) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(row.get(c.key)) for c in columns])
    return buf.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def md_escape(text: str) -> str:
    """Make text safe inside a Markdown table cell, and inert where it is rendered.

    Names come from the profiled program (kernels, NVTX ranges, files): in a
    pull-request comment ``[click](javascript:...)`` must not become a link,
    ``![x](https://...)`` not an image, a URL, ``www.`` name or e-mail
    address not an autolink, ``float *a, float *b`` or ``__init__`` not
    italics or bold.  Brackets, backticks and emphasis marks are escaped, as are the ``:`` of ``://``
    and the ``.`` of ``www.``; ``<`` and ``>`` become entities, so no HTML
    or ``<autolink>`` gets through.  GitHub finds e-mail addresses after
    escapes and entities are undone, so no escape stops those: an
    address-shaped run goes into a code span, which GitHub never links (the
    text reads the same).
    """
    text = str(text)
    out, last = [], 0
    for match in _AUTOLINK_EMAIL.finditer(text):
        out += [_md_plain(text[last:match.start()]), f"`{match.group()}`"]
        last = match.end()
    out.append(_md_plain(text[last:]))
    return "".join(out)


def md_escape_prose(text: str) -> str:
    """``md_escape`` for a sentence that marks code with backticks (a finding): each
    `...` pair stays a code span, which GitHub renders as text (no link, no mark
    inside one), and the rest is escaped."""
    parts = _CODE_SPAN.split(str(text))
    return "".join(part if i % 2 else md_escape(part) for i, part in enumerate(parts))


_CODE_SPAN = re.compile(r"(`[^`\n]+`)")


def _md_plain(text: str) -> str:
    out = (
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
        .replace("\r", " ")
    )
    for mark in ("[", "]", "`", "*", "~"):
        out = out.replace(mark, "\\" + mark)
    out = _EMPHASIS_UNDERSCORE.sub(r"\\_", out)
    out = _AUTOLINK_SCHEME.sub(r"\\:", out)
    return _AUTOLINK_WWW.sub(r"\1\\.", out)


# "_" emphasizes only where it is not between two letters or digits (GFM's flanking
# rules), so "shared_memory" stays as written and "__init__" or " _x_ " are escaped.
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# GitHub's autolink extension starts a link at "scheme:" + "//" and at "www.".
# (Patterns here are tried only where a run starts, by a lookbehind: one free to start
# anywhere rescans a long name from every character, quadratic in its length.)
_AUTOLINK_SCHEME = re.compile(r"(?<=[A-Za-z0-9+.-]):(?=//)")  # (a superset: "1://" is escaped too)
_AUTOLINK_WWW = re.compile(r"((?:^|(?<=[^A-Za-z0-9]))[Ww][Ww][Ww])\.")
# ... and an e-mail address at any "local@domain.part" run of these characters
# (cmark-gfm's autolink.c: the local part alnum and ".+-_", the domain alnum and
# ".-_" with a dot); a wider match only costs a code span.
_AUTOLINK_EMAIL = re.compile(r"(?<![A-Za-z0-9.+_-])[A-Za-z0-9.+_-]+@[A-Za-z0-9_-]*\.[A-Za-z0-9._-]*")


def rows_to_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    align = {"text": ":--", "kernel": ":--"}
    head = "| " + " | ".join(md_escape(c.title) for c in columns) + " |"
    rule = "| " + " | ".join(align.get(c.kind, "--:") for c in columns) + " |"
    body = [
        "| " + " | ".join(md_escape(c.show(row.get(c.key))) for c in columns) + " |"
        for row in rows
    ]
    return "\n".join([head, rule, *body]) + "\n"


# C0 controls (ESC, CR, BEL, ...), DEL and C1 controls: a name or NVTX text holding
# "\x1b[2J" or an OSC 8 hyperlink must not clear or drive the user's terminal.  They
# show as visible escapes; JSON keeps them as JSON escapes, CSV and Markdown as text.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def terminal_safe(text: str, lines: bool = False) -> str:
    """``text`` with every control character replaced by a visible ``\\xNN``
    (``lines``: line breaks kept, for a text report of several lines)."""
    if text.isprintable():
        return text
    if lines:
        return "\n".join(line.translate(_CONTROLS) for line in text.split("\n"))
    return text.translate(_CONTROLS)


def emit_rows(rows: Sequence[dict[str, Any]], columns: Sequence[Column], fmt: str, title: str | None = None,
              wide: bool = False) -> None:
    """Print rows in the chosen format to stdout.

    Terminal tables fit the terminal by one rule (``profkit.terminal``): kernel names
    short (``short_kernel_names``) and other names cut with "…" unless ``wide``, numbers
    whole, columns hidden by priority with a note naming them.  JSON, CSV and Markdown
    carry every column and the full names."""
    if fmt == "table" and not wide:
        rows = with_short_kernel_names(rows, columns)
    if fmt == "json":
        click.echo(rows_to_json(rows))
    elif fmt == "csv":
        click.echo(rows_to_csv(rows, columns), nl=False)
    elif fmt == "md":
        if title:
            click.echo(f"### {md_escape(title)}\n")
        click.echo(rows_to_markdown(rows, columns), nl=False)
    else:
        print_table(rows, columns, title, wide)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str | None = None,
                wide: bool = False) -> None:
    """A terminal table fitted to the terminal's width (``profkit.terminal.fit_table``)."""
    from rich.console import Console

    from profkit.terminal import rich_table, terminal_width

    width = terminal_width()
    cells = [[terminal_safe(c.show(row.get(c.key))) for c in columns] for row in rows]
    table, hidden = rich_table(cells, columns, width, wide, terminal_safe(title) if title else title)
    # markup=False: kernel names such as "void f<[1]>" must print verbatim.
    console = Console(markup=False, highlight=False, width=width)
    console.print(table)
    if hidden:
        console.print(f"({', '.join(c.title for c in hidden)} hidden: terminal too narrow; widen it, "
                      "or use --format csv or json)", style="dim")


# -- short kernel names, like nsys's `:base` ----------------------------------------------
# A name is generic when it says nothing without its template argument
# (cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>).
_GENERIC_BASES = frozenset({"Kernel", "Kernel2", "kernel", "device_kernel", "kernel_entry"})
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")
_DULL = frozenset({
    "int", "unsigned", "long", "short", "char", "float", "double", "bool", "void", "const", "signed", "auto",
    "true", "false", "std", "at", "native", "c10", "cuda", "detail", "array", "Array", "Half", "BFloat16", "half",
    "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t", "nullptr_t", "decltype", "nullptr", "unnamed",
    "anonymous", "namespace", "lambda", "instance", "operator", "type", "enable_if", "float2", "float4",
    "Params", "Policy", "Policy800", "Policy900",
    # ATen's wrappers: the functor inside them tells kernels apart
    "BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "UnaryFunctor", "TensorListMetadata",
    "TensorListScalarListMetadata", "FusedOptimizerTensorListMetadata", "gpu_kernel_impl_nocast", "gpu_kernel_impl",
    "ReduceOp", "func_wrapper_t", "binary_internal", "OpaqueType", "gpu_index_kernel", "index_kernel_impl",
    "TrivialOffsetCalculator", "OffsetCalculator", "LoadWithCast", "StoreWithCast", "memory",
})


def kernel_base_name(name: str) -> str:
    """The kernel's function name without namespaces, template arguments,
    parameters or return type, like nsys's ``:base`` / HTA's ``shorten_name``:
    ``void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3)`` ->
    ``vectorized_elementwise_kernel``."""
    text = name.replace("(anonymous namespace)", "").replace("<unnamed>", "").replace("->", "")
    if "<" not in text and "(" not in text:
        return text.rsplit("::", 1)[-1].strip() or name
    kept: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(ch)
    words = "".join(kept).split()
    base = words[-1] if words else name
    return base.rsplit("::", 1)[-1] or name


def _template_hint(name: str, base: str) -> str:
    """The first telling identifier in the kernel's template arguments, e.g.
    ``CUDAFunctor_add`` for ``vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>``."""
    i = name.find(base + "<")
    if i < 0:
        return ""
    for ident in _IDENTIFIER.findall(name[i + len(base) + 1:]):
        last = ident.rsplit("::", 1)[-1]
        if last not in _DULL and not re.fullmatch(r"T\d*|_+", last):
            return last
    return ""


def short_kernel_names(names: Sequence[str]) -> list[str]:
    """Short names for a table of kernels: the base name; where bases collide
    (or say nothing, like ``Kernel2``) the first telling template argument
    added (``vectorized_elementwise_kernel<CUDAFunctor_add>``); where that still
    collides, ``#2``, ``#3`` ... in table order."""
    full = [str(n) for n in names]
    bases = [kernel_base_name(n) for n in full]
    distinct_per_base: dict[str, set[str]] = {}
    for n, b in zip(full, bases):
        distinct_per_base.setdefault(b, set()).add(n)
    shown: list[str] = []
    for n, b in zip(full, bases):
        if len(distinct_per_base[b]) > 1 or b in _GENERIC_BASES:
            hint = _template_hint(n, b)
            shown.append(f"{b}<{hint}>" if hint else b)
        else:
            shown.append(b)
    first_full: dict[str, str] = {}
    seen: dict[str, int] = {}
    out = []
    for n, label in zip(full, shown):
        owner = first_full.setdefault(label, n)
        if owner == n:
            out.append(label)
            continue
        seen[label] = seen.get(label, 1) + 1
        out.append(f"{label} #{seen[label]}")
    return out


def with_short_kernel_names(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> list[dict[str, Any]]:
    """The rows with every ``kernel`` column's names shortened (a copy)."""
    keys = [c.key for c in columns if c.kind == "kernel"]
    if not keys:
        return list(rows)
    out = [dict(r) for r in rows]
    for key in keys:
        positions = [i for i, r in enumerate(out) if isinstance(r.get(key), str)]
        for i, short in zip(positions, short_kernel_names([out[i][key] for i in positions])):
            out[i][key] = short
    return out


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# -- the columns of the nsys summaries (terminal tables and the report alike) -------------
# A narrow terminal hides the spread first (StdDev, Min, Max, Med), the name never.
TIME_COLUMNS = [
    Column("time_pct", "Time %", "pct"),
    Column("total_ns", "Total (ns)", "ns"),
    Column("instances", "Instances", "int"),
    Column("avg_ns", "Avg (ns)", "float"),
    Column("med_ns", "Med (ns)", "float", drop=2),
    Column("min_ns", "Min (ns)", "ns", drop=4),
    Column("max_ns", "Max (ns)", "ns", drop=3),
    Column("stddev_ns", "StdDev (ns)", "float", drop=5),
]
KERNEL_COLUMNS = [*TIME_COLUMNS, Column("name", "Kernel", "kernel")]
API_COLUMNS = [*TIME_COLUMNS, Column("name", "API function", drop=-1)]
NVTX_COLUMNS = [*TIME_COLUMNS, Column("style", "Style", drop=1), Column("name", "Range", drop=-1)]

# The machine code of a kernel (profkit.analysis.kernels.code) and its achieved DRAM
# bandwidth (profkit.analysis.kernels.bandwidth), shown next to its GPU time.  "—" marks
# a kernel whose code or ncu figures are not known (a vendor kernel: cuBLAS, NCCL, ...),
# so that nothing reads as a zero.
NOT_KNOWN = "—"
KERNEL_CODE_COLUMNS = [
    Column("registers", "Regs", "int", NOT_KNOWN),
    Column("spills", "Spill B", "int", NOT_KNOWN),
    Column("global_loads", "Loads", "widths", NOT_KNOWN),
    Column("global_stores", "Stores", "widths", NOT_KNOWN),
    Column("vector_grade", "Vectorized (128-bit share)", "text", NOT_KNOWN),
]
KERNEL_BANDWIDTH_COLUMNS = [
    Column("dram_gbps", "DRAM GB/s", "float", NOT_KNOWN),
    Column("dram_peak_pct", "% of peak BW", "pct", NOT_KNOWN),
]


def kernel_columns_with(*extra: list[Column]) -> list[Column]:
    """KERNEL_COLUMNS with more columns before the kernel name (which stays last)."""
    return [*KERNEL_COLUMNS[:-1], *(c for columns in extra for c in columns), KERNEL_COLUMNS[-1]]

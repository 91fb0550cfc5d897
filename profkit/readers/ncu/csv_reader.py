"""Read ncu's CSV output, both pages, from a live run or ``ncu --import``.

Quirks of the real format handled here:

* a live run (``ncu --csv ... app > out.csv 2>&1``) writes ``==PROF==`` and
  ``==WARNING==`` lines and the program's own output before (and sometimes
  between) the CSV lines: the table starts at the first line that parses as
  the ``"ID",...,"Kernel Name"`` header, and later lines are kept only when
  they look like records of it;
* ``--page details`` is long: one row per (launch, section, metric) plus rule
  rows; with rule columns in the header ("Rule Name", "Estimated Speedup"),
  metric rows may stop after "Metric Value" (ragged rows);
* ``--page raw`` is wide: a header of metric names, a row of units, then one
  row per launch;
* kernel names contain commas and template brackets (quoted in the CSV).

A CSV is input from strangers like a trace: its columns, rows, raw cells
(rows x columns) and the length of a cell are bounded (``profkit.limits``:
``PROFKIT_MAX_CSV_COLUMNS``, ``_ROWS``, ``_CELLS``, ``PROFKIT_MAX_STRING``), and
an .xz file may expand no more than a gzip'd trace may.
"""

from __future__ import annotations

import csv
import io
import lzma
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.limits import VARIABLES, LimitExceeded, Limits
from profkit.limits import current as current_limits

# The leading columns both pages share; the header must start with "ID".
IDENTITY_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name")
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
TOOL_PREFIXES = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")


@dataclass
class MetricRow:
    section: str
    name: str
    unit: str
    value: str


@dataclass
class RuleRow:
    section: str
    name: str
    type: str
    description: str
    speedup_type: str = ""
    speedup: str = ""


@dataclass
class RawLaunch:
    """One kernel launch as the CSV gave it: identity columns and metric cells."""

    identity: dict[str, str]
    metrics: dict[str, MetricRow] = field(default_factory=dict)  # key: "Section/Name" (details) or metric id (raw)
    rules: list[RuleRow] = field(default_factory=list)


@dataclass
class NcuCsv:
    page: str  # "details" | "raw"
    launches: list[RawLaunch]
    skipped_lines: int  # tool and program lines that were not part of the table


def read_csv_file(path: str | os.PathLike[str]) -> NcuCsv:
    p = Path(path)
    try:
        if p.suffix == ".xz":  # captures are committed compressed
            most = current_limits().max_decompressed(p.stat().st_size)
            with lzma.open(p, "rt", encoding="utf-8", errors="replace") as fh:
                text = fh.read(most + 1)
            if len(text) > most:
                raise LimitExceeded(f"{p.name} expands to more than {most:,} characters",
                                    VARIABLES["max_gzip_ratio"])
        else:
            text = p.read_text(encoding="utf-8", errors="replace")
    except lzma.LZMAError as exc:
        raise ProfkitError(f"{p}: not a valid .xz file ({exc})") from None
    except FileNotFoundError:
        raise ProfkitError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ProfkitError(f"{p} is a directory, not an ncu CSV file") from None
    except OSError as exc:
        raise ProfkitError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if text.startswith("NVIDIA Nsight Compute") or ".ncu-rep" in p.suffixes or "\x00" in text[:4096]:
        raise ProfkitError(f"{p} is an ncu report, not CSV",
                           hint=f"convert it: ncu --import {p.name} --csv --page details > {p.stem}.csv")
    try:
        return parse_csv_text(text)
    except ProfkitError as exc:
        raise ProfkitError(f"{p.name}: {exc.message}", hint=exc.hint) from None


def parse_csv_text(text: str) -> NcuCsv:
    lines = text.splitlines()
    start = _find_header(lines)
    if start is None:
        if any(line.startswith("==PROF==") for line in lines) and "No kernels were profiled" in text:
            raise ProfkitError("ncu profiled no kernels", hint="check the --kernel-name/-c filters")
        raise ProfkitError("no ncu CSV table found (no \"ID\",...,\"Kernel Name\" header)",
                           hint="make it with ncu --csv --page details (or --page raw)")
    limits = current_limits()
    # csv's own cap on a cell (131,072 by default) becomes PROFKIT_MAX_STRING, so that raising the
    # variable raises both; a longer cell ends the parse at the cap, in linear time
    csv.field_size_limit(limits.max_string + 1)
    header = _split(lines[start], limits)
    if len(header) > limits.max_csv_columns:
        raise LimitExceeded(f"the table has {len(header):,} columns, more than the {limits.max_csv_columns:,} "
                            "allowed", VARIABLES["max_csv_columns"])
    body = [line for line in lines[start + 1:] if line.strip() and not line.startswith(TOOL_PREFIXES)]
    skipped = start + (len(lines) - start - 1 - len(body))
    del lines
    if len(body) > limits.max_csv_rows:
        raise LimitExceeded(f"the table has {len(body):,} rows, more than the {limits.max_csv_rows:,} allowed",
                            VARIABLES["max_csv_rows"])
    if all(c in header for c in DETAILS_COLUMNS):
        launches, dropped = _details(header, body, limits)
        page = "details"
    else:
        # every cell of the raw page becomes a metric: bounded before any is made
        if len(header) * len(body) > limits.max_csv_cells:
            raise LimitExceeded(f"the raw page has {len(body):,} rows of {len(header):,} columns, more than "
                                f"the {limits.max_csv_cells:,} cells allowed", VARIABLES["max_csv_cells"])
        launches, dropped = _raw(header, body, limits)
        page = "raw"
    return NcuCsv(page, launches, skipped + dropped)


def _split(line: str, limits: Limits | None = None) -> list[str]:
    try:
        rows = list(csv.reader(io.StringIO(line)))
    except csv.Error as exc:  # a cell past csv's own field limit (set to ours in parse_csv_text)
        if "field limit" in str(exc):
            raise LimitExceeded(f"a cell holds more than the {csv.field_size_limit() - 1:,} characters allowed",
                                VARIABLES["max_string"]) from None
        raise ProfkitError(f"a line is not CSV ({exc})") from None
    fields = rows[0] if rows else []
    if limits is not None and len(line) > limits.max_string:  # only a line this long can hold such a cell
        longest = max(map(len, fields), default=0)
        if longest > limits.max_string:
            raise LimitExceeded(f"a cell holds {longest:,} characters, more than the {limits.max_string:,} "
                                "allowed", VARIABLES["max_string"])
    return fields


# A launch ID, a process ID: ASCII digits, few enough for any integer type ("²" is a digit to
# str.isdigit, and int() refuses 5,000 digits).
_ID = re.compile(r"[0-9]{1,18}")


def is_id(text: str) -> bool:
    return _ID.fullmatch(text.strip()) is not None


def _find_header(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith(('"ID"', "ID,")):
            fields = _split(line)
            if fields[:1] == ["ID"] and "Kernel Name" in fields:
                return i
    return None


def _records(header: list[str], body: Iterable[str], limits: Limits) -> Iterator[list[str] | None]:
    """CSV records of the table; None for a line that is not one (program output)."""
    for line in body:
        fields = _split(line, limits)
        yield fields if fields and is_id(fields[0]) else None


def _details(header: list[str], body: list[str], limits: Limits) -> tuple[list[RawLaunch], int]:
    col: dict[str, int] = {}
    for i, name in enumerate(header):
        col.setdefault(name, i)
    identity_cols = header[: col["Section Name"]]
    by_id: dict[str, RawLaunch] = {}
    dropped = 0
    for fields in _records(header, body, limits):
        if fields is None:
            dropped += 1
            continue

        # ragged rows (metric rows end at "Metric Value") read "" past their end; only the
        # columns asked for are read, so a row costs the same whatever the header's width
        def get(name: str, fields: list[str] = fields) -> str:
            i = col.get(name)
            return fields[i] if i is not None and i < len(fields) else ""

        launch_id = fields[0]
        launch = by_id.get(launch_id)
        if launch is None:
            launch = by_id[launch_id] = RawLaunch({c: get(c) for c in identity_cols})
        section = get("Section Name")
        if get("Metric Name"):
            launch.metrics.setdefault(f"{section}/{get('Metric Name')}",
                                      MetricRow(section, get("Metric Name"), get("Metric Unit"), get("Metric Value")))
        elif get("Rule Name"):
            launch.rules.append(RuleRow(section, get("Rule Name"), get("Rule Type"), get("Rule Description"),
                                        get("Estimated Speedup Type"), get("Estimated Speedup")))
    return list(by_id.values()), dropped


def _raw(header: list[str], body: list[str], limits: Limits) -> tuple[list[RawLaunch], int]:
    # Identity columns end where metric ids (which contain "__") begin.
    first_metric = next((i for i, name in enumerate(header) if "__" in name), len(header))
    units: list[str] = [""] * len(header)
    launches: list[RawLaunch] = []
    dropped = 0
    for line in body:
        fields = _split(line, limits)[: len(header)]
        if not launches and fields and not fields[0].strip() and len(fields) >= first_metric:
            units = fields + [""] * (len(header) - len(fields))  # the units row
            continue
        if not fields or not is_id(fields[0]):
            dropped += 1
            continue
        fields = fields + [""] * (len(header) - len(fields))
        launch = RawLaunch({header[i]: fields[i] for i in range(first_metric)})
        for i in range(first_metric, len(header)):
            launch.metrics[header[i]] = MetricRow("", header[i], units[i], fields[i])
        launches.append(launch)
    return launches, dropped


_NVTX_RANGE = re.compile(r'<[^>]*>:([^:"]+):')


def nvtx_ranges(raw: RawLaunch) -> list[str]:
    """The NVTX ranges a launch ran inside (``ncu --nvtx``), outermost first.

    ncu writes them into identity columns named like ``thread Domain:Push/Pop_Range:...``,
    one cell per thread: ``1429  "<default domain>:gelu_manual:none:..."``."""
    out: list[str] = []
    for column, cell in raw.identity.items():
        if "Range" in column and cell:
            out += _NVTX_RANGE.findall(cell)
    return out

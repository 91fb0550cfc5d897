"""`profkit kernels|api|nvtx|info TRACE`: the summary tables of a trace.

Thin commands: open what TRACE names, each rank of a multi-rank input
(``profkit.api.per_rank``), take the rows from ``profkit.api`` (the
functions the Python API frames), render with profkit.output.  On nsys exports the figures equal `nsys stats`
(cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum) on the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from profkit.analysis.kernels import summaries
from profkit.api import api_json, kernels_json, nvtx_json, per_rank
from profkit.analysis.timeline.capture import capture_info
from profkit.analysis.kernels.graphs import unrecorded_kernels_note
from profkit.analysis.cpu_only import cpu_only_note
from profkit.cli.kernel_code_options import kernel_target_options
from profkit.cli.per_rank import rank_columns, rank_option, titled, with_rank
from profkit.model import Trace
from profkit.readers.nsys import NsysExport
from profkit.terminal import echo
from profkit.readers.run_folder import NCU_CSV, RUN_JSON, read_run_record
from profkit.output import json_text
from profkit.output import (
    API_COLUMNS,
    KERNEL_BANDWIDTH_COLUMNS,
    KERNEL_CODE_COLUMNS,
    KERNEL_COLUMNS,
    NVTX_COLUMNS,
    Column,
    emit_rows,
    format_option,
    kernel_columns_with,
    top_option,
    wide_option,
)

INFO_COLUMNS = [Column("field", "Field", fit="whole"), Column("value", "Value", fit="wrap")]

SUMMARY_SCAN_MMAP_BYTES = 1 << 30

# click.Path without exists=True: the reader reports a missing or bad file
# as one line, the same way for every problem.
_EXPORT_ARG = click.argument("export", metavar="TRACE", type=click.Path(path_type=Path))
_TOP_OPTION = top_option(help="Show the N rows with the most time and sum the rest into one '(other K)' row.")


def _trace_options(command: Callable) -> Callable:
    """TRACE and --rank N, the same on every summary command."""
    return _EXPORT_ARG(rank_option(command))


def _print_summary(summarize: Callable, columns: list[Column], title: str,
                   export: Path, rank: int | None, top: int | None, fmt: str, wide: bool = False,
                   note: Callable[[Trace], str | None] | None = None,
                   readable: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> None:
    def one(trace: Trace) -> tuple[list[dict[str, Any]], str | None, str]:
        _one_scan_then_exit(trace)
        return summarize(trace), note(trace) if note is not None else None, trace.meta.gpu_platform

    answers = per_rank(export, rank, one)
    if top is not None:
        answers = answers.map(lambda v: (summaries.top_n(v[0], top), *v[1:]))
    if fmt in ("json", "csv"):  # rows only, for machines: JSON and CSV keep the names nsys has
        emit_rows(with_rank(answers, lambda v: v[0]) if fmt == "csv" else answers.map(lambda v: v[0]).json(),
                  rank_columns(answers, columns), fmt)
        return
    for answer in answers.items:
        rows, said, platform = answer.value
        if readable is not None:
            rows = readable(rows)
        # "CUDA kernels" / "CUDA API" name the platform the trace records: "HIP kernels" on ROCm
        emit_rows(rows, columns, fmt, title=titled(title.replace("CUDA", platform), answers, answer), wide=wide)
        if said:
            echo(said, err=True)


def _one_scan_then_exit(trace: Trace) -> None:
    if isinstance(trace.native, NsysExport):
        # One scan, then exit: mapped file pages (faster) cost no memory that matters.
        trace.native.scan_mmap_bytes = SUMMARY_SCAN_MMAP_BYTES


@click.command()
@_trace_options
@_TOP_OPTION
@wide_option()
@format_option()
@click.option("--with-code", "with_code", is_flag=True,
              help="Add each Triton/inductor kernel's registers, spills, load/store widths and vectorization "
                   "from its compiled code.")
@click.option("--inductor", "code_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="A TORCHINDUCTOR_CACHE_DIR or Triton cache to find compiled kernels in "
                                  "(repeatable; a `profkit trace` run folder records its own).")
@kernel_target_options
@click.option("--ncu", "ncu_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="CSV", help="With --with-code: achieved DRAM bandwidth per kernel from an ncu CSV "
                                  "(a run folder's ncu.csv is used by itself).")
def kernels(export: Path, rank: int | None, top: int | None, wide: bool, fmt: str, with_code: bool,
            code_dirs: tuple[Path, ...], kernel_targets: Any, ncu_csv: Path | None) -> None:
    """CUDA kernel summary: time per kernel name (= nsys stats cuda_gpu_kern_sum).

    \b
    Examples:
      profkit kernels run.sqlite
      profkit kernels run.sqlite --top 10 --format md
      profkit kernels run.sqlite --format json | jq '.[0]'
      profkit kernels profkit-runs/train-*/ --with-code     # a run folder: its caches, its ncu.csv
      profkit kernels trace.json.gz --inductor /tmp/torchinductor_me --ncu ncu.csv
      profkit kernels run.sqlite --with-code --kernels kernels.py --kernels gelu.cu   # compiled now

    JSON rows have the keys name, time_pct, total_ns, instances, avg_ns,
    med_ns, min_ns, max_ns, stddev_ns (times in ns; avg/med/stddev rounded
    to 0.1 ns as nsys rounds them).  TRACE is an nsys SQLite export
    (`nsys profile -t cuda ... --export sqlite` or `nsys export --type
    sqlite`) or a PyTorch profiler trace (.json, .json.gz, or a folder).
    With --with-code, rows add registers, spills (bytes), global_loads and
    global_stores (instructions per access width in bits), vector_share (the
    share of global bytes moved by 128-bit accesses), vectorization
    (full/mostly/partly/none), vector_grade (both in words) and code_source
    ("cache": the code the run left; "compiled": compiled now from --kernels,
    which need not be what ran) for kernels whose compiled code is found, and with ncu data dram_gbps (DRAM bytes
    read + written / duration) and dram_peak_pct (of the GPU's peak); null,
    or "—" in tables, where unknown (vendor kernels: cuBLAS, NCCL, ...).
    """
    if with_code or code_dirs or kernel_targets or ncu_csv is not None:
        _print_kernels_with_code(export, rank, top, fmt, wide, code_dirs, ncu_csv, kernel_targets)
        return
    _print_summary(kernels_json, KERNEL_COLUMNS, "CUDA kernels", export, rank, top, fmt, wide,
                   note=lambda trace: cpu_only_note(trace) or unrecorded_kernels_note(trace))


def _print_kernels_with_code(export: Path, rank: int | None, top: int | None, fmt: str, wide: bool,
                             code_dirs: tuple[Path, ...], ncu_csv: Path | None, kernel_targets: Any = None) -> None:
    from profkit.analysis.kernels.bandwidth import attach_bandwidth, bandwidth_note, peak_bandwidth
    from profkit.analysis.kernels.code import attach_code, launch_shapes, run_folder_caches
    from profkit.analysis.kernels.targets import code_for_trace, code_notes
    from profkit.readers.ncu import read_ncu_csv

    dirs = list(code_dirs)
    if export.is_dir() and (export / RUN_JSON).is_file():
        dirs += run_folder_caches(read_run_record(export), export)
        if ncu_csv is None and (export / NCU_CSV).is_file():
            ncu_csv = export / NCU_CSV
    launches = read_ncu_csv(ncu_csv) if ncu_csv is not None else None

    def one(trace: Trace) -> tuple[list[dict[str, Any]], list[str], str]:
        rows = kernels_json(trace)
        code, compiled = code_for_trace(trace, [r["name"] for r in rows], dirs, kernel_targets)
        rows = attach_code(rows, code, launch_shapes(trace) if code else None)
        peaks = peak_bandwidth(trace)
        rows = attach_bandwidth(rows, launches or [], peaks)
        notes = [*code_notes(rows, dirs, compiled), *[n for n in [bandwidth_note(rows, launches, peaks)] if n]]
        return (summaries.top_n(rows, top) if top is not None else rows), notes, trace.meta.gpu_platform

    answers = per_rank(export, rank, one)
    columns = kernel_columns_with(KERNEL_CODE_COLUMNS, KERNEL_BANDWIDTH_COLUMNS if launches else [])
    if fmt in ("json", "csv"):  # rows only, for machines
        emit_rows(with_rank(answers, lambda v: v[0]) if fmt == "csv" else answers.map(lambda v: v[0]).json(),
                  rank_columns(answers, columns), fmt)
        return
    for answer in answers.items:
        rows, notes, platform = answer.value
        emit_rows(rows, columns, fmt, title=titled(f"{platform} kernels with their machine code", answers, answer),
                  wide=wide)
        for note in notes:
            echo(note, err=True)


@click.command()
@_trace_options
@_TOP_OPTION
@wide_option()
@format_option()
def api(export: Path, rank: int | None, top: int | None, wide: bool, fmt: str) -> None:
    """CUDA API summary: time per runtime/driver call (= nsys stats cuda_api_sum).

    \b
    Examples:
      profkit api run.sqlite
      profkit api run.sqlite --top 5 --format csv

    Version suffixes are dropped from names as nsys does
    (cudaLaunchKernel_v7000 -> cudaLaunchKernel).  Needs `nsys profile -t cuda`.
    """
    _print_summary(api_json, API_COLUMNS, "CUDA API", export, rank, top, fmt, wide)


@click.command()
@_trace_options
@_TOP_OPTION
@wide_option()
@format_option()
def nvtx(export: Path, rank: int | None, top: int | None, wide: bool, fmt: str) -> None:
    """NVTX range summary: time per range text and style (= nsys stats nvtx_sum).

    \b
    Examples:
      profkit nvtx run.sqlite
      profkit nvtx run.sqlite --format json

    Push/pop and start/end ranges are listed separately (key "style").
    Ranges in a named domain show as "domain:text"; a range that never
    ended lasts until the last NVTX event.  Needs `nsys profile -t nvtx`.
    The ranges `profkit trace --python-sync-sites` records around each
    synchronizing call read as "sync: .item() at train.py:42: loss.item()" in
    tables; json and csv keep the recorded name ("profkit.sync|item|...").
    """
    _print_summary(nvtx_json, NVTX_COLUMNS, "NVTX ranges", export, rank, top, fmt, wide, readable=_readable_ranges)


def _readable_ranges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from profkit.model.sync_sites import readable_rows

    return readable_rows(rows)


@click.command()
@_trace_options
@wide_option()
@format_option()
def info(export: Path, rank: int | None, wide: bool, fmt: str) -> None:
    """The capture: nsys and schema versions, GPU, span, GPU busy %.

    \b
    Examples:
      profkit info run.sqlite
      profkit info run.sqlite --format json

    Never shows the profiled process's environment (it can hold secrets).
    """
    answers = per_rank(export, rank, capture_info)
    if fmt == "json":
        click.echo(json_text(answers.json(), indent=2))
        return
    def fields(details: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"field": key, "value": _show(value)} for key, value in details.items()]

    if fmt == "csv":
        emit_rows(with_rank(answers, fields), rank_columns(answers, INFO_COLUMNS), fmt)
        return
    for answer in answers.items:
        emit_rows(fields(answer.value), INFO_COLUMNS, fmt, title=titled("Capture", answers, answer), wide=wide)


def _show(value: object) -> str:
    if isinstance(value, list):
        return "; ".join(_show(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_show(v)}" for k, v in value.items() if v is not None)
    return "" if value is None else str(value)

"""The report: ``write_report(trace_path, out_dir)`` writes report.html, report.md and report.json.

    from profkit.report import write_report
    paths = write_report("run.sqlite", "out/")      # -> ReportPaths(html=..., md=..., json=...)

``build.py`` gathers the data (``Report``); ``html.py``, ``markdown.py`` and
``json_report.py`` render it; ``figures.py`` draws the figures.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from profkit.atomic import write_files
from profkit.readers.run_folder import NCU_CSV, RUN_JSON, read_run_record
from profkit.errors import ProfkitError

HTML_NAME, MD_NAME, JSON_NAME = "report.html", "report.md", "report.json"


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    md: Path
    json: Path


def write_report(export_path: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None, *,
                 ncu_csv: Path | None = None, partial: bool = False, run_info: dict[str, Any] | None = None,
                 top: int = 20, baseline: str | os.PathLike[str] | None = None,
                 code_dirs: Sequence[str | os.PathLike[str]] = (), kernel_targets: Any = None,
                 force: bool = False) -> ReportPaths:
    """Read a trace (an nsys SQLite export or a PyTorch profiler / Kineto JSON trace,
    detected from its content) and write report.html, report.md and report.json
    into ``out_dir`` (default: the trace's folder).

    ``ncu_csv`` adds an ncu section (an ncu CSV, details or raw page);
    ``partial`` marks the run as failed (a banner, and ``"partial": true``);
    ``run_info`` (from ``profkit trace``) adds the command, exit status and tools;
    ``top`` cuts long tables to the first N rows by time plus one summed row;
    ``baseline`` (another trace of the same program, ``profkit.analysis.compare.same_program``; ``force``
    skips that check) adds a step-time comparison;
    ``code_dirs`` (inductor or Triton caches) add each Triton kernel's registers, spills,
    load/store widths and vectorization to the kernel table; ``kernel_targets`` (a
    ``profkit.analysis.kernels.targets.KernelTargets``) compiles sources for them now.  A ``profkit trace`` run
    folder brings its own: the caches its run.json recorded and its ncu.csv.
    Raises ProfkitError for a bad trace or an unwritable folder.  The trace
    is opened read-only and never modified.
    """
    from profkit.readers import open_trace
    from profkit.report.columns import start_loading

    export_path = Path(export_path)
    target = Path(out_dir) if out_dir is not None else export_path.resolve().parent
    dirs = [Path(d) for d in code_dirs]
    if export_path.is_dir() and (export_path / RUN_JSON).is_file():
        from profkit.analysis.kernels.code import run_folder_caches

        record = read_run_record(export_path)
        dirs += run_folder_caches(record, export_path)
        if ncu_csv is None and (export_path / NCU_CSV).is_file():
            ncu_csv = export_path / NCU_CSV
        if run_info is None:  # a re-made report says what the run was, as the one `profkit trace` wrote
            run_info = run_folder_info(record)
            partial = partial or run_info.get("partial") is True
    with contextlib.ExitStack() as stack:
        trace = stack.enter_context(open_trace(export_path))
        start_loading(trace)  # the big tables load while the rest of the report is imported
        from profkit.report.build import build_report
        from profkit.report.html import render_html
        from profkit.report.json_report import render_json
        from profkit.report.markdown import render_markdown

        base = stack.enter_context(open_trace(Path(baseline))) if baseline is not None else None
        if base is not None:
            from profkit.analysis.compare.same_program import check_traces

            check_traces(trace, base, force=force)
        report = build_report(trace, ncu_csv=Path(ncu_csv) if ncu_csv is not None else None, partial=partial,
                              run_info=run_info, top=top, baseline=base, code_dirs=dirs,
                              kernel_targets=kernel_targets)
    texts = {HTML_NAME: render_html(report), MD_NAME: render_markdown(report), JSON_NAME: render_json(report)}
    try:
        target.mkdir(parents=True, exist_ok=True)
        # the three files are one report: never a mix of two runs', never half a file
        write_files({target / name: text for name, text in texts.items()})
    except OSError as exc:
        raise ProfkitError(f"cannot write the report into {target}: {exc.strerror or exc}",
                           hint="choose another folder with -o DIR") from None
    return ReportPaths(html=target / HTML_NAME, md=target / MD_NAME, json=target / JSON_NAME)




__all__ = ["ReportPaths", "write_report"]


# run.json's "recorded" entries that measure what the capture cost, each with a "sentence"
MEASURED_COST = ("bare_run", "capture_window")


def run_folder_info(record: Any) -> dict[str, Any]:
    """What a ``profkit trace`` run folder's run.json (``read_run_record``'s value) says
    about the run, as ``write_report(run_info=...)`` takes it; fields of the wrong
    type are left out (run.json is input like any other)."""
    if not isinstance(record, dict):
        return {}
    kinds = {"command": list, "backend": str, "exit_code": int, "partial_reason": str, "tools": dict,
             "started": str, "host": str, "nsys_command": list}
    info = {key: record[key] for key, kind in kinds.items() if isinstance(record.get(key), kind)}
    for key in ("command", "nsys_command"):
        if key in info and not all(isinstance(part, str) for part in info[key]):
            del info[key]
    if isinstance(info.get("exit_code"), bool):
        del info["exit_code"]
    recorded = record.get("recorded") if isinstance(record.get("recorded"), dict) else {}
    for key in MEASURED_COST:  # what the capture cost, measured in the run
        measured = recorded.get(key)
        if isinstance(measured, dict) and isinstance(measured.get("sentence"), str):
            info[key] = measured["sentence"]
    info["partial"] = record.get("partial") is True
    if not info["partial"]:
        info.pop("partial_reason", None)
    return info

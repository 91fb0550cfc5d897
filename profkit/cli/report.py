"""`profkit report EXPORT.sqlite [-o DIR]`: HTML, Markdown and JSON report of an nsys export.

Thin: parse, call profkit.report.write_report, print the HTML path.
``--example`` unpacks the real export bundled in profkit/examples/ into the
user's cache folder and reports on it.
"""

from __future__ import annotations

import lzma
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import click

from profkit.cli.kernel_code_options import kernel_target_options
from profkit.cli.ranks import rank_from_option, scheduler_option, workers_option
from profkit.errors import ProfkitError

EXAMPLE = "train_print.sqlite.xz"


@click.command()
@click.argument("exports", metavar="[TRACE...]", type=click.Path(path_type=Path), nargs=-1)
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Folder for report.html, report.md and report.json "
                                  "(default: the export's folder).")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, metavar="N",
              help="Rows per table; the rest are summed into one '(other K)' row.")
@click.option("--baseline", type=click.Path(path_type=Path), default=None, metavar="OTHER.sqlite",
              help="Compare step times with another trace of the same program (profkit diff's verdict "
                   "and interval).")
@click.option("--ncu", "ncu_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, metavar="CSV",
              help="Add an ncu section from an Nsight Compute CSV (ncu --csv, details or raw page).")
@click.option("--inductor", "code_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              metavar="DIR", help="A TORCHINDUCTOR_CACHE_DIR or Triton cache with the compiled Triton kernels: "
                                  "their registers, spills, load/store widths and vectorization join the kernel "
                                  "table (repeatable; a `profkit trace` run folder records its own).")
@kernel_target_options
@click.option("--force", is_flag=True, help="Compare with --baseline even when the two runs share under half "
                                            "their kernel names (they look like different programs).")
@click.option("--example", is_flag=True,
              help="Report on the real export that ships with profkit (a small PyTorch training run).")
@scheduler_option
@workers_option
@rank_from_option
def report(exports: tuple[Path, ...], out_dir: Path | None, top: int, baseline: Path | None, ncu_csv: Path | None,
           code_dirs: tuple[Path, ...], kernel_targets: Any, force: bool, example: bool, scheduler: str | None, workers: int | None,
           rank_from: str | None) -> None:
    """Write report.html, report.md and report.json for a trace (nsys export or PyTorch profiler trace),
    or the cross-rank report for several ranks of one job.

    \b
    Examples:
      profkit report run.sqlite                  # next to run.sqlite
      profkit report run.sqlite -o reports/run1 --top 10
      profkit report run.sqlite --ncu ncu.csv    # add ncu's per-kernel figures and achieved bandwidth
      profkit report run.json.gz --inductor /tmp/torchinductor_me   # Triton kernels' machine code
      profkit report run.sqlite --kernels kernels.py --kernels my.cu   # ... compiled now from their sources
      profkit report print.sqlite --baseline noprint.sqlite   # step time vs a baseline run
      profkit report --example                   # the bundled real export
      profkit report rank0.sqlite rank1.sqlite -o job/   # several ranks: the cross-rank report
                                                 # (exit code 3 when some rank could not be read)
      profkit report whole_job.sqlite -o job/    # one export of a whole multi-GPU job: the same

    report.html is one self-contained file (figures and CSS inline, nothing
    loaded from the network): findings, the capture (GPU, versions, GPU
    busy %), a timeline per stream with NVTX ranges, GPU utilization over
    time, kernel / CUDA API / NVTX summaries (equal to nsys stats), kernels
    per NVTX range, memory copies, occupancy and synchronization stalls.
    report.md is the same as Markdown tables for a pull-request comment;
    report.json holds every row and the figures' numbers.  Prints the path
    of report.html.  EXPORT.sqlite comes from `nsys profile --export sqlite`
    or `nsys export --type sqlite REPORT.nsys-rep`.

    \b
    Times: seconds from the session start (`profkit export --help`); a time
      copied from the report is one `profkit export --window` takes.
    Idle stretch: a time with no kernel, copy or set on a GPU.
    Kernel time: a sum of kernel durations (as nsys stats); GPU span: first
      to last GPU operation (HTA's "kernel time").
    Synchronization sites: by GPU idle time caused (`profkit stalls --help`).
    --baseline: `profkit diff`'s verdict on the steady-state step times.
    Cross-rank report: the straggler is the rank with the least communication
      kernel time per steady step (a collective's kernel runs until every rank
      has arrived, so the last to arrive waits least); "rank R waits X per
      step" is R's communication kernel time per step minus the straggler's.
      Why: "GPU compute" when the straggler's compute kernel time per step is
      the ranks' longest and at least 3% above their median, else "host".
    """
    from profkit.readers import is_whole_job
    from profkit.report import write_report

    if example == bool(exports):
        raise click.UsageError("give either a TRACE or --example")
    if len(exports) > 1 or (exports and (_is_folder_of_ranks(exports[0]) or is_whole_job(exports[0]))):
        # several ranks (files, a folder of them, or one export of the whole job): the cross-rank report
        if baseline is not None or ncu_csv is not None or code_dirs or kernel_targets:
            raise click.UsageError("--baseline, --ncu, --inductor and --kernels take a single trace, not several ranks")
        html = write_ranks_report_cli(exports, out_dir, top, scheduler, workers, rank_from)
        click.echo(str(html.resolve()))
        return
    export = unpack_example() if example else exports[0]
    if example:
        out_dir = out_dir or export.parent / "report"
    from profkit.terminal import progress

    with progress(f"writing the report on {export.name}"):  # stderr, on a terminal only
        paths = write_report(export, out_dir, ncu_csv=ncu_csv, top=top, baseline=baseline, code_dirs=code_dirs,
                             kernel_targets=kernel_targets, force=force)
    click.echo(str(paths.html.resolve()))


def _is_folder_of_ranks(path: Path) -> bool:
    """A folder holding several trace files, or a run folder of a torchrun job (one trace per rank,
    profkit.readers.job): the ranks of one job."""
    from profkit.ranks.inputs import is_trace_file
    from profkit.readers.job import job_files

    if not path.is_dir():
        return False
    if (path / "run.json").exists():
        return job_files(path).rank_files
    return sum(1 for f in path.iterdir() if is_trace_file(f)) > 1


def write_ranks_report_cli(traces: tuple[Path, ...], out_dir: Path | None, top: int, scheduler: str | None,
                           workers: int | None, rank_from: str | None) -> Path:
    """Read every rank on Dask, write the cross-rank report; exits 3 after writing when some rank failed."""
    from profkit.analysis.ranks.cross_rank import cross_rank
    from profkit.cli.ranks import PARTIAL_EXIT, exit_for, read_ranks
    from profkit.report.ranks import write_ranks_report

    summaries = read_ranks(traces, scheduler, workers, rank_from)
    code = exit_for(summaries)
    from profkit.terminal import progress

    job = cross_rank(summaries)
    target = out_dir or Path(traces[0]).resolve().parent / "ranks-report"
    with progress("writing the cross-rank report"):
        html = write_ranks_report(job, summaries, target, top)
    if code == PARTIAL_EXIT:
        click.echo(str(html.resolve()))
        for f in job["failed"]:
            click.echo(f"profkit: rank file {f['file']} not read: {f['error']}", err=True)
        raise SystemExit(PARTIAL_EXIT)
    return html


def example_dir() -> Path:
    """$XDG_CACHE_HOME/profkit/example (~/.cache/...), or a temp folder when that is not writable."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    for candidate in (base / "profkit" / "example", Path(tempfile.gettempdir()) / "profkit-example"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(candidate, os.W_OK):
            return candidate
    raise ProfkitError("no writable folder for the example (tried the user cache and the temp folder)",
                       hint="set XDG_CACHE_HOME to a writable folder")


def unpack_example() -> Path:
    """The bundled export, decompressed once into ``example_dir()``."""
    packed = resources.files("profkit").joinpath("examples", EXAMPLE)
    if not packed.is_file():
        raise ProfkitError(f"the bundled example {EXAMPLE} is missing from this profkit install",
                           hint="reinstall profkit: pip install -e .")
    target = example_dir() / EXAMPLE.removesuffix(".xz")
    with resources.as_file(packed) as source:
        if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
            tmp = target.with_name(f".{target.name}.{os.getpid()}")
            with lzma.open(source) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            tmp.replace(target)
    return target

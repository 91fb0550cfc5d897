"""`profkit scrub TRACE -o OUT`: a copy of a trace that is safe to share."""

from __future__ import annotations

from pathlib import Path

import click

from profkit.output import Column, emit_rows, format_option

REMOVED_COLUMNS = [Column("what", "Removed"), Column("count", "Count", "int")]


@click.command()
@click.argument("trace", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), metavar="OUT",
              help="The copy to write (never the input).")
@click.option("--anonymize", is_flag=True,
              help="Also replace user names, host names and home folders with stable tokens (user1, host1).")
@format_option()
def scrub(trace: Path, output: Path, anonymize: bool, fmt: str) -> None:
    """Write a copy of an nsys export or Kineto trace without the recorded environment.

    \b
      profkit scrub run.sqlite -o run.shared.sqlite
      profkit scrub rank0.json.gz -o rank0.shared.json.gz --anonymize

    Removed: the profiled process's environment (nsys keeps it in
    TARGET_INFO_SYSTEM_ENV, META_DATA_CAPTURE and NUL-separated blocks in
    StringIds), the values of its secret-looking variables wherever else
    they occur (command lines, NVTX texts), and credential-shaped strings.
    Summaries of the copy equal the original's.
    """
    from profkit.scrub import scrub as scrub_file

    removed = scrub_file(trace, output, anonymize=anonymize)
    rows = [{"what": what, "count": count} for what, count in removed.items()]
    emit_rows(rows, REMOVED_COLUMNS, fmt, title=f"scrubbed copy: {output}")

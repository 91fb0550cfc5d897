"""`profkit scrub TRACE -o OUT`: a copy of a trace that is safe to share."""

from __future__ import annotations

from pathlib import Path

import click

from profkit.output import json_text
from profkit.output import Column, emit_rows, format_option, wide_option

REMOVED_COLUMNS = [Column("what", "Removed", fit="wrap"), Column("count", "Count", "int")]


@click.command()
@click.argument("trace", metavar="TRACE", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path), metavar="OUT",
              help="The copy to write (never the input).")
@click.option("--anonymize", is_flag=True,
              help="Also replace user names, host names and home folders with stable tokens (user1, host1).")
@click.option("--report", "report_path", type=click.Path(path_type=Path), metavar="FILE",
              help="Also write what was redacted as JSON: counts by rule, never the values.")
@format_option()
@wide_option()
def scrub(trace: Path, output: Path, anonymize: bool, report_path: Path | None, fmt: str, wide: bool) -> None:
    """Write a copy of an nsys export or Kineto trace without the recorded environment.

    \b
      profkit scrub run.sqlite -o run.shared.sqlite
      profkit scrub rank0.json.gz -o rank0.shared.json.gz --anonymize

    Removed: the profiled process's environment (nsys keeps it in
    TARGET_INFO_SYSTEM_ENV, META_DATA_CAPTURE and NUL-separated blocks in
    StringIds), the values of its variables wherever else they occur
    (command lines, NVTX texts, program output; every value of 8 characters
    or more that is no common path or word, whatever the variable's name),
    credential-shaped strings, and the value of every secret-looking
    NAME=value, --name value, --name=value, -pVALUE, URL password and
    token=/key=/secret=/password= query parameter, in every text column
    and every Kineto string, keys included.
    Summaries of the copy equal the original's.
    """
    from profkit.scrub import scrub as scrub_file

    from profkit.terminal import progress

    with progress(f"scrubbing {trace.name}"):  # stderr, on a terminal only
        removed = scrub_file(trace, output, anonymize=anonymize)
    if report_path is not None:

        from profkit.atomic import write_text

        write_text(report_path, json_text({"output": str(output), "redacted": removed}, indent=2) + "\n")
    rows = [{"what": what, "count": count} for what, count in removed.items()]
    emit_rows(rows, REMOVED_COLUMNS, fmt, title=f"scrubbed copy: {output}", wide=wide)

"""The `profkit` command.

Each subcommand lives in its own module under profkit/cli/ and is imported
only when it runs, so `profkit --help` stays fast and a missing optional
dependency (triton, torch) breaks only the command that needs it.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import warnings
from typing import NoReturn

import click

from profkit import allocator, signals
from profkit._version import __version__
from profkit.errors import ProfkitError, ProfkitWarning

# command name -> "module:attribute"; the order is the order in --help.
COMMANDS: dict[str, str] = {
    "report": "profkit.cli.report:report",
    "kernels": "profkit.cli.summaries:kernels",
    "api": "profkit.cli.summaries:api",
    "nvtx": "profkit.cli.summaries:nvtx",
    "info": "profkit.cli.summaries:info",
    "stalls": "profkit.cli.stalls:stalls",
    "steps": "profkit.cli.steps:steps",
    "breakdown": "profkit.cli.breakdown:breakdown",
    "host": "profkit.cli.host:host",
    "graphs": "profkit.cli.graphs:graphs",
    "memory": "profkit.cli.memory:memory",
    "ranks": "profkit.cli.ranks:ranks",
    "diff": "profkit.cli.diff:diff",
    "history": "profkit.cli.history:history",
    "occupancy": "profkit.cli.occupancy:occupancy",
    "roofline": "profkit.cli.roofline:roofline",
    "ptx": "profkit.cli.ptx:ptx",
    "trace": "profkit.cli.trace:trace",
    "export": "profkit.cli.export:export",
    "scrub": "profkit.cli.scrub:scrub",
    "doctor": "profkit.cli.doctor:doctor",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return self._load(name)

    def _load(self, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A command whose module is not written yet is simply absent;
            # a missing third-party package is a real error.
            if exc.name and exc.name.startswith("profkit"):
                return None
            raise
        return getattr(module, attr)

    def invoke(self, ctx: click.Context):
        # not warnings.catch_warnings: it is not thread-safe, and rank workers run in threads
        warnings.showwarning = _collect_warning
        warnings.simplefilter("always", ProfkitWarning)
        try:
            return super().invoke(ctx)
        except ProfkitError as exc:
            _SKIPPED.clear()  # what was skipped on the way matters no more: the error line says what ended it
            if signals.STOP.is_set():
                # A signal ended a query inside SQLite, and the error it left was read as
                # damage somewhere on the way up: the signal is what happened.
                signals.raise_stop()
            from profkit.output import terminal_safe

            click.echo(f"profkit: error: {terminal_safe(exc.one_line())}", err=True)
            ctx.exit(exc.exit_code)
        finally:
            _show_skipped()


_PYTHON_SHOWWARNING = warnings.showwarning
_SKIPPED: list[str] = []  # ProfkitWarnings of the running command, from any thread


def _collect_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: object = None, line: str | None = None) -> None:
    if issubclass(category, ProfkitWarning):
        _SKIPPED.append(" ".join(str(message).split()))
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)  # type: ignore[arg-type]


def _show_skipped() -> None:
    """Each distinct ProfkitWarning (part of a trace skipped, the rest read) as one line on stderr,
    after the command's output."""
    from profkit.output import terminal_safe

    texts = list(dict.fromkeys(_SKIPPED))
    _SKIPPED.clear()
    for text in texts:
        click.echo(f"profkit: warning: {terminal_safe(text)}", err=True)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="profkit")
def cli() -> None:
    """Profile GPU programs and read their machine code.

    \b
    Read an Nsight Systems export:
      profkit report run.sqlite          HTML, Markdown and JSON report
      profkit kernels run.sqlite         kernel summary (= nsys stats cuda_gpu_kern_sum)
      profkit report --example           report on the bundled real export
    Capture:
      profkit trace train.py -- --steps 20
    Machine code, no GPU needed:
      profkit ptx gelu --check vectorized-loads
    """


def main() -> None:
    allocator.configure()  # big short-lived arrays: see profkit/allocator.py
    signals.install()  # SIGTERM/SIGHUP unwind like SIGINT, so temporary files are removed
    try:
        cli(prog_name="profkit")
    except SystemExit as exc:
        _exit_now(exc)
    _exit_now(SystemExit(0))


def _exit_now(exc: SystemExit) -> NoReturn:
    """End the process once the command is done, without tearing the interpreter down.

    Python's own shutdown frees every object of every module one by one: with pandas,
    matplotlib and their caches loaded that is 0.2-0.4 s after the last output, each
    time.  Everything a clean exit does that matters still happens here: exit handlers
    run (temporary folders, logging, Dask), the standard streams are flushed, and the
    exit status is the command's.  Where a thread other than the main one still runs
    (its work would be cut off), the usual exit happens instead."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        raise exc
    code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # as sys.exit("message") prints it
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (profkit kernels ... | head): nothing more to say
            pass
    os._exit(code or 0)


if __name__ == "__main__":
    sys.exit(main())

"""The figures and output excerpts of README.md and benchmarks/README.md, made from committed data.

Each one sits between cog markers in the Markdown (``<!-- [[[cog ... ]]] -->`` ...
``<!-- [[[end]]] -->``) and is produced here by running the command it shows, in this
process, on the bundled example (``profkit/examples/train_print.sqlite.xz``, which
``profkit report --example`` unpacks) or a committed fixture under ``tests/data``:

    cog -r -I scripts README.md benchmarks/README.md          # rewrite them after a change
    python -m pytest tests/test_readme.py                     # fails while they are stale

Commands run in a scratch folder where the README's paths resolve as a user of a
checkout would type them: ``train_print.sqlite`` is the bundled export, ``tests/`` the
repository's.  Tables are drawn for a 100-column terminal.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import io
import lzma
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # profkit and tests/ of this checkout, however cog was started
    sys.path.insert(0, str(ROOT))
EXAMPLE = "train_print.sqlite"
COLUMNS = "100"


def _out(text: str) -> None:
    import cog  # only present while cog runs this module

    cog.out(text)


@functools.cache
def workdir() -> Path:
    """A scratch folder holding the unpacked example and a link to the repository's tests/."""
    folder = Path(tempfile.mkdtemp(prefix="profkit-readme-"))
    atexit.register(shutil.rmtree, folder, True)
    with lzma.open(ROOT / "profkit" / "examples" / f"{EXAMPLE}.xz") as src, open(folder / EXAMPLE, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    (folder / "tests").symlink_to(ROOT / "tests")
    return folder


def fixture(path: str) -> str:
    """A committed ``.xz`` fixture, decompressed beside itself (as the tests do); its path."""
    from tests.conftest import _decompressed

    return str(_decompressed(ROOT / f"{path}.xz").relative_to(ROOT))


@contextlib.contextmanager
def _in_workdir() -> Iterator[Path]:
    before = Path.cwd()
    os.chdir(workdir())
    try:
        yield workdir()
    finally:
        os.chdir(before)


@functools.cache
def run(command: str, stderr: bool = False) -> tuple[int, str]:
    """Run ``profkit ARGS`` through click's CliRunner: (exit code, stdout [+ stderr])."""
    from click.testing import CliRunner

    from profkit.cli import cli

    args = shlex.split(command)
    assert args[0] == "profkit", command
    with _in_workdir():
        result = CliRunner(env={"COLUMNS": COLUMNS}).invoke(cli, args[1:], catch_exceptions=False)
    text = result.stdout + (result.stderr if stderr else "")
    return result.exit_code, text


def shell(command: str, *, head: int | None = None, grep: str | None = None, stderr: bool = False,
          each: Iterable[Any] | None = None) -> None:
    """A fenced block: ``$ COMMAND`` and what it prints (``head`` lines of it, or the lines
    holding ``grep``; "…" marks what was left out), and the exit code when not 0.

    ``each``: run ``command.format(i=...)`` for each value, shown as one shell ``for`` loop."""
    if each is not None:
        values = list(each)
        results = [run(command.format(i=i), stderr) for i in values]
        code = max(c for c, _ in results)
        text = "".join(t for _, t in results)
        shown_command = (f"for i in {' '.join(map(str, values))}; do "
                         f"{command.replace('{i}', '$i')}; done")
    else:
        code, text = run(command, stderr)
        shown_command = command
    lines = text.rstrip("\n").splitlines()
    shown = _paragraphs_holding(lines, grep) if grep else lines
    if head is not None and len(shown) > head:
        shown = [*shown[:head], "…"]
    elif grep and len(shown) < len(lines):
        shown.append("…")
    footer = [f"(exit code {code})"] if code else []
    _out("\n".join(["```console", f"$ {shown_command}", *[line.rstrip() for line in shown], *footer, "```"]) + "\n")


def _paragraphs_holding(lines: list[str], text: str) -> list[str]:
    """The lines holding ``text``, each with the lines that continue it (profkit wraps a long
    sentence onto lines that start with a space or a lower-case word, not a new item)."""
    shown: list[str] = []
    for i, line in enumerate(lines):
        if text in line:
            shown.append(line)
            for follow in lines[i + 1:]:
                if not follow.strip() or follow.lstrip().startswith(("*", "-", "┃", "┏", "│")) or \
                        not (follow[:1].isspace() or follow[:1].islower()):
                    break
                shown.append(follow)
    return shown


def markdown(command: str, *, section: str | None = None, head: int | None = None) -> None:
    """What ``command`` (a ``--format md`` one) prints, as Markdown under a ``$ COMMAND`` line;
    ``section``: only the lines under that heading (to the next heading), ``head``: at most
    that many of them."""
    code, text = run(command)
    assert code == 0, text
    lines = text.rstrip("\n").splitlines()
    if section is not None:
        start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip() == section) + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
        lines = lines[start:end]
    lines = [line for line in lines if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if head is not None and len(lines) > head:
        lines = [*lines[:head], "", "…"]
    _out("\n".join([f"`$ {command}`", "", *[line.rstrip() for line in lines]]).rstrip() + "\n")


def report_findings(head: int) -> None:
    """The first findings of ``profkit report --example``'s report.md."""
    from click.testing import CliRunner

    from profkit.cli import cli

    out = Path(tempfile.mkdtemp(prefix="profkit-readme-report-"))
    with _in_workdir():
        result = CliRunner(env={"COLUMNS": COLUMNS}).invoke(cli, ["report", EXAMPLE, "-o", str(out)],
                                                             catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = (out / "report.md").read_text().splitlines()
    start = lines.index("## Findings") + 2
    findings = [line for line in lines[start:lines.index("", start)]]
    shutil.rmtree(out)
    _out("\n".join([*findings[:head], f"- … ({len(findings) - head} more)" if len(findings) > head else ""]).rstrip()
         + "\n")


_SESSION: dict[str, Any] = {}


def python(source: str) -> None:
    """A ``pycon`` block: each statement of ``source`` after ``>>>`` and, for an expression,
    its value as the interpreter shows it.  Runs in the scratch folder; the blocks of one
    file share their names, as the cells of a notebook do."""
    import pandas as pd

    source = source.strip("\n")
    tree = ast.parse(source)
    lines = source.splitlines()
    namespace = _SESSION
    shown: list[str] = []
    with _in_workdir(), pd.option_context("display.width", 80):
        for node in tree.body:
            text = lines[node.lineno - 1:node.end_lineno]
            shown += [f">>> {text[0]}", *(f"... {line}" for line in text[1:])]
            if isinstance(node, ast.Expr):
                value = eval(compile(ast.Expression(node.value), "<readme>", "eval"), namespace)  # noqa: S307
                if value is not None:
                    shown += repr(value).splitlines()
            else:
                buffer = io.StringIO()
                with contextlib.redirect_stdout(buffer):
                    exec(compile(ast.Module([node], []), "<readme>", "exec"), namespace)  # noqa: S102
                shown += buffer.getvalue().splitlines()
    _out("\n".join(["```pycon", *[line.rstrip() for line in shown], "```"]) + "\n")


def value(command: str, *keys: Any) -> Any:
    """One value from ``command --format json``, by keys and list indices."""
    import json

    code, text = run(f"{command} --format json")
    assert code == 0, text
    data = json.loads(text)
    for key in keys:
        data = data[key]
    return data


def out(text: str) -> None:
    """Plain text (a sentence with figures computed in the cog block)."""
    _out(text.rstrip("\n") + "\n")


# -- figures computed from several commands -----------------------------------------------

GRAPH_CAPTURES = [
    ("tests/data/graphs/gpt_graphs_graph.sqlite", "nsys, graph level (`--cuda-graph-trace=graph`, nsys's default)"),
    ("tests/data/graphs/gpt_graphs_node.sqlite", "nsys, node level (`--cuda-graph-trace=node`, `profkit trace`'s)"),
    ("tests/data/graphs/gpt_graphs_kineto.json.gz", "torch.profiler (node level)"),
]


def graph_capture_costs() -> None:
    """The committed reduce-overhead GPT captures: steady step median and mean cudaGraphLaunch."""
    rows = ["| capture | steady step median | mean `cudaGraphLaunch` on the CPU |", "|---|--:|--:|"]
    for path, label in GRAPH_CAPTURES:
        path = fixture(path) if path.endswith(".sqlite") else path
        median = value(f"profkit steps {path}", "summary", "median_ns")
        launch = value(f"profkit graphs {path}", "launch", "mean_ns")
        rows.append(f"| {label} | {median / 1e6:.2f} ms | {launch / 1e3:.0f} µs |")
    out("\n".join(rows))


def stream_wait_example() -> None:
    """HTA's per-stream host wait summed over streams against the rank's idle time (DDP rank 0)."""
    row = value(f"profkit breakdown {fixture('tests/data/ddp/nsys/rank0.sqlite')} --steady", 0)
    out(f"Summing HTA's per-stream figures instead (JSON `stream_*_wait_ns`) counts a moment once per "
        f"idle stream: on the committed DDP capture's rank 0 (`tests/data/ddp/nsys`, steady state) that is "
        f"{row['stream_host_wait_ns'] / 1e6:.0f} ms of host wait against {row['idle_ns'] / 1e6:.0f} ms of "
        f"idle time.")


PROFILER_CAPTURES = [
    ("tests/data/nsys/nsys2025_gpt_eager.sqlite", "Nsight Systems (`-t cuda,nvtx,osrt`)"),
    ("tests/data/kineto/gpt_eager.json.gz", "torch.profiler (`record_shapes=True`)"),
]


def profiler_overhead() -> None:
    """The eager GPT loop's steady step under nsys and under torch.profiler."""
    rows = ["| profiler | steady steps | step median | step p90 | GPU busy |", "|---|--:|--:|--:|--:|"]
    for path, label in PROFILER_CAPTURES:
        path = fixture(path) if path.endswith(".sqlite") else path
        s = value(f"profkit steps {path}", "summary")
        rows.append(f"| {label} | {s['steady_count']} | {s['median_ns'] / 1e6:.1f} ms | {s['p90_ns'] / 1e6:.1f} ms "
                    f"| {s['steady_gpu_busy_pct']:.0f}% |")
    out("\n".join(rows))

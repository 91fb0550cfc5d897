"""Every table command fits an 80- and a 120-column terminal, on real fixtures.

One layout rule (profkit.terminal): no line of stdout or stderr is wider than the
terminal, and no number is cut or wrapped: every figure of a shown column, as the
table formats it from the command's ``--format json``, is printed whole.  Columns a
narrow terminal hides are named in the note below their table; only those may lack
their figures.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.output import Column
from profkit.terminal import TEXT_KINDS, cell_len
from tests.conftest import DATA, _decompressed, ncu_fixture, nsys_fixture

WIDTHS = (80, 120)
KINETO = DATA / "kineto"


def run(args: list[str], width: int | None = None) -> Any:
    env = {"COLUMNS": str(width)} if width else {}
    result = CliRunner(env=env).invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def numbers(rows: list[dict[str, Any]], columns: list[Column]) -> Iterator[tuple[str, str]]:
    """(column title, the figure as the table prints it) for each number cell."""
    for row in rows:
        for c in columns:
            value = row.get(c.key)
            if c.kind not in TEXT_KINDS and isinstance(value, (int, float)) and not isinstance(value, bool):
                if value == value:  # not NaN
                    yield c.title, c.show(value)


# -- each command: its arguments, and the figures its table must show (from its JSON) -----
def _kernels() -> tuple[list[str], Callable]:
    from profkit.output import KERNEL_COLUMNS

    return ["kernels", str(nsys_fixture("nsys2025_train_print"))], lambda d: numbers(d, KERNEL_COLUMNS)


def _api() -> tuple[list[str], Callable]:
    from profkit.output import API_COLUMNS

    return ["api", str(nsys_fixture("nsys2023_sync_sites"))], lambda d: numbers(d, API_COLUMNS)


def _nvtx() -> tuple[list[str], Callable]:
    from profkit.output import NVTX_COLUMNS

    return ["nvtx", str(nsys_fixture("nsys2023_sync_sites"))], lambda d: numbers(d, NVTX_COLUMNS)


def _info() -> tuple[list[str], Callable]:
    return ["info", str(nsys_fixture("nsys2023_sync_sites"))], \
        lambda d: [(k, str(v)) for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)]


def _steps() -> tuple[list[str], Callable]:
    from profkit.cli.steps import STEP_TABLE

    columns = [c for c in STEP_TABLE if c.key in ("index", "duration_ns", "gpu_busy_ns", "launches")]
    return ["steps", str(nsys_fixture("nsys2025_train_print"))], lambda d: numbers(d["steps"][:50], columns)


def _breakdown() -> tuple[list[str], Callable]:
    from profkit.cli.breakdown import RANK_COLUMNS, STREAM_COLUMNS

    ranks = DATA / "ddp" / "kineto"
    return (["breakdown", str(ranks / "rank0.json.gz"), str(ranks / "rank1.json.gz")],
            lambda d: [*numbers(d, RANK_COLUMNS), *(n for r in d for n in numbers(r["idle_by_stream"], STREAM_COLUMNS))])


def _stalls() -> tuple[list[str], Callable]:
    from profkit.cli.stalls import SITE_COLUMNS

    columns = [c for c in SITE_COLUMNS if c.key in ("count", "cpu_blocked_ns", "gpu_idle_ns")]
    return ["stalls", str(nsys_fixture("nsys2023_sync_sites"))], lambda d: numbers(d["rows"], columns)


def _ranks() -> tuple[list[str], Callable]:
    from profkit.cli.ranks import RANK_COLUMNS

    ranks = DATA / "ddp" / "kineto"
    return (["ranks", str(ranks / "rank0.json.gz"), str(ranks / "rank1.json.gz"), "--scheduler", "threads"],
            lambda d: numbers([r for r in d if "error" not in r], RANK_COLUMNS))


def _occupancy() -> tuple[list[str], Callable]:
    from profkit.cli.occupancy import TRACE_COLUMNS

    return ["occupancy", str(nsys_fixture("nsys2025_train_print"))], lambda d: numbers(d, TRACE_COLUMNS)


def _occupancy_ncu() -> tuple[list[str], Callable]:
    from profkit.cli.occupancy import NCU_COLUMNS

    return ["occupancy", "--ncu", str(ncu_fixture("matmul_raw_import.csv"))], lambda d: numbers(d, NCU_COLUMNS)


def _roofline() -> tuple[list[str], Callable]:
    from profkit.cli.roofline import COLUMNS

    source = _decompressed(DATA / "roofline" / "softmax_raw.csv.xz")
    return ["roofline", str(source)], lambda d: numbers(d["launches"] + d["kernels"], COLUMNS)


def _host() -> tuple[list[str], Callable]:
    from profkit.cli.host import TABLE

    return (["host", str(DATA / "host" / "kineto" / "llama_train_kineto.json.gz")],
            lambda d: numbers(d["functions"][:25], TABLE))


def _graphs() -> tuple[list[str], Callable]:
    from profkit.report.graphs_section import GRAPH_COLUMNS

    return (["graphs", str(DATA / "graphs" / "gpt_graphs_kineto.json.gz")],
            lambda d: numbers(d["graphs"], GRAPH_COLUMNS))


def _diff() -> tuple[list[str], Callable]:
    from profkit.cli.diff import KERNEL_DIFF_COLUMNS

    def figures(d: dict[str, Any]) -> Iterator[tuple[str, str]]:
        changed = sorted((k for k in d["kernels"] if k["status"] != "same"), key=lambda k: -abs(k["delta_ns_per_step"]))
        return numbers(changed[:10], KERNEL_DIFF_COLUMNS)

    return ["diff", str(KINETO / "review" / "mlp_gpu_print.json.gz"), str(KINETO / "mlp_print.json.gz")], figures


def _ptx_list() -> tuple[list[str], Callable]:
    return ["ptx", "--list"], lambda d: []


COMMANDS = {
    "kernels": _kernels, "api": _api, "nvtx": _nvtx, "info": _info, "steps": _steps, "breakdown": _breakdown,
    "stalls": _stalls, "ranks": _ranks, "occupancy": _occupancy, "occupancy --ncu": _occupancy_ncu,
    "roofline": _roofline, "host": _host, "graphs": _graphs, "diff": _diff, "ptx --list": _ptx_list,
}


@pytest.fixture(scope="module")
def outputs() -> dict[tuple[str, int | None], Any]:
    """Each command's JSON and its table at each width, run once."""
    return {}


def _output(outputs: dict, name: str, width: int | None) -> Any:
    if (name, width) not in outputs:
        args, _ = COMMANDS[name]()
        outputs[(name, width)] = run(args + (["--format", "json"] if width is None else []), width)
    return outputs[(name, width)]


def hidden_titles(text: str) -> str:
    """The notes naming hidden columns, as one line (a note may wrap)."""
    flat = " ".join(text.split())
    return " ".join(re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*) hidden: terminal too narrow", flat))


def check_fits(stdout: str, stderr: str, width: int) -> None:
    for stream, text in (("stdout", stdout), ("stderr", stderr)):
        wide = [line for line in text.splitlines() if cell_len(line) > width]
        assert not wide, f"{stream}: {len(wide)} lines wider than {width}, e.g. {wide[0]!r}"


def check_figures(text: str, figures: list[tuple[str, str]]) -> None:
    printed = set(re.findall(r"-?[\d,]*\d(?:\.\d+)?(?: (?:[KMGT]iB|[KMGTP]|B)(?=[ │]))?", text))
    hidden = hidden_titles(text)
    missing = [(title, shown) for title, shown in figures if shown not in printed and title not in hidden]
    assert not missing, f"{len(missing)} figures not printed whole, e.g. {missing[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_table_fits_and_shows_every_figure_whole(outputs: dict, name: str, width: int) -> None:
    _, figures_of = COMMANDS[name]()
    table = _output(outputs, name, width)
    check_fits(table.stdout, table.stderr, width)
    figures = [] if name == "ptx --list" else list(figures_of(json.loads(_output(outputs, name, None).stdout)))
    assert figures or name == "ptx --list"
    check_figures(table.stdout, figures)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_history_show_fits(tmp_path: Path, width: int) -> None:
    from profkit.cli.history import TREND_COLUMNS

    db = tmp_path / "history.db"
    for i in (1, 2, 3):
        run(["history", "add", str(KINETO / f"hist_run{i}.json.gz"), "--db", str(db), "--label",
             f"a long label for run {i} of the history", "--commit", f"{i:040x}"])
    args = ["history", "show", "--db", str(db), "--plot", str(tmp_path / "p.png")]
    table = run(args, width)
    check_fits(table.stdout, table.stderr, width)
    data = json.loads(run(args + ["--format", "json"]).stdout)
    check_figures(table.stdout, list(numbers(data["runs"], TREND_COLUMNS)))


@pytest.mark.parametrize("width", WIDTHS)
def test_ptx_list_never_cuts_the_name_to_type(width: int) -> None:
    from profkit.ptx.targets import SAMPLES

    text = run(["ptx", "--list"], width).stdout
    for sample in SAMPLES:  # whole, on one line, as the first cell of its row
        assert re.search(rf"^│ {re.escape(sample.name)} +│", text, re.MULTILINE), sample.name


@pytest.mark.parametrize("width", WIDTHS)
def test_scrub_fits(tmp_path: Path, width: int) -> None:
    source = tmp_path / "in.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_sync"), source)
    table = run(["scrub", str(source), "-o", str(tmp_path / f"out{width}.sqlite")], width)
    check_fits(table.stdout, table.stderr, width)


def test_advice_wraps_between_words_not_one_letter_per_line() -> None:
    from profkit.terminal import PROSE_MIN

    path = str(nsys_fixture("nsys2025_train_print"))
    words = {w for row in json.loads(run(["occupancy", path, "--format", "json"]).stdout) for w in row["advice"].split()}
    text = run(["occupancy", path], 80).stdout
    cells = [line.split("│")[-2] for line in text.splitlines() if line.startswith("│")]
    assert cells and all(len(c) - 2 >= PROSE_MIN for c in cells)  # the Advice column, with its padding
    assert {w for c in cells for w in c.split()} <= words  # every word whole: wrapped between words


def test_a_number_is_never_cut_even_where_the_terminal_is_too_narrow() -> None:
    from profkit.terminal import fit_table

    columns = [Column("name", "Name"), Column("a", "A (ns)", "ns"), Column("b", "B (ns)", "ns")]
    cells = [["some_long_kernel_name", "174,170", "1,234,567,890"]]
    for width in (20, 30, 40, 60):
        fitted = fit_table(cells, columns, width)
        for c, w in zip(fitted.columns, fitted.widths):
            if c.key != "name":  # shown whole, or hidden (and named in the note)
                assert w >= len(cells[0][columns.index(c)])
        assert [c.key for c in fitted.columns][0] == "name"
    assert [c.key for c in fit_table(cells, columns, 40).hidden] == ["b"]  # the right-most goes first

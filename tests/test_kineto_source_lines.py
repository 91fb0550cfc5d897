"""Call lines of torch.profiler frames from the program's source (readers/kineto/source_lines.py).

torch.profiler records a frame's first line (or, for a frame running when recording began, its line
then), never the line of the call inside it; where the source is at hand profkit finds that call.
The committed zoo capture (item_sync_sleep, torch.profiler with stacks, made on an H100) plants an
``.item()`` at line 32 and a ``time.sleep`` at line 35 of main(), which the trace names
``item_sync_sleep.py(26): main`` (main's line when the profiler started)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.readers.kineto.source_lines import SOURCE_PATH_ENV, SourceLines

DATA = Path(__file__).parent / "data"
ZOO_PROGRAMS = Path(__file__).parent / "zoo" / "programs"
TRACE = DATA / "zoo" / "item_sync_sleep" / "item_sync_sleep.kineto.rank0.json.gz"

SOURCE = textwrap.dedent("""\
    import time


    def step(loss):
        loss.backward()
        if loss.item() > 1:
            pass


    @decorated
    def twice(loss):
        a = loss.item()
        b = loss.item()

        def inner():
            loss.item()
        return a + b


    def main():
        for _ in range(3):
            step(1)
            time.sleep(0.1)


    main()
""")


@pytest.fixture
def program(tmp_path: Path) -> SourceLines:
    (tmp_path / "prog.py").write_text(SOURCE)
    return SourceLines([tmp_path])


def test_a_call_made_once_in_the_function_gets_its_line(program: SourceLines) -> None:
    assert program.call_line("prog.py", "step", 4, "item") == 6
    assert program.call_line("prog.py", "step", 4, "backward") == 5


def test_a_frame_running_when_recording_began_is_found_by_the_line_it_was_at(program: SourceLines) -> None:
    assert program.call_line("prog.py", "main", 22, "sleep") == 23  # line 22: inside main's loop


def test_no_line_for_module_frames_and_special_methods(program: SourceLines) -> None:
    """A module's frame cannot be told apart from another file's; ``__init__`` runs at ``Linear(...)``."""
    assert program.call_line("prog.py", "<module>", 26, "main") is None
    assert program.call_line("prog.py", "step", 4, "__init__") is None


def test_a_same_named_file_without_the_function_there_is_passed_over(tmp_path: Path) -> None:
    other, mine = tmp_path / "other", tmp_path / "mine"
    other.mkdir(), mine.mkdir()
    (other / "prog.py").write_text("def unrelated():\n    pass\n")
    (mine / "prog.py").write_text(SOURCE)
    assert SourceLines([other, mine]).call_line("prog.py", "step", 4, "item") == 6


def test_a_source_too_deep_to_parse_is_no_source(tmp_path: Path) -> None:
    (tmp_path / "deep.py").write_text("def f():\n    x = " + "1+" * 200_000 + "1\n")
    assert SourceLines([tmp_path]).call_line("deep.py", "f", 1, "item") is None


def test_a_decorated_function_starts_at_its_decorator(program: SourceLines) -> None:
    assert program.call_line("prog.py", "twice", 10, "inner") is None  # defined, never called


def test_no_line_where_the_name_is_called_twice_or_only_in_a_nested_function(program: SourceLines) -> None:
    assert program.call_line("prog.py", "twice", 10, "item") is None  # lines 12 and 13: ambiguous


def test_no_line_from_a_file_whose_function_is_not_at_the_recorded_line(program: SourceLines) -> None:
    """A same-named file of another program (or an edited one) is not used."""
    assert program.call_line("prog.py", "step", 40, "item") is None
    assert program.call_line("prog.py", "nowhere", 4, "item") is None


def test_no_line_without_the_file_or_from_a_file_that_does_not_parse(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def f(:\n")
    lines = SourceLines([tmp_path])
    assert lines.call_line("missing.py", "step", 4, "item") is None
    assert lines.call_line("broken.py", "f", 1, "item") is None
    assert lines.call_line("notes.txt", "f", 1, "item") is None


def stalls_top_site(env: dict[str, str]) -> str:
    result = CliRunner(env=env).invoke(cli, ["stalls", str(TRACE), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(result.stdout)["rows"] if r["in_steps"]]
    return max(rows, key=lambda r: r["per_step"]["gpu_idle_ns"])["source"]


def test_the_zoo_sync_gets_its_line_from_the_source_and_its_recorded_line_without_it(tmp_path: Path) -> None:
    planted = json.loads((TRACE.parent / "item_sync_sleep.zoo_lines.txt").read_text().split("ZOO_PLANT ")[1]
                         .splitlines()[0])
    assert stalls_top_site({SOURCE_PATH_ENV: str(ZOO_PROGRAMS)}) == planted["sync"] == "item_sync_sleep.py:32"
    # an empty folder as the only source root (the test's own folder holds no program): the line
    # torch.profiler recorded, main's when recording began
    assert stalls_top_site({SOURCE_PATH_ENV: str(tmp_path)}) == "item_sync_sleep.py:26"


def test_the_zoo_sleep_gets_its_line_in_the_host_table() -> None:
    result = CliRunner(env={SOURCE_PATH_ENV: str(ZOO_PROGRAMS)}).invoke(cli, ["host", str(TRACE), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["function"]: r["line"] for r in json.loads(result.stdout)["functions"]}
    assert rows["sleep (built-in) called from main"] == 35
    assert rows["Tensor.item (built-in) called from main"] == 32

"""Comparisons refuse unrelated traces: `diff`, `history add`, `report --baseline` and
`stalls --compare` share one check (profkit.analysis.compare.same_program) with `ranks`.

Oracles: real captures.  The GPT and MLP training loops (sample_kernels/gpt.py and
train_mlp.py, tests/data/kineto/README.md) are different programs; one program
traced by nsys and by torch.profiler is one program; and the MLP capture (one
without annotations, so that its kernel names decide) with half of its kernels
removed (built below from the real export, by deleting the kernels of half of
its kernel names) stands for a change that removes half the
program's kernels, which must still be accepted, while one more name removed is
refused: that is where the threshold lies.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.kernels.names import canonical_kernel_name
from profkit.cli import cli
from tests.conftest import nsys_fixture

KINETO = Path(__file__).parent / "data" / "kineto"
SHARE = re.compile(r"share (\d+)% of their kernel names")
pytestmark = pytest.mark.skipif(not (KINETO / "gpt_eager.json.gz").exists(), reason="Kineto fixtures missing")


def _names(path: Path) -> set[str]:
    """Canonical kernel names read straight from the export's SQL (not through profkit's reader)."""
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        rows = db.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "JOIN StringIds s ON s.id = k.demangledName").fetchall()
    return {canonical_kernel_name(r[0]) for r in rows}


def _refused(result, share_pct: int | None = None) -> None:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and "different programs" in lines[0] and "--force" in lines[0], result.output
    assert "Traceback" not in result.output
    if share_pct is not None:
        assert int(SHARE.search(lines[0]).group(1)) == share_pct, lines[0]


def test_diff_refuses_gpt_against_mlp_naming_the_share_and_force_overrides() -> None:
    gpt, mlp = nsys_fixture("nsys2025_gpt_eager"), nsys_fixture("nsys2025_mlp_nvtx")
    a, b = _names(gpt), _names(mlp)
    expected = int(100 * len(a & b) / len(a | b))
    assert expected < 50  # measured: 24%
    _refused(CliRunner().invoke(cli, ["diff", str(gpt), str(mlp)]), expected)
    forced = CliRunner().invoke(cli, ["diff", str(gpt), str(mlp), "--force", "--format", "json"])
    assert forced.exit_code == 0, forced.output


def test_one_program_under_two_profilers_is_accepted() -> None:
    result = CliRunner().invoke(cli, ["diff", str(nsys_fixture("nsys2025_mlp_nvtx")),
                                      str(KINETO / "mlp_annotated.json.gz"), "--format", "json"])
    assert result.exit_code == 0, result.output


def _half_removed(tmp_path: Path, remove: int) -> tuple[Path, Path, int]:
    """The real MLP export without annotations (``--no-nvtx-steps``: nothing but its kernels says
    what program it is, so their names decide), and a copy without the kernels of ``remove`` of
    its canonical names."""
    base = nsys_fixture("nsys2025_mlp_plain")
    copy = tmp_path / f"mlp_plain_without_{remove}_kernel_names.sqlite"
    shutil.copyfile(base, copy)
    with sqlite3.connect(copy) as db:
        ids: dict[str, list[int]] = {}
        for sid, value in db.execute("SELECT DISTINCT k.demangledName, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                     "JOIN StringIds s ON s.id = k.demangledName"):
            ids.setdefault(canonical_kernel_name(value), []).append(sid)
        # the least-used names go: the steps (the launch pattern) stay findable
        counts = {key: db.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN "
                                  f"({','.join('?' * len(v))})", v).fetchone()[0] for key, v in ids.items()}
        for key in sorted(counts, key=lambda k: (counts[k], k))[:remove]:
            db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName IN ({','.join('?' * len(ids[key]))})",
                       ids[key])
    return base, copy, len(ids)


def test_a_change_that_removes_half_the_kernels_is_accepted_and_one_name_more_is_not(tmp_path: Path) -> None:
    base, _, total = _half_removed(tmp_path, 0)
    assert total == 20  # the MLP loop's kernel names (canonical)
    _, half, _ = _half_removed(tmp_path, total // 2)
    assert len(_names(half)) == total // 2
    accepted = CliRunner().invoke(cli, ["diff", str(base), str(half), "--format", "json"])
    assert accepted.exit_code == 0, accepted.output
    _, more, _ = _half_removed(tmp_path, total // 2 + 1)
    _refused(CliRunner().invoke(cli, ["diff", str(base), str(more)]), 45)  # 9 of 20


def test_history_add_refuses_another_program(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    runner = CliRunner()
    first = runner.invoke(cli, ["history", "add", str(KINETO / "hist_run1.json.gz"), "--db", str(db)])
    assert first.exit_code == 0, first.output
    _refused(runner.invoke(cli, ["history", "add", str(KINETO / "gpt_eager.json.gz"), "--db", str(db)]))
    # the run of the same program traced by nsys is accepted (canonical names)
    same = runner.invoke(cli, ["history", "add", str(nsys_fixture("nsys2025_mlp_nvtx")), "--db", str(db)])
    assert same.exit_code == 0, same.output
    forced = runner.invoke(cli, ["history", "add", str(KINETO / "gpt_eager.json.gz"), "--db", str(db), "--force"])
    assert forced.exit_code == 0, forced.output


def test_stalls_compare_and_report_baseline_refuse_another_program(tmp_path: Path) -> None:
    gpt, mlp = nsys_fixture("nsys2025_gpt_eager"), nsys_fixture("nsys2025_mlp_nvtx")
    _refused(CliRunner().invoke(cli, ["stalls", str(mlp), "--compare", str(gpt)]))
    _refused(CliRunner().invoke(cli, ["report", str(mlp), "--baseline", str(gpt), "-o", str(tmp_path / "r")]))
    assert not (tmp_path / "r").exists()

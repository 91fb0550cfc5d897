"""Which rank a file is, where nothing but its name or place says (review of #31's resolver), on the
real per-rank DDP exports (tests/data/ddp/per_rank2: one nsys export per rank process; rank 1 runs
the planted spin_kernel)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import DATA, _decompressed

RANKS = DATA / "ddp" / "per_rank2"


def cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profkit", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def rank_file(rank: int) -> Path:
    return _decompressed(RANKS / f"rank{rank}.sqlite.xz")


def kernel_names(out: str) -> set[str]:
    return {row["name"] for row in json.loads(out)}


def test_a_lone_rank_file_is_the_rank_its_name_says() -> None:
    """rank1.sqlite records no rank; `ranks` reads it as rank 1 by its name, and so does --rank."""
    wrong = cli("kernels", rank_file(1), "--rank", "0")
    assert wrong.returncode == 2 and "is rank 1, not rank 0" in wrong.stderr
    right = cli("kernels", rank_file(1), "--rank", "1", "--format", "json")
    assert right.returncode == 0, right.stderr
    assert any("spin_kernel" in name for name in kernel_names(right.stdout))  # only rank 1 runs it


def test_a_rank_folder_says_which_files_it_skipped(tmp_path: Path) -> None:
    """A file named like a rank's trace that holds none (hand-made junk beside real exports) is named."""
    for rank in (0, 1):
        shutil.copyfile(rank_file(rank), tmp_path / f"rank{rank}.sqlite")
    (tmp_path / "rank2.sqlite").write_text("hello\n")
    out = cli("kernels", tmp_path, "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert "skipped 1 file that holds no trace: rank2.sqlite" in out.stderr


def test_ranks_without_names_take_their_place_and_say_so(tmp_path: Path) -> None:
    shutil.copyfile(rank_file(0), tmp_path / "a.sqlite")
    shutil.copyfile(rank_file(1), tmp_path / "b.sqlite")
    out = cli("ranks", tmp_path, "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    rows = rows if isinstance(rows, list) else rows["ranks"]
    assert [(r["rank"], r["rank_source"], Path(r["file"]).name) for r in rows] == \
        [(0, "file order", "a.sqlite"), (1, "file order", "b.sqlite")]
    table = cli("ranks", tmp_path)
    assert "Rank 1 is the straggler" in table.stdout and "Rank None" not in table.stdout

"""Names in Markdown output stay text when GitHub renders them (issue 15, item 4).

A kernel and an NVTX range of a copy of a real export are renamed to links,
images, autolinks and raw HTML; report.md and `--format md` are rendered
with cmark-gfm (the Markdown engine of GitHub, through cmarkgfm, its Python
binding, with GitHub's extensions: autolink, tables, tagfilter), and the
rendered HTML must hold no link and no image, only the names as text.
"""

from __future__ import annotations

import html
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.report import write_report
from tests.conftest import nsys_fixture

cmarkgfm = pytest.importorskip("cmarkgfm")

KERNEL = "[click](javascript:alert(1)) ![x](https://tracker.example.com/p.png) www.evil.example a@b.example"
NVTX = "![img](http://e.example/i.png)<https://e.example>[ref]: https://e.example <b>bold</b>"


def render_github(markdown: str) -> str:
    from cmarkgfm.cmark import Options

    # UNSAFE keeps raw HTML (GitHub sanitizes it later; here it must simply not be there)
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def hostile_copy(tmp_path: Path) -> Path:
    export = tmp_path / "hostile_names.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), export)
    with sqlite3.connect(export) as conn:
        (top_id,) = conn.execute("""SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL
                                    GROUP BY demangledName ORDER BY sum("end" - start) DESC LIMIT 1""").fetchone()
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (KERNEL, top_id))
        (text_id,) = conn.execute("SELECT textId FROM NVTX_EVENTS WHERE eventType = 59 AND textId IS NOT NULL "
                                  "ORDER BY start LIMIT 1").fetchone()
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (NVTX, text_id))
    return export


def assert_inert(markdown: str, *names: str) -> None:
    rendered = render_github(markdown)
    # GitHub links a bare e-mail address to itself whatever the escaping; that
    # link shows its whole target, so it is allowed, and nothing else is.
    rendered = re.sub(r'<a href="mailto:([^"]+)">\1</a>', r"\1", rendered)
    assert not re.search(r"<a\b|<img\b|<b>", rendered), re.findall(r"<(?:a|img|b)\b[^>]*>", rendered)
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    for name in names:
        assert name in text, name  # shown as written


def test_report_md_names_are_text(tmp_path: Path) -> None:
    paths = write_report(hostile_copy(tmp_path), tmp_path / "out")
    assert_inert(Path(paths.md).read_text(), KERNEL, NVTX)


@pytest.mark.parametrize("command, name", [("kernels", KERNEL), ("nvtx", NVTX)])
def test_format_md_names_are_text(command: str, name: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [command, str(hostile_copy(tmp_path)), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout, name)

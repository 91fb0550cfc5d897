"""Names in Markdown output stay text when GitHub renders them (issue 15, item 4).

A kernel and an NVTX range of a copy of a real export are renamed to links,
images, autolinks and raw HTML; in another copy, the real names (a kernel,
an NVTX range, the sync sites' file paths, the command line) get e-mail
addresses, ``www.`` names and URLs added, as a user name in a home folder or
a notification address in a command line would put them there.  report.md
and `--format md` are rendered with cmark-gfm (the Markdown engine of GitHub,
through cmarkgfm, its Python binding, with GitHub's extensions: autolink,
tables, tagfilter), and the rendered HTML must hold no link (``mailto:``
included) and no image, only the names as text.
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
from tests.conftest import DATA, nsys_fixture

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


# -- real names with addresses and URLs in them ---------------------------------------------------
EMAIL = "jo.doe+ci@corp.example"
SOURCE_DIR = f"/home/{EMAIL}/www.code.example"  # a home folder named by an address, a repo named like a site
KERNEL_SUFFIX = f" {EMAIL} www.k.example"  # report.md clips names at 160 characters
NVTX_SUFFIX = f" mailto:{EMAIL} xmpp:ops@corp.example HTTPS://E.EXAMPLE/step"
STEP_SUFFIX = " [notes](javascript:void) *ops@team.example* `x`"  # no digits: stalls shows step N
ARGUMENT = "--notify=ops@team.example"
RUN_COMMAND = ["train_mlp.py", "--notify", "ops@team.example", "http://hooks.example/x", "www.dash.example"]


def real_names_copy(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of nsys2025_train_print whose real names carry addresses and URLs; the names as renamed."""
    export = tmp_path / "hostile_real_names.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), export)
    names = {}
    with sqlite3.connect(export) as conn:
        (kernel_id, kernel) = conn.execute(
            """SELECT demangledName, value FROM CUPTI_ACTIVITY_KIND_KERNEL JOIN StringIds ON id = demangledName
               GROUP BY demangledName ORDER BY sum("end" - start) DESC LIMIT 1""").fetchone()
        names["kernel"] = kernel + KERNEL_SUFFIX  # the cuBLAS GEMM's real name
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (names["kernel"], kernel_id))
        names["nvtx"] = "warmup" + NVTX_SUFFIX  # the program's own ranges
        conn.execute("UPDATE StringIds SET value = ? WHERE value = 'warmup'", (names["nvtx"],))
        names["step"] = "step" + STEP_SUFFIX
        conn.execute("UPDATE StringIds SET value = ? WHERE value = 'step'", (names["step"],))
        # the sync sites' paths: profkit.sync|item|<path>:59|print(...)
        old_path = "../../../work/main/sample_kernels/train_mlp.py"
        assert conn.execute("SELECT count(*) FROM StringIds WHERE instr(value, ?)", (old_path,)).fetchone()[0] == 3
        conn.execute("UPDATE StringIds SET value = replace(value, ?, ?)", (old_path, f"{SOURCE_DIR}/train_mlp.py"))
        names["path"] = f"{SOURCE_DIR}/train_mlp.py"
        # the command line nsys recorded
        conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'PROCESS_0:ARGUMENT_2'",
                     (f"{SOURCE_DIR}/train_mlp.py",))
        conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'PROCESS_0:ARGUMENT_5'", (ARGUMENT,))
    return export, names


def test_report_md_real_names_with_addresses_are_text(tmp_path: Path) -> None:
    export, names = real_names_copy(tmp_path)
    paths = write_report(export, tmp_path / "out", run_info={"command": RUN_COMMAND, "exit_code": 0})
    markdown = Path(paths.md).read_text()
    assert_inert(markdown, names["kernel"], names["nvtx"], names["step"],
                 f"{SOURCE_DIR}/train_mlp.py --steps 20 {ARGUMENT}",
                 " ".join(RUN_COMMAND))
    assert f"{SOURCE_DIR}/train_mlp.py:59" in html.unescape(re.sub(r"<[^>]+>", "", render_github(markdown)))


@pytest.mark.parametrize("command, name", [("kernels", "kernel"), ("nvtx", "nvtx"), ("stalls", "step")])
def test_format_md_real_names_with_addresses_are_text(command: str, name: str, tmp_path: Path) -> None:
    export, names = real_names_copy(tmp_path)
    result = CliRunner().invoke(cli, [command, str(export), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout, names[name])


@pytest.mark.parametrize("text", [
    "a@b.example", "x a.user+tag@example.org y", "mailto:a@b.example", "xmpp:a@b.example/res",
    "www.evil.example", "WWW.EVIL.EXAMPLE", "(www.evil.example)", "http://e.example", "HTTPS://E.EXAMPLE/p",
    "ftp://f.example", "`a@b.example`", "a_b@c_d.example_", "x@y.example@w.example", "[a@b.example](http://x.y)",
    "<a@b.example>", "a@www.x.example", "\\a@b.example", "*a@b.example*", "__init__ _x_ a_b", "float *a, float *b",
    KERNEL, NVTX,
])
def test_md_escape_leaves_no_autolink(text: str) -> None:
    """Each hostile string alone, in a table cell and in prose."""
    from profkit.output import md_escape

    assert_inert(f"| {md_escape(text)} |\n| --- |\n", text)
    assert_inert(f"- {md_escape(text)}\n", text)


@pytest.mark.parametrize("text", ["a@b.example", "mailto:a@b.example", "www.evil.example", "HTTPS://E.EXAMPLE/p",
                                  f"/home/{EMAIL}/x.py"])
def test_the_renderer_links_them_unescaped(text: str) -> None:
    """The oracle is live: cmark-gfm with GitHub's autolink extension does link each as written."""
    assert "<a href=" in render_github(f"| {text} |\n| --- |\n")


def test_diff_md_names_with_pipes_are_text(tmp_path: Path) -> None:
    """`profkit diff --format md` puts names in code spans; in its tables a name's "|" used to end
    the cell and the span, and the rest of the name rendered live (a link here)."""
    base = tmp_path / "base.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), base)
    new, names = real_names_copy(tmp_path)
    # the renamed GEMM gets a "|", and a backslash before one, first: diff clips names at 90 and 120 characters
    hostile = "[click](http://e.example) | x@y.example \\| [img](www.e.example) "
    with sqlite3.connect(new) as conn:
        conn.execute("UPDATE StringIds SET value = ? WHERE value = ?",
                     (hostile + names["kernel"].replace(KERNEL_SUFFIX, ""), names["kernel"]))
    # the copy's range names were made hostile too, so diff takes it for another program: --force
    result = CliRunner().invoke(cli, ["diff", str(base), str(new), "--format", "md", "--force"])
    assert result.exit_code == 0, result.output
    assert "| `[click]" in result.stdout  # the new kernel's table row
    assert_inert(result.stdout, hostile + "sm80_xmma_gemm")


def test_report_md_record_function_names_are_text(tmp_path: Path) -> None:
    """A real torch.profiler trace whose record_function ranges carry addresses, URLs and
    Markdown (the Kineto reader's names, the same renderer)."""
    import gzip
    import json

    doc = json.loads(gzip.decompress((DATA / "kineto" / "mlp_annotated.json.gz").read_bytes()))
    step = "step" + STEP_SUFFIX
    warmup = "warmup" + NVTX_SUFFIX
    renamed = {"step": step, "warmup": warmup}
    for event in doc["traceEvents"]:
        if event.get("cat") == "user_annotation" and event.get("name") in renamed:
            event["name"] = renamed[event["name"]]
    trace = tmp_path / "hostile_mlp_annotated.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    markdown = Path(write_report(trace, tmp_path / "out").md).read_text()
    assert_inert(markdown, step, warmup)

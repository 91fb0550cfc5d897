"""`profkit report` / ``write_report`` on the real exports of both nsys versions.

Structural checks (tables, row counts, keys), not byte-for-byte goldens: the
report's numbers are compared with the summaries (which equal ``nsys stats``)
and with the export itself.  Hostile or broken inputs are copies of a real
fixture altered in the test.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.kernels import summaries
from profkit.analysis.timeline.capture import capture_info
from profkit.analysis.kernels.bandwidth import BANDWIDTH_KEYS
from profkit.analysis.kernels.code import CODE_KEYS
from profkit.analysis.timeline.busy import gpu_busy
from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.model.sync_sites import readable_rows
from profkit.readers.ncu import read_ncu_csv
from profkit.output import md_escape
from profkit.readers import open_trace
from profkit.readers.nsys import open_export
from profkit.readers.nsys.model_source import trace_of_export
from profkit.report import ReportPaths, write_report
from tests.conftest import Lazy, default_run, ncu_fixture, nsys_fixture, nsys_fixture_names, recorded_gpu_name

FIXTURES = nsys_fixture_names()
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ReportPaths]:
    """One report per real fixture, written once for the module when a test first asks."""
    root = tmp_path_factory.mktemp("reports")
    return Lazy(lambda name: write_report(nsys_fixture(name), root / name))


def load(paths: ReportPaths) -> tuple[str, str, dict]:
    return paths.html.read_text(), paths.md.read_text(), json.loads(paths.json.read_text())


# -- HTML parsing ------------------------------------------------------------------
class Tables(HTMLParser):
    """Cell texts (entities decoded) of every <table id=...>'s body rows, and every <img>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[dict[str, str | None]] = []
        self.scripts = 0
        self._table: str | None = None
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tbody" and self._table:
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table:
            self.tables[self._table].append([])
        elif tag == "td" and self._in_body and self._table:
            self._cell = []
        elif tag == "img":
            self.images.append(a)
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def summary_part(rows: list[dict]) -> list[dict]:
    """The report's kernel rows without the machine-code and bandwidth keys, which are all
    None in a report made without code folders or ncu data (tests/test_kernel_code_report.py
    checks them where they are known)."""
    extra = set(CODE_KEYS) | set(BANDWIDTH_KEYS)
    assert all(row[key] is None for row in rows for key in extra)
    return [{k: v for k, v in row.items() if k not in extra} for row in rows]


def parse_html(html: str) -> Tables:
    parser = Tables()
    parser.feed(html)
    parser.close()
    return parser


def md_tables(md: str) -> dict[str, list[list[str]]]:
    """Markdown tables by their bold title line: the body rows' cells (still escaped)."""
    out: dict[str, list[list[str]]] = {}
    lines = md.splitlines()
    for i, line in enumerate(lines):
        title = re.match(r"^\*\*(.+?)\*\*", line)
        if not title or i + 3 >= len(lines) or not lines[i + 2].startswith("| "):
            continue
        rows = []
        for body in lines[i + 4:]:
            if not body.startswith("| "):
                break
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", body)[1:-1]])
        out[title.group(1)] = rows
    return out


# -- every fixture -------------------------------------------------------------------
@pytest.mark.parametrize("name", default_run(FIXTURES))
def test_report_files_hold_the_summaries(name: str, reports: dict[str, ReportPaths]) -> None:
    html, md, data = load(reports[name])
    with open_export(nsys_fixture(name)) as export:
        trace = trace_of_export(export)
        kernels = summaries.kernel_summary(trace)
        api = summaries.api_summary(trace)
        nvtx = summaries.nvtx_summary(trace) if export.has_table("NVTX_EVENTS") else []
        memory = summaries.memory_summary(trace)
    with open_trace(nsys_fixture(name)) as trace:
        info = capture_info(trace)
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    assert data["schema"] == "profkit.report/1" and data["partial"] is False
    assert data["export"] == f"{name}.sqlite"
    sections = data["sections"]
    # JSON: every row of the summaries, exactly (the summaries equal nsys stats)
    assert summary_part(sections["kernels"]["tables"]["kernels"]["rows"]) == kernels
    assert sections["api"]["tables"]["api"]["rows"] == api
    # no table without NVTX; the sync hook's ranges read decoded ("sync: .item() at ...")
    assert sections["nvtx"]["tables"].get("nvtx", {"rows": []})["rows"] == readable_rows(nvtx)
    assert sections["memory"]["tables"].get("memory", {"rows": []})["rows"] == memory
    assert data["capture"]["gpu_busy_ns"] == info["gpu_busy_ns"]
    assert data["capture"]["gpu_name"] == info["gpu_name"] == recorded_gpu_name(name)
    # HTML: the kernel table shows the top 20 (+ "(other K)") with the names as text
    tables = parse_html(html).tables
    shown = summaries.top_n(kernels, 20)
    assert [row[-1] for row in tables["table-kernels"]] == [k["name"] for k in shown]
    assert [row[1] for row in tables["table-kernels"]] == [f"{k['total_ns']:,}" for k in shown]
    # Markdown: the same tables, as tables
    md_kernels = md_tables(md)["CUDA kernels"]
    assert len(md_kernels) == len(shown)
    assert [row[1] for row in md_kernels] == [f"{k['total_ns']:,}" for k in shown]
    assert "| Time % | Total (ns) | Instances |" in md
    for section in ("Capture", "Timeline", "GPU utilization", "CUDA kernels", "CUDA API", "NVTX ranges",
                    "Kernels per NVTX range", "Memory copies and sets", "Occupancy and registers"):
        assert f"## {section}" in md
        assert f">{section}</h2>" in html


@pytest.mark.parametrize("name", default_run(FIXTURES))
def test_capture_section_and_findings(name: str, reports: dict[str, ReportPaths]) -> None:
    html, md, data = load(reports[name])
    capture = data["capture"]
    facts = dict(data["sections"]["capture"]["facts"])
    assert facts["Nsight Systems version"] == capture["nsys_version"]
    assert facts["Export schema version"] == capture["export_schema_version"]
    assert facts["GPU"] == recorded_gpu_name(name) and facts["SM count"] == "132"
    assert facts["Compute capability"] == "9.0" and facts["Driver"] == capture["driver_version"]
    assert facts["Memory bandwidth"] == f"{capture['memory_bandwidth_gbps']:,} GB/s"
    assert facts["GPU busy"].startswith(f"{capture['gpu_busy_pct']:.2f}%")
    # findings come first and say how busy the GPU was, in words; where the run has steps,
    # the steady state leads and the whole-capture figure says it includes start-up
    assert data["findings"] and any("GPU was busy" in f for f in data["findings"])
    if data["sections"]["steps"]["data"]["summary"]["count"]:
        assert " steps, " in data["findings"][0] and "median" in data["findings"][0]
        assert any(f.startswith("Over the whole capture, start-up included") for f in data["findings"])
    assert md.index("## Findings") < md.index("## Capture")
    assert html.index('id="findings"') < html.index('id="capture"')


@pytest.mark.parametrize("name", default_run(FIXTURES))
def test_figures_are_inline_pngs_and_their_numbers_add_up(name: str, reports: dict[str, ReportPaths]) -> None:
    html, _, data = load(reports[name])
    images = parse_html(html).images
    figures = {key: fig for s in data["sections"].values() for key, fig in s["figures"].items()}
    assert {"timeline", "utilization"} <= set(figures)
    assert len(images) == len(figures)
    for image in images:
        assert image["src"] and image["src"].startswith("data:image/png;base64,iVBORw0KGgo")
    # nothing outside the file: no http(s) URL in any src/href
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html)
    with open_trace(nsys_fixture(name)) as trace:
        busy = gpu_busy(trace)
    with open_export(nsys_fixture(name)) as export:
        per_stream = {(s, 0): (n, t) for s, n, t in export.rows(
            'SELECT streamId, count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY streamId')}
    whole = figures["utilization"]["data"]["views"][0]
    assert {d["device_id"]: d["busy_ns"] for d in whole["devices"]} == {
        d["device"]: d["busy_ns"] for d in busy["per_device"]}
    for device in whole["devices"]:
        assert sum(device["busy_ns_per_bin"]) == device["busy_ns"]
        assert max(device["busy_ns_per_bin"]) <= whole["bins"]["width_ns"]
    lanes = [lane for lane in figures["timeline"]["data"]["streams"] if lane["kind"] == "kernel"]
    assert {(lane["stream_id"], 0): (lane["operations"], lane["busy_ns"]) for lane in lanes} == per_stream


# -- hostile text ------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in FIXTURES if n in ("nsys2025_nvtx", "nsys2023_nvtx")])  # nvtx_probe.py
def test_script_in_nvtx_text_is_shown_as_text(name: str, reports: dict[str, ReportPaths]) -> None:
    html, md, data = load(reports[name])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The only script elements are the interactive timeline's data block and its code, and
    # the CSP admits exactly that code, by its sha256: no other script may run.
    assert html.lower().count("<script") == 2 and parse_html(html).scripts == 2
    assert '<script type="application/json" id="tl-data">' in html
    code = html.split('<script type="application/json" id="tl-data">', 1)[1].split("</script>\n<script>", 1)[1]
    code = code.split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    assert f"script-src &#39;sha256-{digest}&#39;;" in html and "default-src 'none'" in html
    ranges = [row[-1] for row in parse_html(html).tables["table-nvtx"]]
    assert any(r.endswith(XSS) for r in ranges), ranges  # decoded text == the NVTX text
    assert md_escape(XSS) in md and "<script" not in md.lower()
    assert any(row["name"].endswith(XSS) for row in data["sections"]["nvtx"]["tables"]["nvtx"]["rows"])


def test_hostile_kernel_name(tmp_path: Path) -> None:
    """A kernel name with HTML, Markdown table syntax and matplotlib math is shown verbatim."""
    export = tmp_path / "hostile.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_gelu"), export)
    name = '<img src=x onerror=alert(1)>|`code`*b*_i_ $\\alpha$ & "q"'
    with sqlite3.connect(export) as conn:
        (top_id,) = conn.execute("""SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL
                                    GROUP BY demangledName ORDER BY sum("end" - start) DESC LIMIT 1""").fetchone()
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", (name, top_id))
    paths = write_report(export, tmp_path / "out")
    html, md, data = load(paths)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert parse_html(html).tables["table-kernels"][0][-1] == name
    assert data["sections"]["kernels"]["tables"]["kernels"]["rows"][0]["name"] == name
    kernel_rows = md_tables(md)["CUDA kernels"]
    assert all(len(row) == 9 for row in kernel_rows)  # the "|" did not split a cell
    assert kernel_rows[0][-1] == "&lt;img src=x onerror=alert(1)&gt;\\|\\`code\\`\\*b\\*\\_i\\_ $\\\\alpha$ & \"q\""
    assert "<img" not in md


# -- the environment never leaks -----------------------------------------------------------
def environment_entries(export: Path) -> list[str]:
    """``KEY=VALUE`` entries of the profiled process's environment recorded in the export."""
    conn = sqlite3.connect(f"file:{export}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        values = []
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            values += [v for (v,) in conn.execute(
                "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")]
        if "META_DATA_CAPTURE" in tables:
            values += [v for (v,) in conn.execute(
                "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT%'")]
    finally:
        conn.close()
    return [e for v in values for e in str(v).split(";") if "=" in e and len(e) >= 6]


@pytest.mark.parametrize("name", ["nsys2025_train_print", "nsys2023_sync_sites"])
def test_no_environment_in_any_output(name: str, tmp_path: Path) -> None:
    # The committed fixtures are scrubbed; a copy with an environment planted
    # in all three places nsys records one (tests/planted.py) stands in for a raw export.
    from tests.planted import plant_secret

    export = plant_secret(name, tmp_path)
    entries = environment_entries(export)
    assert any(e.startswith("HOME=") for e in entries) and len(entries) >= 10  # the copy does record it
    html, md, data = load(write_report(export, tmp_path / "report"))
    text = json.dumps(data)
    for output in (html, md, text):
        leaked = [e for e in entries if e in output]
        assert leaked == []
    for key in ("HOME=", "PATH=", "CONTAINER_NAME=", "NV_LIBCUBLAS_VERSION="):
        assert key not in html and key not in md and key not in text


# -- options ---------------------------------------------------------------------------------
def test_top_n_cuts_tables_and_sums_the_rest(tmp_path: Path) -> None:
    export = nsys_fixture("nsys2025_train_print")
    paths = write_report(export, tmp_path, top=3)
    html, md, data = load(paths)
    with open_trace(export) as trace:
        kernels = summaries.kernel_summary(trace)
    assert len(kernels) > 4
    table = data["sections"]["kernels"]["tables"]["kernels"]
    assert table["top"] == 3 and summary_part(table["rows"]) == kernels
    other = table["other"]
    assert other["name"] == f"(other {len(kernels) - 3})"
    assert other["total_ns"] == sum(k["total_ns"] for k in kernels[3:])
    assert other["instances"] == sum(k["instances"] for k in kernels[3:])
    html_rows = parse_html(html).tables["table-kernels"]
    assert [r[-1] for r in html_rows] == [k["name"] for k in kernels[:3]] + [other["name"]]
    assert html_rows[-1][1] == f"{other['total_ns']:,}"
    assert len(md_tables(md)["CUDA kernels"]) == 4
    assert f"top 3 of {len(kernels)} rows" in md
    # every table in the HTML has at most top + 1 rows (the idle gaps are at most 5 anyway; the
    # steps are in time order, not ranked, and cut at steps_section.MAX_TABLE_STEPS)
    assert all(len(rows) <= 4 for key, rows in parse_html(html).tables.items()
               if key not in ("table-idle_gaps", "table-steady_idle_gaps", "table-steps"))


def test_partial_run_has_a_banner(tmp_path: Path) -> None:
    run_info = {"command": ["train.py", "--steps", "3"], "exit_code": 3, "partial": True,
                "partial_reason": "the program exited with status 3", "started": "2026-01-01T00:00:00+00:00",
                "tools": {"nsys": {"path": "/opt/nsys", "source": "PATH", "version": "2025.3.1"}}}
    paths = write_report(nsys_fixture("nsys2025_sync"), tmp_path, partial=True, run_info=run_info)
    html, md, data = load(paths)
    assert data["partial"] is True and data["partial_reason"] == "the program exited with status 3"
    assert data["run_info"] == run_info
    assert 'class="banner partial"' in html and "the program exited with status 3" in html
    assert "> **Partial report:** the profiled program did not finish (the program exited with status 3)" in md
    assert data["title"] == "profkit report: train.py --steps 3"
    facts = dict(data["sections"]["capture"]["facts"])
    assert facts["Program exit status"] == "3" and facts["nsys used"] == "2025.3.1"
    full = write_report(nsys_fixture("nsys2025_sync"), tmp_path / "ok")
    assert "banner partial" not in full.html.read_text() and "Partial report" not in full.md.read_text()


def test_ncu_section(tmp_path: Path) -> None:
    csv_path = ncu_fixture("gelu_live_details.csv")
    launches = read_ncu_csv(csv_path)
    paths = write_report(nsys_fixture("nsys2025_gelu"), tmp_path, ncu_csv=csv_path, top=50)
    html, md, data = load(paths)
    table = data["sections"]["ncu"]["tables"]["ncu"]
    names = {launch.kernel_name for launch in launches}
    assert {row["name"] for row in table["rows"]} == names
    assert sum(row["instances"] for row in table["rows"]) == len(launches)
    for row in table["rows"]:
        mine = [x for x in launches if x.kernel_name == row["name"]]
        assert row["duration_ns"] == pytest.approx(sum(x.duration_ns for x in mine) / len(mine))
        assert row["dram_throughput_pct"] == pytest.approx(sum(x.dram_throughput_pct for x in mine) / len(mine))
        assert row["achieved_occupancy_pct"] == pytest.approx(
            sum(x.achieved_occupancy_pct for x in mine) / len(mine))
        assert row["theoretical_occupancy_pct"] == pytest.approx(mine[0].theoretical_occupancy_pct)
        assert row["registers_per_thread"] == mine[0].registers_per_thread
        assert row["block_limit_registers"] == mine[0].block_limit_registers
    assert "## Nsight Compute (ncu)" in md and 'id="table-ncu"' in html
    # matched kernels get ncu's achieved occupancy in the occupancy table
    occupancy = data["sections"]["occupancy"]["tables"]["occupancy"]["rows"]
    assert any(row.get("ncu_achieved_occupancy_pct") is not None for row in occupancy)
    # the trace share of a profiled kernel is taken from the trace's kernel summary
    assert any(row["trace_time_pct"] for row in table["rows"])


def test_ncu_csv_that_is_not_ncu_output_is_a_note(tmp_path: Path) -> None:
    bad = tmp_path / "not-ncu.csv"
    bad.write_text("a,b\n1,2\n")
    paths = write_report(nsys_fixture("nsys2025_gelu"), tmp_path / "out", ncu_csv=bad)
    data = json.loads(paths.json.read_text())
    assert data["sections"]["ncu"]["notes"] and "tables" in data["sections"]["ncu"]
    assert data["sections"]["ncu"]["tables"] == {}


def test_default_folder_is_next_to_the_export(tmp_path: Path) -> None:
    export = tmp_path / "run.sqlite"
    shutil.copyfile(nsys_fixture("nsys2023_vector_add"), export)
    paths = write_report(export)
    assert paths.html == tmp_path / "report.html" and paths.md.is_file() and paths.json.is_file()


@pytest.mark.skipif(importlib.util.find_spec("profkit.analysis.sync.stalls") is None,
                    reason="profkit.analysis.sync.stalls is not there yet")
def test_stalls_section_and_findings(reports: dict[str, ReportPaths]) -> None:
    from profkit.analysis.sync.stalls import analyze_stalls

    _, md, data = load(reports["nsys2025_sync"])
    with open_trace(nsys_fixture("nsys2025_sync")) as trace:
        stalls = analyze_stalls(trace)
    section = data["sections"]["stalls"]
    rows = section["tables"]["stall_sites"]["rows"]
    # the same sites, in the order the table's title ("by GPU idle time caused") says
    assert sorted((r["source"] or "", r["count"], r["gpu_idle_ns"]) for r in rows) == sorted(
        (s["source"] or "", s["count"], s["gpu_idle_ns"]) for s in stalls.sites)
    assert [r["gpu_idle_ns"] for r in rows] == sorted((r["gpu_idle_ns"] for r in rows), reverse=True)
    assert section["data"]["events_count"] == len(stalls.events) and "events" not in section["data"]
    assert section["data"]["steps_count"] == len(stalls.steps) and section["data"]["step_stats"] == stalls.step_stats
    # the stall findings follow the steady-state ones, which lead the report's findings
    # (the headline, then the steady state's longest idle stretch and start-up where there are such)
    lead = 1 + sum(f.startswith(("In the steady state the longest", "Start-up")) for f in data["findings"][1:3])
    assert " steps, " in data["findings"][0]
    assert stalls.findings and data["findings"][lead: lead + len(stalls.findings)] == stalls.findings
    assert "## Synchronization stalls" in md


# -- missing data and bad input ------------------------------------------------------------------
def altered_copy(tmp_path: Path, name: str, *statements: str) -> Path:
    path = tmp_path / f"{name}-altered.sqlite"
    shutil.copyfile(nsys_fixture(name), path)
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    return path


def test_export_without_nvtx_says_how_to_record_it(tmp_path: Path) -> None:
    export = altered_copy(tmp_path, "nsys2025_train_print", "DROP TABLE NVTX_EVENTS")
    data = json.loads(write_report(export, tmp_path / "out").json.read_text())
    notes = data["sections"]["nvtx"]["notes"]
    assert len(notes) == 1 and "no NVTX data" in notes[0] and "-t nvtx" in notes[0]
    assert data["sections"]["nvtx_kernels"]["notes"]
    assert data["sections"]["kernels"]["tables"]["kernels"]["rows"]  # the rest is all there


def test_export_without_cuda_trace_is_an_error_unless_partial(tmp_path: Path) -> None:
    export = altered_copy(tmp_path, "nsys2025_train_print", "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
                          "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    with pytest.raises(ProfkitError) as err:
        write_report(export, tmp_path / "out")
    assert "no CUDA trace data" in err.value.one_line() and "-t cuda" in err.value.one_line()
    assert not (tmp_path / "out").exists()
    data = json.loads(write_report(export, tmp_path / "partial", partial=True).json.read_text())
    assert data["partial"] is True
    assert "-t cuda" in data["sections"]["kernels"]["notes"][0]


def test_many_devices_and_streams_hand_built(tmp_path: Path) -> None:
    """A hand-built export (scale/edge test): 4 GPUs, 30 streams each, kernels only, no NVTX,
    no launch configuration columns.  The report still comes out, every lane in report.json."""
    from tests.test_report_timeline import build_synthetic

    export = tmp_path / "many-streams.sqlite"
    build_synthetic(export, 3000, seed=5)
    with sqlite3.connect(export) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = (rowid / 30) % 4, streamId = rowid % 30")
    paths = write_report(export, tmp_path / "out")
    html, md, data = load(paths)
    assert "## Timeline" in md
    lanes = data["sections"]["timeline"]["figures"]["timeline"]["data"]["streams"]
    assert len({(x["device_id"], x["stream_id"]) for x in lanes if x["kind"] == "kernel"}) == 4 * 30
    assert len(data["sections"]["utilization"]["figures"]["utilization"]["data"]["views"][0]["devices"]) == 4
    assert data["sections"]["occupancy"]["notes"] and data["sections"]["nvtx"]["notes"]
    assert len(parse_html(html).images) == 2


def _digest(path: Path) -> tuple[str, int, set[str]]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, set(os.listdir(path.parent))


@pytest.mark.parametrize("make, expected", [
    (lambda p: p.write_text("kernel,time\n"), "is not an SQLite database"),
    (lambda p: p.write_bytes(b""), "is an empty file"),
    (lambda p: sqlite3.connect(p).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);").close(),
     "not an Nsight Systems export"),
    (lambda p: p.write_bytes(nsys_fixture("nsys2025_sync").read_bytes()[:300_000]), "truncated"),
])
def test_cli_bad_input_is_one_line(tmp_path: Path, make, expected: str) -> None:
    path = tmp_path / "in" / "bad.sqlite"
    path.parent.mkdir()
    make(path)
    before = _digest(path)
    result = CliRunner().invoke(cli, ["report", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error: ") and expected in lines[0]
    assert result.stdout == "" and "Traceback" not in result.output
    assert _digest(path) == before  # unchanged, nothing created next to it
    assert not (tmp_path / "out").exists()


def test_cli_unreadable_and_missing_paths(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(tmp_path / "nope.sqlite")])
    assert result.exit_code == 2 and result.stderr.startswith("profkit: error: ") and "no such file" in result.stderr
    if importlib.util.find_spec("profkit.readers.kineto") is not None:
        # a folder is read as a folder of Kineto traces; this one holds none
        result = CliRunner().invoke(cli, ["report", str(tmp_path)])
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
        assert "Traceback" not in result.output
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.sqlite"
        shutil.copyfile(nsys_fixture("nsys2025_sync"), locked)
        locked.chmod(0)
        result = CliRunner().invoke(cli, ["report", str(locked)])
        assert result.exit_code == 2 and "permission denied" in result.stderr


# -- the command --------------------------------------------------------------------------------
def test_cli_writes_the_report_and_prints_the_html_path(tmp_path: Path) -> None:
    export = nsys_fixture("nsys2023_vector_add")
    before = _digest(export)
    result = CliRunner().invoke(cli, ["report", str(export), "-o", str(tmp_path / "r"), "--top", "5"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str((tmp_path / "r" / "report.html").resolve())
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["top"] == 5
    assert _digest(export)[:2] == before[:2]


def test_cli_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["report", "--example"])
    assert result.exit_code == 0, result.output
    html = Path(result.stdout.strip())
    assert html.is_file() and html.is_relative_to(tmp_path / "cache")
    data = json.loads((html.parent / "report.json").read_text())
    # the bundled export is the real train_print fixture
    with open_trace(nsys_fixture("nsys2025_train_print")) as trace:
        assert summary_part(data["sections"]["kernels"]["tables"]["kernels"]["rows"]) == \
            summaries.kernel_summary(trace)
    again = CliRunner().invoke(cli, ["report", "--example", "-o", str(tmp_path / "mine")])
    assert again.exit_code == 0 and Path(again.stdout.strip()) == (tmp_path / "mine" / "report.html").resolve()


def test_cli_needs_exactly_one_source() -> None:
    for args in (["report"], ["report", "x.sqlite", "--example"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2 and "give either a TRACE or --example" in result.output

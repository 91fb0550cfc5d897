"""`profkit scrub`: the copy holds no environment, no planted secret, and the same summaries.

Oracles: the `nsys stats` CSVs of each real fixture (the scrubbed copy must
still equal them), the byte pattern of an environment block from the
project's before-stop hook, and the bytes of a fake secret planted into a
copy of a real fixture in every place nsys records one (tests/planted.py).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.kernels import summaries
from profkit.cli import cli
from profkit.readers.nsys import open_export
from profkit.readers.nsys.model_source import trace_of_export
from profkit.report import write_report
from profkit.scrub import scrub
from tests import planted
from tests.conftest import DATA, default_run, nsys_fixture, nsys_fixture_names
from tests.test_summaries import assert_rows_equal, read_oracle

# The before-stop hook's test for an environment block (an independent oracle).
HOOK_ENV = re.compile(rb"\x00(HOME|PATH|USER|PYTHONPATH|LD_LIBRARY_PATH)=[^\x00]*\x00")
FIXTURES = nsys_fixture_names()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _name_key(row: dict) -> object:
    return row["name"] if "name" in row else row["Name"]


@pytest.mark.parametrize("name", default_run(FIXTURES))
def test_scrubbed_copy_still_equals_nsys_stats(name: str, tmp_path: Path) -> None:
    source = nsys_fixture(name)
    before = sha256(source)
    out = tmp_path / "shared.sqlite"
    scrub(source, out, anonymize=name in ("nsys2025_train_print", "nsys2023_sync_sites"))
    assert sha256(source) == before, "the input changed"
    with open_export(out) as export:
        trace = trace_of_export(export)
        assert_rows_equal(summaries.kernel_summary(trace), read_oracle(name, "cuda_gpu_kern_sum"), key=_name_key)
        assert_rows_equal(summaries.api_summary(trace), read_oracle(name, "cuda_api_sum"), key=_name_key)
        nvtx = read_oracle(name, "nvtx_sum")
        if nvtx:
            assert_rows_equal(summaries.nvtx_summary(trace), nvtx,
                              key=lambda r: (r["name"], r["style"]) if "name" in r else (r["Range"], r["Style"]))
        for table, where in (("TARGET_INFO_SYSTEM_ENV", "name = 'DeviceEnvironment'"),
                             ("META_DATA_CAPTURE", "name LIKE '%ENVIRONMENT_VARIABLE%'"),
                             ("StringIds", "instr(CAST(value AS BLOB), x'00') > 0")):
            if export.has_table(table):
                assert export.scalar(f"SELECT count(*) FROM {table} WHERE {where}") == 0, table
    assert not HOOK_ENV.search(out.read_bytes())
    assert [p.name for p in tmp_path.iterdir()] == ["shared.sqlite"], "temporary files left behind"


@pytest.mark.parametrize(("fixture", "anonymize"), [
    ("nsys2023_sync_sites", False), ("nsys2025_train_print", True),
    pytest.param("nsys2023_sync_sites", True, marks=pytest.mark.slow),
    pytest.param("nsys2025_train_print", False, marks=pytest.mark.slow)])
def test_planted_secret_appears_nowhere_after_scrub(fixture: str, anonymize: bool, tmp_path: Path) -> None:
    source = planted.plant_secret(fixture, tmp_path)
    secret = planted.SECRET.encode()
    assert source.read_bytes().count(secret) >= 5, "the secret was planted in five places"
    out = tmp_path / "shared" / "trace.sqlite"
    out.parent.mkdir()
    removed = scrub(source, out, anonymize=anonymize)
    assert removed["TARGET_INFO_SYSTEM_ENV environment rows"] == 1
    assert removed["META_DATA_CAPTURE environment rows"] >= 5
    assert removed["environment blocks"] >= 1
    assert removed["secret values"] == 2  # the command-line argument and the NVTX text
    paths = write_report(out, out.parent)
    for path in (out, paths.html, paths.md, paths.json):
        data = Path(path).read_bytes()
        assert secret not in data, path
        assert b"5ecret" not in data, path
        assert not HOOK_ENV.search(data), path
        if anonymize:
            for identity in (planted.USER.encode(), planted.HOST.encode(), b"gpu-node-17"):
                assert identity not in data, (path, identity)
    report = json.loads(Path(paths.json).read_text())
    assert "[redacted]" in json.dumps(report), "the NVTX range and the argument are still there, redacted"


def test_anonymize_is_consistent(tmp_path: Path) -> None:
    source = planted.plant_secret("nsys2025_train_print", tmp_path)
    out = tmp_path / "anon.sqlite"
    scrub(source, out, anonymize=True)
    with open_export(out) as export:
        capture = dict(export.rows("SELECT name, value FROM META_DATA_CAPTURE WHERE name IN "
                                   "('PROCESS_0:USER_NAME', 'PROCESS_0:WORKING_DIR', 'DEVICE_DISPLAY_NAME')"))
        host = export.scalar("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
    user = capture["PROCESS_0:USER_NAME"]
    assert re.fullmatch(r"user\d+", user)
    assert capture["PROCESS_0:WORKING_DIR"] == f"/home/{user}/project"
    assert re.fullmatch(r"host\d+", host) and capture["DEVICE_DISPLAY_NAME"] == host
    # the same input gives the same bytes
    again = tmp_path / "again.sqlite"
    scrub(source, again, anonymize=True)
    assert sha256(again) == sha256(out)


def test_cli_scrub(tmp_path: Path) -> None:
    source = planted.plant_secret("nsys2025_sync", tmp_path)
    out = tmp_path / "out.sqlite"
    result = CliRunner().invoke(cli, ["scrub", str(source), "-o", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["what"]: r["count"] for r in json.loads(result.output)}
    assert rows["META_DATA_CAPTURE environment rows"] >= 5
    assert planted.SECRET.encode() not in out.read_bytes()


@pytest.mark.parametrize("case", ["same-file", "not-a-trace", "missing", "output-folder-missing"])
def test_cli_scrub_bad_input_is_one_line(case: str, tmp_path: Path) -> None:
    source = tmp_path / "in.sqlite"
    source.write_bytes(nsys_fixture("nsys2025_sync").read_bytes())
    out = tmp_path / "out.sqlite"
    if case == "same-file":
        out = source
    elif case == "not-a-trace":
        source = tmp_path / "notes.txt"
        source.write_text("hello")
    elif case == "missing":
        source = tmp_path / "nope.sqlite"
    else:
        out = tmp_path / "no" / "such" / "out.sqlite"
    before = sha256(source) if source.exists() else None
    result = CliRunner().invoke(cli, ["scrub", str(source), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    if before:
        assert sha256(source) == before


def test_interrupted_scrub_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profkit.scrub import nsys as nsys_scrub

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(nsys_scrub, "_check_clean", interrupted)
    with pytest.raises(KeyboardInterrupt):
        scrub(nsys_fixture("nsys2025_sync"), tmp_path / "out.sqlite")
    assert list(tmp_path.iterdir()) == []


KINETO_TRACES = sorted((DATA / "kineto").rglob("*.json.gz"), key=lambda p: p.stat().st_size) if (DATA / "kineto").is_dir() else []


@pytest.mark.skipif(not KINETO_TRACES, reason="no Kineto fixtures yet")
def test_kineto_planted_secret_removed(tmp_path: Path) -> None:
    real = json.loads(gzip.decompress(KINETO_TRACES[0].read_bytes()))
    # plant: an environment object, an environ block in an event name, the secret in an argument
    real.setdefault("metadata", {})["env"] = {planted.SECRET_VARIABLE: planted.SECRET, "HOME": planted.HOME}
    events = real["traceEvents"]
    events.append({"name": "x\x00HOME=/root\x00PATH=/bin\x00", "ph": "i", "ts": 0, "pid": 0, "tid": 0})
    events.append({"name": planted.NVTX_TEXT, "ph": "X", "ts": 0, "dur": 1, "pid": 0, "tid": 0,
                   "args": {"stack": f"{planted.HOME}/train.py(3): main"}})
    source = tmp_path / "planted_kineto.json.gz"
    source.write_bytes(gzip.compress(json.dumps(real).encode()))
    out = tmp_path / "shared.json.gz"
    removed = scrub(source, out, anonymize=True)
    assert removed["environment members"] == 1 and removed["environment blocks"] == 1
    data = gzip.decompress(out.read_bytes())
    assert planted.SECRET.encode() not in data and planted.USER.encode() not in data
    assert b"HOME=" not in data
    shared = json.loads(data)
    assert len(shared["traceEvents"]) == len(events)


def test_secret_rules_by_variable_name() -> None:
    from profkit.scrub.text import secret_values

    env = {"HF_TOKEN": "hf_notreallyatoken", "AWS_SECRET_ACCESS_KEY": "abcdefgh", "DB_PASSWORD": "123456",
           "NPM_AUTHTOKEN": "npm-abcdef", "TOKEN_FILE": "/run/secrets/token",
           "NSYS_PROFILING_SESSION_ID": "101372", "TIKTOKEN_CACHE_DIR": "/opt/tiktoken_cache",
           "OLDPWD": "/work/main", "GH": "ghp_" + "a1" * 18}
    assert secret_values(env) == {"hf_notreallyatoken", "abcdefgh", "123456", "npm-abcdef", "ghp_" + "a1" * 18}


@pytest.mark.skipif(not KINETO_TRACES, reason="no Kineto fixtures yet")
@pytest.mark.parametrize("path", KINETO_TRACES[:3], ids=lambda p: p.name)
def test_kineto_scrubbed_copy_has_the_same_summaries(path: Path, tmp_path: Path) -> None:
    from profkit.readers import open_trace

    out = tmp_path / path.name
    before = sha256(path)
    scrub(path, out, anonymize=True)
    assert sha256(path) == before
    with open_trace(path) as original, open_trace(out) as shared:
        assert summaries.kernel_summary(shared) == summaries.kernel_summary(original)
        assert summaries.api_summary(shared) == summaries.api_summary(original)

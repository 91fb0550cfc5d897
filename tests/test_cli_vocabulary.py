"""One vocabulary across commands: --top for every row limit (old spellings hidden and
still working), one JSON shape per command, NVTX sync-site ranges read as words, and
diff's terminal summary naming kernels by the tables' short names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.model.sync_sites import encode_site, readable_range
from tests.conftest import DATA, nsys_fixture

WIDE = {"COLUMNS": "200"}


def run(*args: str, env: dict | None = None):
    result = CliRunner(env=env or WIDE).invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.mark.parametrize("command, path", [
    ("steps", nsys_fixture("nsys2025_train_print")),
    ("host", DATA / "host" / "kineto" / "llama_train_kineto.json.gz"),
])
def test_limit_is_a_hidden_alias_of_top(command: str, path: Path) -> None:
    top = run(command, str(path), "--top", "3")
    old = run(command, str(path), "--limit", "3")
    assert old.stdout == top.stdout
    assert "--limit is deprecated, use --top" in old.stderr
    shown = top.stdout.count("\n│")
    assert shown == 3 or command == "host"  # host's table rows may wrap
    help_text = run(command, "--help").stdout
    assert "--top" in help_text and "--limit" not in help_text


def test_every_table_command_has_top_or_none_and_wide() -> None:
    for command in ("kernels", "api", "nvtx", "info", "steps", "breakdown", "stalls", "ranks", "occupancy",
                    "roofline", "host", "graphs", "diff", "ptx", "scrub"):
        help_text = run(command, "--help").stdout
        assert "--wide" in help_text, command
        assert "--limit" not in help_text, command
    assert "--wide" in run("history", "show", "--help").stdout


def test_sync_site_ranges_read_as_words() -> None:
    text = encode_site("item", "/work/src/train.py", 42, "loss = x.sum().item()")
    assert readable_range(text) == "sync: .item() at train.py:42: loss = x.sum().item()"
    assert readable_range("profkit.sync:" + text) == readable_range(text)  # nsys's "domain:text"
    assert readable_range("samples:step") == "samples:step"


def test_nvtx_table_decodes_json_and_csv_keep_the_recorded_names() -> None:
    path = str(nsys_fixture("nsys2023_sync_sites"))
    table = run("nvtx", path).stdout
    assert "profkit.sync|" not in table and "sync: .item() at sync_elementwise.py:25" in table
    assert "sync: .item() at sync_elementwise.py:25" in run("nvtx", path, "--format", "md").stdout
    rows = json.loads(run("nvtx", path, "--format", "json").stdout)
    assert any(r["name"].startswith("profkit.sync:profkit.sync|item|") for r in rows)
    assert "profkit.sync|item|" in run("nvtx", path, "--format", "csv").stdout


def test_stalls_json_has_one_shape_with_and_without_compare() -> None:
    a, b = str(nsys_fixture("nsys2025_train_print")), str(nsys_fixture("nsys2025_train_noprint"))
    alone = json.loads(run("stalls", a, "--format", "json").stdout)
    compared = json.loads(run("stalls", a, "--compare", b, "--format", "json").stdout)
    assert {"rows", "findings", "step_stats"} <= set(alone) and set(compared) == set(alone) | {"comparison"}
    assert compared["rows"] == alone["rows"]
    assert compared["comparison"]["other_rows"] == json.loads(run("stalls", b, "--format", "json").stdout)["rows"]
    assert {"a", "b", "finding", "sites_only_in_a", "sites_only_in_b"} <= set(compared["comparison"])


def test_diff_summary_names_the_causes_with_short_names() -> None:
    base, new = DATA / "kineto" / "review" / "mlp_gpu_print.json.gz", DATA / "kineto" / "mlp_print.json.gz"
    data = json.loads(run("diff", str(base), str(new), "--format", "json").stdout)
    lines = run("diff", str(base), str(new)).stdout.splitlines()
    assert lines[0].startswith("Step time: ")
    changed = [k for k in data["kernels"] if k["status"] != "same"]
    assert any(line.startswith("Syncs in the trace: ") and "sync sites 1 changed" in line for line in lines)
    assert any(line.startswith("GPU kernel time per step: ") and f"of {len(data['kernels'])} kernels" in line
               for line in lines)
    assert "  - kernel Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1> gone: 1.31 ms → 0 ns per step" in lines
    assert not any("void cutlass::" in line for line in lines)  # no full template name by default
    assert sum(line.startswith("│ ") for line in lines) == min(10, len(changed))  # --top 10 by default
    wide = run("diff", str(base), str(new), "--wide", "--top", "0").stdout
    assert "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>" in wide.replace("│\n│", "")


def test_diff_of_sync_sites_added_and_removed() -> None:
    lines = run("diff", str(nsys_fixture("nsys2025_train_noprint")), str(nsys_fixture("nsys2025_train_print"))
                ).stdout.splitlines()
    assert any(line.startswith("Syncs in the trace: ") and "sync sites 1 added, 1 removed" in line for line in lines)
    assert any(line.startswith("  - sync site added: train_mlp.py:59 print(") for line in lines)

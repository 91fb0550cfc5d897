"""`diff` tells programs apart by what the traces record about them, not by their kernels first.

Real captures (tests/data/kineto/README.md, tests/data/kineto/review/README.md):
- gpt_eager vs gpt_compiled: one script (`sample_kernels/gpt.py`, `--compile` or not), both annotate
  `train_step`; inductor replaces most kernels (they share about a third of their names): compared,
  with a note;
- nsys2025_mlp_nvtx (`train_mlp.py`: NVTX "warmup" and "step") vs nsys2025_mlp_sleep
  (`train_slow_loader.py`: NVTX "step", the same MLP, so most kernels shared): refused.
The oracles read the range names and kernel names straight from the raw JSON / SQL."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import DATA, nsys_fixture

KINETO = DATA / "kineto"


def kineto_ranges_and_kernels(path: Path) -> tuple[set[str], set[str]]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    ranges = {e["name"] for e in events
              if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#")}
    return ranges, {e["name"] for e in events if e.get("cat") == "kernel"}


def nsys_ranges_and_kernels(path: Path) -> tuple[set[str], set[str]]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        ranges = {r[0] for r in db.execute("SELECT DISTINCT coalesce(n.text, s.value) FROM NVTX_EVENTS n "
                                           "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59")}
        kernels = {r[0] for r in db.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                            "JOIN StringIds s ON s.id = k.demangledName")}
    return ranges, kernels


def test_eager_against_compiled_is_compared_with_a_note() -> None:
    eager, compiled = KINETO / "gpt_eager.json.gz", KINETO / "gpt_compiled.json.gz"
    (ra, ka), (rb, kb) = kineto_ranges_and_kernels(eager), kineto_ranges_and_kernels(compiled)
    # the oracle: the program's own annotation on both sides (README: --annotate-steps); the rest are
    # torch's own ranges (the optimizer's, inductor's compiled graphs)
    assert "train_step" in ra & rb
    assert all(n.startswith(("Optimizer.", "## Call CompiledFxGraph")) for n in (ra | rb) - {"train_step"})
    assert len(ka & kb) / len(ka | kb) < 0.5  # and most kernels replaced
    out = CliRunner().invoke(cli, ["diff", str(eager), str(compiled), "--format", "json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["same_program_by"] == "ranges"
    (note,) = [n for n in result["notes"] if n.startswith("one program")]
    assert "'train_step'" in note and "different kernels" in note
    shared = int(re.search(r"share (\d+)% of their kernel names", note).group(1))
    assert shared == int(result["kernel_names_shared_pct"]) and shared < 50
    assert {"new", "gone"} <= {k["status"] for k in result["kernels"]}
    text = CliRunner().invoke(cli, ["diff", str(eager), str(compiled)], env={"COLUMNS": "300"})
    assert text.exit_code == 0 and "Note: one program" in text.output


def test_another_script_sharing_the_mlp_kernels_is_refused() -> None:
    mlp, loader = nsys_fixture("nsys2025_mlp_nvtx"), nsys_fixture("nsys2025_mlp_sleep")
    (ra, ka), (rb, kb) = nsys_ranges_and_kernels(mlp), nsys_ranges_and_kernels(loader)
    assert ra == {"warmup", "step"} and rb == {"step"}
    assert len(ka & kb) / len(ka | kb) >= 0.5  # the kernels alone would call them one program
    out = CliRunner().invoke(cli, ["diff", str(mlp), str(loader)])
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert out.exit_code == 2 and len(lines) == 1 and "Traceback" not in out.output
    assert "different programs" in lines[0] and "['step', 'warmup'] and ['step']" in lines[0]
    assert "--force" in lines[0]
    forced = CliRunner().invoke(cli, ["diff", str(mlp), str(loader), "--force", "--format", "json"])
    assert forced.exit_code == 0, forced.output


def test_the_script_in_python_stacks_identifies_the_program() -> None:
    from profkit.analysis.compare.same_program import program_identity
    from profkit.readers import open_trace

    with open_trace(KINETO / "mlp_print.json.gz") as trace:
        mlp = program_identity(trace)
    with open_trace(DATA / "host" / "kineto" / "llama_train_kineto.json.gz") as trace:
        llama = program_identity(trace)
    assert (mlp.script, llama.script) == ("train_mlp.py", "hf_llama.py")
    out = CliRunner().invoke(cli, ["diff", str(KINETO / "mlp_print.json.gz"),
                                   str(DATA / "host" / "kineto" / "llama_train_kineto.json.gz")])
    assert out.exit_code == 2 and "the scripts train_mlp.py and hf_llama.py" in out.output

"""Built-ins under torch.profiler: the C function that holds the time is named with its Python caller.

Real capture: tests/data/host/kineto/llama_train_kineto.json.gz, whose program sleeps 5 ms per step in
``planted_host_work`` (hf_llama.py line 43, as its .stdout says).  The oracle is the raw JSON: every
``<built-in function sleep>`` event's Python parent is that function's event."""

from __future__ import annotations

import gzip
import json
import re
import statistics

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import DATA

TRAIN = DATA / "host" / "kineto" / "llama_train_kineto.json.gz"


def planted() -> tuple[str, int]:
    text = TRAIN.with_name("llama_train_kineto.stdout").read_text()
    m = re.search(r"planted: (\S+) (\d+) planted_host_work", text)
    assert m, text
    return m.group(1).rsplit("/", 1)[-1], int(m.group(2))


def sleeps_from_the_raw_json() -> list[int]:
    """Durations (ns) of the sleep built-ins, each checked to be called from planted_host_work."""
    with gzip.open(TRAIN) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "python_function"]
    by_id = {e["args"]["Python id"]: e for e in events}
    sleeps = [e for e in events if e["name"] == "<built-in function sleep>"]
    assert sleeps
    file, line = planted()
    for e in sleeps:
        assert by_id[e["args"]["Python parent id"]]["name"] == f"{file}({line}): planted_host_work"
    return [round(e["dur"] * 1000) for e in sleeps]


def test_host_names_the_sleep_with_its_caller() -> None:
    file, line = planted()
    out = CliRunner().invoke(cli, ["host", str(TRAIN), "--format", "json", "--top", "0"])
    assert out.exit_code == 0, out.output
    rows = [r for r in json.loads(out.output)["functions"] if r["function"].startswith("sleep (built-in)")]
    assert len(rows) == 1
    row = rows[0]
    assert row["function"] == "sleep (built-in) called from planted_host_work"
    assert row["file"].endswith(file) and row["line"] == line
    # once per step: a step's self time in it is one sleep's
    assert row["self_ns_per_step"] == pytest.approx(statistics.median(sleeps_from_the_raw_json()), rel=0.02)


def test_the_verdict_names_the_call_and_the_caller() -> None:
    file, line = planted()
    out = CliRunner().invoke(cli, ["host", str(TRAIN)], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    first = out.output.split("\n5 steps", 1)[0].replace("\n", " ")
    assert f"sleep (built-in) called from planted_host_work ({file}:{line})" in first


@pytest.mark.parametrize("event,name", [
    ("<built-in function sleep>", "sleep"),
    ("<built-in method item of Tensor object at 0x7f2a1c3e4b80>", "Tensor.item"),
    ("<built-in function linear>", "linear"),
    ("<built-in method cat of type object at 0x7f2a1c3e4b80>", "cat"),
    ("<built-in method run_backward of torch._C._EngineBase object at 0x7f2a>", "_EngineBase.run_backward"),
    ("hf_llama.py(43): planted_host_work", None),
    ("nn.Module: LlamaModel_0", None),
])
def test_builtin_event_names(event: str, name: str | None) -> None:
    from profkit.readers.kineto.stacks import builtin_name

    assert builtin_name(event) == name


def test_tensor_item_is_named_with_the_loop_that_calls_it() -> None:
    """mlp_gpu_print (tests/data/kineto/review) prints ``loss.item()`` every step; mlp_gpu_noprint, the
    same loop without the print, has no such row."""
    review = DATA / "kineto" / "review"
    rows = {}
    for name in ("mlp_gpu_print", "mlp_gpu_noprint"):
        out = CliRunner().invoke(cli, ["host", str(review / f"{name}.json.gz"), "--format", "json", "--top", "0"])
        assert out.exit_code == 0, out.output
        rows[name] = [r for r in json.loads(out.output)["functions"]
                      if r["function"] == "Tensor.item (built-in) called from main" and r["file"] == "train_mlp.py"]
    assert len(rows["mlp_gpu_print"]) == 1 and rows["mlp_gpu_noprint"] == []
    assert rows["mlp_gpu_print"][0]["self_ns_per_step"] > 0.1e6  # it waits for the GPU: a GPU-bound step

"""The GPU zoo's programs (tests/zoo/programs) before any capture: scripts/make_zoo.sh runs every
one of them, and each runs on the CPU (--dry) printing its planted lines and its own step times.

The dry runs import torch and run each program (torch.compile, Triton's interpreter): slow.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "zoo" / "programs"
MAKE_ZOO = ROOT / "scripts" / "make_zoo.sh"
DRY_STEPS = 5  # zoo_common caps a dry run at this many steps
# The lines each program plants (a CPU run: stream_wait's wait is CUDA-only).
PLANTS = {"amp_bf16": {"sync"}, "compile_modes": set(), "compile_train": set(), "dataloader_workers": set(),
          "ddp_grad_accum": set(), "ddp_slow_kernel": {"slow"}, "final_sync": {"final_sync"},
          "fsdp2_slow_rank": {"slow"}, "graphed_train": {"sync"}, "hf_generate": {"slow"},
          "item_sync_sleep": {"sync", "slow"}, "python_loader": {"slow"}, "stream_wait": set(),
          "triton_suite": set()}
# Programs run with the planted rank slowed (a dry run is a world of one: rank 0).
DRY_ARGS = {"ddp_slow_kernel": ["--slow-rank", "0"], "fsdp2_slow_rank": ["--slow-rank", "0"]}


def programs() -> list[str]:
    return sorted(p.stem for p in PROGRAMS.glob("*.py") if p.stem != "zoo_common")


def test_every_program_is_known_and_captured() -> None:
    assert set(programs()) == set(PLANTS)
    assert len(programs()) >= 12
    entries = re.findall(r'^\s*"([\w-]+)\|(\w+)\.py[^|]*\|(\d)(?:\|\d+)?"', MAKE_ZOO.read_text(), re.MULTILINE)
    assert {program for _, program, _ in entries} == set(programs())
    assert len({name for name, _, _ in entries}) == len(entries)  # one folder per entry


def test_make_zoo_parses() -> None:
    subprocess.run(["bash", "-n", str(MAKE_ZOO)], check=True)


def zoo_lines(stdout: str) -> dict[str, dict]:
    return {match.group(1): json.loads(match.group(2))
            for match in re.finditer(r"^ZOO_(PLANT|STEPS|TRUTH) (.*)$", stdout, re.MULTILINE)}


@pytest.mark.slow
@pytest.mark.parametrize("program", programs())
def test_program_runs_on_cpu(program: str, tmp_path: Path) -> None:
    if program == "hf_generate" and importlib.util.find_spec("transformers") is None:
        pytest.skip("hf_generate needs transformers, not installed here")
    result = subprocess.run([sys.executable, str(PROGRAMS / f"{program}.py"), "--dry", *DRY_ARGS.get(program, [])],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = zoo_lines(result.stdout)
    assert set(lines["PLANT"]) == PLANTS[program]
    for kind, where in lines["PLANT"].items():
        file, line = where.split(":")
        assert file == f"{program}.py" and int(line) > 0, kind
    assert lines["STEPS"]["device"] == "cpu"
    assert len(lines["STEPS"]["step_ms"]) == DRY_STEPS


@pytest.mark.slow
@pytest.mark.parametrize("program", ["final_sync", "hf_generate", "triton_suite"])
def test_program_help_needs_no_gpu(program: str) -> None:
    result = subprocess.run([sys.executable, str(PROGRAMS / f"{program}.py"), "--help"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "--dry" in result.stdout

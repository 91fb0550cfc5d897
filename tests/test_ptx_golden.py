"""Golden instruction counts of the sample kernels (not whole listings).

The goldens hold what a kernel author cares about and a compiler update
should not move without a reason: global loads/stores by width, the
read-only path, shared memory ops, special-function and tensor-core ops.
Register counts and total instruction counts are left out: they shift with
every ptxas release.

Regenerate after reviewing a real change:
    PROFKIT_UPDATE_GOLDEN=1 python -m pytest tests/test_ptx_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from profkit.ptx.cache import Cache
from profkit.ptx.kernel import load_kernels
from profkit.ptx.summary import KernelSummary, summarize
from profkit.ptx.targets import SAMPLES, CompileParams, parse_arch, resolve_target
from profkit.ptx.tools import find_tool

GOLDEN = Path(__file__).parent / "data" / "ptx" / "golden_counts.json"
COUNTED = ("sfu", "shared_load", "shared_store", "mma", "global_atomic", "tma")
CASES = [(s.name, arch) for s in SAMPLES for arch in (("sm_90", "sm_80") if s.kind == "triton" else ("sm_90",))]
HAVE_NVCC = find_tool("nvcc", required=False) is not None


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profkit-ptx-cache"))


def counts(summary: KernelSummary) -> dict:
    return {
        "global_loads": summary.global_loads(),
        "global_stores": summary.global_stores(),
        "global_loads_readonly": summary.mix.readonly_global_loads,
        **{c: summary.mix.counts[c] for c in COUNTED},
    }


def measure(name: str, arch: str) -> dict:
    code = load_kernels(resolve_target(name, CompileParams(arch=parse_arch(arch))), Cache())[0]
    return {"ptx": counts(summarize(code)), "sass": counts(summarize(code, sass=True))}


def _load() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


@pytest.mark.parametrize("name, arch", CASES)
def test_instruction_counts_match_the_goldens(name, arch):
    if name.endswith("_cuda") and not HAVE_NVCC:
        pytest.skip("nvcc not found: CUDA C++ samples need the CUDA toolkit")
    measured = measure(name, arch)
    if os.environ.get("PROFKIT_UPDATE_GOLDEN") == "1":
        golden = _load()
        golden.setdefault(name, {})[arch] = measured
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    expected = _load().get(name, {}).get(arch)
    assert expected is not None, f"no golden for {name} {arch}; run with PROFKIT_UPDATE_GOLDEN=1"
    assert measured == expected


def test_goldens_say_what_the_samples_are_for():
    """The goldens themselves: the good kernels vectorize, the bad ones do not."""
    golden = _load()
    for arch in ("sm_90", "sm_80"):
        for good in ("gelu", "softmax", "vector_add"):
            for language in ("ptx", "sass"):
                loads = golden[good][arch][language]["global_loads"]
                assert loads["32"] == 0 and loads["128"] > 0, (good, arch, language)
        strided = golden["gelu_strided"][arch]["sass"]["global_loads"]
        assert strided["128"] == 0 and strided["32"] > 0
    assert golden["gelu_vec4_cuda"]["sm_90"]["sass"]["global_loads"] == {"128": 1, "64": 0, "32": 0}
    assert golden["gelu_cuda"]["sm_90"]["sass"]["global_loads"] == {"128": 0, "64": 0, "32": 1}
    assert golden["gelu_cuda"]["sm_90"]["sass"]["global_loads_readonly"] == 1
    assert golden["softmax_cuda"]["sm_90"]["sass"]["shared_store"] > 0

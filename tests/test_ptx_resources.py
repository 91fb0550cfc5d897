"""Registers, spills and shared memory from ptxas -v and cuobjdump --dump-resource-usage."""

from __future__ import annotations

import pytest

from profkit.ptx.cache import Cache
from profkit.ptx.kernel import demangle, load_kernels, symbol_matches
from profkit.ptx.resources import parse_ptxas_log, parse_resource_usage
from profkit.ptx.summary import summarize
from profkit.ptx.targets import SAMPLES, resolve_target

# nvcc 13.0 -Xptxas -v -maxrregcount=32 on sample_kernels/csrc/bad.cu (sm_90)
NVCC_LOG = """\
ptxas info    : Overriding maximum register limit 256 for '_Z21register_heavy_kernelPKfPfii' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z21register_heavy_kernelPKfPfii' for 'sm_90'
ptxas info    : Function properties for _Z21register_heavy_kernelPKfPfii
    440 bytes stack frame, 956 bytes spill stores, 956 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 440 bytes cumulative stack size
ptxas info    : Compile time = 84.382 ms
ptxas info    : Compiling entry function '_Z19gelu_strided_kernelPKfPfii' for 'sm_90'
ptxas info    : Function properties for _Z19gelu_strided_kernelPKfPfii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 16 registers, used 0 barriers
ptxas info    : Compile time = 7.910 ms
"""

# Triton 3.9's ptxas copy, as captured from its -v log (softmax, sm_90a)
TRITON_LOG = """\
ptxas-blackwell info    : 0 bytes gmem
ptxas-blackwell info    : Compiling entry function 'softmax_kernel' for 'sm_90a'
ptxas-blackwell info    : Function properties for softmax_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas-blackwell info    : Used 26 registers, used 1 barriers
"""

# An older ptxas (sm_80) with static shared memory and a called device function
OLD_LOG = """\
ptxas info    : Function properties for _Z6helperf
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'
ptxas info    : Function properties for _Z1kPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, 4096 bytes smem, 360 bytes cmem[0]
"""

CUOBJDUMP = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z21register_heavy_kernelPKfPfii:
  REG:32 STACK:440 SHARED:0 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function softmax_kernel:
  REG:26 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:576 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_parse_ptxas_log_from_nvcc():
    info = parse_ptxas_log(NVCC_LOG)
    heavy = info["_Z21register_heavy_kernelPKfPfii"]
    assert (heavy.registers, heavy.stack_frame_bytes, heavy.spill_stores_bytes, heavy.spill_loads_bytes) == (32, 440, 956, 956)
    assert heavy.arch == "sm_90" and heavy.barriers == 0
    strided = info["_Z19gelu_strided_kernelPKfPfii"]
    assert (strided.registers, strided.spill_stores_bytes) == (16, 0)


def test_parse_ptxas_log_from_triton():
    info = parse_ptxas_log(TRITON_LOG)["softmax_kernel"]
    assert (info.registers, info.barriers, info.arch, info.spill_loads_bytes) == (26, 1, "sm_90a", 0)


def test_a_called_functions_frame_is_not_the_entrys():
    info = parse_ptxas_log(OLD_LOG)
    assert list(info) == ["_Z1kPf"]
    assert info["_Z1kPf"].spill_stores_bytes == 0 and info["_Z1kPf"].shared_bytes == 4096
    assert info["_Z1kPf"].registers == 40


def test_parse_resource_usage():
    found = parse_resource_usage(CUOBJDUMP)
    assert found["_Z21register_heavy_kernelPKfPfii"].stack_bytes == 440
    assert found["softmax_kernel"].shared_bytes == 1024 and found["softmax_kernel"].registers == 26
    assert found["softmax_kernel"].constant_bytes == 576


def test_demangle():
    assert demangle("_Z11gelu_kernelPKfPfi") == "gelu_kernel"
    assert demangle("_Z16gelu_vec4_kernelPK6float4PS_i") == "gelu_vec4_kernel"
    assert demangle("_ZN2ns6kernelEPf") == "ns::kernel"
    assert demangle("softmax_kernel") == "softmax_kernel"
    assert symbol_matches("_ZN2ns6kernelEPf", "kernel") and not symbol_matches("_Z1kPf", "kernel")


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profkit-ptx-cache"))


@pytest.mark.parametrize("name", [s.name for s in SAMPLES if s.kind == "triton"])
def test_ptxas_and_the_cubin_agree_on_every_triton_sample(name):
    code = load_kernels(resolve_target(name), Cache())[0]
    assert code.ptxas is not None, "Triton's ptxas -v log was captured"
    assert code.ptxas.registers == code.resources.registers
    # spills happen in the stack frame, so a frame is never smaller than a spill slot set
    assert code.resources.stack_bytes >= (code.ptxas.spill_stores_bytes > 0)
    summary = summarize(code)
    assert summary.registers == code.resources.registers
    assert summary.resources_from.startswith("cubin")

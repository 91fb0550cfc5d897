"""Target strings, signatures, architectures and the sample registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from profkit.errors import ProfkitError
from profkit.ptx import sources
from profkit.ptx.compile import triton_spec
from profkit.ptx.targets import (
    SAMPLES,
    SAMPLES_BY_NAME,
    Arch,
    ArgType,
    CompileParams,
    apply_overrides,
    diff_target,
    module_constants,
    parse_arch,
    parse_constexpr,
    parse_diff_spec,
    parse_signature,
    resolve_target,
    samples_dir,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, arch", [
    ("sm_90", Arch(90)), ("sm_90a", Arch(90, "a")), ("90", Arch(90)), ("9.0", Arch(90)), ("sm80", Arch(80)),
    ("compute_89", Arch(89)), ("SM_100", Arch(100)), ("sm_100a", Arch(100, "a")), ("12.0", Arch(120)),
])
def test_parse_arch(text, arch):
    assert parse_arch(text) == arch


@pytest.mark.parametrize("text", ["sm_99", "hopper", "sm_", "", "sm_90x"])
def test_parse_arch_rejects(text):
    with pytest.raises(ProfkitError):
        parse_arch(text)


def test_parse_signature():
    assert parse_signature("*fp32:16, *fp16, i32:1, i64, *kbf16:16") == (
        ArgType("*fp32", 16), ArgType("*fp16"), ArgType("i32", 1), ArgType("i64"), ArgType("*kbf16", 16))


@pytest.mark.parametrize("text, message", [
    ("*fp33", "unknown type '*fp33'"), ("*fp32,,i32", "empty entry"), ("i32:8", "hint"), ("*fp32:1", "pointer"),
    ("", "empty entry"), ("float", "unknown type"),
])
def test_parse_signature_errors(text, message):
    with pytest.raises(ProfkitError, match="bad signature") as err:
        parse_signature(text)
    assert message in err.value.one_line()


def test_parse_constexpr():
    assert parse_constexpr("BLOCK=1024") == ("BLOCK", 1024)
    assert parse_constexpr(" EPS = 1e-5") == ("EPS", 1e-5)
    assert parse_constexpr("EVEN=True") == ("EVEN", True)
    assert parse_constexpr("ACT=gelu") == ("ACT", "gelu")
    for bad in ("BLOCK", "=3", "BLOCK="):
        with pytest.raises(ProfkitError):
            parse_constexpr(bad)


def test_every_sample_resolves_with_its_source_and_parameters():
    directory = samples_dir()
    assert directory == REPO / "sample_kernels"
    assert {"gelu", "gelu_strided", "softmax", "vector_add", "register_heavy", "gelu_cuda", "gelu_vec4_cuda",
            "gelu_strided_cuda", "register_heavy_cuda", "softmax_cuda", "vector_add_cuda"} <= set(SAMPLES_BY_NAME)
    constants = module_constants(directory / "triton_kernels.py")
    for sample in SAMPLES:
        target = resolve_target(sample.name)
        assert target.path.is_file() and target.sample == sample.name
        if sample.kind == "triton":
            spec = triton_spec(target)  # the registry's signature fits the kernel's parameters
            assert spec.kernel == sample.kernel
            for name, value in sample.constexprs:
                assert spec.constexprs[name] == constants[value]
            assert spec.num_warps == sample.num_warps
        else:
            assert f"void {sample.kernel}(" in target.path.read_text()


def test_sample_constants_follow_the_kernel_file():
    # The registry names GELU_BLOCK rather than repeating 1024.
    gelu = triton_spec(resolve_target("gelu"))
    assert gelu.constexprs == {"BLOCK_SIZE": module_constants(samples_dir() / "triton_kernels.py")["GELU_BLOCK"]}
    heavy = triton_spec(resolve_target("register_heavy"))
    assert heavy.num_warps == 1 and heavy.constexprs["BLOCK_SIZE"] == 8192


def test_samples_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("PROFKIT_SAMPLES_DIR", str(tmp_path))
    (tmp_path / "triton_kernels.py").write_text("import triton\nGELU_BLOCK = 64\n")
    assert samples_dir() == tmp_path


def test_constexpr_prefix_and_errors():
    target = resolve_target("gelu", CompileParams(constexprs=(("BLOCK", 128),)))
    assert triton_spec(target).constexprs == {"BLOCK_SIZE": 128}
    with pytest.raises(ProfkitError, match="has no constexpr 'WIDTH'"):
        triton_spec(resolve_target("gelu", CompileParams(constexprs=(("WIDTH", 1),))))


def test_signature_count_must_match_runtime_arguments():
    target = resolve_target("gelu", CompileParams(signature=parse_signature("*fp32,*fp32")))
    with pytest.raises(ProfkitError, match=r"takes 3 runtime arguments \(x_ptr, out_ptr, n_elements\)"):
        triton_spec(target)


def test_hint_one_specializes_to_a_constant(tmp_path):
    source = tmp_path / "k.py"
    source.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\n"
                      "def k(x_ptr, stride, BLOCK: tl.constexpr = 64):\n    pass\n")
    spec = triton_spec(resolve_target(f"{source}::k", CompileParams(signature=parse_signature("*fp32:16,i32:1"))))
    assert spec.signature == {"x_ptr": "*fp32", "stride": "constexpr", "BLOCK": "constexpr"}
    assert spec.constexprs == {"BLOCK": 64, "stride": 1}
    assert spec.divisible_by_16 == (0,)


def test_kernel_params_read_without_importing(tmp_path):
    source = tmp_path / "k.py"
    # importing this module would fail: the parameters come from its syntax tree
    source.write_text("import not_installed_anywhere\nimport triton\n\n@triton.autotune(configs=[], key=[])\n"
                      "@triton.jit\ndef k(a, b: tl.constexpr, c: 'tl.constexpr' = 3):\n    pass\n")
    params = sources.triton_kernels_in(source)["k"]
    assert [(p.name, p.constexpr) for p in params] == [("a", False), ("b", True), ("c", True)]
    assert params[2].default == 3


def test_resolve_errors(tmp_path):
    with pytest.raises(ProfkitError, match="unknown kernel 'gelu_strided_typo'") as err:
        resolve_target("gelu_strided_typo")
    assert "did you mean" in err.value.one_line()
    not_ptx = tmp_path / "notes.ptx"
    not_ptx.write_text("hello\n")
    with pytest.raises(ProfkitError, match="is not PTX"):
        resolve_target(str(not_ptx))
    not_cubin = tmp_path / "k.cubin"
    not_cubin.write_bytes(b"\x00\x01binary")
    with pytest.raises(ProfkitError, match="is not a cubin"):
        resolve_target(str(not_cubin))
    other = tmp_path / "data.bin"
    other.write_bytes(b"\x00" * 10)
    with pytest.raises(ProfkitError, match="is not PTX, a cubin"):
        resolve_target(str(other))
    with pytest.raises(ProfkitError, match="no kernel name after"):
        resolve_target(f"{tmp_path / 'k.py'}::")


def test_unsuffixed_artifacts_are_recognized(tmp_path):
    ptx = tmp_path / "kernel.txt"
    ptx.write_text("//\n.version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n")
    assert resolve_target(str(ptx)).kind == "ptx"


def test_diff_specs():
    assert parse_diff_spec("gelu_strided") == ("gelu_strided", {})
    assert parse_diff_spec("BLOCK=128") == (None, {"BLOCK": "128"})
    assert parse_diff_spec("gelu_strided,arch=sm_80,num_warps=8") == ("gelu_strided", {"arch": "sm_80", "num_warps": "8"})
    with pytest.raises(ProfkitError):
        parse_diff_spec("a,b")
    a = resolve_target("gelu")
    b = diff_target(a, "BLOCK=128,arch=sm_80", CompileParams())
    assert b.path == a.path and b.params.arch == Arch(80)
    assert triton_spec(b).constexprs == {"BLOCK_SIZE": 128}
    # another sample keeps its own parameters; --arch carries over
    strided = diff_target(a, "gelu_strided", CompileParams(arch=Arch(100)))
    assert strided.sample == "gelu_strided" and strided.params.arch == Arch(100)
    with pytest.raises(ProfkitError, match="no constexprs"):
        apply_overrides(resolve_target("gelu_cuda"), {"BLOCK": "1"})

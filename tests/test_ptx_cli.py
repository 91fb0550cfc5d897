"""`profkit ptx` end to end through CliRunner: real Triton AOT compiles (no GPU),
nvcc when present, the triton wheel's cuobjdump/nvdisasm."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.ptx.cache import Cache
from profkit.ptx.kernel import load_kernels
from profkit.ptx.targets import resolve_target
from profkit.ptx.tools import find_tool

REPO = Path(__file__).resolve().parents[1]
REQUIRED_JSON_KEYS = {"kernel", "arch", "registers", "spill_stores_bytes", "spill_loads_bytes", "shared_bytes",
                      "global_loads", "global_stores", "instruction_mix", "vectorized"}
requires_nvcc = pytest.mark.skipif(
    find_tool("nvcc", required=False) is None,
    reason="nvcc not found: CUDA C++ targets need the CUDA toolkit (Triton, .ptx and .cubin targets do not)")


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profkit-ptx-cache"))
    # nothing here may touch a GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def ptx(*args: str, cwd: Path | None = None):
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(cli, ["ptx", *args], catch_exceptions=False)
    with runner.isolated_filesystem(temp_dir=cwd):
        return runner.invoke(cli, ["ptx", *args], catch_exceptions=False)


def ptx_json(*args: str) -> dict:
    result = ptx(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def cuobjdump_registers(cubin: bytes, tmp_path: Path, function: str) -> int:
    """Registers straight from cuobjdump, independent of profkit's parser."""
    path = tmp_path / "check.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(find_tool("cuobjdump").path), "--dump-resource-usage", str(path)],
                         capture_output=True, text=True, check=True).stdout
    block = out[out.index(f"Function {function}:"):]
    return int(re.search(r"REG:(\d+)", block).group(1))


def test_gelu_without_a_gpu_prints_v4_ptx_says_so_and_reads_registers_from_the_cubin(tmp_path):
    result = ptx("gelu")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert ".entry gelu_kernel(" in out
    global_lines = [line for line in out.splitlines() if re.search(r"\b(ld|st)\.global\.", line)]
    assert len(global_lines) == 4
    assert all(".v4." in line for line in global_lines)
    assert all("128-bit, vectorized" in line for line in global_lines)  # each marked in plain mode
    assert "// verdict: all 2 global loads are 128-bit vectorized; all 2 global stores are 128-bit vectorized" in out
    registers = int(re.search(r"// registers / thread: (\d+)", out).group(1))
    code = load_kernels(resolve_target("gelu"), Cache())[0]
    assert registers == cuobjdump_registers(code.build.cubin, tmp_path, "gelu_kernel")
    assert "cuobjdump --dump-resource-usage" in out


def test_json_keys_and_values():
    data = ptx_json("gelu")
    assert REQUIRED_JSON_KEYS <= set(data)
    assert data["kernel"] == "gelu_kernel" and data["arch"] == "sm_90a"
    assert data["global_loads"] == {"128": 2, "64": 0, "32": 0}
    assert data["global_stores"] == {"128": 2, "64": 0, "32": 0}
    assert data["vectorized"] is True
    assert data["spill_stores_bytes"] == 0 and data["spill_loads_bytes"] == 0
    assert isinstance(data["registers"], int) and 0 < data["registers"] <= 255
    assert data["instruction_mix"]["global_load"] == 2 and data["instruction_mix"]["sfu"] > 0
    assert data["instruction_mix"]["total"] == sum(
        v for k, v in data["instruction_mix"].items() if k not in ("total", "global_loads_readonly", "global_loads_async"))


def test_sass_listing_has_128_bit_ldg_and_stg():
    result = ptx("gelu", "--sass")
    assert result.exit_code == 0, result.output
    assert len(re.findall(r"LDG\.E\.128\b", result.stdout)) == 2
    assert len(re.findall(r"STG\.E\.128\b", result.stdout)) == 2
    data = ptx_json("gelu", "--sass")
    assert data["listing"] == "sass" and data["global_loads"]["128"] == 2 and data["instruction_mix"]["sfu"] > 0


def test_color_mode_highlights_and_marks_global_memory():
    result = ptx("gelu", "--color")
    assert result.exit_code == 0
    assert "\x1b[" in result.stdout
    marked = [line for line in result.stdout.splitlines() if "▲" in line]
    assert len(marked) == 4 and all("ld.global.v4.b32" in line or "st.global.v4.b32" in line for line in marked)


def test_gelu_vs_strided_shows_128_bit_loads_turning_into_32_bit():
    data = ptx_json("gelu", "--diff", "gelu_strided")
    deltas = {row["metric"]: row for row in data["deltas"]}
    assert deltas["global loads 128-bit"]["a"] == 2 and deltas["global loads 128-bit"]["b"] == 0
    assert deltas["global loads 32-bit"]["a"] == 0 and deltas["global loads 32-bit"]["b"] > 0
    assert deltas["global stores 128-bit"]["change"] == -2
    assert deltas["vectorized"]["a"] is True and deltas["vectorized"]["b"] is False
    removed = [line for line in data["diff"] if line.startswith("-") and "ld.global" in line]
    added = [line for line in data["diff"] if line.startswith("+") and "ld.global" in line]
    assert removed and all("ld.global.v4.b32" in line for line in removed)
    assert added and all("ld.global.b32" in line for line in added)
    text = ptx("gelu", "--diff", "gelu_strided").stdout
    assert "--- gelu (gelu_kernel, sm_90a)" in text and "+++ gelu_strided (gelu_strided_kernel, sm_90a)" in text
    assert "A: all 2 global loads are 128-bit vectorized" in text
    deltas_only = ptx("gelu", "--diff", "gelu_strided", "--summary-only").stdout
    assert "+++" not in deltas_only and "global loads 32-bit" in deltas_only
    assert re.search(r"B: (\d+) of \1 global loads are scalar \(32-bit", text)


def test_block_1024_vs_128_shows_what_changes():
    data = ptx_json("gelu", "--diff", "BLOCK=128")
    a, b = data["a"], data["b"]
    # 1024 elements over 128 threads: 8 per thread in two 128-bit loads; 128 elements: one 32-bit load each
    assert a["global_loads"]["128"] == 2 and b["global_loads"] == {"128": 0, "64": 0, "32": 1}
    assert b["instruction_mix"]["total"] < a["instruction_mix"]["total"]
    assert b["instruction_mix"]["sfu"] * 8 == a["instruction_mix"]["sfu"]
    deltas = {row["metric"]: row for row in data["deltas"]}
    assert deltas["registers"]["a"] == a["registers"] and deltas["registers"]["b"] == b["registers"]
    assert deltas["instructions"]["change"] == b["instruction_mix"]["total"] - a["instruction_mix"]["total"]
    assert data["diff"], "the listings differ"
    table = ptx("gelu", "--diff", "BLOCK_SIZE=128", "--format", "md").stdout
    assert "| global loads 128-bit | 2 | 0 | -2 |" in table


def test_arch_diff_is_the_same_kernel_for_another_gpu():
    data = ptx_json("gelu", "--diff", "arch=sm_80", "--sass")
    assert data["a"]["arch"] == "sm_90a" and data["b"]["arch"] == "sm_80"
    assert data["b"]["global_loads"]["128"] == 2


def test_renumbering_alone_makes_no_diff(tmp_path):
    code = load_kernels(resolve_target("gelu"), Cache())[0]
    original = tmp_path / "a.ptx"
    original.write_text(code.build.ptx)
    # Shift every register number and raise the declared counts: valid PTX, same code.
    shifted = re.sub(r"%(r|rd|p)(\d+)", lambda m: f"%{m.group(1)}{int(m.group(2)) + 300}", code.build.ptx)
    shifted = re.sub(r"%(r|rd|p)<(\d+)>", lambda m: f"%{m.group(1)}<{int(m.group(2)) + 300}>", shifted)
    renumbered = tmp_path / "b.ptx"
    renumbered.write_text(shifted)
    result = ptx(str(original), "--diff", str(renumbered))
    assert result.exit_code == 0, result.output
    assert "no difference in the PTX" in result.stdout
    data = ptx_json(str(original), "--diff", str(renumbered))
    assert data["diff"] == []
    assert data["a"]["global_loads"] == data["b"]["global_loads"]


def test_checks_pass_with_exit_0():
    result = ptx("gelu", "--check", "vectorized-loads", "--max-registers", "64", "--no-spills")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: gelu_kernel [sm_90a]: vectorized-loads, no-spills, max-registers 64")


def test_failed_checks_exit_1_with_one_line_each():
    result = ptx("gelu_strided", "--check", "vectorized-loads", "--check", "vectorized-stores",
                 "--max-registers", "8", "--no-spills")
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("gelu_strided_kernel [sm_90a] vectorized-loads: FAILED:")
    assert "global loads are scalar (32-bit" in lines[0]
    assert "vectorized-stores: FAILED" in lines[1]
    assert re.search(r"max-registers 8: FAILED: \d+ registers per thread", lines[2])


def test_register_heavy_spills():
    data = ptx_json("register_heavy")
    assert data["spill_stores_bytes"] > 0 and data["spill_loads_bytes"] > 0
    sass = ptx_json("register_heavy", "--sass")  # spills exist only after ptxas: STL/LDL in SASS
    assert sass["instruction_mix"]["local_store"] > 0 and sass["instruction_mix"]["local_load"] > 0
    assert sass["stack_bytes"] >= sass["spill_stores_bytes"] // sass["instruction_mix"]["local_store"]
    result = ptx("register_heavy", "--no-spills")
    assert result.exit_code == 1
    assert re.fullmatch(r"gelu_register_heavy_kernel \[sm_90a\] no-spills: FAILED: \d+ bytes spill stores, "
                        r"\d+ bytes spill loads\n", result.stdout)


def test_checks_as_json():
    result = ptx("gelu_strided", "--check", "vectorized-loads", "--no-spills", "--format", "json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert [(r["check"], r["passed"]) for r in rows] == [("vectorized-loads", False), ("no-spills", True)]


@pytest.mark.parametrize("args, message", [
    (["no_such_kernel"], "unknown kernel 'no_such_kernel'"),
    (["gelu", "--signature", "*fp33,*fp32,i32"], "bad signature"),
    (["gelu", "--signature", "*fp32,*fp32"], "bad signature: gelu_kernel takes 3 runtime arguments"),
    (["gelu", "--arch", "sm_99"], "unknown architecture 'sm_99'"),
    (["gelu", "--constexpr", "BLOCK=100"], "failed to compile for sm_90: arange's range must be a power of 2"),
    (["gelu", "--diff", "WIDTH=3"], "has no constexpr 'WIDTH'"),
    (["gelu", "--diff", "gelu", "--rev", "HEAD"], "--diff or --rev"),
    (["gelu", "--diff", "gelu_strided", "--no-spills"], "leave out --diff"),
    ([], "name a TARGET"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = ptx(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("profkit: error: ")
    assert message in result.stderr


def test_bad_files_are_one_line_exit_2(tmp_path):
    (tmp_path / "notes.ptx").write_text("this is not PTX\n")
    (tmp_path / "k.cubin").write_text("not an ELF file\n")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    for name, message in (("notes.ptx", "is not PTX (no .version directive)"), ("k.cubin", "is not a cubin"),
                          ("table.csv", "is not PTX, a cubin")):
        result = ptx(str(tmp_path / name))
        assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_compile_failure_shows_the_compilers_message(tmp_path):
    source = tmp_path / "kernels.py"
    source.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef bad(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    tl.store(x_ptr + offs, undefined_name)\n")
    result = ptx(f"{source}::bad", "--signature", "*fp32:16", "--constexpr", "BLOCK=64")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "undefined_name is not defined" in result.stderr and "kernels.py:8:" in result.stderr


def test_module_that_fails_to_import(tmp_path):
    source = tmp_path / "kernels.py"
    source.write_text("import triton\nraise RuntimeError('needs a GPU at import')\n\n@triton.jit\ndef k(x):\n    pass\n")
    result = ptx(f"{source}::k", "--signature", "*fp32")
    assert result.exit_code == 2
    assert "cannot import kernels.py: RuntimeError: needs a GPU at import" in result.stderr


def test_any_triton_kernel_file(tmp_path):
    source = tmp_path / "my_kernels.py"
    source.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    m = offs < n\n    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)\n")
    aligned = ptx_json(f"{source}::scale", "--signature", "*fp32:16,*fp32:16,i32:16", "--constexpr", "BLOCK=1024")
    assert aligned["kernel"] == "scale" and aligned["vectorized"] is True
    # n without ":16": the mask may end inside a vector, so Triton cannot use 128-bit loads
    unaligned = ptx_json(f"{source}::scale", "--signature", "*fp32:16,*fp32:16,i32", "--constexpr", "BLOCK=1024",
                         "--num-warps", "8")
    assert unaligned["vectorized"] is False and unaligned["global_loads"]["128"] == 0
    result = ptx(str(source), "--signature", "*fp32:16,*fp32:16,i32:16", "--constexpr", "BLOCK=1024")
    assert result.exit_code == 0, result.output  # the file's only kernel


def test_ptx_and_cubin_files(tmp_path):
    code = load_kernels(resolve_target("gelu_strided"), Cache())[0]
    (tmp_path / "strided.ptx").write_text(code.build.ptx)
    (tmp_path / "strided.cubin").write_bytes(code.build.cubin)
    from_ptx = ptx_json(str(tmp_path / "strided.ptx"))
    from_cubin = ptx_json(str(tmp_path / "strided.cubin"))
    assert from_ptx["kernel"] == from_cubin["kernel"] == "gelu_strided_kernel"
    assert from_ptx["arch"] == "sm_90a" and from_cubin["arch"] == "sm_90a"
    assert from_ptx["global_loads"]["32"] > 0 and from_ptx["vectorized"] is False
    assert from_cubin["listing"] == "sass" and from_cubin["global_loads"]["32"] > 0
    assert from_cubin["registers"] == code.resources.registers
    # a cubin without a stack frame cannot have spilled
    assert from_cubin["spill_stores_bytes"] == 0
    text = ptx(str(tmp_path / "strided.cubin")).stdout
    assert "a cubin holds no PTX, showing SASS" in text and "LDG.E " in text


def test_html_page_has_ptx_and_sass_side_by_side(tmp_path):
    page = tmp_path / "gelu.html"
    result = ptx("gelu", "--html", str(page), "--summary-only")
    assert result.exit_code == 0
    html = page.read_text()
    assert "ld.global.v4.b32" in html and "LDG.E.128" in html
    assert html.count('class="ln wide"') == 8  # 4 PTX + 4 SASS global accesses, all 128-bit
    assert "<script" not in html and "http" not in html.replace("http-equiv", "")
    diff_page = tmp_path / "diff.html"
    assert ptx("gelu", "--diff", "gelu_strided", "--html", str(diff_page)).exit_code == 0
    assert "global loads 32-bit" in diff_page.read_text()


def test_list_and_tabular_formats():
    listed = ptx("--list", "--format", "csv").stdout
    for name in ("gelu", "gelu_strided", "softmax", "vector_add", "register_heavy", "gelu_cuda", "gelu_vec4_cuda",
                 "gelu_strided_cuda", "register_heavy_cuda", "softmax_cuda", "vector_add_cuda"):
        assert f"\n{name}," in listed
    md = ptx("softmax", "--format", "md").stdout
    assert "| registers / thread |" in md
    shared = ptx_json("softmax")
    assert shared["shared_bytes"] == shared["static_shared_bytes"] + shared["dynamic_shared_bytes"]
    assert shared["dynamic_shared_bytes"] > 0  # the cross-warp reduction's scratch


def test_rev_compares_with_a_git_revision(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    source = repo / "k.py"
    source.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "k.py"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], cwd=repo, check=True)
    args = [f"{source}::k", "--signature", "*fp32:16,*fp32:16,i32:16", "--constexpr", "BLOCK=512"]
    unchanged = json.loads(ptx(*args, "--rev", "HEAD", "--format", "json").stdout)
    assert unchanged["diff"] == []
    source.write_text(source.read_text().replace("* 2)", "* 2 + 1)"))
    data = json.loads(ptx(*args, "--rev", "HEAD", "--format", "json").stdout)
    assert data["a"]["source"].endswith("@HEAD") and not data["b"]["source"].endswith("@HEAD")
    # x * 2 + 1 fuses into one FMA per element where x * 2 was a multiply
    assert any(line.startswith("+") and "fma.rn.f32" in line for line in data["diff"])
    assert data["b"]["instruction_mix"]["fma"] > data["a"]["instruction_mix"]["fma"]
    assert data["a"]["global_loads"] == data["b"]["global_loads"]
    unknown = ptx(*args, "--rev", "no-such-rev")
    assert unknown.exit_code == 2 and unknown.stderr.startswith("profkit: error: --rev 'no-such-rev' names no commit")
    # issue 15: a rev that git would read as an option never reaches git as one
    written = tmp_path / "x"
    for hostile in (f"--output={written}", "-p", "--no-index", f"HEAD:../{source.name}", "HEAD..HEAD~1",
                    "$(touch pwned)"):
        result = ptx(*args, "--rev", hostile)
        assert result.exit_code == 2, (hostile, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("x*")) and not (repo / "pwned").exists()


def _triton_cache_dump(directory: Path) -> None:
    """built-in-test inductor cache: what torch.compile leaves under $TORCHINDUCTOR_CACHE_DIR/triton/0
    is Triton's own cache, so compile sample kernels with Triton's cache pointed there."""
    import warnings

    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    from sample_kernels import triton_kernels as tk

    jobs = [(tk.gelu_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"},
             {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]]}),
            (tk.gelu_strided_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "stride": "i32",
                                      "BLOCK_SIZE": "constexpr"}, {(0,): [["tt.divisibility", 16]]})]
    with knobs.cache.scope(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        knobs.cache.dir = str(directory / "triton" / "0")
        for fn, signature, attrs in jobs:
            src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs={"BLOCK_SIZE": 1024}, attrs=attrs)
            triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    # built-in-test output code: the generated module names kernels it defines in source form
    (directory / "ab").mkdir()
    (directory / "ab" / "cab12.py").write_text(
        "from torch._inductor.async_compile import AsyncCompile\nasync_compile = AsyncCompile()\n"
        "triton_poi_fused_mul_0 = async_compile.triton('triton_poi_fused_mul_0', '''\n"
        "import triton\n@triton.jit\ndef triton_poi_fused_mul_0(in_ptr0, out_ptr0, xnumel, XBLOCK):\n    pass\n"
        "''', device_str='cuda')\n")


def test_inductor_cache(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    dump = tmp_path / "inductor"
    _triton_cache_dump(dump)
    assert len(list(dump.rglob("*.cubin"))) == 2
    table = ptx("--inductor", str(dump))
    assert table.exit_code == 0, table.output
    assert "2 compiled kernels" in table.stdout
    assert "only as source, not compiled yet: triton_poi_fused_mul_0" in table.stderr
    rows = ptx("--inductor", str(dump), "--format", "csv").stdout.splitlines()
    assert rows[0].startswith("kernel,arch,registers")
    assert sorted(r.split(",")[0] for r in rows[1:]) == ["gelu_kernel", "gelu_strided_kernel"]
    assert all(r.split(",")[-1].startswith("triton/0/") and r.endswith(".cubin") for r in rows[1:])
    data = json.loads(ptx("--inductor", str(dump), "--format", "json").stdout)
    by_name = {d["kernel"]: d for d in data}
    assert by_name["gelu_kernel"]["vectorized"] is True
    assert by_name["gelu_strided_kernel"]["global_loads"]["32"] > 0
    assert by_name["gelu_kernel"]["compiler"].startswith("triton ")
    check = ptx("--inductor", str(dump), "--check", "vectorized-loads")
    assert check.exit_code == 1
    assert check.stdout.strip().splitlines() == [
        line for line in check.stdout.strip().splitlines() if line.startswith("gelu_strided_kernel")]
    many_html = ptx("--inductor", str(dump), "--html", str(tmp_path / "x.html"))
    assert many_html.exit_code == 2 and "--html shows one kernel and 2 were found" in many_html.stderr
    one = ptx("--inductor", str(dump), "--kernel", "gelu_kernel", "--sass")
    assert one.exit_code == 0 and "LDG.E.128" in one.stdout
    missing = ptx("--inductor", str(dump), "--kernel", "triton_poi_fused_mul_0")
    assert missing.exit_code == 2 and "no compiled kernel 'triton_poi_fused_mul_0'" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no kernels under" in ptx("--inductor", str(empty)).stderr


REAL_INDUCTOR_CACHE = Path(__file__).parent / "data" / "ptx" / "inductor_cache.tar.xz"


@pytest.mark.skipif(not REAL_INDUCTOR_CACHE.exists(),
                    reason="no real inductor cache yet (tests/data/ptx/make_inductor_cache.py on the GPU host)")
def test_real_inductor_cache(tmp_path):
    import tarfile

    with tarfile.open(REAL_INDUCTOR_CACHE) as tar:
        tar.extractall(tmp_path, filter="data")
    result = ptx("--inductor", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    kernels = json.loads(result.stdout)
    assert kernels
    cubins = {p.relative_to(tmp_path).as_posix(): p for p in tmp_path.rglob("*.cubin")}
    for kernel in kernels:
        assert REQUIRED_JSON_KEYS <= set(kernel)
        assert kernel["compiler"].startswith("triton ")
        if kernel["source"] in cubins:
            function = kernel["kernel"]
            assert kernel["registers"] == cuobjdump_registers(cubins[kernel["source"]].read_bytes(), tmp_path, function)


@requires_nvcc
def test_cuda_scalar_and_float4_gelu():
    scalar = ptx_json("gelu_cuda")
    vec4 = ptx_json("gelu_vec4_cuda")
    assert scalar["kernel"] == "gelu_kernel" and scalar["arch"] == "sm_90"
    assert scalar["global_loads"] == {"128": 0, "64": 0, "32": 1} and scalar["vectorized"] is False
    assert scalar["instruction_mix"]["global_loads_readonly"] == 1  # ld.global.nc from const __restrict__
    assert vec4["global_loads"]["128"] == 1 and vec4["global_stores"]["128"] == 1 and vec4["vectorized"] is True
    sass = ptx("gelu_vec4_cuda", "--sass").stdout
    assert "LDG.E.128.CONSTANT" in sass and "STG.E.128" in sass
    text = ptx("gelu_vec4_cuda").stdout
    assert "ld.global.nc.v4.f32" in text


@requires_nvcc
def test_cuda_file_needs_a_kernel_name_when_it_has_several():
    result = ptx(str(REPO / "sample_kernels" / "csrc" / "gelu.cu"))
    assert result.exit_code == 2 and "has 2 kernels (gelu_kernel, gelu_vec4_kernel)" in result.stderr
    assert ptx_json(str(REPO / "sample_kernels" / "csrc" / "gelu.cu"), "--kernel", "gelu_vec4_kernel")["vectorized"]


@requires_nvcc
def test_cuda_register_limit_causes_spills(tmp_path):
    limited = ptx_json("register_heavy_cuda", "--nvcc-flag=-maxrregcount=32")
    assert limited["registers"] <= 32 and limited["spill_stores_bytes"] > 0
    free = ptx_json("register_heavy_cuda")
    assert free["registers"] > 64 and free["spill_stores_bytes"] == 0
    assert ptx("register_heavy_cuda", "--max-registers", "64").exit_code == 1


@requires_nvcc
def test_cuda_compile_error_is_nvccs_line(tmp_path):
    source = tmp_path / "broken.cu"
    source.write_text("__global__ void k(float* x) { x[0] = undefined_thing; }\n")
    result = ptx(str(source))
    assert result.exit_code == 2
    assert re.search(r"nvcc failed on broken\.cu: .*broken\.cu\(1\): error: identifier \"undefined_thing\" is undefined",
                     result.stderr)


def test_missing_nvcc_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr("profkit.ptx.tools.candidates", lambda name: [])
    monkeypatch.delenv("PROFKIT_NVCC", raising=False)
    result = ptx("gelu_cuda")
    assert result.exit_code == 2
    assert "nvcc not found (install the CUDA toolkit" in result.stderr


def test_tools_come_from_a_pip_package_without_the_toolkit():
    # CI has no CUDA toolkit: the triton wheel (a dev dependency) carries ptxas, cuobjdump and nvdisasm
    from profkit.ptx.tools import candidates

    for name in ("ptxas", "cuobjdump", "nvdisasm"):
        wheel_copies = [p for p in candidates(name) if "site-packages" in p.parts or "dist-packages" in p.parts]
        assert wheel_copies, f"no pip-installed {name}"
        assert find_tool(name).version >= (12, 0)


@pytest.mark.parametrize("flag", ["-ccbin=/tmp/evil", "--compiler-bindir=/tmp", "-o=/tmp/x", "-Xcompiler=-fplugin=x.so",
                                  "--keep-dir=/tmp", "-I/etc", "--options-file=/tmp/f", "-odir", "-Xptxas=-v,--x"])
def test_nvcc_flags_outside_the_allow_list_never_reach_nvcc(flag):
    result = ptx("gelu_cuda", f"--nvcc-flag={flag}")
    assert result.exit_code == 2 and result.stderr.startswith(f"profkit: error: --nvcc-flag {flag!r} is not an allowed")
    assert len(result.stderr.strip().splitlines()) == 1


def test_allowed_nvcc_flags():
    from profkit.ptx.compile import check_nvcc_flags
    from profkit.ptx.targets import SAMPLE_NVCC_FLAGS

    flags = ("-O3", "-maxrregcount=32", "--use_fast_math", "-DBLOCK=256", "-Xptxas=-v,-O3", "--ftz=true",
             "-std=c++17", *SAMPLE_NVCC_FLAGS)
    assert check_nvcc_flags(flags) == flags

"""`--kernels TARGET`: the machine code of traced kernels compiled now from their sources,
joined to real H200 captures of the samples (`profkit report`, `profkit kernels --with-code`).

Fixtures: nsys2025_gelu (sample_kernels/gelu.py: the Triton ``gelu_kernel`` and the CUDA
C++ ``gelu_kernel(const float *, float *, int)`` in one trace) and nsys2025_bad
(sample_kernels/bad_kernels.py: Triton and CUDA C++ ``gelu_strided_kernel`` and
register-heavy kernels).  Oracles, all outside profkit:
- registers: the ``registersPerThread`` CUPTI recorded for the kernel's launches, read
  here from the export with sqlite3 (the driver's count of the code that ran), under the
  rule of tests/test_kernel_code_report.py: CUPTI never reports fewer than 16, so its 16
  means "16 or fewer";
- load/store widths: the ``ld.global``/``st.global`` of the kernel's PTX, counted with a
  regex, the PTX made here by triton.compile (Triton) or ``nvcc -ptx`` (CUDA C++) directly.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.ptx.tools import find_tool
from tests.conftest import nsys_fixture
from tests.run_folders import REPORTS, unpacked_run
from tests.test_kernel_code_report import DRIVER_MINIMUM_REGISTERS, nsys_registers, ptx_widths
from tests.test_report import md_tables, parse_html

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_kernels"
requires_nvcc = pytest.mark.skipif(
    find_tool("nvcc", required=False) is None,
    reason="nvcc not found: CUDA C++ targets need the CUDA toolkit (Triton, .ptx and .cubin targets do not)")

# The fixtures were captured with triton 3.6.0 (torch 2.11, tests/data/kineto/README.md; the
# inductor cache of the same session says "triton_version": "3.6.0").  Triton 3.6.0 compiles
# the sample gelu_kernel (BLOCK_SIZE 1024, 4 warps, sm_90) to 30 registers and softmax_kernel
# to 22, as CUPTI recorded; triton 3.9.0 (its ptxas 12.9 against 3.6.0's 12.8) to 32 and 21:
# checked by compiling them with both wheels.  Code compiled now is not the code that ran,
# and these are the places it shows.  Kernel -> (registers compiled now, CUPTI's).
COMPILER_DIFFERS = {"3.9.0": {"gelu_kernel": (32, 30), "softmax_kernel": (21, 22)}}
CHECKED_TRITON = {"3.6.0", *COMPILER_DIFFERS}


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROFKIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "profkit-ptx-cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # compiling needs no GPU


def triton_version() -> str:
    import triton

    return triton.__version__


def kernels_json(export: Path, *args: str) -> dict[str, dict]:
    result = CliRunner().invoke(cli, ["kernels", str(export), "--with-code", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return {r["name"]: r for r in json.loads(result.output)}


def check_registers(rows: dict[str, dict], export: Path, names: list[str]) -> None:
    """Each named row's compiled registers against CUPTI's for the kernel."""
    recorded = nsys_registers(export)
    differs = COMPILER_DIFFERS.get(triton_version(), {})
    for name in names:
        row, driver = rows[name], recorded[name]
        assert row["code_source"] == "compiled" and row["registers"] is not None, name
        if driver == DRIVER_MINIMUM_REGISTERS:
            assert row["registers"] <= driver, (name, row["registers"])
        elif name in differs:
            assert (row["registers"], driver) == differs[name], name
        else:
            assert row["registers"] == driver, (name, row["registers"], driver)


# -- Triton: the samples' kernels, compiled without a GPU ------------------------------
@pytest.fixture(scope="module")
def bad_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    cache = tmp_path_factory.getbasetemp() / "profkit-ptx-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROFKIT_CACHE_DIR", str(cache))
        return kernels_json(nsys_fixture("nsys2025_bad"), "--kernels", str(SAMPLES / "bad_kernels.py"))


@pytest.mark.slow  # compiles the Triton samples (~10 s, shared with the test below)
def test_a_programs_file_brings_the_triton_kernels_it_imports(bad_rows: dict[str, dict]) -> None:
    """bad_kernels.py defines no kernel: it imports triton_kernels.py, whose kernels that the
    trace ran are compiled with the sample registry's parameters, for the trace's sm_90."""
    if triton_version() not in CHECKED_TRITON:
        pytest.skip(f"registers checked for triton {sorted(CHECKED_TRITON)}, not {triton_version()}")
    check_registers(bad_rows, nsys_fixture("nsys2025_bad"), ["gelu_strided_kernel", "gelu_register_heavy_kernel"])
    compiled = {n for n, r in bad_rows.items() if r["registers"] is not None}
    assert compiled == {"gelu_strided_kernel", "gelu_register_heavy_kernel"}  # no C++ kernel took Triton code
    assert all(bad_rows[n]["code_variants"] == 1 for n in compiled)


def triton_ptx(kernel: str, runtime_types: dict[str, str], divisible: list[int], block: int, warps: int) -> str:
    """The kernel's PTX from triton.compile itself (the test's own compile, as Triton's
    launcher specializes the sample's arguments)."""
    import triton
    from triton.backends.compiler import GPUTarget

    from sample_kernels import triton_kernels

    signature = {**runtime_types, "BLOCK_SIZE": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    source = triton.compiler.ASTSource(fn=getattr(triton_kernels, kernel), signature=signature,
                                       constexprs={"BLOCK_SIZE": block}, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}).asm["ptx"]


@pytest.mark.slow  # compiles the Triton samples; tests/test_kernel_code_report.py checks widths against PTX by default
def test_triton_load_and_store_widths_equal_the_ptx(bad_rows: dict[str, dict]) -> None:
    from sample_kernels import triton_kernels

    two = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}
    cases = {
        "gelu_strided_kernel": triton_ptx("gelu_strided_kernel", {**two, "stride": "i32"}, [0, 1],
                                          triton_kernels.GELU_BLOCK, 4),
        "gelu_register_heavy_kernel": triton_ptx("gelu_register_heavy_kernel", two, [0, 1, 2],
                                                 triton_kernels.REGISTER_HEAVY_BLOCK, 1),
    }
    for name, ptx in cases.items():
        loads, stores = ptx_widths(ptx)
        row = bad_rows[name]
        assert {int(w): n for w, n in row["global_loads"].items() if n} == loads, name
        assert {int(w): n for w, n in row["global_stores"].items() if n} == stores, name
    assert bad_rows["gelu_strided_kernel"]["vectorization"] == "none"  # the runtime stride defeats 128-bit
    assert bad_rows["gelu_register_heavy_kernel"]["vectorization"] == "full"


@pytest.mark.slow  # compiles the Triton kernels for several warp counts (~11 s)
def test_num_warps_follows_the_traced_block_size(tmp_path: Path) -> None:
    """A copy of the kernels' file is no sample: the signature and BLOCK_SIZE come from the
    command line, num_warps from the trace (32 threads per block: 1 warp). With Triton's
    default 4 warps the kernel has 92 registers (profkit ptx register_heavy --num-warps 4,
    triton 3.9.0); CUPTI recorded 64."""
    copy = tmp_path / "my_kernels.py"
    shutil.copyfile(SAMPLES / "triton_kernels.py", copy)
    export = nsys_fixture("nsys2025_bad")
    rows = kernels_json(export, "--kernels", f"{copy}::gelu_register_heavy_kernel",
                        "--signature", "*fp32:16,*fp32:16,i32:16", "--constexpr", "BLOCK=8192")
    assert nsys_registers(export)["gelu_register_heavy_kernel"] == 64
    assert rows["gelu_register_heavy_kernel"]["registers"] == 64


def test_a_kernel_without_a_signature_gets_a_note_not_a_traceback(tmp_path: Path) -> None:
    copy = tmp_path / "my_kernels.py"
    shutil.copyfile(SAMPLES / "triton_kernels.py", copy)
    export = nsys_fixture("nsys2025_bad")
    result = CliRunner().invoke(cli, ["kernels", str(export), "--kernels", str(copy), "--format", "md"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "no code" in line]
    assert len(notes) == 2  # the two Triton kernels the trace ran, each with its own line
    for line in notes:
        assert re.match(r"(gelu_strided_kernel|gelu_register_heavy_kernel) \(my_kernels\.py\): no code: its argument "
                        r"types are unknown: add --signature '\w+=[^']+'", line), line
    assert "Traceback" not in result.output
    rows = kernels_json(export, "--kernels", str(copy))
    assert all(r["registers"] is None for r in rows.values())  # the rows show no code
    # one signature per kernel, as the note says, and each compiles
    rows = kernels_json(export, "--kernels", str(copy), "--constexpr", "BLOCK_SIZE=1024",
                        "--signature", "gelu_strided_kernel=*fp32:16,*fp32:16,i32,i32")
    assert rows["gelu_strided_kernel"]["registers"] == nsys_registers(export)["gelu_strided_kernel"]
    assert rows["gelu_register_heavy_kernel"]["registers"] is None


def test_ptx_and_cubin_targets(tmp_path: Path) -> None:
    """A .ptx and a .cubin made here by triton.compile (no nvcc): their kernel joins the trace."""
    import triton
    from triton.backends.compiler import GPUTarget

    from sample_kernels import triton_kernels

    source = triton.compiler.ASTSource(
        fn=triton_kernels.gelu_register_heavy_kernel, constexprs={"BLOCK_SIZE": triton_kernels.REGISTER_HEAVY_BLOCK},
        signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"},
        attrs={(i,): [["tt.divisibility", 16]] for i in (0, 1, 2)})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    (tmp_path / "heavy.ptx").write_text(compiled.asm["ptx"])
    (tmp_path / "heavy.cubin").write_bytes(compiled.asm["cubin"])
    export = nsys_fixture("nsys2025_bad")
    loads, _ = ptx_widths(compiled.asm["ptx"])
    for artifact in ("heavy.ptx", "heavy.cubin"):
        row = kernels_json(export, "--kernels", str(tmp_path / artifact))["gelu_register_heavy_kernel"]
        assert row["code_source"] == "compiled" and row["registers"] == 64, artifact  # = CUPTI's
        assert {int(w): n for w, n in row["global_loads"].items() if n} == loads, artifact


# -- CUDA C++ (nvcc) and the Triton / C++ name clash -----------------------------------
def nvcc_ptx_widths(source: Path, symbol_part: str, tmp_path: Path) -> tuple[dict[int, int], dict[int, int]]:
    """Widths counted in ``nvcc -ptx`` output, in the .entry whose symbol holds ``symbol_part``."""
    out = tmp_path / f"{source.stem}.ptx"
    subprocess.run([str(find_tool("nvcc").path), "-ptx", "-arch=sm_90", "-O3", "-o", str(out), str(source)],
                   check=True, capture_output=True)
    entries = re.split(r"(?m)^\s*\.(?:visible\s+)?\.?entry\s+", out.read_text())
    (body,) = [e for e in entries[1:] if e.split("(")[0].strip().find(symbol_part) >= 0]
    return ptx_widths(body)


@requires_nvcc
def test_triton_and_cuda_kernels_of_one_name_each_get_their_own_code(tmp_path: Path) -> None:
    """The gelu capture runs a Triton ``gelu_kernel`` and a C++ ``gelu_kernel(const float *,
    float *, int)``: the bare name takes the Triton code, the one with parameters nvcc's."""
    export = nsys_fixture("nsys2025_gelu")
    rows = kernels_json(export, "--kernels", str(SAMPLES / "gelu.py"), "--kernels", str(SAMPLES / "csrc" / "gelu.cu"))
    cuda_name = "gelu_kernel(const float *, float *, int)"
    if triton_version() in CHECKED_TRITON:
        check_registers(rows, export, ["gelu_kernel", cuda_name])
    assert {n for n, r in rows.items() if r["registers"] is not None} == {"gelu_kernel", cuda_name}
    loads, stores = nvcc_ptx_widths(SAMPLES / "csrc" / "gelu.cu", "11gelu_kernel", tmp_path)
    cuda = rows[cuda_name]
    assert {int(w): n for w, n in cuda["global_loads"].items() if n} == loads == {32: 1}
    assert {int(w): n for w, n in cuda["global_stores"].items() if n} == stores == {32: 1}
    from sample_kernels import triton_kernels

    two = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}
    loads, stores = ptx_widths(triton_ptx("gelu_kernel", two, [0, 1, 2], triton_kernels.GELU_BLOCK, 4))
    assert {int(w): n for w, n in rows["gelu_kernel"]["global_loads"].items() if n} == loads
    assert {int(w): n for w, n in rows["gelu_kernel"]["global_stores"].items() if n} == stores
    assert (rows["gelu_kernel"]["vectorization"], cuda["vectorization"]) == ("full", "none")


@requires_nvcc
def test_hand_compiled_cuda_kernels_from_cu_and_cubin(tmp_path: Path) -> None:
    export = nsys_fixture("nsys2025_bad")
    names = ["gelu_strided_kernel(const float *, float *, int, int)", "register_heavy_kernel(const float *, float *, int, int)"]
    rows = kernels_json(export, "--kernels", str(SAMPLES / "csrc" / "bad.cu"), "--nvcc-flag=-O3")
    check_registers(rows, export, names)
    assert nsys_registers(export)[names[1]] == 80  # compared exactly, above CUPTI's floor
    cubin = tmp_path / "bad.cubin"
    subprocess.run([str(find_tool("nvcc").path), "-cubin", "-arch=sm_90", "-O3", "-o", str(cubin),
                    str(SAMPLES / "csrc" / "bad.cu")], check=True, capture_output=True)
    from_cubin = kernels_json(export, "--kernels", str(cubin))
    check_registers(from_cubin, export, names)
    loads, stores = nvcc_ptx_widths(SAMPLES / "csrc" / "bad.cu", "21register_heavy_kernel", tmp_path)
    for source in (rows, from_cubin):
        row = source[names[1]]
        assert {int(w): n for w, n in row["global_loads"].items() if n} == loads
        assert {int(w): n for w, n in row["global_stores"].items() if n} == stores


@pytest.mark.parametrize("fixture, sample", [("nsys2025_softmax", "softmax"), ("nsys2023_vector_add", "vector_add")])
def test_the_other_samples_registers_equal_cuptis(fixture: str, sample: str) -> None:
    """The softmax and vector-add captures: the program's Triton kernel, and its CUDA C++
    kernel when nvcc is here."""
    export = nsys_fixture(fixture)
    args = ["--kernels", str(SAMPLES / f"{sample}.py")]
    have_nvcc = find_tool("nvcc", required=False) is not None
    if have_nvcc:
        args += ["--kernels", str(SAMPLES / "csrc" / f"{sample}.cu")]
    rows = kernels_json(export, *args)
    compiled = sorted(n for n, r in rows.items() if r["registers"] is not None)
    triton_kernel = {"softmax": "softmax_kernel", "vector_add": "add_kernel"}[sample]
    cuda = [n for n in compiled if "(" in n]
    assert [n for n in compiled if "(" not in n] == [triton_kernel] and len(cuda) == int(have_nvcc)
    if triton_version() in CHECKED_TRITON:
        check_registers(rows, export, compiled)
    elif cuda:
        check_registers(rows, export, cuda)


def test_missing_nvcc_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from profkit.ptx import tools

    real = tools.candidates
    monkeypatch.setattr("profkit.ptx.tools.candidates", lambda name: [] if name == "nvcc" else real(name))
    monkeypatch.delenv("PROFKIT_NVCC", raising=False)
    result = CliRunner().invoke(cli, ["kernels", str(nsys_fixture("nsys2025_bad")), "--kernels", "register_heavy_cuda",
                                      "--top", "3"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "--kernels register_heavy_cuda: no code: nvcc not found" in result.stderr


def test_bad_targets_and_options_are_one_line_errors(tmp_path: Path) -> None:
    export = str(nsys_fixture("nsys2025_bad"))
    cases = {
        ("--kernels", str(tmp_path / "nope.py")): "unknown kernel",
        ("--signature", "*fp32"): "--signature only apply with --kernels",
        ("--kernels", "gelu", "--signature", "*float"): "unknown type",
        ("--kernels", "gelu", "--arch", "sm_1"): "unknown architecture",
    }
    for args, message in cases.items():
        result = CliRunner().invoke(cli, ["report", export, "-o", str(tmp_path / "out"), *args])
        assert result.exit_code == 2 and message in result.stderr, (args, result.output)
        assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # refused before reading the trace


# -- the report ---------------------------------------------------------------------------
def test_report_labels_code_compiled_now(tmp_path: Path) -> None:
    export = nsys_fixture("nsys2025_bad")
    result = CliRunner().invoke(cli, ["report", str(export), "-o", str(tmp_path), "--kernels", "gelu_strided",
                                      "--kernels", "register_heavy"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "report.json").read_text())
    section = data["sections"]["kernels"]
    rows = {r["name"]: r for r in section["tables"]["kernels"]["rows"]}
    recorded = nsys_registers(export)
    for name in ("gelu_strided_kernel", "gelu_register_heavy_kernel"):
        assert rows[name]["code_source"] == "compiled" and rows[name]["registers"] == recorded[name]
    (note,) = [n for n in section["notes"] if "compiled now" in n]
    assert "not read from the run" in note and "sm_90" in note and "triton" in note
    assert note in (tmp_path / "report.html").read_text()
    columns = [c["title"] for c in section["tables"]["kernels"]["columns"]]
    regs = columns.index("Regs")
    cells = {c[-1]: c for c in parse_html((tmp_path / "report.html").read_text()).tables["table-kernels"]}
    assert cells["gelu_register_heavy_kernel"][regs] == "64"
    md = (tmp_path / "report.md").read_text()
    assert "compiled now from --kernels" in md
    assert any("gelu_register_heavy_kernel" in " ".join(c) for c in md_tables(md)["CUDA kernels"])


# -- a `profkit trace` run folder: the run's own Triton cache and --kernels together ------


def needs_run(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not (REPORTS / name / "triton_cache.tar.xz").exists(), reason=f"reports/{name} missing")


@needs_run("bad_kernels")
def test_run_folder_cache_for_triton_and_cuda_compiled_now(tmp_path: Path) -> None:
    """`profkit report RUN`: the Triton kernels' code from the cache the run compiled into
    (code_source "cache"), the CUDA C++ kernels' from bad.cu compiled now when nvcc is
    here; every one's registers against CUPTI's in the run's export."""
    run = unpacked_run("bad_kernels", tmp_path)
    have_nvcc = find_tool("nvcc", required=False) is not None
    extra = ["--kernels", str(SAMPLES / "csrc" / "bad.cu")] if have_nvcc else []
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "out"), *extra])
    assert result.exit_code == 0, result.output
    section = json.loads((tmp_path / "out" / "report.json").read_text())["sections"]["kernels"]
    rows = {r["name"]: r for r in section["tables"]["kernels"]["rows"]}
    recorded = nsys_registers(run / "trace.sqlite")
    for name in ("gelu_strided_kernel", "gelu_register_heavy_kernel"):  # 32 and 64: above CUPTI's floor
        assert rows[name]["code_source"] == "cache" and rows[name]["registers"] == recorded[name] > 16, name
    cuda = [n for n in rows if "(" in n and not n.startswith("void ")]
    assert sorted(cuda) == ["gelu_strided_kernel(const float *, float *, int, int)",
                            "register_heavy_kernel(const float *, float *, int, int)"]
    if not have_nvcc:
        assert all(rows[n]["registers"] is None for n in cuda)
        return
    check_registers(rows, run / "trace.sqlite", cuda)
    (note,) = [n for n in section["notes"] if "compiled now" in n]
    assert note.startswith("Machine code of 2 kernel(s) compiled now") and "nvcc" in note


@needs_run("gelu")
def test_the_runs_own_code_wins_over_code_compiled_now(tmp_path: Path) -> None:
    """The gelu run's Triton cache holds the gelu_kernel that ran: 30 registers, as CUPTI
    recorded.  --kernels gelu compiles it again here (32 with triton 3.9.0, see
    COMPILER_DIFFERS); the row keeps the run's own code."""
    run = unpacked_run("gelu", tmp_path)
    rows = kernels_json(run, "--kernels", "gelu")
    recorded = nsys_registers(run / "trace.sqlite")
    assert rows["gelu_kernel"]["code_source"] == "cache"
    assert rows["gelu_kernel"]["registers"] == recorded["gelu_kernel"] == 30
    assert rows["gelu_kernel"]["code_variants"] == 1  # the compiled-now variant is not mixed in

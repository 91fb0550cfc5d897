"""Finding nsys/ncu/nvcc/... : PATH, install folders, PROFKIT_* variables, triton's copies."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from profkit.capture import tools
from profkit.errors import ProfkitError

FAKE_TOOLS = Path(__file__).parent / "fake_tools"


def make_exe(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_path_wins_over_install_folders_and_env(tmp_path):
    on_path = make_exe(tmp_path / "bin" / "nsys")
    make_exe(tmp_path / "root/opt/nvidia/nsight-systems/2025.3.1/bin/nsys")
    env_tool = make_exe(tmp_path / "elsewhere" / "nsys")
    env = {"PATH": str(tmp_path / "bin"), "PROFKIT_NSYS": str(env_tool)}
    found = tools.find_tool("nsys", env=env, root=tmp_path / "root")
    assert found == tools.FoundTool("nsys", on_path, "path")


def test_install_folders_newest_version_first(tmp_path):
    root = tmp_path / "root"
    for version in ("2024.5.1", "2025.3.1", "2025.10.0", "2025.9.9"):
        make_exe(root / f"opt/nvidia/nsight-systems/{version}/bin/nsys")
    found = tools.find_tool("nsys", env={"PATH": ""}, root=root)
    assert found is not None and found.source == "install"
    # 2025.10 is newer than 2025.9 (numeric, like sort -V), not older as a string sort says
    assert found.path == root / "opt/nvidia/nsight-systems/2025.10.0/bin/nsys"


def test_nsys_inside_nsight_compute_is_found(tmp_path):
    root = tmp_path / "root"
    inside = make_exe(root / "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys")
    found = tools.find_tool("nsys", env={"PATH": ""}, root=root)
    assert found is not None and found.path == inside
    assert tools.nsys_inside_ncu(found.path)


def test_standalone_install_beats_the_copy_inside_ncu(tmp_path):
    root = tmp_path / "root"
    make_exe(root / "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys")
    standalone = make_exe(root / "opt/nvidia/nsight-systems/2024.1.1/bin/nsys")
    assert tools.find_tool("nsys", env={"PATH": ""}, root=root).path == standalone


def test_cuda_toolkit_folders(tmp_path):
    root = tmp_path / "root"
    make_exe(root / "usr/local/cuda-12.4/bin/ncu")
    newer = make_exe(root / "usr/local/cuda-13.0/bin/ncu")
    versioned_nvcc = make_exe(root / "usr/local/cuda-12.8/bin/nvcc")
    assert tools.find_tool("ncu", env={"PATH": ""}, root=root).path == newer
    assert tools.find_tool("nvcc", env={"PATH": ""}, root=root).path == versioned_nvcc
    default = make_exe(root / "usr/local/cuda/bin/nvcc")
    assert tools.find_tool("nvcc", env={"PATH": ""}, root=root).path == default


def test_environment_variable_is_the_last_resort(tmp_path):
    tool = make_exe(tmp_path / "custom" / "my-nsys")
    found = tools.find_tool("nsys", env={"PATH": "", "PROFKIT_NSYS": str(tool)}, root=tmp_path / "empty")
    assert found == tools.FoundTool("nsys", tool, "env")
    ncu = make_exe(tmp_path / "custom" / "ncu-wrapper")
    assert tools.find_tool("ncu", env={"PATH": "", "PROFKIT_NCU": str(ncu)}, root=tmp_path / "empty").path == ncu


def test_non_executable_files_are_skipped(tmp_path):
    root = tmp_path / "root"
    plain = root / "opt/nvidia/nsight-systems/2025.3.1/bin/nsys"
    plain.parent.mkdir(parents=True)
    plain.write_text("not executable")
    assert tools.find_tool("nsys", env={"PATH": ""}, root=root) is None


def test_require_tool_says_how_to_get_nsys(tmp_path):
    with pytest.raises(ProfkitError) as info:
        tools.require_tool("nsys", env={"PATH": ""}, root=tmp_path)
    line = info.value.one_line()
    assert "nsys not found" in line
    assert "install Nsight Systems" in line and "PROFKIT_NSYS" in line
    assert "\n" not in line


def test_require_tool_names_a_bad_environment_variable(tmp_path):
    with pytest.raises(ProfkitError, match=r"PROFKIT_NCU=.*no-such-ncu is not an executable file"):
        tools.require_tool("ncu", env={"PATH": "", "PROFKIT_NCU": str(tmp_path / "no-such-ncu")}, root=tmp_path)


def test_ptxas_falls_back_to_the_triton_wheel(tmp_path):
    bundled = tools.triton_bin_dir()
    if bundled is None or not (bundled / "ptxas").exists():
        pytest.skip("triton with bundled ptxas is not installed")
    found = tools.find_tool("ptxas", env={"PATH": ""}, root=tmp_path)
    assert found == tools.FoundTool("ptxas", bundled / "ptxas", "triton")
    assert tools.find_tool("ptxas", env={"PATH": ""}, root=tmp_path, use_triton=False) is None
    # nsys and ncu never come from triton
    assert tools.find_tool("nsys", env={"PATH": ""}, root=tmp_path) is None


# --version outputs as the real tools print them
NSYS_2025 = "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0\n"
NSYS_2023 = "NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0\n"
NCU = ("NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\n"
       "Version 2025.3.1.0 (build 36398880) (public-release)\n")
NVCC = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
        "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
        "Build cuda_13.0.r13.0/compiler.36424714_0\n")
PTXAS_TRITON = ("ptxas: NVIDIA (R) Ptx optimizing assembler\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
                "Built on Tue_May_27_02:18:05_PDT_2025\nCuda compilation tools, release 12.9, V12.9.86\n"
                "Build cuda_12.9.r12.9/compiler.36037853_0\n")


@pytest.mark.parametrize("output, version", [
    (NSYS_2025, "2025.3.1.90-253135822126v0"),
    (NSYS_2023, "2023.4.4.54-234433681190v0"),
    (NCU, "2025.3.1.0"),
    (NVCC, "13.0.88"),
    (PTXAS_TRITON, "12.9.86"),
    ("bash: nsys: command not found\n", None),
])
def test_parse_version(output, version):
    assert tools.parse_version(output) == version


def test_tool_version_runs_the_tool():
    assert tools.tool_version(FAKE_TOOLS / "nsys") == "2025.3.1.90-253135822126v0"
    assert tools.tool_version(FAKE_TOOLS / "ncu") == "2025.3.1.0"


def test_real_nsys_version_when_available():
    real = Path(__file__).parent.parent / ".tools/nsys/target-linux-x64/nsys"
    if not real.exists():
        pytest.skip("no Nsight Systems CLI in .tools/")
    assert tools.tool_version(real).startswith("2023.4.")
    assert tools.nsys_layout_problem(real) is None


def test_layout_problem_for_the_copy_inside_ncu(tmp_path):
    ncu_root = tmp_path / "opt/nvidia/nsight-compute/2025.3.1"
    nsys = make_exe(ncu_root / "host/target-linux-x64/nsys")
    problem = tools.nsys_layout_problem(nsys)
    assert problem is not None and "inside Nsight Compute" in problem and "host-linux-x64" in problem
    # what the GPU kit's setup.sh assembles: target-linux-x64 beside host-linux-x64
    kit = tmp_path / "nsys-kit"
    make_exe(kit / "target-linux-x64/nsys")
    make_exe(kit / "host-linux-x64/QdstrmImporter")
    assert tools.nsys_layout_problem(kit / "target-linux-x64/nsys") is None
    # a bin/ wrapper has its own layout
    assert tools.nsys_layout_problem(make_exe(tmp_path / "bin/nsys")) is None


def test_symlinked_tool_is_judged_by_its_target(tmp_path):
    kit = tmp_path / "kit"
    make_exe(kit / "target-linux-x64/nsys")
    make_exe(kit / "host-linux-x64/QdstrmImporter")
    link = tmp_path / "bin/nsys"
    link.parent.mkdir()
    os.symlink(kit / "target-linux-x64/nsys", link)
    assert tools.nsys_layout_problem(link) is None

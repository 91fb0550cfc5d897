"""profkit doctor: each check with found / missing inputs, and the command's output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from profkit.capture import doctor
from profkit.capture.gpu import GpuStatus, detect_gpus, parse_cuda_version, parse_smi_query
from profkit.cli import cli

FAKE_TOOLS = Path(__file__).parent / "fake_tools"


def by_name(checks):
    return {c.name: c for c in checks}


def test_tools_found_with_versions_and_missing_with_fixes(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("nsys", "ncu"):
        shutil.copy(FAKE_TOOLS / name, bin_dir / name)
    checks = by_name(doctor.tool_checks(env={"PATH": str(bin_dir)}, root=tmp_path / "root"))
    assert checks["nsys"].status == "ok"
    assert checks["nsys"].detail.startswith("2025.3.1.90-253135822126v0 at ")
    assert checks["ncu"].status == "ok" and checks["ncu"].detail.startswith("2025.3.1.0")
    assert checks["nvcc"].status == "missing"
    assert "CUDA toolkit" in checks["nvcc"].fix
    # ptxas/cuobjdump/nvdisasm: missing here, or found in the triton wheel
    for name in ("ptxas", "cuobjdump", "nvdisasm"):
        assert checks[name].status in ("missing", "ok")
        if checks[name].status == "ok":
            assert "(from triton)" in checks[name].detail


def test_tool_that_does_not_answer_version_is_a_warning(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
    (bin_dir / "nvcc").chmod(0o755)
    check = by_name(doctor.tool_checks(env={"PATH": str(bin_dir)}, root=tmp_path))["nvcc"]
    assert check.status == "warn" and "gave no version" in check.detail


def test_nsys_inside_ncu_without_its_importer_is_a_warning(tmp_path):
    nsys = tmp_path / "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys"
    nsys.parent.mkdir(parents=True)
    shutil.copy(FAKE_TOOLS / "nsys", nsys)
    check = by_name(doctor.tool_checks(env={"PATH": ""}, root=tmp_path))["nsys"]
    assert check.status == "warn"
    assert "inside Nsight Compute" in check.detail and "(from install)" in check.detail
    assert "setup.sh" in check.fix


SMI_QUERY = "NVIDIA H200, 580.159.04, 143771, 9.0\n"
SMI_HEADER = """Sun Nov 22 22:38:06 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
"""


def test_parse_nvidia_smi():
    assert parse_smi_query(SMI_QUERY) == [{"name": "NVIDIA H200", "driver_version": "580.159.04",
                                           "memory_total_mib": "143771", "compute_cap": "9.0"}]
    assert parse_cuda_version(SMI_HEADER) == "13.0"
    assert parse_cuda_version("no header") is None


def test_gpu_checks():
    status = GpuStatus(devices=["/dev/nvidia0"], smi="/usr/bin/nvidia-smi", gpus=parse_smi_query(SMI_QUERY),
                       cuda_version="13.0")
    checks = by_name(doctor.gpu_checks(status))
    assert checks["GPU 0"].status == "ok"
    assert checks["GPU 0"].detail == "NVIDIA H200, compute capability 9.0, 143771 MiB"
    assert checks["driver"].detail == "580.159.04"
    assert checks["CUDA (driver)"].detail == "13.0"


def test_no_gpu_says_so_and_how_to_fix():
    (check,) = doctor.gpu_checks(GpuStatus())
    assert check.status == "missing"
    assert check.detail == "no NVIDIA GPU: no /dev/nvidia[0-9]* device and nvidia-smi not found"
    assert check.fix
    (broken,) = doctor.gpu_checks(GpuStatus(devices=["/dev/nvidia0"], smi="/usr/bin/nvidia-smi",
                                            error="Failed to initialize NVML: Driver/library version mismatch"))
    assert broken.status == "missing" and "Driver/library version mismatch" in broken.detail


def test_detect_gpus_with_fake_devices_and_nvidia_smi(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidia0").touch()
    (dev / "nvidiactl").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nif [ -n \"$1\" ]; then printf '{SMI_QUERY}'; else cat <<'EOF'\n{SMI_HEADER}EOF\nfi\n")
    smi.chmod(0o755)
    status = detect_gpus(dev, env={"PATH": str(bin_dir)})
    assert status.devices == [str(dev / "nvidia0")]
    assert status.available and status.problem() is None
    assert status.gpus[0]["name"] == "NVIDIA H200" and status.cuda_version == "13.0"
    assert not detect_gpus(tmp_path / "nodev", env={"PATH": ""}).available


def test_package_checks_report_missing_and_broken_packages():
    def importer(name):
        if name == "nvtx":
            raise ImportError("No module named 'nvtx'")
        if name == "torch":
            raise OSError("libcudnn.so.9: cannot open shared object file")
        return __import__(name)

    checks = by_name(doctor.package_checks(importer))
    assert checks["nvtx"].status == "missing" and checks["nvtx"].fix == "pip install nvtx"
    assert checks["torch"].status == "warn" and "libcudnn.so.9" in checks["torch"].detail
    assert checks["click"].status == "ok"


def test_perf_event_paranoid(tmp_path):
    path = tmp_path / "sys/kernel/perf_event_paranoid"
    path.parent.mkdir(parents=True)
    path.write_text("2\n")
    assert doctor.perf_event_check(tmp_path).status == "ok"
    path.write_text("4\n")
    check = doctor.perf_event_check(tmp_path)
    assert check.status == "warn" and "perf_event_paranoid=2" in check.fix
    assert doctor.perf_event_check(tmp_path / "none").status == "info"


def write_params(proc: Path, text: str) -> None:
    params = proc / "driver/nvidia/params"
    params.parent.mkdir(parents=True, exist_ok=True)
    params.write_text(text)


def test_gpu_counters_admin_only_for_a_normal_user(tmp_path):
    write_params(tmp_path, "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "self/status").write_text("Name:\tpython\nCapEff:\t0000000000000000\n")
    check = doctor.gpu_counter_check(tmp_path, euid=1000)
    assert check.status == "missing"
    assert "ERR_NVGPUCTRPERM" in check.detail and "NVreg_RestrictProfilingToAdminUsers=0" in check.fix


def test_gpu_counters_admin_only_but_root_or_cap_sys_admin(tmp_path):
    write_params(tmp_path, "RmProfilingAdminOnly: 1\n")
    assert doctor.gpu_counter_check(tmp_path, euid=0).status == "ok"
    (tmp_path / "self").mkdir()
    (tmp_path / "self/status").write_text(f"CapEff:\t{1 << 21:016x}\n")
    assert doctor.gpu_counter_check(tmp_path, euid=1000).status == "ok"


def test_gpu_counters_open_or_unknown(tmp_path):
    write_params(tmp_path, "RmProfilingAdminOnly: 0\n")
    assert doctor.gpu_counter_check(tmp_path, euid=1000).status == "ok"
    write_params(tmp_path, "NVreg_RestrictProfilingToAdminUsers: 1\n")  # older drivers' spelling
    assert doctor.gpu_counter_check(tmp_path, euid=0).status == "ok"
    write_params(tmp_path, "EnableMSI: 1\n")
    assert doctor.gpu_counter_check(tmp_path).status == "info"
    assert doctor.gpu_counter_check(tmp_path / "nodriver").status == "info"


def test_doctor_command_json():
    result = CliRunner().invoke(cli, ["doctor", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    names = [r["name"] for r in rows]
    for name in ("nsys", "ncu", "nvcc", "ptxas", "cuobjdump", "nvdisasm", "torch", "triton", "nvtx",
                 "perf_event_paranoid", "GPU performance counters"):
        assert name in names
    assert {r["status"] for r in rows} <= {"ok", "missing", "warn", "info"}
    assert all(r["fix"] for r in rows if r["status"] == "missing")


def test_doctor_command_table():
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "profkit doctor" in result.output and "nsys" in result.output and "perf_event_paranoid" in result.output

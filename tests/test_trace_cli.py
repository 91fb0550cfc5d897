"""`profkit trace` end to end.

CPU: a fake `nsys` (tests/fake_tools/nsys) runs the script and writes a real
export (tests/data/nsys/nsys2025_gelu), so discovery, the command line, the
temp folder, the run folder, the report and the exit codes are all real.
GPU (@pytest.mark.gpu): the real nsys and ncu on sample_kernels/gelu.py.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.capture import tools
from profkit.capture.trace import TraceOptions, run_trace
from profkit.cli import cli
from profkit.errors import ProfkitError
from tests.conftest import ncu_fixture, nsys_fixture, oracle_csv

ROOT = Path(__file__).resolve().parent.parent
FAKE_TOOLS = Path(__file__).parent / "fake_tools"
FIXTURE = "nsys2025_gelu"


def oracle_kernels(name: str = FIXTURE) -> list[dict[str, str]]:
    with open(oracle_csv(name, "cuda_gpu_kern_sum")) as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working folder with a small script, a PATH with the fake nsys, and the fixture export."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text(
        "import sys\nprint('program says hi', sys.argv[1:])\nprint('to stderr', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[sys.argv.index('--exit') + 1]) if '--exit' in sys.argv else 0)\n")
    env = {
        "PATH": os.pathsep.join([str(FAKE_TOOLS), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "FAKE_NSYS_EXPORT": str(nsys_fixture(FIXTURE)),
        "FAKE_NSYS_LOG": str(tmp_path / "nsys-calls.jsonl"),
        "PYTHONPATH": str(ROOT),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("COLUMNS", "200")  # the summary table's width
    for key in ("FAKE_NSYS_MODE", "FAKE_NSYS_SKIP_RUN", "PROFKIT_NSYS", "PROFKIT_NCU"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def trace(*args: str):
    return CliRunner().invoke(cli, ["trace", "--no-gpu-check", "--tmp-dir", "tmp", *args])


def nsys_calls(workdir: Path) -> list[dict]:
    calls = [json.loads(line) for line in (workdir / "nsys-calls.jsonl").read_text().splitlines()]
    # `nsys COMMAND --help` is profkit asking what this nsys supports, not a capture
    return [call for call in calls if "--help" not in call["argv"]]


def only_run_dir(workdir: Path) -> Path:
    (run_dir,) = (workdir / "profkit-runs").iterdir()
    return run_dir


def find_key(data, key):
    """Every value of `key` anywhere in a JSON document."""
    if isinstance(data, dict):
        for k, v in data.items():
            if k == key:
                yield v
            yield from find_key(v, key)
    elif isinstance(data, list):
        for item in data:
            yield from find_key(item, key)


def test_trace_end_to_end(workdir):
    result = trace("prog.py", "--", "--n", "4096")
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(workdir)
    assert run_dir.name.startswith("prog-")
    # the run folder
    for name in ("trace.sqlite", "trace.log", "run.json", "report.html", "report.md", "report.json"):
        assert (run_dir / name).is_file(), name
    # by default the export is scrubbed of the environment and the .nsys-rep (which holds it too) goes
    assert not (run_dir / "trace.nsys-rep").exists()
    assert b"DeviceEnvironment" not in (run_dir / "trace.sqlite").read_bytes()
    assert "program says hi ['--n', '4096']" in (run_dir / "trace.log").read_text()
    # nothing left in the temp folder (nsys's .qdstrm included)
    assert list((workdir / "tmp").iterdir()) == []
    # run.json
    record = json.loads((run_dir / "run.json").read_text())
    assert record["command"] == ["prog.py", "--n", "4096"]
    assert record["status"] == "ok" and record["exit_code"] == 0 and record["partial"] is False
    assert record["tools"]["nsys"]["version"] == "2025.3.1.90-253135822126v0"
    assert record["files"]["sqlite"] == "trace.sqlite" and "nsys_rep" not in record["files"]
    assert record["scrub"]["scrubbed"] is True
    # the command nsys got: the launcher with the sync-site hook, the script, its args
    (call,) = [c for c in nsys_calls(workdir) if c["argv"][0] == "profile"]
    assert call["argv"][-5:] == ["-m", "profkit.capture.launch", "prog.py", "--n", "4096"]
    assert "--trace=cuda,nvtx" in call["argv"] and "--cuda-graph-trace=graph" in call["argv"]
    # exported afterwards, with the NVTX payloads (this fake nsys lists no --include-blobs: none asked)
    assert "--export=sqlite" not in call["argv"]
    (export,) = [c for c in nsys_calls(workdir) if c["argv"][0] == "export"]
    assert export["argv"][-1].endswith("trace.nsys-rep")
    assert call["env"]["TMPDIR"].startswith(str(workdir / "tmp"))
    assert call["env"]["PROFKIT_SYNC_SITES"] == "1"
    assert call["cwd"] == str(workdir)  # the script runs where the user is
    # the terminal: program output, top kernels, total, report path
    assert "program says hi" in result.output
    oracle = oracle_kernels()
    assert "Top kernels by GPU time" in result.output
    assert oracle[0]["Name"] in result.output
    total_ms = sum(int(r["Total Time (ns)"]) for r in oracle) / 1e6
    assert f"Total GPU kernel time: {total_ms:,.3f} ms" in result.output
    assert "Report: " in result.output and "report.html" in result.output
    assert "PARTIAL" not in result.output


@pytest.mark.slow  # another `profkit trace` run with its report (~2-3 s)
def test_arguments_without_double_dash_and_output_folder(workdir):
    result = trace("-o", "myrun", "prog.py", "--n", "4096", "--top", "3")
    assert result.exit_code == 0, result.output
    assert (workdir / "myrun" / "trace.sqlite").is_file()
    assert not (workdir / "profkit-runs").exists()
    # --top after the script belongs to the script
    assert "program says hi ['--n', '4096', '--top', '3']" in result.output


def test_script_failure_keeps_the_trace_marks_it_partial_and_returns_its_exit_code(workdir):
    result = trace("prog.py", "--exit", "3")
    assert result.exit_code == 3, result.output
    run_dir = only_run_dir(workdir)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "partial" and record["partial"] is True and record["exit_code"] == 3
    assert record["partial_reason"] == "the program exited with status 3"
    assert (run_dir / "trace.sqlite").is_file() and (run_dir / "report.html").is_file()
    assert True in set(find_key(json.loads((run_dir / "report.json").read_text()), "partial"))
    assert "PARTIAL: the program exited with status 3" in result.output


def test_missing_nsys_is_one_line_saying_how_to_get_it(workdir, monkeypatch):
    if tools.find_tool("nsys", env={"PATH": ""}) is not None:
        pytest.skip("this machine has nsys in an install folder")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    result = trace("--backend", "nsys", "prog.py")  # (auto would take torch.profiler instead)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("profkit: error: nsys not found")
    assert "install Nsight Systems" in lines[-1] and "PROFKIT_NSYS" in lines[-1]
    assert not (workdir / "profkit-runs").exists()


@pytest.mark.slow  # another `profkit trace` run with its report (~2-3 s)
def test_nsys_from_profkit_nsys_variable(workdir, monkeypatch):
    if tools.find_tool("nsys", env={"PATH": ""}) is not None:
        pytest.skip("this machine has nsys in an install folder, which comes first")
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    monkeypatch.setenv("PROFKIT_NSYS", str(FAKE_TOOLS / "nsys"))
    result = trace("prog.py")
    assert result.exit_code == 0, result.output
    assert json.loads((only_run_dir(workdir) / "run.json").read_text())["tools"]["nsys"]["source"] == "env"


def test_nsys_that_captures_nothing(workdir, monkeypatch):
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKE_TOOLS / "broken"), os.environ["PATH"]]))
    result = trace("prog.py")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("profkit: error: nsys wrote no report (exit status 1; last output: Error: Failed to "
                           "initialize the collection session")
    record = json.loads((only_run_dir(workdir) / "run.json").read_text())
    assert record["status"] == "failed"
    assert list((workdir / "tmp").iterdir()) == []


def test_failed_import_leaves_no_qdstrm_behind(workdir, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_MODE", "nothing")  # writes a .qdstrm, then no report
    result = trace("prog.py")
    assert result.exit_code == 2  # the program succeeded: profkit's own failure code
    assert "nsys wrote no report" in result.output
    assert list((workdir / "tmp").iterdir()) == []


def test_missing_sqlite_is_exported_afterwards(workdir, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_MODE", "no-sqlite")
    result = trace("prog.py")
    assert result.exit_code == 0, result.output
    commands = [c["argv"][0] for c in nsys_calls(workdir)]
    assert commands.count("export") == 1
    assert (only_run_dir(workdir) / "trace.sqlite").is_file()


def test_options_reach_nsys(workdir):
    result = trace("--nvtx-only", "gelu/triton", "--nsys-args", "--cuda-memory-usage=true -t cuda,nvtx",
                   "--no-python-sync-sites", "prog.py")
    assert result.exit_code == 0, result.output
    (call,) = [c for c in nsys_calls(workdir) if c["argv"][0] == "profile"]
    argv = call["argv"]
    assert "--nvtx-capture=gelu/triton@*" in argv and "--capture-range=nvtx" in argv
    assert "--cuda-memory-usage=true" in argv
    assert "-t" in argv and "--trace=cuda,nvtx" not in argv
    assert "profkit.capture.launch" not in argv and argv[-1] == "prog.py"
    assert call["env"]["PROFKIT_SYNC_SITES"] == "0"
    assert call["env"]["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"


@pytest.mark.slow  # another `profkit trace` run with its report (~2-3 s)
def test_module_target(workdir):
    pkg = workdir / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bench.py").write_text("import sys\nprint('module says hi', sys.argv[1:])\n")
    result = trace("-m", "mypkg.bench", "--", "--size", "8")
    assert result.exit_code == 0, result.output
    assert "module says hi ['--size', '8']" in result.output
    (call,) = [c for c in nsys_calls(workdir) if c["argv"][0] == "profile"]
    assert call["argv"][-5:] == ["profkit.capture.launch", "-m", "mypkg.bench", "--size", "8"]
    assert only_run_dir(workdir).name.startswith("bench-")


def test_no_such_script(workdir):
    result = trace("nope.py")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == "profkit: error: nope.py: no such script"


def test_bad_nsys_args(workdir):
    result = trace("--nsys-args", "--env-var='unclosed", "prog.py")
    assert result.exit_code == 2
    assert "--nsys-args cannot be parsed" in result.output


def test_no_gpu_is_said_plainly(workdir):
    with pytest.raises(ProfkitError) as info:
        run_trace(TraceOptions(target="prog.py"), reporter=None, root=workdir)  # type: ignore[arg-type]
    assert info.value.one_line().startswith("no NVIDIA GPU: no /dev/nvidia[0-9]* device")
    assert "--no-gpu-check" in info.value.one_line()


def test_cli_without_gpu_check_on_a_cpu_machine(workdir):
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    result = CliRunner().invoke(cli, ["trace", "prog.py"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("profkit: error: no NVIDIA GPU")


def ncu_details_csv() -> Path:
    """A real `ncu --import R --csv --page details` output (what profkit asks ncu for)."""
    try:
        return ncu_fixture("probe_details_import.csv")
    except FileNotFoundError:
        pytest.skip("ncu fixtures not unpacked")


def test_ncu_top_profiles_the_busiest_kernels(workdir, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_CSV", str(ncu_details_csv()))
    monkeypatch.setenv("FAKE_NCU_LOG", str(workdir / "ncu-calls.jsonl"))
    result = trace("--ncu-top", "2", "prog.py")
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(workdir)
    assert (run_dir / "ncu-1.ncu-rep").is_file() and (run_dir / "ncu-2.ncu-rep").is_file()
    assert (run_dir / "ncu.csv").is_file()
    calls = [json.loads(line)["argv"] for line in (workdir / "ncu-calls.jsonl").read_text().splitlines()]
    calls = [argv for argv in calls if "--kernel-name" in argv]  # not --version or --import
    profiled = [argv[argv.index("--kernel-name") + 1] for argv in calls]
    oracle = oracle_kernels()
    assert profiled[0] == "triton_poi_fused_add_mul_pow_tanh_0" == oracle[0]["Name"]
    assert profiled[1].startswith("_ZN2at6native29vectorized_elementwise_kernel")  # FillFunctor, mangled
    # ncu runs the plain program (no sync-site launcher)
    assert calls[0][-2:] == [sys.executable, "prog.py"]
    record = json.loads((run_dir / "run.json").read_text())
    assert [k["rank"] for k in record["ncu"]["kernels"]] == [1, 2]
    assert record["files"]["ncu_csv"] == "ncu.csv"
    # the report gained its ncu section from ncu.csv
    report = json.loads((run_dir / "report.json").read_text())
    assert report["sections"]["ncu"]["tables"]["ncu"]["rows"]


def test_ncu_without_permission_keeps_the_trace_and_warns(workdir, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_CSV", str(ncu_details_csv()))
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    result = trace("--ncu-top", "1", "prog.py")
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(workdir)
    assert not (run_dir / "ncu.csv").exists() and (run_dir / "report.html").is_file()
    assert "no permission to read GPU performance counters" in result.output
    record = json.loads((run_dir / "run.json").read_text())
    assert record["ncu"]["errors"] and "NVreg_RestrictProfilingToAdminUsers=0" in record["ncu"]["errors"][0]


def test_ncu_top_needs_ncu(workdir, monkeypatch):
    if tools.find_tool("ncu", env={"PATH": ""}) is not None:
        pytest.skip("this machine has ncu in an install folder")
    monkeypatch.setenv("PATH", os.pathsep.join([str(workdir / "nothing"), str(Path(sys.executable).parent)]))
    monkeypatch.setenv("PROFKIT_NSYS", str(FAKE_TOOLS / "nsys"))
    shutil.rmtree(workdir / "tmp")
    result = trace("--ncu-top", "1", "prog.py")
    assert result.exit_code == 2
    assert "ncu not found" in result.output and "install Nsight Compute" in result.output


# -- on the GPU host ---------------------------------------------------------

GELU_KERNELS = ("gelu_kernel", "gelu_kernel(const float *, float *, int)")
GELU_RANGES = [f"samples:gelu/{v}" for v in ("manual", "pytorch", "cuda", "triton", "compiled")]


def gpu_trace(tmp_path: Path, *extra: str):
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    result = CliRunner().invoke(cli, ["trace", "-o", str(tmp_path / "run"), *extra,
                                      str(ROOT / "sample_kernels/gelu.py"), "--", "--n", "4096", "--trials", "2"],
                                env=env)
    assert result.exit_code == 0, result.output
    return result, tmp_path / "run"


@pytest.mark.gpu
def test_gpu_trace_gelu_has_the_kernels_and_ranges(tmp_path):
    from profkit.analysis.kernels.summaries import kernel_summary, nvtx_summary
    from profkit.readers import open_trace

    result, run_dir = gpu_trace(tmp_path)
    with open_trace(run_dir / "trace.sqlite") as trace:
        kernels = {row["name"]: row for row in kernel_summary(trace)}
        ranges = {row["name"]: row for row in nvtx_summary(trace)}
    for name in GELU_KERNELS:
        assert name in kernels, sorted(kernels)
    assert any("vectorized_elementwise_kernel" in name and "tanh" in name for name in kernels)  # manual
    assert any("GeluCUDAKernelImpl" in name for name in kernels)  # torch's fused GELU
    assert any(name.startswith("triton_poi_fused") for name in kernels)  # torch.compile
    for name in GELU_RANGES:
        assert ranges[name]["instances"] == 1, sorted(ranges)
        assert ranges[f"{name}/call"]["instances"] == 2
    sync_sites = [name for name in ranges if name.startswith("profkit.sync:profkit.sync|synchronize|")]
    assert any("sample_kernels/bench.py" in name for name in sync_sites), sorted(ranges)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and record["tools"]["nsys"]["version"]
    assert "gelu/manual" in result.output  # the program's own output came through


@pytest.mark.gpu
def test_gpu_trace_gelu_with_ncu_top_2(tmp_path):
    from profkit.readers.ncu.launches import read_ncu_csv

    result, run_dir = gpu_trace(tmp_path, "--ncu-top", "2")
    assert (run_dir / "ncu-1.ncu-rep").is_file() and (run_dir / "ncu-2.ncu-rep").is_file()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["ncu"]["errors"] == [] and len(record["ncu"]["kernels"]) == 2
    launches = read_ncu_csv(run_dir / "ncu.csv")
    assert len(launches) == 2 and len({launch.id for launch in launches}) == 2
    for launch, kernel in zip(launches, record["ncu"]["kernels"]):
        assert launch.duration_ns and launch.duration_ns > 0
        assert launch.dram_bytes_read is not None and launch.dram_bytes_write is not None
        assert launch.achieved_occupancy_pct is not None and launch.theoretical_occupancy_pct is not None
        assert launch.registers_per_thread is not None
    rows = json.loads((run_dir / "report.json").read_text())["sections"]["ncu"]["tables"]["ncu"]["rows"]
    assert len(rows) == 2
    assert all(r["duration_ns"] > 0 and r["dram_throughput_pct"] is not None for r in rows)
    # --ncu-top collects the roofline sections by default: every profiled launch gets its roof
    tables = json.loads((run_dir / "report.json").read_text())["sections"]["ncu"]["tables"]
    roofline_rows = tables["roofline"]["rows"]
    assert roofline_rows and all(r["roof"] and r["bound"] in ("memory", "compute") for r in roofline_rows)
    assert all(r["bound"] == "memory" for r in roofline_rows)  # GELU kernels are elementwise


def test_nvtx_range_that_never_starts(workdir, monkeypatch):
    # real nsys 2023.4 in that case: prints "Generated:" with no files and exits 0
    monkeypatch.setenv("FAKE_NSYS_MODE", "nothing")
    result = trace("--nvtx-only", "no/such/range", "prog.py")
    assert result.exit_code == 2
    assert "nothing captured: the NVTX range 'no/such/range' never started" in result.output


@pytest.mark.slow
def test_real_nsys_on_a_cpu_only_program(workdir, monkeypatch):
    """Nsight Systems 2023.4 (.tools/) runs here without a GPU: the whole capture path is real; the
    report then refuses an export without CUDA data, and says where the trace is."""
    real = ROOT / ".tools/nsys/target-linux-x64"
    if not (real / "nsys").exists():
        pytest.skip("no Nsight Systems CLI in .tools/")
    monkeypatch.setenv("PATH", os.pathsep.join([str(real), str(Path(sys.executable).parent), "/usr/bin", "/bin"]))
    result = trace("prog.py", "--", "--n", "1")
    assert result.exit_code == 2
    run_dir = only_run_dir(workdir)
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"profkit: error: the trace is in {run_dir}, but the report failed: ")
    assert "no CUDA trace data" in last
    # the scrubbed export is kept; the .nsys-rep (which holds the environment) goes without --keep-rep
    assert (run_dir / "trace.sqlite").is_file() and not (run_dir / "trace.nsys-rep").exists()
    assert "program says hi ['--n', '1']" in result.output
    record = json.loads((run_dir / "run.json").read_text())
    assert record["tools"]["nsys"]["version"].startswith("2023.4.")
    assert record["status"] == "failed" and record["exit_code"] == 0
    assert list((workdir / "tmp").iterdir()) == []


def test_keep_env_and_keep_rep_keep_what_nsys_wrote(workdir):
    result = trace("--keep-env", "--keep-rep", "prog.py")
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(workdir)
    assert (run_dir / "trace.sqlite").read_bytes() == nsys_fixture(FIXTURE).read_bytes()
    assert (run_dir / "trace.nsys-rep").is_file()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["scrub"] == {"scrubbed": False, "why": "--keep-env"}
    assert record["files"]["nsys_rep"] == "trace.nsys-rep"


def test_default_trace_leaves_no_planted_secret(workdir, monkeypatch):
    """A fake secret in the environment, the export's three environment places, its
    command line and an NVTX text (tests/planted.py) is nowhere in the run folder's
    export, report or run.json after the default `profkit trace`."""
    from tests import planted

    export = planted.plant_secret("nsys2025_train_print", workdir)
    monkeypatch.setenv("FAKE_NSYS_EXPORT", str(export))
    monkeypatch.setenv(planted.SECRET_VARIABLE, planted.SECRET)
    result = trace("--keep-rep", "prog.py", "--", planted.ARGUMENT)
    assert result.exit_code == 0, result.output
    run_dir = only_run_dir(workdir)
    record = json.loads((run_dir / "run.json").read_text())
    assert record["scrub"]["removed"]["META_DATA_CAPTURE environment rows"] >= 5
    assert record["command"] == ["prog.py", "--token=[redacted]"]
    assert any("--keep-rep" in w for w in record["warnings"])
    for name in ("trace.sqlite", "report.html", "report.md", "report.json", "run.json"):
        data = (run_dir / name).read_bytes()
        assert planted.SECRET.encode() not in data and b"5ecret" not in data, name


def test_a_script_named_like_an_option_reaches_python_as_a_path(workdir):
    from profkit.capture.trace import program_argv

    (workdir / "-c.py").write_text("print('hi')\n")
    argv = program_argv(TraceOptions(target="-c.py", python="python3"))
    assert argv == ["python3", "-m", "profkit.capture.launch", "./-c.py"]
    argv = program_argv(TraceOptions(target="-c.py", python="python3", sync_sites=False))
    assert argv == ["python3", "./-c.py"]
    # --memory and --bare-run work through the launcher, with or without sync sites (on the GPU
    # host, --memory --no-python-sync-sites once ran the program bare and wrote no snapshot)
    for feature in ("memory", "bare_run"):
        argv = program_argv(TraceOptions(target="-c.py", python="python3", sync_sites=False, **{feature: True}))
        assert argv == ["python3", "-m", "profkit.capture.launch", "./-c.py"]


@pytest.mark.gpu
def test_gpu_trace_memory_explains_a_planted_oom(tmp_path):
    """`profkit trace --memory` on a loop whose sequence length doubles until the allocator fails:
    the snapshot dumped by the out-of-memory observer names the failed request's size, which the
    program's own observer was told (MEM_TRUTH), and the line that asked for it."""
    from profkit.analysis.memory import memory_report
    from profkit.readers.snapshot import open_snapshot

    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"}
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(cli, ["trace", "--memory", "-o", str(run_dir), "--no-python-sync-sites",
                                      str(ROOT / "sample_kernels/gpt_memory.py"), "--", "--oom"], env=env)
    assert result.exit_code == 0, result.output
    truth = json.loads(next(line for line in result.output.splitlines()
                            if line.startswith("MEM_TRUTH "))[len("MEM_TRUTH "):])["oom"]
    assert (run_dir / "oom_snapshot.pickle").is_file() and (run_dir / "memory_snapshot.pickle").is_file()
    assert "Memory snapshot: profkit memory" in result.output
    with open_snapshot(run_dir / "oom_snapshot.pickle") as trace:
        oom = memory_report(trace)["oom"][0]
    assert oom["requested_bytes"] == truth["requested_bytes"]
    assert oom["cause"] == "real use"  # the request is larger than the whole device
    assert f"Out of memory on GPU {oom['device']}" in result.output


@pytest.mark.gpu
def test_gpu_trace_memory_splits_the_device_memory_by_the_snapshot(tmp_path):
    """`profkit trace --memory` records the driver's allocations (nsys --cuda-memory-usage) and the
    allocator's snapshot; `profkit memory RUN_DIR` splits the device memory the process held at its
    peak: the caching allocator's part is the reserved peak the program measured itself (MEM_TRUTH,
    torch.cuda.max_memory_reserved), and the parts add up to the export's own peak."""
    from profkit.analysis.memory.driver import CACHING_ALLOCATOR

    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"}
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(cli, ["trace", "--memory", "-o", str(run_dir), "--no-python-sync-sites",
                                      str(ROOT / "sample_kernels/gpt_memory.py"), "--", "--steps", "6"], env=env)
    assert result.exit_code == 0, result.output
    truth = json.loads(next(line for line in result.output.splitlines()
                            if line.startswith("MEM_TRUTH "))[len("MEM_TRUTH "):])
    shown = CliRunner().invoke(cli, ["memory", str(run_dir), "--format", "json"], env=env)
    assert shown.exit_code == 0, shown.output
    (gpu,) = [d for d in json.loads(shown.output)["devices"] if d["device"] >= 0]
    assert gpu["level"] == "driver" and gpu["snapshot"] == "memory_snapshot.pickle"
    parts = {p["category"]: p["bytes"] for p in gpu["held_by_category"]}
    assert parts[CACHING_ALLOCATOR] == max(truth["step_peak_reserved_bytes"])
    assert sum(parts.values()) == gpu["peak"]["reserved_bytes"]


@pytest.mark.gpu
def test_gpu_trace_a_window_of_steps(tmp_path):
    """`profkit trace --steps 6 --skip 10` under nsys: only those optimizer steps are traced (the
    export holds 6 "step" ranges of the program's 40, counted by SQL), and the run says how the
    traced steps compare with the untraced ones of the same run."""
    import sqlite3

    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200"}
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(cli, ["trace", "--steps", "6", "--skip", "10", "-o", str(run_dir),
                                      str(ROOT / "sample_kernels/train_mlp.py"), "--", "--steps", "40"], env=env)
    assert result.exit_code == 0, result.output
    with sqlite3.connect(run_dir / "trace.sqlite") as db:
        (ranges,) = db.execute("SELECT count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                               "WHERE coalesce(n.text, s.value) = 'step' AND n.end IS NOT NULL").fetchone()
    assert 5 <= ranges <= 7  # the window opens and closes inside the hooks of steps 10 and 16
    window = json.loads((run_dir / "run.json").read_text())["recorded"]["capture_window"]
    assert window["traced_steps"] >= 4 and window["untraced_steps"] >= 20, window
    assert "nsys traced a window of the run" in result.output.replace("\n", " ") or window["inflated"]

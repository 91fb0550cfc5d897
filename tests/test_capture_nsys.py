"""The nsys profile command line, its environment, and reading nsys's output as it runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from profkit.capture import nsys
from profkit.errors import ProfkitError

PROGRAM = ["/usr/bin/python3", "-m", "profkit.capture.launch", "train.py", "--steps", "20"]


def build(**kwargs) -> list[str]:
    request = nsys.ProfileRequest(program=PROGRAM, output_base=Path("/tmp/pk/trace"), **kwargs)
    return nsys.build_profile_command("/opt/nsys/bin/nsys", request)


def test_default_command_line():
    assert build() == [
        "/opt/nsys/bin/nsys", "profile",
        "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
        "--force-overwrite=true", "--cuda-graph-trace=graph", "--output=/tmp/pk/trace",
        *PROGRAM,
    ]


def test_full_traces_osrt_every_graph_node_and_samples_at_nsys_rate():
    cmd = build(full=True, python_sampling=True)
    assert "--trace=cuda,nvtx,osrt" in cmd and "--cuda-graph-trace=node" in cmd
    assert "--python-sampling-frequency=1000" in cmd
    assert f"--python-sampling-frequency={nsys.PYTHON_SAMPLING_HZ}" in build(python_sampling=True)


def test_python_sampling_where_nsys_has_it():
    assert "--python-sampling=true" in build(python_sampling=True)
    assert "--python-sampling=true" not in build()
    assert "--python-sampling=false" in build(python_sampling=True, extra_args=["--python-sampling=false"])
    assert "--python-sampling=true" not in build(python_sampling=True, extra_args=["--python-sampling=false"])
    assert "--include-blobs=true" in nsys.build_export_command("nsys", Path("r.nsys-rep"), Path("r.sqlite"))
    assert "--include-blobs=true" not in nsys.build_export_command("nsys", Path("r"), Path("s"), blobs=False)


def test_program_arguments_stay_last_and_untouched():
    cmd = build(extra_args=["--cuda-memory-usage=true"])
    assert cmd[-len(PROGRAM):] == PROGRAM
    assert cmd.index("--cuda-memory-usage=true") < cmd.index(PROGRAM[0])


def test_nvtx_only_captures_the_range_in_any_domain_and_lets_the_program_finish():
    cmd = build(nvtx_range="gelu/triton")
    assert "--capture-range=nvtx" in cmd
    assert "--nvtx-capture=gelu/triton@*" in cmd
    assert "--capture-range-end=stop" in cmd  # nsys's default, stop-shutdown, kills the program


def test_nvtx_range_with_a_domain_is_kept():
    assert "--nvtx-capture=gelu/triton@samples" in build(nvtx_range="gelu/triton@samples")
    assert nsys.nvtx_capture_spec(r"a\@b") == r"a\@b@*"  # an escaped @ is part of the name


@pytest.mark.parametrize("user_args, dropped, kept", [
    (["-t", "cuda,nvtx,osrt"], "--trace=cuda,nvtx", "-t"),
    (["--trace=cuda,cublas"], "--trace=cuda,nvtx", "--trace=cuda,cublas"),
    (["--sample=process-tree"], "--sample=none", "--sample=process-tree"),
    (["--capture-range-end=repeat:3"], "--capture-range-end=stop", "--capture-range-end=repeat:3"),
    (["--cuda-graph-trace=node"], "--cuda-graph-trace=graph", "--cuda-graph-trace=node"),
])
def test_user_flags_replace_ours(user_args, dropped, kept):
    cmd = build(nvtx_range="step", extra_args=user_args)
    assert dropped not in cmd
    assert kept in cmd


def test_nsys_args_may_not_move_the_output():
    for args in (["-o", "x"], ["--output=x"]):
        with pytest.raises(ProfkitError, match="may not set --output"):
            build(extra_args=args)


def test_export_command():
    assert nsys.build_export_command("nsys", Path("/t/trace.nsys-rep"), Path("/t/trace.sqlite")) == [
        "nsys", "export", "--type=sqlite", "--include-blobs=true", "--force-overwrite=true", "--output=/t/trace.sqlite",
        "/t/trace.nsys-rep"]


def test_environment(tmp_path):
    env = nsys.profile_environment({"PATH": "/bin", "TMPDIR": "/scratch"}, tmp_path, nvtx_range=None,
                                   sync_sites=True)
    assert env["TMPDIR"] == str(tmp_path)  # where nsys puts the .qdstrm
    # torch.compile's cache stays where it would be without profkit
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith("/scratch/torchinductor_")
    assert env["PROFKIT_SYNC_SITES"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "NSYS_NVTX_PROFILER_REGISTER_ONLY" not in env
    assert env["PATH"] == "/bin"


def test_environment_respects_the_users_settings(tmp_path):
    env = nsys.profile_environment({"TORCHINDUCTOR_CACHE_DIR": "/mine", "PYTHONUNBUFFERED": "0"}, tmp_path,
                                   nvtx_range="step", sync_sites=False)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    assert env["PYTHONUNBUFFERED"] == "0"
    assert env["PROFKIT_SYNC_SITES"] == "0"
    assert env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    assert nsys.profile_environment({}, tmp_path, nvtx_range=None, sync_sites=True)[
        "TORCHINDUCTOR_CACHE_DIR"].startswith("/tmp/torchinductor_")


# Lines as nsys 2023.4 and 2025.3 print them (see tests/data/nsys/*.stdout)
@pytest.mark.parametrize("segment, kind, stage, percent", [
    ("Collecting data...", "chatter", None, None),
    ("Generating '/tmp/nsys-report-c1c8.qdstrm'", "stage", "importing", None),
    ("[1/2] [11%                         ] nsys2025_gelu.nsys-rep", "progress", "importing", 11),
    ("[1/2] [========================100%] nsys2025_gelu.nsys-rep", "progress", "importing", 100),
    ("[2/2] [=15%                        ] nsys2025_gelu.sqlite", "progress", "exporting", 15),
    ("Generated:", "chatter", None, None),
    ("\t/tmp/fixtures/nsys/nsys2025_gelu.sqlite", "chatter", None, None),
    ("    /tmp/nsystry/out/trace.nsys-rep", "chatter", None, None),
    ("gelu/manual                  median    0.327 ms  [0.325 .. 0.344]  n=5", "output", None, None),
    ("[1/2] done", "output", None, None),
    ("Generating data for step 3", "output", None, None),
])
def test_classify(segment, kind, stage, percent):
    event = nsys.classify(segment)
    assert (event.kind, event.stage, event.percent) == (kind, stage, percent)


class Recorder(nsys.Reporter):
    def __init__(self) -> None:
        self.stages: list[str] = []
        self.percents: list[int] = []
        self.out: list[tuple[str, str]] = []

    def stage(self, name: str, detail: str = "") -> None:
        if not self.stages or self.stages[-1] != name:
            self.stages.append(name)

    def progress(self, percent: int) -> None:
        self.percents.append(percent)

    def output(self, text: str, stream: str) -> None:
        self.out.append((stream, text))


def test_run_streaming_separates_nsys_from_the_program(tmp_path):
    fixture_stdout = Path(__file__).parent / "data/nsys/nsys2025_gelu.stdout"
    if not fixture_stdout.exists():
        pytest.skip("nsys fixtures not unpacked")
    # replay a real nsys 2025.3 stdout (program lines, \r progress bars, Generated:) and a stderr line
    script = ("import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); sys.stdout.flush();"
              "sys.stderr.write('a warning\\n'); sys.exit(7)")
    log = tmp_path / "trace.log"
    rec = Recorder()
    result = nsys.run_streaming([sys.executable, "-c", script, str(fixture_stdout)], env={}, cwd=None,
                                log_path=log, reporter=rec)
    assert result.returncode == 7 and not result.interrupted
    assert rec.stages == ["importing", "exporting"]
    assert rec.percents[-1] == 100 and 11 in rec.percents
    program_lines = [text for stream, text in rec.out if stream == "stdout"]
    assert program_lines == [line + "\n" for line in fixture_stdout.read_text().splitlines()[:5]]
    assert ("stderr", "a warning\n") in rec.out
    # both streams go to the log as they arrive (their relative order is up to the OS)
    logged = log.read_bytes()
    assert b"a warning\n" in logged
    assert logged.replace(b"a warning\n", b"", 1) == fixture_stdout.read_bytes()


def test_run_streaming_keeps_partial_last_lines_and_blank_lines(tmp_path):
    rec = Recorder()
    script = "import sys; sys.stdout.write('one\\n\\ntwo'); sys.stdout.flush()"
    nsys.run_streaming([sys.executable, "-c", script], env={}, cwd=None, log_path=tmp_path / "log", reporter=rec)
    assert rec.out == [("stdout", "one\n"), ("stdout", "\n"), ("stdout", "two")]


def test_run_streaming_missing_program_is_a_profkit_error(tmp_path):
    with pytest.raises(ProfkitError, match="cannot run"):
        nsys.run_streaming([str(tmp_path / "no-such-nsys")], env={}, cwd=None, log_path=tmp_path / "log",
                           reporter=Recorder())


REAL_NSYS = Path(__file__).resolve().parent.parent / ".tools/nsys/target-linux-x64/nsys"


@pytest.mark.slow
def test_real_nsys_accepts_our_command_line_and_keeps_the_qdstrm_in_the_temp_folder(tmp_path):
    """Nsight Systems 2023.4 runs on a CPU-only machine: the flags, TMPDIR and
    output handling are checked against the real tool (no kernels, of course)."""
    if not REAL_NSYS.exists():
        pytest.skip("no Nsight Systems CLI in .tools/")
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "prog.py"
    script.write_text("import sys, time\nprint('program output', sys.argv[1:])\ntime.sleep(0.2)\nsys.exit(3)\n")
    request = nsys.ProfileRequest(program=[sys.executable, str(script), "--x", "1"], output_base=temp / "trace")
    env = nsys.profile_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, temp, nvtx_range=None,
                                   sync_sites=False)
    rec = Recorder()
    result = nsys.run_streaming(nsys.build_profile_command(REAL_NSYS, request), env=env, cwd=tmp_path,
                                log_path=tmp_path / "trace.log", reporter=rec)
    assert result.returncode == 3  # nsys passes the program's exit status through
    assert (temp / "trace.nsys-rep").is_file()
    assert not nsys.exports_blobs(REAL_NSYS)  # 2023.4's export has no --include-blobs
    assert not nsys.samples_python(REAL_NSYS, blobs=False)
    nsys.run_export(REAL_NSYS, temp / "trace.nsys-rep", temp / "trace.sqlite", env=env,
                    log_path=tmp_path / "trace.log", reporter=rec)
    assert (temp / "trace.sqlite").is_file()
    assert not list(temp.glob("*.qdstrm")) and not list(tmp_path.glob("*.qdstrm"))
    assert rec.stages == ["importing", "exporting"]
    assert ("stdout", "program output ['--x', '1']\n") in rec.out
    assert not [text for stream, text in rec.out if "Generat" in text or "%]" in text]
    from profkit.readers.nsys import open_export

    with open_export(temp / "trace.sqlite") as export:
        assert export.schema_version.startswith("3.")


def test_ctrl_c_is_passed_on_once_and_the_run_finishes(tmp_path):
    """The child (standing in for nsys) gets one SIGINT, may still write its
    report, and its exit status is kept; the run is marked interrupted."""
    import os
    import signal
    import threading

    script = ("import signal, sys, time\n"
              "def stop(*_):\n"
              "    print('writing what was captured', flush=True); sys.exit(5)\n"
              "signal.signal(signal.SIGINT, stop)\n"
              "print('ready', flush=True)\n"
              "time.sleep(30)\n")
    rec = Recorder()
    # as from a terminal: a test runner started in the background (nohup, &) has SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, os.kill, args=(os.getpid(), signal.SIGINT))  # Ctrl-C to profkit only
    timer.start()
    try:
        result = nsys.run_streaming([sys.executable, "-c", script], env={}, cwd=None, log_path=tmp_path / "log",
                                    reporter=rec)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert result.interrupted and result.returncode == 5
    assert "interrupted" in rec.stages
    assert ("stdout", "writing what was captured\n") in rec.out

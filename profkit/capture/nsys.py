"""Run a program under `nsys profile` and export SQLite.

Why the command line looks the way it does:
- ``-t cuda,nvtx``: kernels and memcpys, the user's (and the sync hook's)
  NVTX ranges; OS runtime calls (``osrt``: what a thread blocked in while the
  GPU idled) only with ``full``, since tracing every libc call costs a
  host-bound loop the most;
- CUDA graphs traced per replay (``--cuda-graph-trace=graph``: one row per
  launch, which costs a graph-replaying decode loop least); ``full`` traces
  every node of every replay;
- Python sampling (where nsys has it) at PYTHON_SAMPLING_HZ, a fifth of
  nsys's 1000 Hz; ``full`` keeps 1000 Hz;
- ``--sample=none --cpuctxsw=none``: CPU sampling needs perf_event access
  and makes exports much bigger, and no profkit analysis reads it;
- ``--export sqlite``: the export profkit reads, made in the same run;
- the output goes to a temporary folder and TMPDIR points there too: nsys
  writes its multi-GB ``.qdstrm`` capture into TMPDIR (2023.4 and 2025.3
  both print "Generating '$TMPDIR/nsys-report-XXXX.qdstrm'"), so a crashed
  import never leaves gigabytes behind in the user's folders.
- with ``--nvtx-only RANGE``: ``--capture-range=nvtx --nvtx-capture=RANGE@*``
  (any domain, unless RANGE names one) and ``--capture-range-end=stop`` so
  the program runs to its end instead of being shut down (nsys's default);
  NSYS_NVTX_PROFILER_REGISTER_ONLY=0 lets unregistered NVTX strings (most
  Python code) start the capture.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profkit.errors import ProfkitError

TRACE_APIS = "cuda,nvtx"
TRACE_APIS_FULL = "cuda,nvtx,osrt"
PYTHON_SAMPLING_HZ = 200
PYTHON_SAMPLING_HZ_FULL = 1000

# nsys options profkit sets itself; a user's --nsys-args replacing one of
# them wins, so ours is dropped.  Short forms map to the long ones.
_SHORT_OPTIONS = {"-t": "--trace", "-s": "--sample", "-c": "--capture-range", "-p": "--nvtx-capture",
                  "-f": "--force-overwrite", "-o": "--output"}
_PROFKIT_SET = ("--trace", "--sample", "--cpuctxsw", "--export", "--force-overwrite", "--cuda-graph-trace",
                "--cuda-memory-usage",
                "--python-sampling", "--python-sampling-frequency",
                "--capture-range", "--nvtx-capture", "--capture-range-end")
# Options that would move or rename the files profkit has to find afterwards.
_FORBIDDEN = {"--output": "use `profkit trace -o DIR` to choose the run folder"}


@dataclass(frozen=True)
class ProfileRequest:
    """What to profile and how."""

    program: Sequence[str]  # full argv of the program to run under nsys
    output_base: Path  # <dir>/<name> without extension; nsys adds .nsys-rep / .sqlite
    nvtx_range: str | None = None
    extra_args: Sequence[str] = ()  # passed through from --nsys-args
    # Python periodic sampling (nsys 2024.1+): what `profkit host` reads, after an export with blobs
    python_sampling: bool = False
    # every API (osrt too), every graph node, Python sampling at nsys's own rate: what costs most
    full: bool = False
    # --memory: every device allocation the process makes from the driver (cudaMalloc, module
    # globals), which `profkit memory` splits into the caching allocator's and the libraries'
    cuda_memory_usage: bool = False
    # --steps / --window: trace only between the launcher's cudaProfilerStart and cudaProfilerStop
    cuda_profiler_range: bool = False


def option_names(args: Sequence[str]) -> set[str]:
    """Long option names present in an nsys argument list (``-t x`` and ``--trace=x`` -> --trace)."""
    names = set()
    for arg in args:
        if not arg.startswith("-"):
            continue
        name = arg.split("=", 1)[0]
        names.add(_SHORT_OPTIONS.get(name, name))
    return names


def nvtx_capture_spec(range_name: str) -> str:
    """nsys's ``--nvtx-capture`` value: ``range@domain`` as given, else ``range@*`` (any domain)."""
    if re.search(r"(?<!\\)@", range_name):
        return range_name
    return f"{range_name}@*"


def build_profile_command(nsys: Path | str, request: ProfileRequest) -> list[str]:
    """The full ``nsys profile ...`` argv."""
    user = list(request.extra_args)
    user_names = option_names(user)
    for name, why in _FORBIDDEN.items():
        if name in user_names:
            raise ProfkitError(f"--nsys-args may not set {name}", hint=why)
    ours: list[tuple[str, ...]] = [
        ("--trace", f"--trace={TRACE_APIS_FULL if request.full else TRACE_APIS}"),
        ("--sample", "--sample=none"),
        ("--cpuctxsw", "--cpuctxsw=none"),
        # no --export=sqlite: an export made during capture leaves NVTX payloads (the Python
        # samples, NCCL's) empty; profkit exports the report afterwards with --include-blobs=true
        ("--force-overwrite", "--force-overwrite=true"),
        # full: every kernel of every CUDA graph replay, not one row per replay (whose kernels
        # the kernel tables cannot show); measured on the committed reduce-overhead capture:
        # the same 11.1 ms steps, but cudaGraphLaunch 168 us instead of 48 us
        ("--cuda-graph-trace", f"--cuda-graph-trace={'node' if request.full else 'graph'}"),
    ]
    if request.python_sampling:
        rate = PYTHON_SAMPLING_HZ_FULL if request.full else PYTHON_SAMPLING_HZ
        ours += [("--python-sampling", "--python-sampling=true"),
                 ("--python-sampling-frequency", f"--python-sampling-frequency={rate}")]
    if request.cuda_memory_usage:
        ours.append(("--cuda-memory-usage", "--cuda-memory-usage=true"))
    if request.cuda_profiler_range:
        ours += [("--capture-range", "--capture-range=cudaProfilerApi"),
                 ("--capture-range-end", "--capture-range-end=stop")]
    elif request.nvtx_range:
        ours += [
            ("--capture-range", "--capture-range=nvtx"),
            ("--nvtx-capture", f"--nvtx-capture={nvtx_capture_spec(request.nvtx_range)}"),
            ("--capture-range-end", "--capture-range-end=stop"),
        ]
    cmd = [str(nsys), "profile"]
    for name, arg in ours:
        if name not in user_names:
            cmd.append(arg)
    cmd += [f"--output={request.output_base}", *user, *request.program]
    return cmd


def build_export_command(nsys: Path | str, report: Path, sqlite: Path, *, blobs: bool = True) -> list[str]:
    """``nsys export`` of a report to SQLite; ``blobs``: NVTX payloads (Python samples, NCCL's) included
    (``--include-blobs``, which nsys 2023.4 lacks)."""
    return [str(nsys), "export", "--type=sqlite", *(["--include-blobs=true"] if blobs else []),
            "--force-overwrite=true", f"--output={sqlite}", str(report)]


def profile_environment(base: Mapping[str, str], temp_dir: Path, *, nvtx_range: str | None,
                        sync_sites: bool) -> dict[str, str]:
    """Environment for nsys and the program under it."""
    env = dict(base)
    original_tmp = env.get("TMPDIR") or "/tmp"
    env["TMPDIR"] = str(temp_dir)
    # TMPDIR also moves torch.compile's cache (inductor keeps it under
    # gettempdir()); pin it to where it would be without us so compiled
    # kernels are reused instead of rebuilt inside the profile.
    if "TORCHINDUCTOR_CACHE_DIR" not in env:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(original_tmp, f"torchinductor_{_user_name(env)}")
    env.setdefault("PYTHONUNBUFFERED", "1")  # program output arrives as it is printed
    env["PROFKIT_SYNC_SITES"] = "1" if sync_sites else "0"
    if nvtx_range:
        env.setdefault("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
    return env


def _user_name(env: Mapping[str, str]) -> str:
    # torch._inductor.runtime.cache_dir_utils: getpass.getuser() with \/:*?"<>| replaced by _
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = env.get("USER", "unknown")
    return re.sub(r'[\\/:*?"<>|]', "_", name)


# -- watching nsys's output --------------------------------------------------

# "[1/2] [=====95%  ] trace.nsys-rep": nsys's import/export progress bars.
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] \[[= ]*(\d+)%[= ]*\] (\S+)\s*$")
_GENERATING = re.compile(r"^Generating '.*\.qdstrm'\s*$")
# "Processing 3310 events: [=====100%]": `nsys export`'s own bar (2023.4)
_EXPORT_PROGRESS = re.compile(r"^Processing \d+ events: \[[= ]*(\d+)%[= ]*\]\s*$")
_CHATTER = re.compile(r"^(Collecting data\.\.\.|Generated:|Processing events\.\.\.|"
                      r"Capture range (started|ended).*)\s*$")
_GENERATED_PATH = re.compile(r"^\s+/\S+\.(nsys-rep|qdrep|sqlite|qdstrm)\s*$")


@dataclass
class NsysEvent:
    """What a segment of nsys's stdout means: a stage change, progress, or program output."""

    kind: str  # stage | progress | chatter | output
    stage: str | None = None  # profiling | importing | exporting
    percent: int | None = None
    text: str = ""


def classify(segment: str) -> NsysEvent:
    """Tell nsys's own messages from the program's output (one line or \\r-segment)."""
    match = _PROGRESS.match(segment)
    if match:
        target = match.group(4)
        stage = "exporting" if target.endswith(".sqlite") else "importing"
        return NsysEvent("progress", stage, int(match.group(3)), segment)
    match = _EXPORT_PROGRESS.match(segment)
    if match:
        return NsysEvent("progress", "exporting", int(match.group(1)), segment)
    if _GENERATING.match(segment):
        return NsysEvent("stage", "importing", None, segment)
    if _CHATTER.match(segment) or _GENERATED_PATH.match(segment):
        return NsysEvent("chatter", None, None, segment)
    return NsysEvent("output", None, None, segment)


class Reporter:
    """Callbacks from ``run_nsys``; the CLI shows them, tests record them."""

    def stage(self, name: str, detail: str = "") -> None: ...

    def progress(self, percent: int) -> None: ...

    def output(self, text: str, stream: str) -> None: ...


@dataclass
class ProcessResult:
    returncode: int
    interrupted: bool = False
    tail: list[str] = field(default_factory=list)  # last nsys/program lines, for error messages


def run_streaming(cmd: Sequence[str], *, env: Mapping[str, str], cwd: Path | None, log_path: Path,
                  reporter: Reporter, classify_stdout: Callable[[str], NsysEvent] = classify,
                  program_stderr: bool = True) -> ProcessResult:
    """Run cmd, copying its output to log_path (line by line) and to the reporter as it arrives.

    stdout segments are classified (nsys's stage messages become stage and
    progress calls, the rest is program output); stderr is program output, unless
    ``program_stderr`` is False (``nsys export``: no program runs, its bar is on stderr).
    Ctrl-C is passed to the child once and then waited out, because nsys
    answers SIGINT by stopping the capture and still writing the report.
    """
    # Its own process group: a Ctrl-C at the terminal reaches profkit only,
    # which passes exactly one SIGINT on (nsys treats a second one as "abort").
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    try:
        proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, **group)
    except OSError as exc:
        raise ProfkitError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    chunks: queue.Queue[tuple[str, bytes]] = queue.Queue()
    readers = [threading.Thread(target=_pump, args=(pipe, name, chunks), daemon=True)
               for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))]
    for reader in readers:
        reader.start()
    pending = {"stdout": "", "stderr": ""}
    tail: list[str] = []
    interrupted = False
    open_streams = 2

    def on_interrupt() -> None:
        """First Ctrl-C: pass it to nsys, which then writes what it captured.
        Second: kill the process group and re-raise (called inside the except)."""
        nonlocal interrupted
        if interrupted:
            _kill_group(proc)
            raise  # noqa: PLE0704 - the KeyboardInterrupt being handled by the caller
        interrupted = True
        _forward_sigint(proc)

    with open(log_path, "ab") as log:
        while open_streams:
            try:
                # a timeout, so a Ctrl-C that the kernel hands to a reader
                # thread still reaches the main thread's handler promptly
                stream, data = chunks.get(timeout=0.1)
            except queue.Empty:
                continue
            except KeyboardInterrupt:
                on_interrupt()
                reporter.stage("interrupted", "waiting for nsys to write what it captured (Ctrl-C again to abort)")
                continue
            if not data:
                open_streams -= 1
                if pending[stream]:
                    log.write(pending[stream].encode())
                    _handle(pending[stream], "", stream, reporter, classify_stdout, tail, program_stderr)
                    pending[stream] = ""
                continue
            text = pending[stream] + data.decode("utf-8", errors="replace")
            pieces = re.split(r"(\r\n|\r|\n)", text)
            # pieces alternate text, separator; the last text has no separator yet
            for i in range(0, len(pieces) - 1, 2):
                # whole lines only, so stdout and stderr never interleave inside a line of the log
                log.write((pieces[i] + pieces[i + 1]).encode())
                _handle(pieces[i], pieces[i + 1], stream, reporter, classify_stdout, tail, program_stderr)
            log.flush()
            pending[stream] = pieces[-1]
        while True:
            try:
                returncode = proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                continue
            except KeyboardInterrupt:
                on_interrupt()
    return ProcessResult(returncode, interrupted, tail[-20:])


def _pump(pipe, name: str, chunks: queue.Queue) -> None:
    fd = pipe.fileno()
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        chunks.put((name, data))
        if not data:
            pipe.close()
            return


def _handle(segment: str, separator: str, stream: str, reporter: Reporter,
            classify_stdout: Callable[[str], NsysEvent], tail: list[str], program_stderr: bool = True) -> None:
    if not segment and separator == "\r":
        return  # the start of a progress bar redraw, not a blank line
    if segment.strip():
        tail.append(segment)
        del tail[:-40]
    if stream == "stderr" and program_stderr:
        reporter.output(segment + ("\n" if separator else ""), stream)
        return
    event = classify_stdout(segment)
    if event.kind == "output":
        # keep the program's own line structure; a bare \r (progress bars) becomes a newline
        reporter.output(segment + ("\n" if separator else ""), stream)
    elif event.kind == "stage":
        reporter.stage(event.stage or "importing")
    elif event.kind == "progress":
        reporter.stage(event.stage or "importing")
        if event.percent is not None:
            reporter.progress(event.percent)


def _forward_sigint(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGINT)
        except OSError:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL nsys and everything it started (the program too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def supports_option(nsys: Path | str, command: str, option: str) -> bool:
    """Whether ``nsys COMMAND --help`` lists an option (2023.4's export has no ``--include-blobs``)."""
    try:
        done = subprocess.run([str(nsys), command, "--help"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in done.stdout + done.stderr


def exports_blobs(nsys: Path | str) -> bool:
    """Whether ``nsys export`` keeps NVTX payloads' bytes (``--include-blobs``; 2023.4's has none)."""
    return supports_option(nsys, "export", "--include-blobs")


def samples_python(nsys: Path | str, *, blobs: bool) -> bool:
    """Whether to turn on Python sampling: this nsys samples, and (``blobs``) its export keeps the
    samples' bytes; without them the samples would cost the program time and reach no export."""
    return blobs and supports_option(nsys, "profile", "--python-sampling")


def run_export(nsys: Path | str, report: Path, sqlite: Path, *, env: Mapping[str, str], log_path: Path,
               reporter: Reporter, blobs: bool | None = None) -> ProcessResult:
    """``nsys export`` a report whose SQLite nsys did not write itself; ``blobs``: what
    ``exports_blobs`` said (asked of nsys when not given)."""
    reporter.stage("exporting")
    if blobs is None:
        blobs = exports_blobs(nsys)
    return run_streaming(build_export_command(nsys, report, sqlite, blobs=blobs), env=env, cwd=None,
                         log_path=log_path, reporter=reporter, program_stderr=False)

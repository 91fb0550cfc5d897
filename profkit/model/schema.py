"""The columns of every table of the trace model, in one place.

A reader fills these tables; analyses read them.  Every reader must produce
exactly these column names and kinds (a column the source does not record is
filled with the table's missing value: ``-1`` for integers, ``NaN``-free
empty category ``""`` for text) so that an analysis never needs to know
which source a trace came from.

Kinds:
- ``int``: int64, or int32 for the columns ``NARROW`` names (see there).  Times are integer nanoseconds on the trace's own clock
  (nsys: since the session start; Kineto: the JSON's microseconds times
  1000, rounded: ``round(ts * 1000)``).  ``end`` is exclusive-free: the
  duration of an event is ``end - start``.
- ``category``: a pandas ``Categorical`` (codes plus the distinct strings).
  A million kernels of 300 names are a million small integers and 300
  strings, like nsys's StringIds and HTA's symbol table; ``groupby(...,
  observed=True)`` on it is a hash on the codes.
- ``float``: float64.

Why pandas and not a list of objects: a 1M-kernel trace is 1M rows; as
dataclasses that is ~1 GB and seconds of Python.  As columns it is ~8 MB per
integer column, and the summaries are vectorised (numpy) operations.  pandas
rather than bare numpy because joins (launch <-> kernel by correlation id),
group-bys and categoricals come with it, and it is already in the stack.
"""

from __future__ import annotations

from dataclasses import dataclass

INT = "int"
CATEGORY = "category"
FLOAT = "float"

MISSING_INT = -1


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    doc: str


def _cols(*spec: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in spec)


# One row per CUDA device seen in the trace.
DEVICES = _cols(
    ("device", INT, "CUDA device id (as kernels/memcpy refer to it)"),
    ("name", CATEGORY, "e.g. 'NVIDIA H200'"),
    ("sm_count", INT, "streaming multiprocessors"),
    ("cc_major", INT, "compute capability, major"),
    ("cc_minor", INT, "compute capability, minor"),
    ("memory_bandwidth_bps", INT, "peak DRAM bandwidth, bytes/s (-1 unknown)"),
    ("memory_total_bytes", INT, "device memory (-1 unknown)"),
    ("max_threads_per_sm", INT, "occupancy limit (-1 unknown)"),
    ("max_blocks_per_sm", INT, "occupancy limit (-1 unknown)"),
    ("max_registers_per_sm", INT, "occupancy limit (-1 unknown)"),
    ("max_shared_memory_per_sm", INT, "bytes (-1 unknown)"),
    ("max_shared_memory_per_block", INT, "bytes, opt-in maximum (-1 unknown)"),
    ("warp_size", INT, "threads per warp (-1 unknown)"),
    # Added by the nsys reader (occupancy needs them; nsys TARGET_INFO_GPU has them):
    ("max_threads_per_block", INT, "-1 unknown"),
    ("max_registers_per_block", INT, "-1 unknown"),
    ("default_shared_memory_per_block", INT, "bytes without opt-in (48 KiB), -1 unknown"),
    ("reserved_shared_memory_per_block", INT, "bytes the driver reserves per block, -1 unknown"),
)

# One row per GPU kernel execution.
KERNELS = _cols(
    ("start", INT, "ns"),
    ("end", INT, "ns"),
    ("device", INT, "CUDA device id"),
    ("stream", INT, "stream id (nsys streamId, Kineto args.stream)"),
    ("pid", INT, "process that launched it"),
    ("correlation", INT, "id shared with the API call that launched it (-1 none)"),
    ("name", CATEGORY, "demangled name, as nsys's cuda_gpu_kern_sum and Kineto's event name"),
    ("short_name", CATEGORY, "base name without template arguments and parameters (nsys shortName)"),
    ("grid_x", INT, ""), ("grid_y", INT, ""), ("grid_z", INT, ""),
    ("block_x", INT, ""), ("block_y", INT, ""), ("block_z", INT, ""),
    ("registers_per_thread", INT, "-1 unknown"),
    # Kineto records only the sum ('shared memory' = static + dynamic): it is
    # stored as static with dynamic 0, so static + dynamic (what occupancy
    # needs) is right for both sources; the split itself is nsys-only.
    ("static_smem_bytes", INT, "static shared memory per block, -1 unknown (Kineto: static + dynamic)"),
    ("dynamic_smem_bytes", INT, "dynamic shared memory per block, -1 unknown (Kineto: 0)"),
    ("smem_config_bytes", INT, "shared memory carveout the launch ran with, -1 unknown"),
    # Added by the nsys reader: non-zero means the kernel spills to local memory.
    ("local_memory_per_thread", INT, "bytes of local memory per thread, -1 unknown"),
    # A kernel run as a node of a CUDA graph (nsys --cuda-graph-trace=node): the node's id in its
    # captured graph, unique across graphs, so a graph captured again has new ids (-1: not in a
    # graph, or unknown: Kineto records none).
    ("graph_node_id", INT, "nsys graphNodeId, -1 none or unknown"),
    # The collective call an NCCL kernel runs.  One NCCL kernel runs one call
    # (torch's record_param_comms op; a coalesced group is one call and one
    # kernel), so what the call moved is a property of that kernel: kernel
    # columns rather than a table of their own, which every analysis would
    # first join back to its kernel (for its duration, stream, step), and
    # per-column loading costs nothing to an analysis that does not ask.
    # Kineto records them (the kernel's args 'Collective name', 'In msg
    # nelems', ..., else those of the record_param_comms cpu_op with the same
    # 'External id'); NCCL kernels only.  nsys: NCCL's NVTX ranges
    # (ncclAllReduce ...) carry a 'Message size [bytes]' payload, whose bytes
    # an export holds only when made with `nsys export --include-blobs=true`
    # (readers/nsys/nccl_messages.py); it gives bytes, not elements or dtype,
    # so an nsys kernel fills collective, msg_bytes and group_size and leaves
    # the nelems and dtype unknown.  Without the blobs all are unknown (-1,
    # ''), never 0.
    ("collective", CATEGORY, "torch's collective name: 'allreduce', 'allgather', 'reduce_scatter', "
                             "'broadcast', ... ('' not a collective, or not recorded)"),
    ("msg_in_nelems", INT, "elements of the call's input (Kineto 'In msg nelems'), -1 unknown"),
    ("msg_out_nelems", INT, "elements of its output ('Out msg nelems'; all-gather: the whole output), -1 unknown"),
    ("msg_dtype", CATEGORY, "element type as torch names it ('Float', 'BFloat16', ...; '' unknown)"),
    # For sources that record bytes, not elements (nsys' NCCL payload); analysis.collectives
    # prefers it to elements x element size.
    ("msg_bytes", INT, "bytes the call moved as nccl-tests' size S (all-gather, reduce-scatter: the whole "
                       "array), -1 unknown (Kineto: -1, its nelems and dtype give it)"),
    ("group_size", INT, "ranks in the call's process group, -1 unknown"),
    ("process_group", CATEGORY, "process group name and description, e.g. '0 (default_pg)' ('' unknown)"),
)

# One row per memcpy.
MEMCPY = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("device", INT, ""), ("stream", INT, ""), ("pid", INT, ""), ("correlation", INT, ""),
    ("bytes", INT, ""),
    ("copy_kind", CATEGORY, "'Host-to-Device', 'Device-to-Host', 'Device-to-Device', 'Peer-to-Peer', ..."),
    ("src_kind", CATEGORY, "'Pageable', 'Pinned', 'Device', 'Managed', ... ('' unknown)"),
    ("dst_kind", CATEGORY, "same labels as src_kind"),
)

# One row per memset.
MEMSET = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("device", INT, ""), ("stream", INT, ""), ("pid", INT, ""), ("correlation", INT, ""),
    ("bytes", INT, ""),
    ("dst_kind", CATEGORY, "memory kind set ('Device', 'Managed', ...; '' unknown)"),
)

# One row per replay of a CUDA graph whose nodes were not traced one by one:
# nsys's default ``--cuda-graph-trace=graph`` records a replay as one
# CUPTI_ACTIVITY_KIND_GRAPH_TRACE row (the graph's whole execution on its
# stream) and none of the kernels inside it.  Such a replay is GPU work like a
# kernel: it counts in busy time, idle gaps, steps and utilization.  Where the
# kernels of a replay are traced (nsys ``--cuda-graph-trace=node``, Kineto),
# they are ``kernels`` rows launched by the replay's ``cudaGraphLaunch``
# (same correlation) and this table is empty, so no work is counted twice.
GRAPHS = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("device", INT, "device of the graph's first node"),
    ("stream", INT, "stream the graph was launched on"),
    ("pid", INT, ""),
    ("correlation", INT, "the launching cudaGraphLaunch's correlation id"),
    ("graph_id", INT, "CUDA's graph id (nsys graphId)"),
    ("graph_exec_id", INT, "the executable graph's id (nsys graphExecId), -1 unknown"),
    ("name", CATEGORY, "'CUDA graph <graph_id>': a label that reads like a kernel name in tables"),
)

# One row per CUDA runtime or driver API call on a CPU thread.
API = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, ""), ("correlation", INT, ""),
    ("name", CATEGORY, "version suffix stripped: cudaLaunchKernel_v7000 -> cudaLaunchKernel"),
    ("layer", CATEGORY, "'runtime' or 'driver'"),
)

# Annotated ranges: NVTX push/pop and start/end, record_function /
# user_annotation, GPU-side annotations, ProfilerStep#N, and profkit's sync
# sites (kind 'sync_site', name 'file.py:59 print(loss.item())' as recorded).
RANGES = _cols(
    ("start", INT, "ns"),
    ("end", INT, "ns (-1 for a range never closed)"),
    ("pid", INT, ""), ("tid", INT, "CPU thread (-1 for GPU-side ranges)"),
    # Added by the nsys reader: nvtx_kern_sum and the stall analysis leave out
    # ranges ended on another thread (start/end ranges may cross threads).
    ("end_tid", INT, "thread that ended the range where the source records it (nsys endGlobalTid), else -1"),
    ("device", INT, "for GPU-side annotations, else -1"),
    ("stream", INT, "for GPU-side annotations, else -1"),
    ("name", CATEGORY, "range text"),
    ("domain", CATEGORY, "NVTX domain ('' default domain); Kineto: the event category"),
    ("style", CATEGORY, "'PushPop' or 'StartEnd' (nvtx_sum's Style)"),
    ("kind", CATEGORY, "'nvtx', 'user_annotation', 'gpu_user_annotation', 'profiler_step', 'sync_site'"),
)
# Kineto: domain is the event's cat ('user_annotation', 'gpu_user_annotation',
# 'cpu_op' for a ProfilerStep#N of older torch), style 'PushPop'; kind refines
# it: a user_annotation named ProfilerStep#N is 'profiler_step', one whose
# text starts 'profkit.sync|' (the torch backend's sync hook, record_function
# ranges with the same text as its NVTX ranges) is 'sync_site', with domain
# 'profkit.sync' (the hook's NVTX domain, so nvtx labels agree with nsys).  GPU-side
# ranges have tid -1 and the device and stream they ran on.

# Where in the user's Python code each CUDA API call was made, from the
# Python stacks a trace records (Kineto ``with_stack=True``: its
# ``python_function`` events); nsys has none (its sync sites are the 'sync_site'
# ranges of profkit's hook, which carry the exact line).  One row per API call
# that a recorded Python frame encloses; join with ``api`` on (pid, correlation)
# or (pid, tid, start).  The frame is the innermost one outside torch, profkit
# and built-ins (the frame that called into torch, as profkit's sync hook
# picks it).  Its line is the line torch's Python tracer gives the frame: the
# function's first line, not the line of the call inside it (for a frame running
# when profiling began: its line then), so a site here names a function; the sync
# hook's ranges name the line.  Where the program's source is at hand and the
# function calls what the trace shows it calling on exactly one line, the site
# is that line (``readers/kineto/source_lines.py``).
PYTHON_SITES = _cols(
    ("pid", INT, ""), ("tid", INT, ""),
    ("correlation", INT, "the API call's correlation id"),
    ("start", INT, "ns, the API call's start"),
    ("site", CATEGORY, "'train.py:25' (file as the trace names it, the frame's line or, found in the source, "
                       "the call's)"),
    ("function", CATEGORY, "'train_step' ('<module>' for top-level code)"),
)

# Python frames over time, one row per stretch of time a frame was on a thread's
# stack: what the host was running.  Frames of one thread nest: a frame's
# ``depth`` is one more than that of the frame it was called from (0: the
# outermost), and the innermost frame at an instant is the deepest one open.
# Built-in (C) functions: nsys's sampler does not see them, so there time spent
# in ``time.sleep`` or a CUDA call counts for the Python function that called it;
# Kineto records them, and each is a frame named with its caller (below).
# - Kineto ``with_stack=True``: each ``python_function`` event
#   ``"file.py(25): train_step"``; ``line`` is the function's first line, as
#   torch's tracer names it.  A built-in (``"<built-in function sleep>"``) is the
#   function ``"sleep (built-in) called from train_step"`` with its caller's file
#   and line: the first line is not the call's, so the call's name finds it (and
#   the line is the call's where the source shows it on one line).
# - nsys ``--python-sampling=true`` (exported with ``--include-blobs=true``):
#   each periodic sample is an instant with a stack; sample i stands for the time
#   to the thread's next sample (at most twice the median spacing of its samples:
#   a longer gap is time nothing was sampled), and consecutive samples that share
#   the outer frames (function, file and line) share those rows.  ``line`` is the
#   line executing when sampled, so one call of a function may be several rows.
PYTHON_FRAMES = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, "the thread whose stack held the frame"),
    ("depth", INT, "0 for the outermost frame of the thread"),
    ("function", CATEGORY, "'train_step' ('<module>' for top-level code)"),
    ("file", CATEGORY, "file as the trace names it (Kineto: relative to site-packages or the script's folder; "
                       "nsys: absolute)"),
    ("line", INT, "Kineto: the function's first line (a frame running when recording began: its line then; a "
                  "built-in: its call's line where the source shows it); nsys: the line sampled (-1 unknown)"),
    ("call_line", INT, "1 where ``line`` is a line executing (nsys: sampled; Kineto: a built-in's call, found in "
                       "the source), 0 where it is what torch.profiler recorded for the frame"),
)

# Framework CPU operators (Kineto cat 'cpu_op'; nsys has none).
CPU_OPS = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, ""),
    ("name", CATEGORY, "e.g. 'aten::mm'"),
    ("external_id", INT, "Kineto 'External id' linking ops to launches (-1 none)"),
)

# CUDA synchronization activity recorded by CUPTI (nsys
# CUPTI_ACTIVITY_KIND_SYNCHRONIZATION; Kineto cat 'cuda_sync').
SYNCS = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, "-1 where unknown (nsys: take it from the api row of the same correlation)"),
    ("correlation", INT, ""),
    ("device", INT, ""), ("stream", INT, "-1 when not stream-specific"),
    ("sync_type", CATEGORY, "'Event sync', 'Stream wait sync', 'Stream sync', 'Context sync', ... "
                            "(nsys schema 3.20: 'CUPTI sync type <n>', its labels do not fit the values)"),
)

# OS runtime calls a traced thread made (nsys ``-t osrt``: OSRT_API rows of
# eventClass 27, the calls osrt_sum counts; Kineto records none, so the table
# stays empty there).  What a launching thread did while the GPU sat idle:
# blocked in pthread_cond_wait, sleeping in nanosleep, writing a checkpoint.
# No return value: nsys's returnValue column is 0 in every row of every
# committed export (2023.4 and 2025.3), so it tells nothing.
OSRT = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, ""),
    ("name", CATEGORY, "the libc / system call as nsys names it: 'pthread_cond_wait', 'nanosleep', 'open64'"),
)

# The allocator's events: one row per block handed out (bytes > 0) or taken back (bytes < 0), as
# the profiler saw them (Kineto's '[memory]' instant events, torch.profiler(profile_memory=True);
# a snapshot's history).  nsys --cuda-memory-usage sees the level below: each row is a device
# allocation the process made from the driver (cudaMalloc, a module's globals), so its totals are
# reserved bytes and its allocated bytes are unknown (TraceMeta.extra["memory_level"] = "driver").
# Times are on the host thread that allocated or freed: the caching allocator answers on the CPU,
# so a block's life is measured against the steps' CPU ranges (steps' cpu_start_ns/cpu_end_ns).
MEMORY = _cols(
    ("start", INT, "ns: when the block was handed out or taken back"),
    ("pid", INT, ""), ("tid", INT, "the thread that allocated or freed"),
    ("device", INT, "CUDA device id; -1 the host (CPU) allocator"),
    ("addr", INT, "the block's address: pairs an allocation with its free (-1 unknown)"),
    ("bytes", INT, "+size for an allocation, -size for a free"),
    ("total_allocated", INT, "bytes allocated on that device right after the event (-1 unknown)"),
    ("total_reserved", INT, "bytes held from the CUDA driver right after it: the caching allocator's "
                            "segments (torch), every device allocation of the process (nsys "
                            "--cuda-memory-usage) (-1 unknown; 0 for the host allocator, which reserves nothing)"),
    # Where the source records each event's own stack (memory snapshots), its innermost Python
    # frame; '' / -1 where the site is found from python_frames instead (Kineto).
    ("function", CATEGORY, "the allocating Python function ('' not recorded with the event)"),
    ("file", CATEGORY, "its file ('' not recorded with the event)"),
    ("line", INT, "the line that allocated (-1 not recorded with the event)"),
    # The whole stack where the source records it (snapshots: Python and C++ frames), so an
    # analysis can tell a parameter's allocation (nn.Module._apply) from an optimizer's state
    # (torch.optim ... _init_group) or a cuBLAS workspace (setWorkspaceForHandle).
    ("stack", CATEGORY, "the allocating frames, innermost first, one per line: 'function file:line' for "
                        "Python, the function's name for C++ ('' not recorded with the event)"),
)

# The profiler's own work on the program's threads (nsys PROFILER_OVERHEAD: CUPTI buffer
# flushes, TLS and chunk allocations, its dlopen hooks): what the capture cost the program,
# where it ran.  Kineto records none.
PROFILER_OVERHEAD = _cols(
    ("start", INT, "ns"), ("end", INT, "ns"),
    ("pid", INT, ""), ("tid", INT, ""),
    ("name", CATEGORY, "what nsys did: 'CUPTI Buffer flush', 'TLS allocation', 'dlopen(libcuda.so.1)'"),
)

PROCESSES = _cols(
    ("pid", INT, ""),
    ("name", CATEGORY, "process name ('' unknown)"),
)

THREADS = _cols(
    ("pid", INT, ""), ("tid", INT, ""),
    ("name", CATEGORY, "thread name ('' unknown)"),
)

# The tables of GPU work: every row is time a GPU was busy.  Analyses of busy
# and idle time, steps and timelines read all of them.
GPU_WORK_TABLES = ("kernels", "memcpy", "memset", "graphs")

TABLES: dict[str, tuple[Column, ...]] = {
    "devices": DEVICES,
    "kernels": KERNELS,
    "memcpy": MEMCPY,
    "memset": MEMSET,
    "graphs": GRAPHS,
    "api": API,
    "ranges": RANGES,
    "cpu_ops": CPU_OPS,
    "python_sites": PYTHON_SITES,
    "python_frames": PYTHON_FRAMES,
    "syncs": SYNCS,
    "osrt": OSRT,
    "memory": MEMORY,
    "profiler_overhead": PROFILER_OVERHEAD,
    "processes": PROCESSES,
    "threads": THREADS,
}

# devices column -> its key in a GPU's limits as the occupancy calculator takes them
# (``occupancy.trace.device_from_info``) and the nsys reader reads them (``launches.gpu_info``)
DEVICE_LIMIT_KEYS = {
    "name": "name", "sm_count": "sm_count", "cc_major": "cc_major", "cc_minor": "cc_minor",
    "max_threads_per_sm": "max_threads_per_sm", "max_blocks_per_sm": "max_blocks_per_sm",
    "max_registers_per_sm": "regs_per_sm", "max_shared_memory_per_sm": "smem_per_sm",
    "max_shared_memory_per_block": "smem_per_block_optin", "warp_size": "warp_size",
    "max_threads_per_block": "max_threads_per_block", "max_registers_per_block": "regs_per_block",
    "default_shared_memory_per_block": "smem_per_block",
    "reserved_shared_memory_per_block": "reserved_smem_per_block",
}

# Kernel columns that make a launch configuration (with the name and device): what
# occupancy groups by, and what the report drops once occupancy is done.
LAUNCH_CONFIG_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                         "static_smem_bytes", "dynamic_smem_bytes", "local_memory_per_thread", "smem_config_bytes")

# Integer columns held as int32: small values by nature (device and stream ids, launch
# dimensions, registers, shared and local memory per block or thread), 4 bytes a row
# instead of 8 (the report holds 13 of them for a million kernels: 52 MB less).
# ``Trace`` narrows them as they load, from every source, where every value fits
# (a damaged file's out-of-range value keeps its column int64: never wrapped).
# Audited (grep of every use, issue 10): they are compared, grouped, formatted,
# added to small offsets (GPU pid bases) or multiplied into launch shapes as Python
# ints (occupancy) or within CUDA's limits (threads per block <= 1024).  The CUDA
# calls' pid and tid too (2.5M calls: 20 MB): every analysis that shifts them into a
# 64-bit thread key (``pid << 24 | tid``: sync.inputs, timeline.nvtx_projection, timeline.launch_calls,
# export/tracks) widens them to int64 first, and track ids add int64 lanes to them.
# Left int64 on purpose: times, durations, correlation and external ids, bytes and
# message sizes, the other tables' pid/tid/end_tid, and the syncs table (small; nsys
# writes its "no stream" as streamId 4294967295, past int32).
NARROW: dict[str, frozenset[str]] = {
    "kernels": frozenset({"device", "stream", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                          "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes", "smem_config_bytes",
                          "local_memory_per_thread"}),
    "api": frozenset({"pid", "tid"}),
    "memcpy": frozenset({"device", "stream"}),
    "memset": frozenset({"device", "stream"}),
    "graphs": frozenset({"device", "stream"}),
    "ranges": frozenset({"device", "stream"}),
}


def is_narrow(table: str, column: str) -> bool:
    """Whether an integer column is held as int32 (``NARROW``)."""
    return column in NARROW.get(table, ())


def column_names(table: str) -> tuple[str, ...]:
    return tuple(c.name for c in TABLES[table])


def column_kind(table: str, column: str) -> str:
    for c in TABLES[table]:
        if c.name == column:
            return c.kind
    raise KeyError(f"table {table!r} has no column {column!r}")

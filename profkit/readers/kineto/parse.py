"""Reading a Kineto trace file: bytes in, batches of typed events out.

Why msgspec with typed events, in chunks.  Measured on a 38 MB Kineto trace
(206,004 events: an HTA test trace replicated 3x), in one process, garbage
collector off (see below), 2-core machine under load:

    json (stdlib), dicts            ~1.7 s   whole document as dicts
    orjson, dicts                   0.61-0.70 s, then 0.18 s to pull 6 cpu_op columns
    msgspec, typed ``Event`` structs 0.34-0.53 s, then 0.07-0.11 s for the same columns
    ijson (yajl2_c), dicts          ~2.7x orjson, streaming (68 MB peak)

(on an idle run of a 58 MB trace: json 0.70 s, msgspec untyped 0.58, orjson
0.40; peak RSS json 270 MB, orjson 360, msgspec typed 199, ijson 68.)
A typed decoder only materialises the fields profkit reads -- the ~15 of a
kernel's args it needs, none of a cpu_op's 'Input Dims', flow events'
extra keys -- as small slot objects instead of dicts, so it is faster to
parse, faster to read columns from, and smaller.  Every field is typed
``Any`` so that no odd value fails the decode; events.py checks values.

To bound memory the trace is cut into chunks of whole events at the
separator the writer puts between top-level events (Kineto's C++ writer:
``"},\\n  {"``; torch's Python exporter: ``"},\\n{"``; any pretty-printed
JSON: the first event's indentation); each chunk is decoded, turned into
columns and dropped before the next is read.  The cut
is self-checking: a chunk that does not decode as a list of objects cannot
have been cut between top-level events, and then the whole file is decoded
in one piece (as for any other layout: one-line JSON, a rewritten trace).

The garbage collector is paused while events are decoded and bucketed:
parsers make hundreds of thousands of live objects, and each generation-0
threshold crossing would otherwise rescan the growing heap (orjson: 0.92 s
with the collector on, 0.40 s off).  Nothing made here forms cycles.
"""

from __future__ import annotations

import gc
import gzip
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

import msgspec

from profkit import limits as trace_limits
from profkit.errors import ProfkitError

GZIP_MAGIC = b"\x1f\x8b"
BLOCK = 8 << 20
EVENTS_KEY = b'"traceEvents"'
# The header (schemaVersion, deviceProperties, distributedInfo ...) precedes
# the events; a header bigger than this is no Kineto trace we know.
MAX_HEADER = 64 << 20
# A cpu_op's 'Input Dims' is there only with record_shapes=True, which slows the profiled
# host (`profkit diff` says so).  Looked for in the raw bytes, a memchr-speed search: decoding
# the field, even to msgspec.Raw, cost 45% more time per trace (gpt_eager.json.gz).
SHAPES_KEY = b'"Input Dims"'
RECORD_SHAPES = "record_shapes"  # the metadata key read_events returns it under


class Args(msgspec.Struct, gc=False):
    """The args profkit reads (Kineto's CuptiActivity.cpp and output_json.cpp)."""

    device: Any = None
    in_device: Any = msgspec.field(default=None, name="inDevice")  # peer copies (Memcpy2)
    stream: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")  # static + dynamic
    bytes: Any = None
    graph_id: Any = msgspec.field(default=None, name="graph id")  # profkit's cuda_graph events
    external_id: Any = msgspec.field(default=None, name="External id")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    name: Any = None  # process_name / thread_name metadata
    # A collective call (NCCL kernels and torch's record_param_comms cpu_op):
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    group_name: Any = msgspec.field(default=None, name="Process Group Name")
    group_desc: Any = msgspec.field(default=None, name="Process Group Description")
    # An allocator event ('[memory]', profile_memory=True: Kineto's MemoryEvent, output_json.cpp):
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")


class Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class Document(msgspec.Struct, gc=False):
    """The keys of a trace file profkit reads; the rest are skipped."""

    traceEvents: list[Event] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    cuda_runtime_version: Any = None  # 13000 = CUDA 13.0
    cuda_driver_version: Any = None


_EVENTS = msgspec.json.Decoder(list[Event])
_DOCUMENT = msgspec.json.Decoder(Document)
_ANY = msgspec.json.Decoder()


class _Sink(Protocol):
    def add(self, events: list[Event]) -> None: ...


Sink = TypeVar("Sink", bound=_Sink)


class NotChunkable(Exception):
    """The layout is not one the chunked reader knows: decode the whole file."""


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class BoundedReader:
    """A binary file that refuses to give more than ``limit`` bytes: a gzip bomb (1 MB that
    inflates to 1 GiB of whitespace) stops at the limit instead of filling memory."""

    def __init__(self, raw: BinaryIO, limit: int, compressed: bool, size: int) -> None:
        self.raw, self.limit, self.compressed, self.size = raw, limit, compressed, size
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            parts = []
            while part := self.read(BLOCK):
                parts.append(part)
            return b"".join(parts)
        data = self.raw.read(min(n, self.limit - self.read_bytes + 1))
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            if self.compressed and self.limit < trace_limits.current().max_trace_bytes:
                raise trace_limits.LimitExceeded(
                    f"inflates to more than {self.limit:,} bytes, {self.limit / max(self.size, 1):.0f} times "
                    f"its {self.size:,} compressed bytes (a real trace: under 20 times)",
                    trace_limits.VARIABLES["max_gzip_ratio"])
            raise trace_limits.LimitExceeded(f"holds more than {self.limit:,} bytes of JSON",
                                             trace_limits.VARIABLES["max_trace_bytes"])
        return data

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> BoundedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_binary(path: Path) -> BoundedReader:
    """The file (decompressed when it is gzip, told by its first bytes), read-only, giving
    at most the bytes the limits allow (``profkit.limits``)."""
    try:
        f = path.open("rb")
        size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise ProfkitError(f"{path}: no such file") from None
    except OSError as exc:
        raise ProfkitError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    limits = trace_limits.current()
    if f.read(2) == GZIP_MAGIC:
        f.seek(0)
        raw = gzip.GzipFile(fileobj=f, mode="rb")
        return BoundedReader(raw, limits.max_decompressed(size), True, size)  # type: ignore[arg-type]
    f.seek(0)
    return BoundedReader(f, limits.max_trace_bytes, False, size)


class _EventCounter:
    """Hands batches on to a sink, and stops a trace with far more events than its bytes
    can hold as real events (``Limits.max_events_for``)."""

    def __init__(self, on_batch: Callable[[list[Event]], None], reader_bytes: Callable[[], int]) -> None:
        self.on_batch, self.reader_bytes = on_batch, reader_bytes
        self.limits = trace_limits.current()
        self.events = 0

    def __call__(self, events: list[Event]) -> None:
        self.events += len(events)
        allowed = self.limits.max_events_for(self.reader_bytes())
        if self.events > allowed:
            per_event = self.reader_bytes() / max(self.events, 1)
            raise trace_limits.LimitExceeded(
                f"holds more than {allowed:,} events ({self.events:,} so far, {per_event:.0f} bytes each; "
                f"a real event takes 150-400)", trace_limits.VARIABLES["max_events"])
        self.on_batch(events)


def read_events(path: Path, new_sink: Callable[[], Sink]) -> tuple[dict[str, Any], Sink]:
    """Hand every event of the trace to a sink made by ``new_sink``, a batch
    at a time in file order; return the document's metadata keys and the
    sink.  When the chunked reading gives up half-way, a fresh sink gets
    every event again from the whole-file decode.

    Raises ProfkitError for a file that is not a trace, not JSON, or a
    truncated or corrupt gzip, and for one beyond the limits (``profkit.limits``):
    too many bytes, events or characters in one string, or nested deeper than
    the interpreter's recursion limit."""
    with read_errors(path), gc_paused():
        sink = new_sink()
        try:
            return _read_chunked(path, sink.add), sink
        except NotChunkable:
            sink = new_sink()
            return _read_whole(path, sink.add), sink


@contextmanager
def read_errors(path: Path, io_errors: bool = True) -> Iterator[None]:
    """A trace's read failures as one-line errors naming it: a limit, nesting past the recursion
    limit, a corrupt or truncated gzip, bytes that are not UTF-8 and, with ``io_errors``, any other
    OSError (off where the block also writes a file, whose errors are not the trace's)."""
    try:
        yield
    except trace_limits.LimitExceeded as exc:
        raise trace_limits.LimitExceeded(f"{path.name} {exc.message}", exc.variable) from None
    except RecursionError:
        raise ProfkitError(f"{path.name} is nested deeper than the reader allows (about "
                           f"{sys.getrecursionlimit():,} levels; a real trace has under 10)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise ProfkitError(f"{path.name} is a corrupt gzip file ({exc})") from None
    except EOFError:
        raise ProfkitError(f"{path.name} is truncated: the gzip stream ends early") from None
    except UnicodeDecodeError as exc:  # msgspec raises it for a string that is not UTF-8
        raise ProfkitError(f"{path.name} is not valid JSON: bytes that are not UTF-8 ({exc.reason})") from None
    except OSError as exc:
        if not io_errors:
            raise
        raise ProfkitError(f"{path.name}: cannot read it ({exc.strerror or exc})") from None


def _metadata(doc: Document) -> dict[str, Any]:
    return {f: getattr(doc, f) for f in doc.__struct_fields__ if f != "traceEvents"}


def _read_whole(path: Path, on_batch: Callable[[list[Event]], None]) -> dict[str, Any]:
    with open_binary(path) as f:
        data = f.read()
    size = len(data)
    on_batch = _EventCounter(on_batch, lambda: size)
    if not data.strip():
        raise ProfkitError(f"{path.name} is empty: not a PyTorch profiler trace")
    shapes = SHAPES_KEY in data
    try:
        doc = _DOCUMENT.decode(data)
    except msgspec.ValidationError:  # valid JSON of another shape: a list, or odd events
        doc = _lenient_document(_decode_any(path, data), path)
    except msgspec.DecodeError as exc:
        raise ProfkitError(f"{path.name} is not valid JSON, or is truncated ({exc})") from None
    del data
    if doc.traceEvents is None:
        raise ProfkitError(f"{path.name} is JSON but not a PyTorch profiler trace (no traceEvents list)",
                           hint="write one with prof.export_chrome_trace() or tensorboard_trace_handler")
    events, doc.traceEvents = doc.traceEvents, None
    on_batch(events)
    return {**_metadata(doc), RECORD_SHAPES: shapes}


def _decode_any(path: Path, data: bytes) -> Any:
    try:
        return _ANY.decode(data)
    except msgspec.DecodeError as exc:
        raise ProfkitError(f"{path.name} is not valid JSON, or is truncated ({exc})") from None


def _lenient_document(value: Any, path: Path) -> Document:
    """A Document from JSON that the typed decoder refused: Chrome's array
    format (a bare list of events), or events that are not objects."""
    if isinstance(value, list):
        value = {"traceEvents": value}
    if not isinstance(value, dict) or not isinstance(value.get("traceEvents"), list):
        raise ProfkitError(f"{path.name} is JSON but not a PyTorch profiler trace (no traceEvents list)",
                           hint="write one with prof.export_chrome_trace() or tensorboard_trace_handler")
    events = lenient_events(value.pop("traceEvents"))
    doc = msgspec.convert({k: v for k, v in value.items() if k in Document.__struct_fields__}, Document)
    doc.traceEvents = events
    return doc


def lenient_events(values: list[Any]) -> list[Event]:
    """Events from decoded JSON values; a value that is no event object is dropped."""
    events = []
    for value in values:
        try:
            events.append(msgspec.convert(value, Event))
        except msgspec.ValidationError:
            if isinstance(value, dict):  # an event whose args are not an object
                value = {k: v for k, v in value.items() if k != "args"}
                events.append(msgspec.convert(value, Event))
    return events


def read_to_events(f: BoundedReader, block: int = BLOCK) -> tuple[bytes, int, int]:
    """The trace's first blocks, read until its events array opens: (the bytes read, where the
    ``"traceEvents"`` key is, the index just past the array's ``[``).  ``NotChunkable`` for a
    layout the chunked readers do not know (the key not found in ``MAX_HEADER`` bytes, or found
    only inside some string).  Read ``block`` bytes at a time."""
    buffer = f.read(block)
    while True:
        key_at = buffer.find(EVENTS_KEY)
        if key_at >= 0 and buffer.find(b"[", key_at) >= 0:
            break
        more = f.read(block)
        if not more or len(buffer) > MAX_HEADER:
            raise NotChunkable
        buffer += more
    array_at = buffer.find(b"[", key_at) + 1
    if buffer[key_at + len(EVENTS_KEY):array_at - 1].strip(b" \t\r\n:"):
        raise NotChunkable  # '"traceEvents"' inside some string, not the key
    return buffer, key_at, array_at


def _read_chunked(path: Path, on_batch: Callable[[list[Event]], None]) -> dict[str, Any]:
    with open_binary(path) as f:
        on_batch = _EventCounter(on_batch, lambda: f.read_bytes)
        buffer, _, array_at = read_to_events(f)
        header = buffer[:array_at]
        separator = _separator(buffer[array_at:array_at + 4096])
        # Chunks are decoded in place: the comma after a chunk's last event is
        # set to "]" for the decode, then to "[" to open the next chunk (no
        # copy of the block: bytes slices and concatenation cost 40% of decoding).
        data = bytearray(buffer)
        del buffer
        start = array_at - 1  # the "[" that opens the current chunk
        shapes = False
        fresh = start + 1  # where bytes not yet searched for a separator begin
        while True:
            # Only the new bytes (and a separator's length before them) are searched: a
            # block with no separator (a run of whitespace) is not scanned again.
            cut = data.rfind(separator, max(start + 1, fresh - len(separator))) if separator else -1
            if cut >= 0:  # the separator's "}" ends the last whole event of the block
                comma = cut + 1
                data[comma] = ord("]")
                shapes = shapes or data.find(SHAPES_KEY, start, comma) >= 0
                on_batch(_decode_view(data, start, comma + 1))
                data[comma] = ord("[")
                start = comma
            more = f.read(BLOCK)
            if not more:
                break
            del data[:start]  # what was decoded
            start = 0
            fresh = len(data)
            data += more
        rest = bytes(data[start + 1:])
        del data
    # The last events and the keys after the array: header + rest is a whole document.
    try:
        doc = _DOCUMENT.decode(header + rest)
    except msgspec.MsgspecError:
        raise NotChunkable from None
    if doc.traceEvents is None:
        raise NotChunkable
    events, doc.traceEvents = doc.traceEvents, None
    on_batch(events)
    return {**_metadata(doc), RECORD_SHAPES: shapes or SHAPES_KEY in rest}


def _separator(events: bytes) -> bytes | None:
    """What stands between two top-level events: ``},`` a line break and the
    first event's indentation, then ``{``.  A nested object's closing brace is
    followed by a deeper indentation, and a string holds no raw line break,
    so this never matches inside an event.  None for one-line JSON."""
    body = events.lstrip(b" \t\r\n")
    space = events[:len(events) - len(body)]
    if not body.startswith(b"{") or b"\n" not in space:
        return None
    newline = b"\r\n" if b"\r\n" in space else b"\n"
    return b"}," + newline + space[space.rfind(b"\n") + 1:] + b"{"


def _decode_view(data: bytearray, start: int, end: int) -> list[Event]:
    """Decode ``data[start:end]`` without copying it (the view is released so
    that ``data`` can be resized afterwards)."""
    with memoryview(data) as whole, whole[start:end] as chunk:
        return _decode_chunk(chunk)


def _decode_chunk(chunk: bytes | memoryview) -> list[Event]:
    try:
        return _EVENTS.decode(chunk)
    except msgspec.ValidationError:
        pass  # whole events, but some odd one: decode loosely below
    except msgspec.DecodeError:
        raise NotChunkable from None
    values = _ANY.decode(chunk)
    return lenient_events(values)

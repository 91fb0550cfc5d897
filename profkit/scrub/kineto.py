"""Write a copy of a Kineto (torch.profiler) JSON trace without environment or credentials.

torch.profiler records no environment by itself, but a trace carries
whatever the program added (``prof.add_metadata_json``, record_function
names, ``distributedInfo``) and the paths of its stacks.  Every string of
the document, keys included, passes through one ``Redactor``; an object
member named like an environment (``env``, ``environ``, ``environment``)
is dropped whole after its secret values were noted.  The copy keeps the
input's compression (gzip, level 6, when the output name ends in ``.gz``)
and is written under a temporary name, then renamed.

Why it streams.  A trace with Python stacks holds millions of events (a
52 MB .json.gz: 3.5M events, 1 GB of JSON); decoding it whole took 6 GB and
walking every dict twice in Python most of a minute.  Here the events are
cut into chunks at the separator Kineto's writers put between top-level
events (the reader's cut, ``parse._separator``), each chunk decoded,
scrubbed and written before the next is read, so memory holds one chunk.
The decisions are made once per distinct string and once per distinct
key (``_Walker``): an event whose keys are all known-plain costs one set
test and a dict lookup per string value.  A layout that cannot be cut
(one-line JSON, a bare list) is scrubbed whole, as before.

An environment found part-way (a ``metadata.env`` after the events) names
secrets that strings already written may hold: then the copy is written
again from the start, knowing it (a second pass, only for such a trace).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from profkit import limits as trace_limits
from profkit.atomic import atomic_path
from profkit.errors import ProfkitError
from profkit.readers.kineto.parse import (BLOCK, NotChunkable, _separator, gc_paused, open_binary,
                                          read_errors, read_to_events)
from profkit.scrub.text import Redactor, is_secret_option, parse_environment

ENVIRONMENT_KEYS = {"env", "environ", "environment", "envvars", "environment_variables"}
# zlib's default: a third of level 9's time on a Kineto trace, a few percent larger.
GZIP_LEVEL = 6
_DECODE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()


class _Object(msgspec.Struct):
    """Any JSON object, its members skipped: checks a chunk is whole events without building them."""


_OBJECTS = msgspec.json.Decoder(list[_Object])


class _NotChunkable(NotChunkable):
    """The layout is not one the chunked pass knows: scrub the whole document (the reader's own
    refusal, ``read_to_events``, is one too)."""


def scrub_kineto(source: str | os.PathLike[str], output: str | os.PathLike[str], *, anonymize: bool = False,
                 environment: Mapping[str, str] | None = None) -> dict[str, int]:
    """Write a scrubbed copy of the Kineto trace ``source`` to ``output``; return what was removed."""
    src, out = Path(source), Path(output)
    environments = [dict(environment or {})]
    with read_errors(src, io_errors=False), gc_paused(), atomic_path(out) as tmp:
        while True:
            walker = _Walker(environments, anonymize)
            try:
                _write(tmp, out.name.endswith(".gz"), lambda sink: _scrub_chunked(src, walker, sink))
            except NotChunkable:
                walker = _Walker(environments, anonymize)
                _write(tmp, out.name.endswith(".gz"), lambda sink: _scrub_whole(src, walker, sink))
            found = [env for env in walker.environments if env not in environments]
            if not found:
                break
            environments += found  # strings written before they were seen may hold their secrets
    removed = {"environment members": walker.dropped, **walker.redact.summary()}
    return {k: v for k, v in removed.items() if v}


def _write(tmp: Path, compress: bool, scrub_into: Callable[[Callable[[bytes], object]], None]) -> None:
    with open(tmp, "wb") as fh:
        if not compress:
            scrub_into(fh.write)
            return
        # mtime=0 and no file name: the same input gives the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, compresslevel=GZIP_LEVEL, mtime=0) as gz:
            scrub_into(gz.write)


class _Walker:
    """Scrubs decoded JSON values in place, deciding once per distinct string and key."""

    def __init__(self, environments: list[dict[str, str]], anonymize: bool) -> None:
        self.redact = Redactor.for_environments(environments, anonymize)
        self.environments: list[dict[str, str]] = []  # found in this pass
        self.dropped = 0
        self.strings: dict[str, str] = {}  # each distinct string, scrubbed
        # keys that stay as they are: no environment, nothing to redact, not secret-named
        self.plain_keys: set[str] = set()
        self.other_keys: set[str] = set()
        self.plain_tokens: set[bytes] = set()  # strings as the JSON text spells them, known plain

    def clean(self, text: str) -> str:
        out = self.strings.get(text)
        if out is None:
            out = self.redact(text)
            self.strings[text] = out = text if out == text else out
        return out

    def unchanged(self, chunk: bytes) -> bool:
        """Whether no string of the JSON text ``chunk`` (keys included) would change or be
        dropped, by its distinct strings.  Outside a string JSON has no quote and inside one a
        quote is escaped, so the text split at quotes gives the strings at odd places; a chunk
        with an escaped quote is not judged this way (False: it is walked)."""
        if b'\\"' in chunk:
            return False
        for token in set(chunk.split(b'"')[1::2]) - self.plain_tokens:
            text = _DECODE.decode(b'"' + token + b'"') if b"\\" in token else token.decode()
            if not self._plain(text):
                return False
            self.plain_tokens.add(token)
        return True

    def _plain(self, key: str) -> bool:
        if key in self.plain_keys:
            return True
        if key in self.other_keys:
            return False
        plain = key.lower() not in ENVIRONMENT_KEYS and self.clean(key) == key and not is_secret_option(key)
        (self.plain_keys if plain else self.other_keys).add(key)
        return plain

    def walk(self, root: Any) -> Any:
        """``root`` with every string (keys too) scrubbed and environment members dropped."""
        if isinstance(root, str):
            return self.clean(root)
        strings, plain_keys, clean = self.strings, self.plain_keys, self.clean
        stack = [root]
        while stack:
            node = stack.pop()
            if type(node) is dict:
                if not plain_keys.issuperset(node) and not all(self._plain(k) for k in list(node)):
                    self._scrub_members(node, stack)
                    continue
                for key, value in node.items():
                    kind = type(value)
                    if kind is str:
                        out = strings.get(value)
                        if out is None:
                            out = clean(value)
                        if out is not value:
                            node[key] = out  # same keys: safe while iterating
                    elif kind is dict or kind is list:
                        stack.append(value)
            else:
                self._scrub_list(node, stack)
        return root

    def _scrub_members(self, node: dict[str, Any], stack: list[Any]) -> None:
        """A dict with an environment, a key to redact or a secret-named key."""
        for key in [k for k in node if k.lower() in ENVIRONMENT_KEYS]:
            self.environments.append(_as_environment(node.pop(key)))
            self.dropped += 1
        items = list(node.items())
        node.clear()
        for key, value in items:
            if isinstance(value, str):
                value = self.redact.redact_member(key, self.clean(value))
            node[self.clean(key)] = value
            if isinstance(value, (dict, list)):
                stack.append(value)

    def _scrub_list(self, node: list[Any], stack: list[Any]) -> None:
        previous = None
        for i, value in enumerate(node):
            if isinstance(value, str):
                node[i] = self.clean(value)
                if isinstance(previous, str):  # ["--password", "VALUE"]: an argv list
                    node[i] = self.redact.redact_pair(previous, node[i])
            elif isinstance(value, (dict, list)):
                stack.append(value)
            previous = value


def _as_environment(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list):
        return parse_environment("\x00".join(str(v) for v in value), "\x00")
    if isinstance(value, str):
        return parse_environment(value, "\x00" if "\x00" in value else "\n")
    return {}


def _scrub_chunked(src: Path, walker: _Walker, write: Callable[[bytes], object]) -> None:
    """Header keys, then the events a chunk at a time, then the keys after the events.

    A chunk none of whose strings changes (``_Walker.unchanged``: the common case) is
    written as it was read, only checked to be JSON objects; any other is decoded,
    walked and encoded.  Either way events are joined as the input joins them (a
    line break and its indentation), so the copy is cut by the reader the same way."""
    with open_binary(src) as f:
        limits = trace_limits.current()
        chunks = _Chunks(f)
        pieces = iter(chunks)
        header = next(pieces)
        try:
            head = _DECODE.decode(header + b"]}")
        except msgspec.DecodeError:
            raise _NotChunkable from None
        if not isinstance(head, dict):
            raise _NotChunkable
        head.pop("traceEvents")
        head = walker.walk(head)
        between = b"," + chunks.between  # "}" + this + "{" is the input's separator
        write(b"{" + b"".join(_ENCODE.encode(k) + b":" + _encode(v) + b"," for k, v in head.items())
              + b'\n"traceEvents":[' + chunks.between)
        first, events = True, 0
        for chunk in pieces:
            if walker.unchanged(chunk):
                try:
                    count = len(_OBJECTS.decode(chunk))
                except msgspec.ValidationError:
                    count = -1  # some event is no object: the slow path below keeps it as it is
                except msgspec.DecodeError:
                    raise _NotChunkable from None
                if count >= 0:
                    events += count
                    body = chunk[1:-1]
            else:
                count = -1
            if count < 0:
                try:
                    batch = _DECODE.decode(chunk)
                except msgspec.DecodeError:
                    raise _NotChunkable from None
                if not isinstance(batch, list):
                    raise _NotChunkable
                events += len(batch)
                body = between.join(map(_encode, walker.walk(batch)))
            if events > limits.max_events_for(f.read_bytes):
                raise trace_limits.LimitExceeded(
                    f"holds more than {limits.max_events_for(f.read_bytes):,} events ({events:,} so far)",
                    trace_limits.VARIABLES["max_events"])
            if body:
                write(body if first else between + body)
                first = False
        rest = chunks.tail
    try:
        tail = _DECODE.decode(b'{"traceEvents":[' + rest)
    except msgspec.DecodeError:
        raise _NotChunkable from None
    if not isinstance(tail, dict) or not isinstance(tail.get("traceEvents"), list):
        raise _NotChunkable
    last = walker.walk(tail.pop("traceEvents"))
    if last:
        write((b"" if first else between) + between.join(map(_encode, last)))
    tail = walker.walk(tail)
    write(b"\n]" + b"".join(b"," + _ENCODE.encode(k) + b":" + _encode(v) for k, v in tail.items()) + b"}\n")


class _Chunks:
    """The header (through the events' ``[``), then chunks of whole events as JSON arrays;
    ``tail`` is what follows the last cut (the last events, ``]`` and the keys after them)."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.tail = b""
        self.between = b"\n"  # what stands between "}," and "{" of two events
    def __iter__(self) -> Iterator[bytes]:
        return self._cut()

    def _cut(self) -> Iterator[bytes]:
        f = self.f
        buffer, key_at, array_at = read_to_events(f, BLOCK)
        if not buffer[:key_at].lstrip().startswith(b"{"):
            raise _NotChunkable
        separator = _separator(buffer[array_at:array_at + 4096])
        if separator is None:
            raise _NotChunkable
        self.between = separator[2:-1]
        yield buffer[:array_at]
        data = bytearray(buffer[array_at - 1:])  # from the "[" that opens the first chunk
        del buffer
        while True:
            cut = data.rfind(separator, 1)
            if cut >= 0:  # the separator's "}" ends the last whole event of the block
                comma = cut + 1
                data[comma] = ord("]")
                yield bytes(data[:comma + 1])
                del data[:comma]
                data[0] = ord("[")
            more = f.read(BLOCK)
            if not more:
                break
            data += more
        self.tail = bytes(data[1:])


def _scrub_whole(src: Path, walker: _Walker, write: Callable[[bytes], object]) -> None:
    with open_binary(src) as fh:
        raw = fh.read()
    if not raw.strip():
        raise ProfkitError(f"{src.name} is empty: not a PyTorch profiler trace")
    try:
        document = _DECODE.decode(raw)
    except msgspec.DecodeError as exc:
        raise ProfkitError(f"{src} is not valid JSON ({exc})", hint="is it a complete torch.profiler trace?") from None
    del raw
    if not isinstance(document, (dict, list)):
        raise ProfkitError(f"{src} is not a Kineto trace (a JSON {type(document).__name__}, not an object)")
    events = document if isinstance(document, list) else document.get("traceEvents")
    if isinstance(events, list):
        limits = trace_limits.current()
        size = fh.read_bytes
        if len(events) > limits.max_events_for(size):
            raise trace_limits.LimitExceeded(f"holds more than {limits.max_events_for(size):,} events "
                                             f"({len(events):,})", trace_limits.VARIABLES["max_events"])
    write(_encode(walker.walk(document)))


def _encode(value: Any) -> bytes:
    """JSON of ``value``; the standard library's encoder where msgspec's refuses (a float that
    is no number, as the reader allows none anyway, or an odd nesting)."""
    try:
        return _ENCODE.encode(value)
    except (TypeError, ValueError, OverflowError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")



"""Where an export's bytes go: a temporary file beside the target, renamed at the end.

The output is written in chunks (never held whole), gzip-compressed when the
name ends in ``.gz``, and appears under its final name only once complete:
an error, Ctrl-C or a full disk leaves no partial file behind.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import queue
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from profkit.errors import ProfkitError

# zlib level 1 compresses trace JSON ~10x at >100 MB/s; level 6 gains ~20% in size at 3-4x the time.
GZIP_LEVEL = 1
BUFFER_BYTES = 1 << 20


@contextlib.contextmanager
def _atomic_path(target: Path) -> Iterator[Path]:
    # The same contract as the shared profkit.atomic.atomic_path (temporary
    # hidden name in the same folder, os.replace on success, removed on any
    # exception); used until that helper is on main.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


try:  # the shared helper, where it has landed
    from profkit.atomic import atomic_path
except ImportError:  # pragma: no cover - depends on what is on main
    atomic_path = _atomic_path


class _CompressInBackground:
    """A write-only stream that gzips on a second thread.

    zlib releases the GIL while it compresses, so the main thread formats
    the next chunk of events meanwhile: on two cores the compression costs
    almost no wall time.  At most ``depth`` chunks wait, bounding memory."""

    def __init__(self, raw: BinaryIO, depth: int = 4) -> None:
        self._packed = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0)
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="profkit-gzip", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._packed.write(data)
                except BaseException as exc:  # noqa: BLE001 - handed to the writing thread below
                    self._error = exc

    def write(self, data: bytes) -> int:
        if self._error is not None:
            raise self._error
        self._queue.put(data)
        return len(data)

    def close(self, finish: bool) -> None:
        self._queue.put(None)
        self._thread.join()
        if finish:
            if self._error is not None:
                raise self._error
            self._packed.close()


@contextlib.contextmanager
def open_output(target: str | os.PathLike[str], inputs: tuple[Path, ...] = ()) -> Iterator[BinaryIO]:
    """A binary stream to write; ``target`` is replaced only if the block succeeds.

    Raises ProfkitError (one line) when the folder is missing or not
    writable, or when ``target`` is one of the ``inputs``."""
    path = Path(target)
    for source in inputs:
        with contextlib.suppress(OSError):
            if path.exists() and path.resolve() == Path(source).resolve():
                raise ProfkitError(f"{path} is the input trace: choose another output name")
    if path.is_dir():
        raise ProfkitError(f"{path} is a folder: give a file name such as {path / 'trace.json.gz'}")
    try:
        with atomic_path(path) as tmp:
            with open(tmp, "wb", buffering=BUFFER_BYTES) as raw:
                if path.name.endswith(".gz"):
                    packed = _CompressInBackground(raw)
                    try:
                        yield packed  # type: ignore[misc]
                    except BaseException:
                        packed.close(finish=False)
                        raise
                    packed.close(finish=True)
                else:
                    yield raw
            os.chmod(tmp, 0o644)
    except OSError as exc:
        raise ProfkitError(f"cannot write {path}: {exc.strerror or exc}",
                           hint="choose a writable folder with -o") from None

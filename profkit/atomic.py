"""Write output files whole or not at all.

Every file profkit writes for a user (reports, exports, scrubbed copies) is
first written under a temporary name in the same folder and then renamed
onto its final name.  A rename within one folder is atomic on POSIX and
Windows, so a reader sees the old file or the new one, never half of one;
an interrupted run leaves its temporary file removed (SIGINT, SIGTERM and
SIGHUP included: ``profkit.signals`` turns them into exceptions; after a
hard kill, a dot-file named ``….incomplete`` that ``profkit`` never reads),
and two runs writing the same folder each put whole files in place.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path


def temp_name(target: Path) -> Path:
    """A fresh hidden name beside ``target`` (same folder, so the rename stays atomic)
    that says what it is, should a hard kill (SIGKILL, power loss) leave it behind."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.incomplete")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``target``.

    On any exception (KeyboardInterrupt included) the temporary file is
    removed and ``target`` is left as it was.
    """
    final = Path(target)
    tmp = temp_name(final)
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_files(files: Mapping[Path, bytes | str]) -> None:
    """Write several files that belong together (report.html/.md/.json) so they are never mixed.

    Each is written under a temporary name first; then, holding a lock on
    their folder, all are renamed into place.  Two runs writing the same
    folder each rename their whole set under the lock, so the folder ends
    with one run's set, never half of each; an interruption before the
    renames leaves the old set.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for target, data in files.items():
            tmp = temp_name(Path(target))
            staged.append((tmp, Path(target)))
            with open(tmp, "wb") as fh:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        folders = sorted({final.parent for _, final in staged})
        with contextlib.ExitStack() as locks:
            for folder in folders:
                locks.enter_context(_folder_lock(folder))
            for tmp, final in staged:
                os.replace(tmp, final)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on the folder itself (no lock file left behind)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; each rename is still atomic
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_bytes(target: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``target`` atomically."""
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return Path(target)


def write_text(target: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``target`` atomically."""
    return write_bytes(target, text.encode(encoding))

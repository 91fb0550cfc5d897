"""``--rev REV``: the same target as it was at a git revision."""

from __future__ import annotations

import atexit
import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from profkit.errors import ProfkitError
from profkit.ptx.cache import Cache
from profkit.ptx.targets import Target


def _git(args: list[str], cwd: Path, failure: str | None = None) -> bytes:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=60, check=False)
    except FileNotFoundError:
        raise ProfkitError("--rev needs git, and git is not installed") from None
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        if failure:
            raise ProfkitError(failure)
        raise ProfkitError(f"git {' '.join(args)}: {message[0] if message else 'failed'}")
    return result.stdout


# What a revision may look like: names, hashes, ~N, ^N, @{...}, ranges of
# those characters; never a leading '-', which git would read as an option
# (`--output=/tmp/x` makes `git show` write a file).
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./~^@{}:+-]{0,255}")


def resolve_revision(rev: str, cwd: Path) -> str:
    """The commit id ``rev`` names, or a ProfkitError; only the id ever reaches ``git show``."""
    if not _REVISION.fullmatch(rev) or ".." in rev or ":" in rev:
        raise ProfkitError(f"--rev {rev!r} is not a git revision",
                           hint="give a branch, tag or commit, e.g. --rev HEAD~1 or --rev main")
    commit = _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], cwd,
                  failure=f"--rev {rev!r} names no commit in this repository").decode().strip()
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise ProfkitError(f"--rev {rev!r} names no commit in this repository")
    return commit


def target_at_revision(target: Target, rev: str, cache: Cache) -> Target:
    """A copy of the target's source file as of ``rev``.

    The copy lives at a path named by its content, so compiling the same
    revision twice hits the compile cache.  Imports and ``#include "..."``
    that the old file makes still resolve next to the original (working tree).
    """
    path = target.path
    top = Path(_git(["rev-parse", "--show-toplevel"], path.parent).decode().strip())
    relative = path.resolve().relative_to(top.resolve()).as_posix()
    blob = _git(["show", f"{resolve_revision(rev, top)}:{relative}"], top)
    digest = hashlib.sha256(blob).hexdigest()[:16]
    if cache.enabled:
        directory = cache.root / "revisions" / digest
    else:
        directory = Path(tempfile.mkdtemp(prefix="profkit-rev-"))
        atexit.register(shutil.rmtree, directory, True)
    directory.mkdir(parents=True, exist_ok=True)
    copy = directory / path.name
    if not copy.exists():
        staging = directory / f".{path.name}.tmp"
        staging.write_bytes(blob)
        staging.replace(copy)
    return replace(target, path=copy, label=f"{target.label}@{rev}", search_dirs=(path.parent, *target.search_dirs))

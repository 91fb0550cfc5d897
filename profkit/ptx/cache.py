"""The compile cache: one directory of files per key.

Keys hash everything that can change the machine code: the source (and the
local files it imports or includes), the compile parameters, the
architecture and the compiler's version.  A warm run therefore imports
neither triton nor the user's module and runs no compiler.

Layout: ``$PROFKIT_CACHE_DIR`` or ``~/.cache/profkit/ptx`` (``$XDG_CACHE_HOME``
respected), then ``<namespace>/<key[:2]>/<key>/<files>``.  Entries are
written to a temporary directory and renamed into place, so concurrent
runs (pytest -n, two terminals) never see half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

# Bump when what an entry holds, or how keys are made, changes.
CACHE_FORMAT = 1
MANIFEST = "manifest.json"


def default_cache_dir() -> Path:
    if os.environ.get("PROFKIT_CACHE_DIR"):
        return Path(os.environ["PROFKIT_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "profkit" / "ptx"


def make_key(parts: dict[str, Any]) -> str:
    """A stable hash of JSON-able key parts."""
    blob = json.dumps({"format": CACHE_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class Cache:
    """Files by key.  ``enabled=False`` makes every lookup miss and every store a no-op."""

    def __init__(self, root: Path | None = None, enabled: bool = True) -> None:
        self.root = root or default_cache_dir()
        self.enabled = enabled

    def _entry(self, namespace: str, key: str) -> Path:
        return self.root / namespace / key[:2] / key

    def get(self, namespace: str, key: str) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        """(manifest, files) of an entry, or None on a miss or a damaged entry."""
        if not self.enabled:
            return None
        return self._read(self._entry(namespace, key))

    @staticmethod
    def _read(entry: Path) -> tuple[dict[str, Any], dict[str, bytes]] | None:
        try:
            manifest = json.loads((entry / MANIFEST).read_text())
            files = {name: (entry / name).read_bytes() for name in manifest.get("files", [])}
        except (OSError, ValueError):
            return None
        return manifest, files

    def put(self, namespace: str, key: str, manifest: dict[str, Any], files: dict[str, bytes]) -> None:
        if not self.enabled:
            return
        entry = self._entry(namespace, key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{uuid.uuid4().hex[:8]}-", dir=entry.parent))
        try:
            for name, data in files.items():
                (staging / name).write_bytes(data)
            (staging / MANIFEST).write_text(json.dumps({**manifest, "files": sorted(files)}, indent=1, default=str))
            try:
                os.replace(staging, entry)
            except OSError:
                # Another process stored the same key first (its entry is as
                # good as ours), or a damaged entry is in the way.
                if self._read(entry) is None:
                    shutil.rmtree(entry, ignore_errors=True)
                    os.replace(staging, entry)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def clear(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)

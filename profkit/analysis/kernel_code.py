"""The machine code behind the kernels of a trace.

Triton and inductor kernels leave their compiled code on disk: Triton's cache
(``$TRITON_CACHE_DIR``, default ``~/.triton/cache``) and inductor's
(``$TORCHINDUCTOR_CACHE_DIR``, whose ``triton/`` holds the same artifacts)
keep ``<kernel>.cubin``, ``.ptx`` and ``.json`` per compiled kernel.  A trace
names a Triton kernel by its function name (``triton_poi_fused_gelu_0``,
``gelu_kernel``), which is the symbol in the cubin, so the two join on that
name.  For each traced kernel found, this gives registers, spills, load and
store widths and the graded vectorization verdict (``profkit.ptx.summary``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from profkit.analysis.kernel_names import function_name
from profkit.errors import ProfkitError

CODE_KEYS = ("registers", "spills", "global_loads", "global_stores", "vector_share", "vectorization", "code_verdict")


def code_by_kernel(directories: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """Kernel function name -> its machine-code facts, for every compiled kernel under the folders."""
    from profkit.ptx.cache import Cache
    from profkit.ptx.inductor import scan
    from profkit.ptx.kernel import kernels_of
    from profkit.ptx.summary import summarize, width_map

    cache = Cache()
    found: dict[str, dict[str, Any]] = {}
    for directory in directories:
        if not Path(directory).is_dir():
            continue
        for build in scan(Path(directory), cache).builds:
            for code in kernels_of(build, cache, every=True):
                s = summarize(code)
                found.setdefault(code.name, {
                    "registers": s.registers,
                    "spills": None if s.spill_stores_bytes is None else s.spill_stores_bytes + s.spill_loads_bytes,
                    "global_loads": width_map(s.mix.global_loads),
                    "global_stores": width_map(s.mix.global_stores),
                    "vector_share": s.vector_share,
                    "vectorization": s.vectorization,
                    "code_verdict": s.verdict,
                    "arch": s.arch,
                    "code_source": s.source,
                })
    return found


def attach_code(rows: Sequence[dict[str, Any]], code: dict[str, dict[str, Any]],
                name_key: str = "name") -> list[dict[str, Any]]:
    """Rows with the machine-code columns of the kernels that have code (others unchanged)."""
    out = []
    for row in rows:
        facts = code.get(function_name(str(row.get(name_key, ""))))
        out.append({**row, **facts} if facts else dict(row))
    return out


def run_folder_caches(run_json: Path) -> list[Path]:
    """The kernel caches a ``profkit trace`` run recorded in its run.json."""
    try:
        info = json.loads(run_json.read_text())
    except (OSError, ValueError) as exc:
        raise ProfkitError(f"{run_json}: unreadable ({exc})") from None
    caches = (info.get("kernel_caches") or {}) if isinstance(info, dict) else {}
    return [Path(p) for p in caches.values() if isinstance(p, str)]

"""The machine code behind the kernels of a trace.

Triton and inductor kernels leave their compiled code on disk: Triton's cache
(``$TRITON_CACHE_DIR``, default ``~/.triton/cache``) and inductor's
(``$TORCHINDUCTOR_CACHE_DIR``, whose ``triton/`` holds the same artifacts)
keep ``<kernel>.cubin``, ``.ptx`` and ``.json`` per compiled kernel.  A trace
names a Triton kernel by its function name (``triton_poi_fused_gelu_0``,
``gelu_kernel``), which is the symbol in the cubin, so the two join on that
name.  For each traced kernel found, this gives registers, spills, load and
store widths and the graded vectorization verdict (``profkit.ptx.summary``).

One name can have several compiled variants: inductor's autotuner compiles
every candidate configuration (warps, block sizes) and keeps them all in the
cache.  The variant that ran is the one whose warps and shared memory match
the launches the trace recorded (block size, shared memory per block); when
that still leaves variants whose code differs, the facts they disagree on are
left unknown rather than guessed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from profkit.analysis.kernels.names import code_key
from profkit.model import Trace

# The keys every row gets from ``attach_code`` (None where the code is unknown).
# code_source: "cache" (the code the run left in a Triton/inductor cache) or "compiled"
# (compiled now from the sources named by --kernels: not necessarily what ran).
CODE_KEYS = ("registers", "spills", "global_loads", "global_stores", "vector_share", "vectorization",
             "vector_grade", "code_verdict", "code_source", "code_variants")

Variant = dict[str, Any]
_SHOWN_KEYS = ("registers", "spills", "global_loads", "global_stores", "vector_grade")


def code_by_kernel(directories: Iterable[Path], names: Iterable[str] | None = None) -> dict[str, list[Variant]]:
    """Kernel ``code_key`` (its function name) -> the machine-code facts of each of its compiled variants under the
    folders (``names``: only these kernels; folders that do not exist are skipped).

    A variant's keys: CODE_KEYS but code_variants, plus ``arch``, ``code_file``,
    ``threads_per_block`` (Triton's num_warps x 32, None if unknown) and
    ``shared_bytes`` (Triton's dynamic shared memory, None if unknown)."""
    from profkit.ptx.cache import Cache
    from profkit.ptx.inductor import scan
    from profkit.ptx.kernel import kernels_of

    wanted = None if names is None else {code_key(str(n)) for n in names}
    cache = Cache()
    found: dict[str, list[Variant]] = {}
    for directory in dict.fromkeys(Path(d) for d in directories):
        if not directory.is_dir():
            continue
        for build in scan(directory, cache, only=wanted).builds:
            warps = build.params.get("num_warps")
            for code in kernels_of(build, cache, every=True):
                found.setdefault(symbol_code_key(code), []).append(variant_of(
                    code, int(warps) * 32 if isinstance(warps, int) else None,
                    build.dynamic_shared_bytes.get(code.symbol), "cache"))
    return found


def variant_of(code: Any, threads_per_block: int | None, shared_bytes: int | None, source: str) -> Variant:
    """The facts of one compiled kernel (a ``profkit.ptx.kernel.KernelCode``) as a variant;
    ``source``: "cache" (the code a run left) or "compiled" (compiled now, --kernels)."""
    from profkit.ptx.summary import summarize, width_map

    s = summarize(code)
    return {
        "registers": s.registers,
        "spills": None if s.spill_stores_bytes is None else s.spill_stores_bytes + s.spill_loads_bytes,
        "global_loads": width_map(s.mix.global_loads),
        "global_stores": width_map(s.mix.global_stores),
        "vector_share": s.vector_share,
        "vectorization": s.vectorization,
        "vector_grade": vector_grade(s.vectorization, s.vector_share),
        "code_verdict": s.verdict,
        "code_source": source,
        "arch": s.arch,
        "code_file": s.source,
        "threads_per_block": threads_per_block,
        "shared_bytes": shared_bytes,
    }


def vector_grade(grade: str, share: float | None) -> str:
    """"mostly (92%)": the grade with the share of global load/store bytes moved by 128-bit
    accesses (rounded down below 100%, so that "mostly" never reads "(100%)")."""
    if share is None:
        return grade
    return f"{grade} ({100 if share >= 1 else math.floor(100 * share)}%)"


def launch_configurations(trace: Trace) -> Any:
    """Each kernel name's launch configurations as a DataFrame (name, threads per block,
    shared memory per block with -1 where the trace lacks it, launches), most launched
    first (ties in name, threads, smem order); None without kernels."""
    if not trace.has("kernels"):
        return None
    k = trace.table("kernels", ["name", "block_x", "block_y", "block_z", "static_smem_bytes",
                                "dynamic_smem_bytes"])
    if not len(k):
        return None
    frame = k.assign(threads=k["block_x"] * k["block_y"] * k["block_z"],
                     smem=k["static_smem_bytes"].clip(lower=0) + k["dynamic_smem_bytes"].clip(lower=0))
    unknown_smem = (k["static_smem_bytes"] < 0) & (k["dynamic_smem_bytes"] < 0)
    frame.loc[unknown_smem, "smem"] = -1
    counts = frame.groupby(["name", "threads", "smem"], observed=True).size().reset_index(name="launches")
    return counts.sort_values("launches", ascending=False, kind="stable")


def launch_shapes(trace: Trace) -> dict[str, tuple[int, int | None]]:
    """Kernel function name -> (threads per block, shared memory per block) of its most
    launched configuration in the trace; shared memory None where the trace lacks it."""
    counts = launch_configurations(trace)
    if counts is None:
        return {}
    return {code_key(str(r.name)): (int(r.threads), None if r.smem < 0 else int(r.smem))
            for r in counts.drop_duplicates("name").itertuples(index=False)}


def pick_variant(variants: Sequence[Variant], shape: tuple[int, int | None] | None) -> Variant:
    """What is known of the variant that ran: the variants matching the traced launch's
    threads per block and shared memory (all of them when none match or no launch is
    known), and of their facts those they agree on; the others are None (two variants
    of a pointwise kernel that differ only in elements per thread have the same
    registers and different load widths)."""
    candidates = list(variants)
    if len(candidates) > 1 and shape is not None:
        threads, smem = shape
        same_threads = [v for v in candidates if v["threads_per_block"] == threads]
        same_smem = [v for v in same_threads if smem is not None and v["shared_bytes"] == smem]
        candidates = same_smem or same_threads or candidates
    return {key: _agreed([v.get(key) for v in candidates]) for key in candidates[0]}


def _agreed(values: list[Any]) -> Any:
    first = json.dumps(values[0], sort_keys=True)
    return values[0] if all(json.dumps(v, sort_keys=True) == first for v in values[1:]) else None


def attach_code(rows: Sequence[dict[str, Any]], code: dict[str, list[Variant]],
                shapes: dict[str, tuple[int, int | None]] | None = None,
                name_key: str = "name") -> list[dict[str, Any]]:
    """Rows with the machine-code columns (CODE_KEYS): the facts of the variant that ran
    where its code was found; a key the row lacks is None elsewhere (a key it has, such
    as a diff row's registers from the trace, stays)."""
    out = []
    for row in rows:
        name = code_key(str(row.get(name_key, "")))
        variants = variants_for(name, code)
        new = dict(row)
        if variants:
            chosen = pick_variant(variants, (shapes or {}).get(name))
            new.update({key: chosen[key] for key in CODE_KEYS if key in chosen})
        for key in CODE_KEYS:
            new.setdefault(key, None)
        new["code_variants"] = len(variants) or None
        out.append(new)
    return out


def variants_for(key: str, code: dict[str, list[Variant]]) -> list[Variant]:
    """The variants of the kernel ``key`` (its ``code_key``): the code the run left (a
    cache) rather than code compiled now (--kernels) when there are both."""
    variants = code.get(key) or []
    from_run = [v for v in variants if v.get("code_source") != "compiled"]
    return from_run or variants


def symbol_code_key(code: Any) -> str:
    """``code_key`` of a compiled kernel (a ``profkit.ptx.kernel.KernelCode``): its
    function name, with "()" for a C++ kernel, whose symbol is mangled."""
    return code.name.split("::")[-1] + ("()" if code.symbol.startswith("_Z") else "")


def run_folder_caches(record: Any, run_dir: Path | None = None) -> list[Path]:
    """The kernel caches a ``profkit trace`` run recorded in its run.json
    (``readers.run_folder.read_run_record``'s value).

    A run folder may come from anyone, and its run.json may name "/": with
    ``run_dir``, only caches below the run folder or below the user's own cache
    folders (``user_cache_roots``) are kept, so a report never walks the disk."""
    caches = (record.get("kernel_caches") or {}) if isinstance(record, dict) else {}
    paths = [Path(p) for p in caches.values() if isinstance(p, str) and p]
    if run_dir is None:
        return paths
    roots = [Path(run_dir).resolve(), *user_cache_roots()]
    return [p for p in paths if any(_below(p.resolve(), root) for root in roots)]


def kernel_caches() -> dict[str, str]:
    """Where the profiled program's Triton and inductor kernels are compiled to.

    The program inherits profkit's environment, so these are its folders:
    ``$TORCHINDUCTOR_CACHE_DIR`` (default ``<tmp>/torchinductor_<user>``, as
    torch._inductor.runtime.cache_dir_utils computes it) and ``$TRITON_CACHE_DIR``
    (default ``~/.triton/cache``).  `profkit kernels --with-code RUN` reads the
    compiled code of the run's kernels from them."""
    import getpass
    import tempfile

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (containers)
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    return {"inductor": inductor, "triton": triton}


def user_cache_roots() -> list[Path]:
    """This user's kernel cache folders: the inductor and Triton caches ``profkit trace``
    records (their environment variables or defaults) and ``$XDG_CACHE_HOME`` (~/.cache)."""
    roots = [Path(p) for p in kernel_caches().values()]
    roots.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"))
    return [r.resolve() for r in roots]


def _below(path: Path, root: Path) -> bool:
    return root != Path(root.anchor) and (path == root or root in path.parents)


def code_note(rows: Sequence[dict[str, Any]], directories: Sequence[Path]) -> str | None:
    """One sentence on what was found, for the kernels whose code could be there
    (Triton's names); None when there are none.  Code compiled now (--kernels) has
    its own note (``targets.compiled_note``)."""
    triton = [r for r in rows if r.get("code_source") != "compiled"
              and (str(r.get("name", "")).startswith("triton_") or r.get("code_variants"))]
    if not triton:
        return None
    known = sum(1 for r in triton if r.get("registers") is not None and r.get("code_variants"))
    partial = sum(1 for r in triton if r.get("code_variants") and any(r.get(k) is None for k in _SHOWN_KEYS))
    where = ", ".join(str(d) for d in directories) or "no folder given"
    text = f"Machine code found for {known} of {len(triton)} Triton kernels (searched: {where})."
    if partial:
        text += (f" {partial} have several compiled variants (autotuning) that the traced launch (block size, "
                 "shared memory) does not tell apart: where their code differs, the cell shows —.")
    return text

"""Are two traces of one program?  The check every comparison shares.

``profkit ranks``/``report`` (ranks of one job), ``diff``, ``history add``,
``report --baseline`` and ``stalls --compare`` compare two traces; a figure
such as "+46% step time" means nothing between two unrelated programs.  The
test is by kernel *names* (canonical, so nsys and Kineto spellings match),
not by time: a change that slows one kernel, or a straggler rank that runs one
extra kernel, is still the same program.

The share is the Jaccard index of the two sets of canonical names: names both
ran over names either ran.  Two traces are of one program when the share is at
least ``SAME_PROGRAM_MIN_SHARED`` (50%), so a change that removes half of a
program's kernels is still accepted and one that removes more is not
(tests/test_same_program.py builds that case from a real capture).  Measured on
the committed captures: one program traced twice, or by nsys and by
torch.profiler, shares 90-100%; the GPT and MLP training loops share 24-25%;
eager vs ``torch.compile``'d GPT shares 35-38% (inductor replaces most
kernels).

So the kernel names come last.  First, what the trace records about the
program itself (``program_identity``): the script (the outermost ``<module>``
frame of its Python stacks, profkit's launcher and runpy left out), else the
names of the user's own annotated ranges (NVTX or ``record_function``;
libraries', torch.profiler's ``ProfilerStep#N`` and profkit's sync sites left
out; digits folded).  Two scripts, or two sets of range names, that differ
are two programs whatever kernels they share (``train_mlp.py``'s "warmup" and
"step" against ``train_slow_loader.py``'s "step", the same MLP's cuBLAS
kernels); the same script or the same range names are one program whatever
its kernels (eager against ``torch.compile``'d GPT, both "train_step"), and
the comparison says how few kernel names they share.  Kernel names decide
only where neither trace records what it ran.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from profkit.errors import ProfkitError
from profkit.model import Trace

SAME_PROGRAM_MIN_SHARED = 0.5


def kernel_keys(trace: Trace) -> set[str]:
    """The canonical names of the kernels (and untraced CUDA graph replays) a trace ran."""
    import pandas as pd

    from profkit.analysis.kernels.names import canonical_kernel_name

    names: set[str] = set()
    for table in ("kernels", "graphs"):
        if not trace.has(table) or not trace.count(table):
            continue
        column = trace.table(table, ["name"])["name"]
        values = pd.unique(column.astype(str)) if not isinstance(column.dtype, pd.CategoricalDtype) else \
            column.cat.remove_unused_categories().cat.categories.astype(str)
        names.update(canonical_kernel_name(str(v)) for v in values)
    return names


def shared_share(a: Iterable[str], b: Iterable[str]) -> float:
    """Names both ran over names either ran (1.0 for two empty sets)."""
    sa, sb = set(a), set(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 1.0


def check_same_program(a_label: str, a_keys: Iterable[str], b_label: str, b_keys: Iterable[str], *,
                       force: bool = False, hint: str | None = "pass --force to compare them anyway") -> float:
    """The share of common kernel names; raises when it is below ``SAME_PROGRAM_MIN_SHARED``
    (unless ``force``)."""
    share = shared_share(a_keys, b_keys)
    if share < SAME_PROGRAM_MIN_SHARED and not force:
        raise ProfkitError(f"{a_label} and {b_label} look like different programs: they share "
                           f"{_percent(share)} of their kernel names (at least "
                           f"{SAME_PROGRAM_MIN_SHARED:.0%} needed)", hint=hint)
    return share


@dataclass(frozen=True)
class ProgramIdentity:
    """What a trace records about the program it ran; None where it records nothing."""

    script: str | None               # 'train_mlp.py'
    ranges: frozenset[str] | None    # the user's range names, digits folded: {'step', 'warmup'}


@dataclass(frozen=True)
class ProgramCheck:
    """How two traces were found to be of one program: ``by`` 'script', 'ranges' or 'kernels';
    ``share`` of kernel names in common; ``note`` for a comparison of one program whose kernels differ."""

    share: float
    by: str
    note: str | None = None


# Frames that are never the program: profkit's launcher, Python's own runner, installed packages.
_NOT_THE_SCRIPT = ("profkit/", "profkit\\", "runpy.py", "site-packages", "<")


def program_identity(trace: Trace) -> ProgramIdentity:
    """The script and the user's range names the trace records (see the module docstring)."""
    from profkit.analysis.steps.ranges import PROFILER_STEP, fold_digits, is_library_range

    script = None
    if trace.has("python_frames"):
        frames = trace.table("python_frames", ["function", "file", "depth"])
        modules = frames[frames["function"].astype(str).to_numpy() == "<module>"]
        files = modules["file"].astype(str).to_numpy()
        mine = [not any(n in f for n in _NOT_THE_SCRIPT) and f != "" for f in files.tolist()]
        if any(mine):
            outer = modules[mine].sort_values("depth", kind="stable")
            script = str(outer["file"].iloc[0]).replace("\\", "/").rsplit("/", 1)[-1]
    ranges = None
    if trace.has("ranges"):
        table = trace.table("ranges", ["name", "domain", "kind"])
        names = {fold_digits(n) for n, d, k in zip(table["name"].astype(str), table["domain"].astype(str),
                                                   table["kind"].astype(str))
                 if k not in (PROFILER_STEP, "gpu_user_annotation") and not is_library_range(n, d, k)}
        ranges = frozenset(names) or None
    return ProgramIdentity(script, ranges)


def compare_programs(a: Trace, b: Trace, *, force: bool = False) -> ProgramCheck:
    """Whether ``a`` and ``b`` ran one program: by what they record about it, else by their kernel
    names (``check_same_program``); raises for two programs unless ``force``."""
    ia, ib = program_identity(a), program_identity(b)
    keys_a, keys_b = kernel_keys(a), kernel_keys(b)
    share = shared_share(keys_a, keys_b)
    if ia.script and ib.script:
        by, same = "script", ia.script == ib.script
        what = (f"the script {ia.script}" if same else f"the scripts {ia.script} and {ib.script}")
    elif ia.ranges and ib.ranges:
        by, same = "ranges", ia.ranges == ib.ranges
        what = (f"annotated ranges {_names(ia.ranges)}" if same else
                f"annotated ranges {_names(ia.ranges)} and {_names(ib.ranges)}")
    else:
        check_same_program(a.name, keys_a, b.name, keys_b, force=force)
        return ProgramCheck(share, "kernels")
    if not same and not force:
        raise ProfkitError(f"{a.name} and {b.name} are different programs: they record {what} "
                           f"(they share {_percent(share)} of their kernel names)",
                           hint="pass --force to compare them anyway")
    note = None
    if same and share < SAME_PROGRAM_MIN_SHARED:
        note = (f"one program ({what} on both sides) with different kernels: they share {_percent(share)} of "
                "their kernel names (a compiler such as torch.compile, or another library, replaced them); "
                "kernels new and gone are that change")
    return ProgramCheck(share, by, note)


def check_traces(a: Trace, b: Trace, *, force: bool = False) -> float:
    """``compare_programs`` on two open traces: the share of kernel names in common."""
    return compare_programs(a, b, force=force).share


def _names(names: frozenset[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in sorted(names)) + "]"


def _percent(share: float) -> str:
    # floor, so that 49.7% never reads "50%" next to "at least 50% needed"
    return f"{int(share * 100)}%"

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
kernels: compare them with ``--force``).
"""

from __future__ import annotations

from collections.abc import Iterable

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


def check_traces(a: Trace, b: Trace, *, force: bool = False) -> float:
    """``check_same_program`` on two open traces."""
    return check_same_program(a.name, kernel_keys(a), b.name, kernel_keys(b), force=force)


def _percent(share: float) -> str:
    # floor, so that 49.7% never reads "50%" next to "at least 50% needed"
    return f"{int(share * 100)}%"

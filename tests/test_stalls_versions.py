"""The same program (scripts/sync_elementwise.py, one sync of each kind per step,
8 steps) traced by nsys 2025.3 and by nsys 2023.4 with profkit's sync-site hook:
both exports must give the same Python sites, causes and counts.

nsys2023_sync_sites was captured after the hook learned to get past nsys
2023.4's nvtxDomainIsEnabled answer; the older nsys2023_sync has no NVTX at all
(its sites are "source unknown", tested in test_stalls.py)."""

from __future__ import annotations

from pathlib import Path

from profkit.analysis.sync.stalls import analyze_stalls
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sync_elementwise.py"


def _sites(name: str) -> dict[tuple[str | None, str], int]:
    with open_trace(nsys_fixture(name)) as trace:
        report = analyze_stalls(trace)
    sites: dict[tuple[str | None, str], int] = {}
    for site in report.sites:
        source = Path(site["source"]).name if site["source"] else None
        sites[(source, site["cause"])] = sites.get((source, site["cause"]), 0) + site["count"]
    return sites


def _line_of(marker: str) -> int:
    for number, text in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if text.rstrip().endswith(marker):
            return number
    raise AssertionError(f"no line ending in {marker!r} in {SCRIPT}")


def test_both_nsys_versions_pin_each_sync_to_its_line() -> None:
    old, new = _sites("nsys2023_sync_sites"), _sites("nsys2025_sync")
    assert old == new
    expected = {
        "# .item()": ".item()",
        "# truthiness": "truthiness",
        "# .cpu()": ".cpu()",
        "# .tolist()": ".tolist()",
        "# print/format of a tensor": "print/format",
        "# explicit": "torch.cuda.synchronize()",
    }
    for marker, cause in expected.items():
        assert old[(f"sync_elementwise.py:{_line_of(marker)}", cause)] == 8, (marker, old)
    assert old[(None, "blocking copy")] == 8  # host.copy_(y): no Python-side hook, still found

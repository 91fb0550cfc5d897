"""Re-render the committed reports under reports/ from the exports kept beside
them, on any machine (no GPU): after a change to the report, the reports of
the real GPU runs show what profkit now says about those runs.

Each reports/<run>/ is a `profkit trace` run folder whose export is committed
xz-compressed (trace.sqlite.xz) or as the kept PyTorch profiler trace
(trace.json.gz). The folder is copied to a temporary place, its export
unpacked, its `inductor_cache.tar.xz` and `triton_cache.tar.xz` unpacked and passed as
kernel caches,
and report.html/md/json are written back into reports/<run>/.
reports/train_print_vs_noprint compares train_print with train_noprint.

    python scripts/render_reports.py [RUN ...]      # default: every run
"""

from __future__ import annotations

import contextlib
import lzma
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = ROOT / "reports"
sys.path.insert(0, str(ROOT))

from profkit.report import write_report  # noqa: E402

# reports/<name>: (trace run, baseline run) rendered as one comparison report
COMPARISONS = {"train_print_vs_noprint": ("train_print", "train_noprint")}
# what a report reads from a run folder; its *_cache.tar.xz are unpacked beside it
KEPT = {"trace.sqlite.xz", "trace.sqlite", "trace.json.gz", "run.json", "ncu.csv"}


def unpacked_run(run: Path, work: Path) -> tuple[Path, list[Path]]:
    """A copy of the run folder with its export unpacked, and its unpacked kernel caches
    (relative to ``work``, the working folder, so the report names them as the tarball)."""
    folder = work / run.name
    folder.mkdir()
    for item in run.iterdir():
        if item.name in KEPT:
            shutil.copy2(item, folder / item.name)
    packed = folder / "trace.sqlite.xz"
    if packed.exists():
        with lzma.open(packed) as src, open(folder / "trace.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst)
        packed.unlink()
    caches = []
    for kind in ("inductor", "triton"):  # the kernel caches the run compiled into (profile_samples.sh)
        packed_cache = run / f"{kind}_cache.tar.xz"
        if packed_cache.exists():
            cache = Path(f"{run.name}-{kind}_cache")
            with tarfile.open(packed_cache) as tar:
                tar.extractall(work / cache, filter="data")
            caches.append(cache)
    return folder, caches


def render(name: str) -> Path:
    with tempfile.TemporaryDirectory(prefix="profkit-render-") as tmp, contextlib.chdir(tmp):
        work = Path(tmp)
        if name in COMPARISONS:  # the exports under their runs' names, as the report names them
            new, base = (unpacked_run(REPORTS / n, work)[0] / "trace.sqlite" for n in COMPARISONS[name])
            new, base = new.rename(work / f"{new.parent.name}.sqlite"), base.rename(work / f"{base.parent.name}.sqlite")
            return write_report(new, REPORTS / name, baseline=base).html
        folder, caches = unpacked_run(REPORTS / name, work)
        return write_report(folder, REPORTS / name, code_dirs=caches).html


def main(argv: list[str]) -> int:
    runs = argv or sorted(p.name for p in REPORTS.iterdir() if (p / "run.json").exists() or p.name in COMPARISONS)
    for name in runs:
        print(f"{name}: {render(name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

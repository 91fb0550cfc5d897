"""Record the CLI's JSON outputs on a few committed fixtures, or check that they did not change.

A refactor that moves code between layers (a constant down into ``model/``, the CLI onto
``profkit.api``) must not change a single figure.  Run ``record`` on the commit before the
change and ``compare`` after it; compare exits 1 naming every output that differs.

    python scripts/check_outputs_unchanged.py record /tmp/outputs-before
    python scripts/check_outputs_unchanged.py compare /tmp/outputs-before

Outputs: ``kernels``, ``api``, ``nvtx``, ``steps``, ``breakdown``, ``stalls``, ``graphs`` with ``--format
json``, and ``report``'s report.json without its ``generated_utc`` (the only field that changes
from run to run), on 3 nsys exports and 2 Kineto traces.  Bytes are compared, not parsed
values, so a changed float formatting or key order shows too.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
FIXTURES = {
    "nsys_train_print": DATA / "nsys" / "nsys2025_train_print.sqlite.xz",
    "nsys_sync_sites": DATA / "nsys" / "nsys2023_sync_sites.sqlite.xz",
    "nsys_graphs": DATA / "graphs" / "gpt_graphs_graph.sqlite.xz",
    "kineto_mlp_print": DATA / "kineto" / "mlp_print.json.gz",
    "kineto_graphs": DATA / "graphs" / "gpt_graphs_kineto.json.gz",
}
COMMANDS = ("kernels", "api", "nvtx", "steps", "breakdown", "stalls", "graphs")


def _plain_copy(packed: Path, work: Path) -> Path:
    """The fixture as the CLI reads it: .xz exports are committed compressed."""
    if packed.suffix != ".xz":
        return packed
    plain = work / packed.with_suffix("").name
    with lzma.open(packed) as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return plain


def _run(args: list[str]) -> tuple[int, bytes]:
    from profkit.cli import cli

    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    # exit code and stdout together: a command that starts failing is a change too
    return result.exit_code, result.stdout_bytes


def outputs(work: Path) -> dict[str, bytes]:
    """``{"<fixture>.<command>": output bytes}`` for every fixture and command."""
    out: dict[str, bytes] = {}
    for name, packed in FIXTURES.items():
        path = _plain_copy(packed, work)
        for command in COMMANDS:
            code, text = _run([command, str(path), "--format", "json"])
            out[f"{name}.{command}.json"] = b"exit %d\n" % code + text
        report_dir = work / f"report-{name}"
        code, _ = _run(["report", str(path), "-o", str(report_dir)])
        report = json.loads((report_dir / "report.json").read_bytes()) if code == 0 else {}
        report.pop("generated_utc", None)
        out[f"{name}.report.json"] = b"exit %d\n" % code + json.dumps(report, indent=1).encode()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("record", "compare"))
    parser.add_argument("folder", type=Path, help="where the recorded outputs are (record writes, compare reads)")
    args = parser.parse_args(argv)
    if args.mode == "compare" and not args.folder.is_dir():
        print(f"check_outputs_unchanged: {args.folder}: no recorded outputs (run record first)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="profkit-outputs-") as tmp:
        now = outputs(Path(tmp))
    if args.mode == "record":
        args.folder.mkdir(parents=True, exist_ok=True)
        for key, value in now.items():
            (args.folder / key).write_bytes(value)
        print(f"recorded {len(now)} outputs in {args.folder}")
        return 0
    changed = []
    for key, value in now.items():
        before = args.folder / key
        if not before.is_file():
            changed.append(f"{key}: not recorded")
        elif before.read_bytes() != value:
            changed.append(f"{key}: differs")
    for line in changed:
        print(line)
    print(f"{len(now) - len(changed)} of {len(now)} outputs unchanged")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

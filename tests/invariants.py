"""Invariants every profkit output keeps, checked on the JSON the CLI prints and on report.json.

``collect(trace)`` runs the commands once (``steps``, ``host`` and ``host --steady``, ``stalls``,
``breakdown --steady``, ``graphs``, ``kernels``, ``api`` with ``--format json``, and ``report``) and keeps
what each printed.
Each checker below takes those outputs and returns the violations it found, as sentences (an empty
list: the invariant holds).  The checkers read only the outputs, never profkit's code: they are
what a reader of the outputs would check by hand, so a planted violation in an output is caught
(tests/test_invariants.py plants one per invariant).

Figures in sentences are parsed back from profkit's printed durations ("2.41 ms", "947 µs"): three
significant digits, so two figures agree when they are within 1% (a mean and a median of the same
steps usually differ by more).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from profkit.cli import cli
from profkit.readers.kineto.source_lines import SOURCE_PATH_ENV

ZOO_PROGRAMS = Path(__file__).parent / "zoo" / "programs"
COMMANDS = {"steps": ["steps"], "host": ["host"], "host_all_steps": ["host", "--all-steps"], "stalls": ["stalls"],
            "breakdown": ["breakdown", "--steady"],
            "graphs": ["graphs"], "kernels": ["kernels"], "api": ["api"]}
PER_RANK_OBJECTS = ("host", "host_all_steps", "stalls", "graphs")
RAW_SYNC_TEXT = "profkit.sync|"
FIGURE_REL_TOL = 0.01  # printed durations have three significant digits
UNITS_NS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
DURATION = r"(\d[\d,]*(?:\.\d+)?)\s?(ns|µs|us|ms|s)\b"
# profkit's own code, which must stay transparent in a host table: the launcher and the sync hook.
OWN_FRAME = re.compile(r"(^|[/\\])profkit[/\\]")
# Advice to do what a trace shows is done already.
# ("replays of 2 CUDA graphs" reports what was done; "replaying them as a CUDA graph" advises it.)
GRAPH_ADVICE = re.compile(r"\b(replay(ing)? (them|it|these|the \w+) (as|in)|captur(e|ing)|us(e|ing)|try(ing)?)"
                          r"\s+(an? |the |one )?([\w-]+ )?CUDA graphs?\b", re.IGNORECASE)
COMPILE_ADVICE = re.compile(r"\b(fus(e|ing) (them|it|these|kernels)|us(e|ing)|try(ing)?|with)\b[^.;]{0,20}"
                            r"\btorch\.compile\b", re.IGNORECASE)


@dataclass
class Outputs:
    """What each command printed for one trace: its JSON (None when it refused, with ``refusals``
    holding its one-line message), the report's JSON and Markdown."""

    name: str
    json: dict[str, Any] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    report_md: str = ""

    @property
    def steps(self) -> dict | None:
        return _rank0(self.json.get("steps"))

    @property
    def host(self) -> dict | None:
        return self.json.get("host")

    @property
    def hosts(self) -> list[tuple[str, dict]]:
        """(command, output) of ``host`` and ``host --all-steps``, those that printed a table."""
        return [(key.replace("_all_steps", " --all-steps"), self.json[key]) for key in ("host", "host_all_steps")
                if self.json.get(key)]

    @property
    def findings(self) -> list[str]:
        return list((self.report or {}).get("findings") or [])


def _rank0(value: Any) -> Any:
    """A whole-job export prints one object per rank: its first rank stands for it."""
    return value[0] if isinstance(value, list) and value and isinstance(value[0], dict) else value


class _Cache(dict):
    def __missing__(self, trace: Path) -> Outputs:
        value = self[trace] = collect(trace)
        return value


# One run of the commands per trace and test session, shared by the test modules that read them.
OUTPUTS: dict[Path, Outputs] = _Cache()


def collect(trace: Path) -> Outputs:
    """Run every command on ``trace`` (in this process) and keep its outputs.  The zoo programs'
    sources are at hand, as a user's own program is where they run profkit: the Kineto reader
    finds call lines in them (``readers/kineto/source_lines.py``)."""
    runner = CliRunner(env={SOURCE_PATH_ENV: str(ZOO_PROGRAMS)})
    out = Outputs(Path(trace).name)
    for key, args in COMMANDS.items():
        result = runner.invoke(cli, [*args, str(trace), "--format", "json"])
        if result.exit_code == 0:
            value = json.loads(result.stdout) if result.stdout.strip() else None
            # a multi-rank input answers with one object per rank: its first rank stands for it
            # (kernels, api and breakdown print rows, with a rank key where there are ranks)
            out.json[key] = _rank0(value) if key in PER_RANK_OBJECTS else value
        elif result.exit_code == 2:  # a one-line refusal ("has no Python stacks")
            out.refusals[key] = result.output.strip()
        else:
            raise AssertionError(f"profkit {' '.join(args)} {trace}: exit {result.exit_code}\n{result.output}") \
                from result.exception
    with tempfile.TemporaryDirectory() as folder:
        result = runner.invoke(cli, ["report", str(trace), "-o", folder])
        if result.exit_code != 0:
            raise AssertionError(f"profkit report {trace}: exit {result.exit_code}\n{result.output}") \
                from result.exception
        out.report = json.loads((Path(folder) / "report.json").read_text())
        out.report_md = (Path(folder) / "report.md").read_text()
    return out


# -- helpers ---------------------------------------------------------------------------------
def parse_ns(text: str) -> float:
    """"2.41 ms" -> 2410000.0."""
    match = re.fullmatch(DURATION, text.strip())
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1).replace(",", "")) * UNITS_NS[match.group(2)]


def close(printed: float, exact: float, rel: float = FIGURE_REL_TOL) -> bool:
    return abs(printed - exact) <= rel * max(abs(exact), 1.0)


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def numbers(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, number) for every number inside a JSON value; the path ends with its key."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from numbers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from numbers(item, f"{path}[{index}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def sentences(out: Outputs) -> list[str]:
    """Every text of every output: findings, verdicts, notes (tables' cells too; they hold no advice)."""
    found = dict.fromkeys(strings(out.json))
    found.update(dict.fromkeys(strings(out.report)))
    return list(found)


def verdict_sentences(out: Outputs) -> list[str]:
    """The host verdict, as ``host`` prints it and as the report's findings repeat it."""
    found = [host["verdict"]["sentence"] for _, host in out.hosts if (host.get("verdict") or {}).get("sentence")]
    found += [text for text in out.findings if "causes explain" in text or " meanwhile in " in text
              or " the host is in " in text]
    return list(dict.fromkeys(found))


@dataclass
class Verdict:
    """A verdict sentence taken apart: the step and idle it quotes, its named causes, its claim."""

    step_ns: float | None
    idle_ns: float | None
    causes: list[tuple[str, float]]
    claimed_pct: float | None
    claim_of: str | None


def parse_verdict(text: str) -> Verdict:
    idle = re.search(rf"idles {DURATION} of the {DURATION} step", text)
    # "the host meanwhile in A 1 ms, B 2 ms" (idle-bound); "the host is in ..." (GPU-bound, CPU-only)
    # "loading data in A 4 ms per step" (data-bound), "waiting in A 1 ms" (sync-bound)
    causes_text = re.search(r"(?:meanwhile|the host is|loading data|waiting) in (.*?)(?:;|$)", text)
    causes = []
    if causes_text:
        for part in re.split(r",\s(?=[^,]*\s\d)", causes_text.group(1)):
            # the last cause may read "93.1 µs per step" (every figure is per steady step)
            match = re.match(rf"(.*\S)\s+{DURATION}(?: per step)?$", part.strip())
            if match:
                causes.append((match.group(1), float(match.group(2).replace(",", "")) * UNITS_NS[match.group(3)]))
    claim = re.search(r"(?:explain|that is) (\d+(?:\.\d+)?)% of the (step|GPU idle|idle)", text)
    return Verdict(step_ns=parse_ns(f"{idle.group(3)} {idle.group(4)}") if idle else None,
                   idle_ns=parse_ns(f"{idle.group(1)} {idle.group(2)}") if idle else None,
                   causes=causes, claimed_pct=float(claim.group(1)) if claim else None,
                   claim_of=claim.group(2) if claim else None)


def host_rows(host: dict) -> list[dict]:
    """The host table's rows, most GPU idle first (the order it is printed in)."""
    return sorted(host.get("functions") or [], key=lambda r: -(r.get("gpu_idle_ns_per_step") or 0.0))


def row_label(row: dict) -> str:
    return f"{row['function']} ({Path(str(row.get('file') or '')).name}:{row.get('line')})"


# -- the invariants --------------------------------------------------------------------------
def one_median(out: Outputs) -> list[str]:
    """Every output that quotes the step median quotes ``steps``' median, of the same steady steps."""
    steps = out.steps
    if not steps or not (steps.get("summary") or {}).get("median_ns"):
        return []
    median = steps["summary"]["median_ns"]
    steady = steps["summary"].get("steady_count")
    bad = []

    def same(where: str, value: float | None, rel: float = 1e-9) -> None:
        if value is not None and not close(value, median, rel):
            bad.append(f"{where} quotes a {value / 1e6:.4g} ms step where steps' median is {median / 1e6:.4g} ms")

    for command, host in out.hosts:
        same(f"{command} summary", host["summary"].get("step_median_ns"))
        same(f"{command} verdict", (host.get("verdict") or {}).get("step_ns"))
    for text in verdict_sentences(out):
        same(f"verdict {text[:60]!r}", parse_verdict(text).step_ns, FIGURE_REL_TOL)
    report = out.report or {}
    sections = report.get("sections") or {}
    same("report steps section", (((sections.get("steps") or {}).get("data") or {}).get("summary") or {})
         .get("median_ns"))
    same("report stalls section", (((sections.get("stalls") or {}).get("data") or {}).get("step_stats") or {})
         .get("median_ns"))
    for text in out.findings:
        for pattern in (rf"{DURATION} median\b", rf"median [^,;()]*? time,? {DURATION}",
                        rf"median [^;()]*? time without them: {DURATION} instead of {DURATION}"):
            for match in re.finditer(pattern, text):
                same(f"finding {text[:60]!r}", parse_ns(f"{match.group(match.lastindex - 1)} "
                                                        f"{match.group(match.lastindex)}"), FIGURE_REL_TOL)
    # The same steady steps under every per-step figure; a whole-job export's breakdown, rank by rank.
    per_rank = {item.get("rank"): (item.get("summary") or {}).get("steady_count")
                for item in out.json.get("steps") or [] if isinstance(item, dict) and "rank" in item}
    for row in out.json.get("breakdown") or []:
        count = (row.get("window") or {}).get("steady_steps")
        expected = per_rank.get(row.get("rank"), steady)
        if expected is not None and count is not None and count != expected:
            bad.append(f"breakdown --steady rank {row.get('rank')} counts {count} steady steps where steps counts "
                       f"{expected}")
    for where, count in [*[(command, host["summary"].get("steady_steps")) for command, host in out.hosts],
                         *[(f"stalls row {row.get('source')}", (row.get("per_step") or {}).get("steady_steps"))
                           for row in (out.json.get("stalls") or {}).get("rows") or []]]:
        if steady is not None and count is not None and count != steady:
            bad.append(f"{where} counts {count} steady steps where steps counts {steady}")
    return bad


def step_counts_add_up(out: Outputs) -> list[str]:
    """The steps a headline counts are each accounted for: warm-up, steady state, and a last step left
    out as teardown add up to the count, and the report's steps line names every part that is there."""
    steps = out.steps
    if not steps or not (steps.get("summary") or {}).get("count"):
        return []
    summary = steps["summary"]
    phases = [row.get("phase") for row in steps.get("steps") or []]
    count, steady = summary["count"], summary.get("steady_count")
    warmup, cut = phases.count("warmup"), phases.count("teardown")
    bad = []
    if phases and (len(phases) != count or warmup + (steady or 0) + cut != count):
        bad.append(f"steps counts {count} steps, its rows {len(phases)}: {warmup} warm-up + {steady} steady + {cut} "
                   f"cut off")
    for text in out.findings:
        found = re.match(r"(\d[\d,]*) steps, ", text)
        if not found:
            continue
        said_warmup = re.search(r"(\d+) warm-up steps? left out", text)
        said = int(said_warmup.group(1)) if said_warmup else 0
        said_cut = 1 if "last step left out" in text else 0
        if int(found.group(1).replace(",", "")) != said + (steady or 0) + said_cut:
            bad.append(f"the report's {text[:100]!r} accounts for {said} warm-up + {steady} steady + {said_cut} "
                       f"cut off steps")
    return bad


def steady_costs(out: Outputs) -> list[str]:
    """No per-step cost is charged for what happened outside the steady steps, and no share over
    100% without saying what it is a share of."""
    bad = []
    outside, inside = [], set()
    for row in (out.json.get("stalls") or {}).get("rows") or []:
        per_step = row.get("per_step") or {}
        line = f"{Path(row['file']).name}:{row['line']}" if row.get("file") and row.get("line") is not None else None
        if per_step.get("steps_with_sync") == 0:
            if per_step.get("gpu_idle_ns") or per_step.get("cpu_blocked_ns"):
                bad.append(f"stalls row {row.get('source')} has no sync in a steady step but a per-step cost")
            if line:
                outside.append(line)
        elif line:
            inside.add(line)  # another site on the line (a .item() beside a device synchronize) syncs in them
    outside = [site for site in outside if site not in inside]
    texts = sentences(out)
    for text in texts:
        for site in outside:
            if re.search(rf"(?<![\w/.]){re.escape(site)}\b", text) and re.search(r"per (\w+ )?step\b", text) \
                    and re.search(r"cost", text):
                bad.append(f"{site} syncs only outside the steady steps, yet {text[:120]!r}")
        for match in re.finditer(r"(\d[\d,]*(?:\.\d+)?)%(?!\s+of\b)", text):
            if float(match.group(1).replace(",", "")) > 100.0:
                bad.append(f"a share over 100% without saying of what: {text[:160]!r}")
    for path, value in numbers(out.json):
        if path.endswith("_pct") and value > 100.0 + 1e-6:
            bad.append(f"{path} = {value:.4g} (over 100%)")
    return bad


def named_causes_add_up(out: Outputs) -> list[str]:
    """The causes a verdict names add up to the share it claims they explain."""
    bad = []
    for command, host in out.hosts:
        verdict = host.get("verdict") or {}
        # the JSON's causes (``causes``: each with its ns and pct per step; older: ``named``)
        causes = verdict.get("causes") or [c for cs in (verdict.get("named") or {}).values() for c in cs]
        python_causes = [c for c in causes if not isinstance(c, dict) or c.get("cause") not in ("gpu", "communication")]
        parsed = parse_verdict(verdict.get("sentence") or "")
        if python_causes and not parsed.causes:
            # A reworded verdict must stay checkable: update parse_verdict with it, never skip it.
            bad.append(f"{command}'s verdict names {len(causes)} causes but none can be read back from "
                       f"{(verdict.get('sentence') or '')[:120]!r}")
            continue
        shares = [c.get("pct") for c in causes if isinstance(c, dict)]
        if parsed.claimed_pct is not None and shares and all(isinstance(x, (int, float)) for x in shares):
            # the sentence's whole percent against the causes' own shares (each to 0.1%)
            if abs(sum(shares) - parsed.claimed_pct) > 0.5 + 0.05 * len(shares):
                bad.append(f"{command}'s causes add up to {sum(shares):.1f}% of the step, the verdict claims "
                           f"{parsed.claimed_pct:g}%")
    for text in verdict_sentences(out):
        verdict = parse_verdict(text)
        if verdict.claimed_pct is None or not verdict.causes:
            continue
        whole = verdict.step_ns if verdict.claim_of == "step" else verdict.idle_ns
        if not whole:
            continue
        named = sum(ns for _, ns in verdict.causes)
        share = 100.0 * named / whole
        # Each cause is printed with three significant digits, the claim as a whole percent.
        if abs(share - verdict.claimed_pct) > 1.0 + FIGURE_REL_TOL * share:
            bad.append(f"the named causes add up to {share:.1f}% of the {verdict.claim_of}, the verdict claims "
                       f"{verdict.claimed_pct:g}%: {text[:160]!r}")
    return bad


def verdict_is_table_top(out: Outputs) -> list[str]:
    """The causes the verdict names are the host table's top rows, in order, with the table's figures.
    A data-loading verdict names the loading function with the GPU idle time spent inside it (the
    table's top rows are the frames it waits in, a queue's lock): that function is a row of the
    table, and the figure is no more than its inclusive time."""
    bad = []
    for command, host in out.hosts:
        rows = host_rows(host)
        sentence = (host.get("verdict") or {}).get("sentence") or ""
        if "loading data in" in sentence:
            for label, ns in parse_verdict(sentence).causes:
                row = next((r for r in rows if row_label(r) == label), None)
                if row is None:
                    bad.append(f"{command}'s data-loading verdict names {label}, no row of its table")
                elif ns > row["inclusive_ns_per_step"] * (1 + FIGURE_REL_TOL):
                    bad.append(f"{command}'s verdict gives {label} {ns / 1e3:.4g} µs loading, more than its "
                               f"table's {row['inclusive_ns_per_step'] / 1e3:.4g} µs inclusive")
            continue
        for (label, ns), row in zip(parse_verdict(sentence).causes, rows):
            if label != row_label(row):
                bad.append(f"{command}'s verdict names {label} where its table's row is {row_label(row)}: "
                           f"{sentence[:100]!r}")
                break
            if not close(ns, row["gpu_idle_ns_per_step"], FIGURE_REL_TOL):
                bad.append(f"{command}'s verdict gives {label} {ns / 1e3:.4g} µs, its table "
                           f"{row['gpu_idle_ns_per_step'] / 1e3:.4g} µs")
    return bad


def no_own_frames(out: Outputs) -> list[str]:
    """No frame of profkit's own code (launcher, sync hook) in a host table or verdict."""
    bad = []
    for command, host in out.hosts:
        rows = [*(host.get("functions") or []), *(host.get("other_threads") or [])]
        bad += [f"{command} row {row_label(row)} is profkit's own code ({row.get('file')})"
                for row in rows if OWN_FRAME.search(str(row.get("file") or ""))]
        for causes in ((host.get("verdict") or {}).get("named") or {}).values():
            bad += [f"{command}'s verdict names profkit's own {cause.get('function')}" for cause in causes
                    if OWN_FRAME.search(str(cause.get("file") or ""))]
    return bad


def no_raw_sync_text(out: Outputs) -> list[str]:
    """profkit's internal sync-site encoding ('profkit.sync|kind|file:line|code') never reaches a reader."""
    bad = [f"{where} shows {RAW_SYNC_TEXT!r}" for where, value in
           [*out.json.items(), ("report.json", out.report), ("report.md", out.report_md)]
           if RAW_SYNC_TEXT in json.dumps(value, ensure_ascii=False)]
    return bad


def graphs_replayed(out: Outputs) -> bool:
    """Whether the trace launched CUDA graphs, from the API summary and the graphs command."""
    api = out.json.get("api") or []
    launched = any(re.match(r"cu(da)?GraphLaunch", str(row.get("name"))) and row.get("instances") for row in api)
    found = out.json.get("graphs") or {}  # a rank that replayed no graph: only its rank keys
    return launched or bool(found.get("replays"))


def compiled(out: Outputs) -> bool:
    """Whether the trace ran torch.compile'd (Triton) kernels."""
    return any("triton" in str(row.get("name")).lower() for row in out.json.get("kernels") or [])


def advice_not_done(out: Outputs) -> list[str]:
    """Advice never recommends what the trace shows is already done."""
    bad = []
    graphs, fused = graphs_replayed(out), compiled(out)
    for text in sentences(out):
        if graphs and GRAPH_ADVICE.search(text):
            bad.append(f"advises CUDA graphs where the trace launches graphs: {text[:160]!r}")
        if fused and COMPILE_ADVICE.search(text):
            bad.append(f"advises torch.compile where the trace runs Triton kernels: {text[:160]!r}")
    return bad


INVARIANTS: dict[str, Callable[[Outputs], list[str]]] = {
    "one_median": one_median,
    "step_counts_add_up": step_counts_add_up,
    "steady_costs": steady_costs,
    "named_causes_add_up": named_causes_add_up,
    "verdict_is_table_top": verdict_is_table_top,
    "no_own_frames": no_own_frames,
    "no_raw_sync_text": no_raw_sync_text,
    "advice_not_done": advice_not_done,
}


if __name__ == "__main__":
    # python -m tests.invariants [CAPTURE_ID...]: each (capture, invariant) that fails today, with its first
    # violation: what tests/test_invariants.py's KNOWN_WRONG must list (ids as in tests/captures.py).
    import sys

    from tests.captures import committed_captures, readable

    for capture, path in committed_captures().items():
        if sys.argv[1:] and capture not in sys.argv[1:]:
            continue
        outputs = OUTPUTS[readable(path)]
        for invariant, check in INVARIANTS.items():
            violations = check(outputs)
            if violations:
                print(f"{capture} {invariant}: {violations[0][:200]}", flush=True)

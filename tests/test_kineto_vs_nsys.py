"""The same program under Nsight Systems and under torch.profiler: the same
kernels, the same number of times per training step.

Pairs of real captures of one program (tests/data/kineto/README.md):
gpt_eager and gpt_compiled (``sample_kernels/gpt.py``, NVTX vs record_function
``train_step`` ranges) and mlp_nvtx vs mlp_annotated (``train_mlp.py``,
``step`` ranges).

Kernel names are normalized to their base name, because the two tools'
demanglers spell one kernel differently: nsys writes ``(bool)1``,
``(int)64``, ``<unnamed>``, ``[lambda() (instance 1)]`` and template
parameters (``T1 *``) in parameter lists where Kineto (the C++ ABI
demangler) writes ``true``, ``64``, ``(anonymous namespace)``,
``{lambda()#1}`` and the types.  The base name drops the return type,
namespaces, template arguments and parameters (nsys's shortName rule:
``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
``vectorized_elementwise_kernel``).  Several kernels share a base name, so
for each base name the test compares the sorted per-step counts of its
distinct full names: the same multiset on both sides means the same kernels,
as many times per step.

Steps: a kernel belongs to the step range (on the launching CPU thread) in
which its launch call started, joined on the correlation id.  The torch
schedule (wait 1, warmup 2) records steps 3..11 of gpt.py's 12; nsys records
all 12, and the first ones hold one-time work (optimizer state, autotuning
and compilation), so nsys's last steps are compared, as many as Kineto holds.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from profkit.model import Trace
from profkit.readers import open_trace
from profkit.readers.kineto.events import short_kernel_name
from tests.conftest import DATA, nsys_fixture, nsys_fixture_names

PAIRS = [("nsys2025_gpt_eager", "gpt_eager", "train_step"),
         ("nsys2025_gpt_compiled", "gpt_compiled", "train_step"),
         ("nsys2025_mlp_nvtx", "mlp_annotated", "step")]
PRESENT = [p for p in PAIRS if p[0] in nsys_fixture_names() and (DATA / "kineto" / f"{p[1]}.json.gz").exists()]


def kernels_per_step(trace: Trace, step: str, last: int | None = None) -> tuple[dict[str, list[float]], int]:
    """{base name: sorted per-step counts of its distinct full names}, number of steps."""
    r = trace.table("ranges", ["name", "start", "end", "kind"])
    cpu_steps = r[(r["name"].astype(str) == step) & (r["kind"].astype(str) != "gpu_user_annotation")]
    steps = cpu_steps.sort_values("start")
    if last is not None:
        steps = steps.iloc[-last:]
    api = trace.table("api", ["correlation", "start"])
    launched = trace.table("kernels", ["name", "correlation"]).merge(api, on="correlation")
    starts = launched["start"].to_numpy()
    inside = np.zeros(len(launched), dtype=bool)
    for s, e in zip(steps["start"].tolist(), steps["end"].tolist()):
        inside |= (starts >= s) & (starts <= e)
    per_name = launched[inside].groupby("name", observed=True).size() / len(steps)
    grouped: dict[str, list[float]] = defaultdict(list)
    for name, count in per_name.items():
        grouped[short_kernel_name(str(name))].append(float(count))
    return {k: sorted(v) for k, v in grouped.items()}, len(steps)


@pytest.mark.skipif(not PRESENT, reason="the nsys/torch fixture pairs are not committed yet")
@pytest.mark.parametrize(("nsys_name", "kineto_name", "step"), PRESENT, ids=[p[1] for p in PRESENT])
def test_same_kernels_same_instances_per_step(nsys_name: str, kineto_name: str, step: str) -> None:
    torch_side, torch_steps = kernels_per_step(open_trace(DATA / "kineto" / f"{kineto_name}.json.gz"), step)
    nsys_side, nsys_steps = kernels_per_step(open_trace(nsys_fixture(nsys_name)), step, last=torch_steps)
    assert torch_steps == nsys_steps >= 9
    assert set(torch_side) == set(nsys_side)
    assert torch_side == nsys_side

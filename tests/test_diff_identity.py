"""A kernel is one kernel across profilers and across a change of its template arguments.

Oracles: real captures of one program under nsys and torch.profiler (tests/data/host:
the Hugging Face Llama training loop and generate(); tests/data/ddp: rank 0 of the DDP
job), whose Kineto trace holds a subset of what nsys saw (its schedule skips start-up),
so every kernel Kineto ran must be one nsys ran; the options torch.profiler ran with,
read from the trace's own header; and a real MLP export whose kernel is renamed in its
StringIds, as a rebuild with another block size would name it (issue 24).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.kernels.names import canonical_kernel_name, template_base
from profkit.cli import cli
from profkit.readers import open_trace
from tests.conftest import _decompressed, nsys_fixture

DATA = Path(__file__).parent / "data"
PAIRS = [("host/nsys/llama_train_nsys.sqlite.xz", "host/kineto/llama_train_kineto.json.gz"),
         ("host/nsys/llama_generate_nsys.sqlite.xz", "host/kineto/llama_generate_kineto.json.gz"),
         ("ddp/nsys/rank0.sqlite.xz", "ddp/kineto/rank0.json.gz")]


def _names(path: Path) -> set[str]:
    with open_trace(path) as trace:
        return {canonical_kernel_name(str(n)) for n in trace.table("kernels", ["name"])["name"].array.categories}


@pytest.mark.parametrize("nsys, kineto", PAIRS, ids=[k.split("/")[-1].split(".")[0] for _, k in PAIRS])
def test_every_kernel_torch_profiler_saw_is_one_nsys_saw(nsys: str, kineto: str) -> None:
    # cub's scan and unique-by-key kernels and fused Adam: "const long *" (nsys) and "long const*" (Kineto)
    assert _names(DATA / kineto) <= _names(_decompressed(DATA / nsys))


def test_nsys_against_kineto_of_the_llama_loop_no_kernel_is_gone_and_new_and_the_first_line_says_so() -> None:
    nsys, kineto = _decompressed(DATA / PAIRS[0][0]), DATA / PAIRS[0][1]
    with gzip.open(kineto) as fh:
        header = json.load(fh)
    options = [o for o in ("with_stack", "record_shapes") if header.get(o)]
    assert options == ["with_stack", "record_shapes"]
    args = ["diff", str(nsys), str(kineto)]
    data = json.loads(CliRunner().invoke(cli, [*args, "--format", "json"]).output)
    assert not [k["name"] for k in data["kernels"] if k["status"] in ("new", "changed")]
    assert len(data["kernels"]) == len(_names(kineto))  # every kernel of the steps, once
    # the first sentence, wrapped at the terminal's width
    first = " ".join(CliRunner().invoke(cli, args).output.split("\nStep time:")[0].split())
    assert first.startswith(f"Different profilers: BASE ({nsys.name}) is an nsys export, NEW ({kineto.name}) is "
                            f"a torch.profiler trace with {' and '.join(options)}; NEW ran under torch.profiler's "
                            "overhead"), first


def _renamed(tmp_path: Path, renames: dict[str, str]) -> Path:
    """A copy of the real MLP export whose kernels are renamed (demangled name: old -> new)."""
    copy = tmp_path / "mlp_print_rebuilt.sqlite"
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), copy)
    with sqlite3.connect(copy) as db:
        for old, new in renames.items():
            (sid,) = db.execute("SELECT DISTINCT k.demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                "ON s.id = k.demangledName WHERE s.value = ?", (old,)).fetchone()
            db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (new, sid))
    return copy


def test_kernels_whose_template_arguments_changed_are_changed_rows_each_with_its_own_base(tmp_path: Path) -> None:
    base = nsys_fixture("nsys2025_train_print")
    with sqlite3.connect(f"file:{base}?mode=ro&immutable=1", uri=True) as db:
        names = [v for (v,) in db.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                          "ON s.id = k.demangledName")]
    # a reduction's block size 512 -> 256 (the other reduce_kernel instance stays), and the list
    # width of two of the six fused-optimizer kernels 2 -> 4: one template, two kernels gone and two new
    reduce = next(n for n in names if n.startswith("void at::native::reduce_kernel<(int)512,"))
    optimizer = [n for n in names if "multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>" in n]
    assert len(optimizer) == 2
    renames = {reduce: reduce.replace("reduce_kernel<(int)512,", "reduce_kernel<(int)256,", 1)}
    renames |= {n: n.replace("TensorListMetadata<(int)2>", "TensorListMetadata<(int)4>", 1) for n in optimizer}
    rebuilt = _renamed(tmp_path, renames)
    data = json.loads(CliRunner().invoke(cli, ["diff", str(base), str(rebuilt), "--format", "json"]).output)
    statuses = [k["status"] for k in data["kernels"]]
    assert "new" not in statuses and "gone" not in statuses
    changed = {k["base_name"]: k for k in data["kernels"] if k["status"] == "changed"}
    assert {old: k["name"] for old, k in changed.items()} == renames
    assert all(k["base_ns_per_step"] == k["new_ns_per_step"] for k in changed.values())  # the same launches
    text = CliRunner().invoke(cli, ["diff", str(base), str(rebuilt)]).output
    assert "changed its template arguments" in text


def test_a_const_before_a_plain_type_is_the_const_after_it() -> None:
    nsys = ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<P, const long *, long *, "
            "at_cuda_detail::cub::ScanTileState<long, (bool)1>, const unsigned long long *>(T2, T3, T4, int)")
    kineto = ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<P, long const*, long*, "
              "at_cuda_detail::cub::ScanTileState<long, true>, unsigned long long const*>(long const*, long*, int)")
    assert canonical_kernel_name(nsys) == canonical_kernel_name(kineto)
    assert canonical_kernel_name("k<const float *>") != canonical_kernel_name("k<float *>")
    assert template_base(canonical_kernel_name(nsys)) == "voidat_cuda_detail::cub::detail::scan::DeviceScanKernel"
    assert template_base("triton_poi_fused_0") == "triton_poi_fused_0"

"""Kernel names as nsys and as Kineto spell them map to one canonical name.

Oracle: the same programs (sample_kernels/gpt.py eager and compiled, train_mlp.py)
traced by nsys 2025.3 and by torch.profiler on the same GPU host.  Every
kernel Kineto saw must match one nsys saw; nsys additionally sees the
initialization kernels that run before torch.profiler's schedule starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profkit.analysis.kernels.names import canonical_kernel_name, function_name
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

KINETO = Path(__file__).parent / "data" / "kineto"
PAIRS = [("nsys2025_gpt_eager", "gpt_eager"), ("nsys2025_gpt_compiled", "gpt_compiled"),
         ("nsys2025_mlp_nvtx", "mlp_annotated")]


def _names(trace) -> set[str]:
    return {canonical_kernel_name(str(n)) for n in trace.table("kernels", ["name"])["name"].array.categories}


@pytest.mark.skipif(not (KINETO / "gpt_eager.json.gz").exists(), reason="Kineto fixtures missing")
@pytest.mark.parametrize("nsys_name, kineto_name", PAIRS)
def test_every_kineto_kernel_matches_an_nsys_kernel(nsys_name, kineto_name):
    with open_trace(nsys_fixture(nsys_name)) as a, open_trace(KINETO / f"{kineto_name}.json.gz") as b:
        nsys_names, kineto_names = _names(a), _names(b)
    assert kineto_names <= nsys_names, sorted(kineto_names - nsys_names)[:3]
    init_only = nsys_names - kineto_names
    assert all("distribution_" in n or "FillFunctor" in n or "direct_copy" in n for n in init_only), init_only


def test_spellings_of_one_kernel():
    nsys = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
            "std::array<char *, (unsigned long)1>>(int, T2, T3)")
    kineto = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
              "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
    assert canonical_kernel_name(nsys) == canonical_kernel_name(kineto)
    assert canonical_kernel_name("fmha_cutlassB_f32(K<float, (bool)1, (int)64>::Params)") == \
        canonical_kernel_name("fmha_cutlassB_f32(K<float, true, 64>::Params)")
    assert function_name(nsys) == "vectorized_elementwise_kernel"
    assert function_name("triton_poi_fused_gelu_0") == "triton_poi_fused_gelu_0"


def test_code_key_keeps_a_cpp_kernel_apart_from_a_triton_kernel_of_its_name() -> None:
    from profkit.analysis.kernels.names import code_key

    # nsys, Kineto and ncu spell the CUDA C++ kernel of sample_kernels/csrc/gelu.cu each their way
    cpp = {code_key(n) for n in ("gelu_kernel(const float *, float *, int)", "gelu_kernel(float const*, float*, int)",
                                 " gelu_kernel(const float *, float *, int) ")}
    assert cpp == {"gelu_kernel()"}
    assert code_key("gelu_kernel") == "gelu_kernel"  # the Triton kernel: a plain C symbol
    assert code_key("void at::native::f<(int)4>(int, T2, T3)") == "f()"


def test_demangler_styles_of_one_kernel() -> None:
    """Spellings of one symbol by c++filt/cu++filt styles (nsys) and by Kineto's demangler."""
    nsys = ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)4>, "
            "(unsigned long)2>(T1, T2)")
    kineto = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
              "TensorListMetadata<4>, 2ul>(at::native::(anonymous namespace)::TensorListMetadata<4>)")
    assert canonical_kernel_name(nsys) == canonical_kernel_name(kineto)
    assert canonical_kernel_name("void k<float,  (int)128 >()") == canonical_kernel_name("void k<float, 128>()")
    assert canonical_kernel_name("void k<float, 128>()") != canonical_kernel_name("void k<float, 256>()")

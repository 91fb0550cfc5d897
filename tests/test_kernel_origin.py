"""Kernel type (HTA's oracle) and origin (user vs vendor) on real kernel names,
and the gate that keeps occupancy/register advice away from vendor kernels."""

from __future__ import annotations

import json

import pytest

from profkit.analysis.kernels import origin
from profkit.analysis.occupancy import trace_occupancy
from profkit.readers import open_trace
from profkit.report import write_report
from tests.conftest import nsys_fixture, nsys_fixture_names

FIXTURES = nsys_fixture_names()
# Real exports whose kernels include cuBLAS GEMMs (sm80_xmma_gemm_..._cublas,
# cutlass::Kernel2<cutlass_80_simt_sgemm...>, cublasLt::splitKreduce_kernel).
CUBLAS_FIXTURES = ["nsys2025_train_print", "nsys2025_train_noprint"]


def _kernel_names() -> list[str]:
    names: set[str] = set()
    for name in FIXTURES:
        with open_trace(nsys_fixture(name)) as trace:
            names.update(str(n) for n in trace.table("kernels", ["name"])["name"].unique())
    return sorted(names)


NAMES = _kernel_names()


def test_kernel_type_equals_hta_on_every_fixture_kernel() -> None:
    """HTA's own classifier is the oracle (hta.utils.utils.get_kernel_type)."""
    utils = pytest.importorskip("hta.utils.utils")
    extra = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
             "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "Stream Sync", "Event Sync"]
    assert len(NAMES) > 50
    for name in NAMES + extra:
        assert origin.kernel_type(name) == utils.get_kernel_type(name).lower(), name


def test_vectorised_types_match_per_name() -> None:
    import pandas as pd

    names = pd.Categorical(NAMES * 2)
    types = origin.kernel_types(names)
    assert list(types[: len(NAMES)]) == [origin.kernel_type(n) for n in NAMES]


# Expected origins for kernel families seen in the fixtures, by who ships the code.
VENDOR_EXAMPLES = {
    "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas": "cublas",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_nt_align1>(T1::Params)": "cutlass",
    "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN": "cublas",
    "ampere_sgemm_32x128_nn": "cublas",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStrided<float const>, cublasGemvTensorStrided<float const>, cublasGemvTensorStrided<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStrided<float const>, cublasGemvTensorStrided<float const>, cublasGemvTensorStrided<float>, float>, float, float)": "cublas",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn": "cudnn",
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)": "cudnn",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "nccl",
    "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::UnaryOpFunctor<float, (int)2, (int)1, (int)1>, at::native::Sqrt<float>>(T1, T2, T3...)": "aten",
    "void <unnamed>::softmax_warp_forward<float, float, float, (int)10, (bool)0, (bool)0>(T2 *, const T1 *, int, int, int, const bool *, int, bool)": "aten",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)": "flash-attention",
    "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<long, long, unsigned long long>::Policy900, true, long, long, unsigned long long, int, int, at_cuda_detail::cub::detail::identity_decomposer_t>(int*, int*, unsigned long long*, unsigned long long const*, long*, long const*, long*, long const*, int, int, int, at_cuda_detail::cub::detail::identity_decomposer_t)": "cub",
}
USER_EXAMPLES = {
    "triton_poi_fused_add_mul_pow_tanh_0": "inductor",
    "triton_red_fused_div_exp_max_sub_sum_0": "inductor",
    "triton_per_fused_div_exp_max_sub_sum_0": "inductor",
    "gelu_kernel": "triton",
    "softmax_kernel": "triton",
    "vector_add_kernel(const float *, const float *, float *, int)": "cuda",
    "register_heavy_kernel(const float *, float *, int, int)": "cuda",
    # a user's CUDA kernel templated on PyTorch's types is still the user's
    "void my_rmsnorm_kernel<c10::Half, 256>(c10::Half*, c10::Half const*, int)": "cuda",
}


@pytest.mark.parametrize("name, library", sorted({**VENDOR_EXAMPLES, **USER_EXAMPLES}.items()))
def test_library_and_origin(name: str, library: str) -> None:
    assert origin.library(name) == library
    assert origin.origin(name) == ("user" if name in USER_EXAMPLES else "vendor")


def test_every_fixture_kernel_of_a_known_family_is_classified() -> None:
    """On the real names: ATen/cuBLAS/CUTLASS kernels are vendor, the sample kernels user."""
    for name in NAMES:
        found = origin.origin(name)
        if "at::native::" in name or "cublas" in name or "cutlass" in name:
            assert found == "vendor", name
        if name.startswith("triton_") or name.split("(")[0] in {"gelu_kernel", "softmax_kernel", "add_kernel",
                                                               "vector_add_kernel", "busy"}:
            assert found == "user", name


REGISTER_ADVICE_WORDS = ("register", "at most", "would be", "fewer", "launch_bounds", "maxrregcount", "block size of")


@pytest.mark.parametrize("fixture", CUBLAS_FIXTURES)
def test_no_register_advice_for_vendor_kernels(fixture: str) -> None:
    with open_trace(nsys_fixture(fixture)) as trace:
        rows = trace_occupancy(trace)
    vendor = [r for r in rows if r["origin"] == "vendor"]
    assert any(r["library"] == "cublas" for r in vendor), "the fixture has cuBLAS GEMMs"
    for row in vendor:
        assert row["registers_next_step"] is None and row["registers_headroom"] is None, row["name"]
        assert not any(w in row["advice"].lower() for w in REGISTER_ADVICE_WORDS), row["advice"]
        assert "library kernel" in row["advice"]


def test_user_kernels_keep_their_advice() -> None:
    """bad_kernels holds register-heavy CUDA kernels of the user's: they still get advice."""
    with open_trace(nsys_fixture("nsys2025_bad")) as trace:
        rows = trace_occupancy(trace)
    user = [r for r in rows if r["origin"] == "user"]
    assert user and any(r["advice"] for r in user)


@pytest.mark.parametrize("fixture", CUBLAS_FIXTURES)
def test_no_finding_advises_a_vendor_kernel(fixture: str, tmp_path) -> None:
    paths = write_report(nsys_fixture(fixture), tmp_path / "r")
    report = json.loads(paths.json.read_text())
    with open_trace(nsys_fixture(fixture)) as trace:
        vendor = {r["name"] for r in trace_occupancy(trace) if r["origin"] == "vendor"}
    from profkit.report.text import short_kernel_name

    vendor_short = {short_kernel_name(n) for n in vendor}
    for finding in report["findings"]:
        text = finding if isinstance(finding, str) else json.dumps(finding)
        if any(w in text.lower() for w in ("register", "occupancy")):
            assert not any(v in text for v in vendor_short), text

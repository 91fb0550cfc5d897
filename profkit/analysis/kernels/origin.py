"""What kind of work a GPU kernel does, and whose code it is.

Two questions per kernel name, answered once per distinct name (the
categories of ``trace.kernels.name``), never once per launch:

- **kernel type**, as Holistic Trace Analysis defines it
  (``hta/utils/utils.py`` ``get_kernel_type``, release 0.5.0 on PyPI):
  ``communication`` when the name matches ``^nccl.*Kernel``; ``memory`` when it
  matches ``^Memcpy|^Memset|^dma`` (memcpy/memset activities are memory
  whatever their name); ``computation`` unless the name matches
  ``^nccl.*Kernel``, contains ``Memcpy`` or ``Sync``, or starts with ``Memset``;
  anything else is ``other`` (CUDA synchronization records).  HTA's main
  branch (after 0.5.0) also counts ``Stream Wait Event`` records as non-compute;
  profkit never puts synchronization records in the kernel table, so the two
  agree on every kernel name.
- **origin**: ``user`` for code the user can change (Triton kernels written by
  hand, TorchInductor's generated ``triton_poi_/triton_red_/triton_per_/
  triton_tem_...`` kernels, CUDA C++ from ``load_inline`` or an extension) and
  ``vendor`` for code shipped compiled in a library (cuBLAS/cuBLASLt
  including ``nvjet`` and ``sm90_xmma`` GEMMs, cuDNN, CUTLASS, NCCL, PyTorch's
  own ATen kernels, CUB/Thrust, flash/memory-efficient attention inside ATen,
  cuFFT, cuRAND, ...).  A name no rule recognises counts as the user's: that
  errs towards showing advice, never towards hiding a user kernel's.

Occupancy and register advice is given only for ``user`` kernels: nobody can
recompile cuBLAS with fewer registers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

COMPUTATION = "computation"
COMMUNICATION = "communication"
MEMORY = "memory"
OTHER = "other"

USER = "user"
VENDOR = "vendor"

# HTA 0.5.0, hta/utils/utils.py: NCCL_KERNEL_RE, MEMORY_KERNEL_RE, NCCL_COMPUTE_KERNEL_RE.
# re.match anchors at the start; ".*" lets a pattern match anywhere.
_HTA_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def kernel_type(name: str) -> str:
    """HTA's kernel type of one name: computation, communication, memory or other."""
    if _HTA_COMMUNICATION.match(name):
        return COMMUNICATION
    if _HTA_MEMORY.match(name):
        return MEMORY
    if not _HTA_NOT_COMPUTE.match(name):
        return COMPUTATION
    return OTHER


# -- origin -------------------------------------------------------------------------------
# Rules on the kernel's own qualified name (namespaces and function, without
# template arguments or parameters), so that a user kernel templated on
# c10::Half is not taken for PyTorch's.  First match wins; (library, pattern).
_QUALIFIED_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (lib, re.compile(pattern)) for lib, pattern in (
        ("nccl", r"^nccl"),
        ("cublas", r"^cublas"),
        ("cudnn", r"^(cudnn|scudnn|implicit_convolve_|explicit_convolve_|precomputed_convolve_|wgrad_alg"
                  r"|conv2d_grouped_direct_kernel|nchwToNhwcKernel|nhwcToNchwKernel)"),
        ("fbgemm", r"^(fbgemm_gpu::|split_embedding_)"),
        ("cutlass", r"^cutlass"),
        # PyTorch ships CUB inside ATen as at_cuda_detail::cub
        ("cub", r"^(at_cuda_detail::)?(cub|thrust)::"),
        # flash-attention and memory-efficient attention compiled into ATen, or the flash-attn package
        ("flash-attention", r"^(pytorch_flash::|flash::|fmha_cutlass[FB]_)"),
        ("aten", r"^(at::|c10::|at_cuda_detail::)"),
        ("cufft", r"^(vector_fft|regular_fft|cufft)"),
        ("curand", r"^(curand|generate_seed_pseudo|gen_sequenced)"),
        ("cusparse", r"^cusparse"),
        ("cusolver", r"^cusolver"),
        ("transformer-engine", r"^transformer_engine::"),
    )
)
# ATen kernels that live outside the at:: namespace (PersistentSoftmax.cuh,
# RangeFactories.cu): matched only in their C++ form, so a Triton kernel of
# the same name stays the user's.
_ATEN_OUTSIDE_NAMESPACE = re.compile(r"^(softmax_warp_forward|softmax_warp_backward|elementwise_kernel_with_index)$")
# Rules on the whole name, for flat names without namespaces (cuBLAS's GEMMs
# carry the architecture and tile in the name: sm90_xmma_gemm_..._cublas,
# nvjet_hsh_128x256_..., ampere_fp16_s16816gemm_...), and for library names
# that show only in template arguments (gemv2T_kernel_val<..., cublasGemvParams<...>>).
_FLAT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (lib, re.compile(pattern)) for lib, pattern in (
        ("cudnn", r"^((sm\d+|ampere|volta|turing|hopper)_\w*(fprop|dgrad|wgrad)|xmma_(fprop|dgrad|wgrad))|.*cudnn"),
        ("cublas", r"^(nvjet_|sm\d+_xmma_gemm|xmma_gemm|(ampere|volta|turing|maxwell|hopper|sm\d+)_\w*gemm"
                   r"|cutlass_\d+_\w*gemm|sgemm_largek|magma_sgemm)|.*cublas"),
    )
)
# TorchInductor names its Triton kernels triton_<kind>_fused_<ops>_<n>
# (poi: pointwise, red: reduction, per: persistent reduction, tem: template, ...).
_INDUCTOR = re.compile(r"^triton_")
_CPP_DECORATION = re.compile(r"\(anonymous namespace\)::|<unnamed>::")
_RETURN_TYPE = re.compile(r"^(void|auto|int|float|bool)\s+")


def qualified_name(name: str) -> str:
    """The kernel's own name with its namespaces: no return type, template
    arguments, parameters or anonymous namespaces.

    ``void at::native::(anonymous namespace)::f<float, 4>(float*)`` ->
    ``at::native::f``."""
    text = _CPP_DECORATION.sub("", name.strip())
    text = _RETURN_TYPE.sub("", text)
    cut = len(text)
    for mark in ("<", "("):
        i = text.find(mark)
        if i > 0:
            cut = min(cut, i)
    return text[:cut].strip()


def library(name: str) -> str:
    """The library a kernel comes from ('cublas', 'cudnn', 'nccl', 'aten', ...),
    or for the user's own code 'inductor', 'triton' or 'cuda'."""
    qualified = qualified_name(name)
    for lib, pattern in _QUALIFIED_RULES:
        if pattern.match(qualified):
            return lib
    if _ATEN_OUTSIDE_NAMESPACE.match(qualified) and ("(" in name or "<" in name):
        return "aten"
    for lib, pattern in _FLAT_RULES:
        if pattern.match(name):
            return lib
    if _INDUCTOR.match(name):
        return "inductor"
    # Triton kernels are named after their Python function: no C++ signature.
    if "(" not in name and "::" not in name and " " not in name:
        return "triton"
    return "cuda"


_USER_LIBRARIES = frozenset({"inductor", "triton", "cuda"})


def origin(name: str) -> str:
    """'user' (the user can change the kernel's code) or 'vendor'."""
    return USER if library(name) in _USER_LIBRARIES else VENDOR


def classify_names(names: Iterable[str]) -> pd.DataFrame:
    """One row per distinct name: name, kernel_type, library, origin, user_code (bool)."""
    unique = list(dict.fromkeys(str(n) for n in names))
    libs = [library(n) for n in unique]
    return pd.DataFrame({
        "name": unique,
        "kernel_type": [kernel_type(n) for n in unique],
        "library": libs,
        "origin": [USER if lib in _USER_LIBRARIES else VENDOR for lib in libs],
        "user_code": [lib in _USER_LIBRARIES for lib in libs],
    })


KERNEL_TYPES = (COMPUTATION, COMMUNICATION, MEMORY, OTHER)


def kernel_types(names: pd.Categorical | pd.Series | Sequence[str]) -> pd.Categorical:
    """HTA's kernel type per element (a Categorical over KERNEL_TYPES),
    computed once per distinct name."""
    cat = _as_categorical(names)
    per_category = np.array([KERNEL_TYPES.index(kernel_type(str(c))) for c in cat.categories]
                            + [KERNEL_TYPES.index(OTHER)], dtype=np.int8)
    # code -1 (a missing name) indexes the trailing OTHER
    return pd.Categorical.from_codes(per_category[cat.codes], categories=list(KERNEL_TYPES))


def origins(names: pd.Categorical | pd.Series | Sequence[str]) -> np.ndarray:
    """'user' / 'vendor' per element, computed once per distinct name."""
    cat = _as_categorical(names)
    per_category = np.array([origin(str(c)) for c in cat.categories] + [USER], dtype=object)
    return per_category[cat.codes]


def _as_categorical(names: pd.Categorical | pd.Series | Sequence[str]) -> pd.Categorical:
    if isinstance(names, pd.Series):
        names = names.array
    if isinstance(names, pd.Categorical):
        return names
    return pd.Categorical(list(names))

"""The Triton kernels of the samples.

This module imports only triton, never torch, so `profkit ptx` can compile
these kernels ahead of time on a machine with no GPU and no torch.
"""

import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    # tl.math.tanh is not in every Triton release; this is exact in fp32.
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """GELU, tanh approximation: one contiguous block per program (vectorizes)."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    a = 0.79788456 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1 + _tanh(a))
    tl.store(out_ptr + offsets, y, mask=mask)


@triton.jit
def gelu_strided_kernel(x_ptr, out_ptr, n_elements, stride, BLOCK_SIZE: tl.constexpr):
    """Deliberately bad GELU: a runtime stride between neighbours defeats 128-bit loads."""
    pid = tl.program_id(axis=0)
    idx = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = idx < n_elements
    x = tl.load(x_ptr + idx * stride, mask=mask)
    a = 0.79788456 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1 + _tanh(a))
    tl.store(out_ptr + idx * stride, y, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    """Softmax over rows: one row per program, the whole row in registers."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Vector add."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def gelu_register_heavy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """Deliberately bad GELU: a huge block per program (run with num_warps=1)
    keeps BLOCK_SIZE/32 values and their temporaries live in each thread, so
    registers climb and occupancy falls."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x3 = x * x * x
    a = 0.79788456 * (x + 0.044715 * x3)
    t = _tanh(a)
    # Keep x, x3 and t live together, and reverse the block so every value
    # must stay in a register until the end.
    y = 0.5 * x * (1 + t) + 0.0 * x3
    y = y + tl.sum(y, axis=0) * 0.0
    tl.store(out_ptr + offsets, y, mask=mask)


# Default launch parameters, shared by the samples and `profkit ptx`.
GELU_BLOCK = 1024
SOFTMAX_BLOCK = 1024  # next power of two of the sample's row length
ADD_BLOCK = 1024
REGISTER_HEAVY_BLOCK = 8192

"""`--kernels TARGET` and its compile options, shared by every command that takes `--inductor`.

The decorator turns ``--kernels``, ``--signature``, ``--constexpr``, ``--num-warps``,
``--arch`` and ``--nvcc-flag`` into one ``kernel_targets`` argument (a
``profkit.analysis.kernels.targets.KernelTargets``, empty when no --kernels was
given), checked before any trace is read: a target that does not resolve or an
option that does not parse is bad input (one line, exit 2).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from profkit.errors import ProfkitError

_OPTIONS = ("kernel_target_texts", "signatures", "constexprs", "num_warps", "arch", "nvcc_flags")


def kernel_target_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options; the command gets ``kernel_targets`` instead of them."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in _OPTIONS}
        kwargs["kernel_targets"] = kernel_targets_from(**values)
        return command(*args, **kwargs)

    decorators = [
        click.option("--kernels", "kernel_target_texts", multiple=True, metavar="TARGET",
                     help="Compile these sources now for the trace's GPU and show the traced kernels' machine code "
                          "(repeatable): a sample name, file.py (its Triton kernels that ran), file.py::kernel, "
                          "file.cu, file.ptx or file.cubin, as profkit ptx takes them. Not necessarily the code "
                          "that ran: the table's note says so."),
        click.option("--signature", "signatures", multiple=True, metavar="[KERNEL=]TYPES",
                     help='With --kernels: Triton argument types, constexprs left out, for every Triton kernel or '
                          'for one: --signature "gelu_kernel=*fp32:16,*fp32:16,i32:16" (repeatable).'),
        click.option("--constexpr", "constexprs", multiple=True, metavar="NAME=VALUE",
                     help="With --kernels: a Triton constexpr, set in the kernels that declare it (repeatable)."),
        click.option("--num-warps", type=click.IntRange(1, 64),
                     help="With --kernels: Triton num_warps (default: the traced block size / 32)."),
        click.option("--arch", help="With --kernels: compile for this architecture (default: the trace's GPU)."),
        click.option("--nvcc-flag", "nvcc_flags", multiple=True, metavar="FLAG",
                     help="With --kernels: an extra nvcc flag for .cu targets (repeatable), as profkit ptx takes it."),
    ]
    for decorate in reversed(decorators):
        wrapper = decorate(wrapper)
    return wrapper


def kernel_targets_from(kernel_target_texts: tuple[str, ...], signatures: tuple[str, ...],
                        constexprs: tuple[str, ...], num_warps: int | None, arch: str | None,
                        nvcc_flags: tuple[str, ...]) -> Any:
    from profkit.analysis.kernels.targets import KernelTargets

    if not kernel_target_texts:
        given = [flag for flag, value in (("--signature", signatures), ("--constexpr", constexprs),
                                          ("--num-warps", num_warps), ("--arch", arch), ("--nvcc-flag", nvcc_flags))
                 if value]
        if given:
            raise ProfkitError(f"{', '.join(given)} only apply with --kernels", hint="add --kernels FILE.py (or .cu, ...)")
        return KernelTargets()
    return KernelTargets(tuple(kernel_target_texts), arch, tuple(signatures), tuple(constexprs), num_warps,
                         tuple(nvcc_flags)).check()

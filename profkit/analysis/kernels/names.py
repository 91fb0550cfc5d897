"""One spelling of a kernel name, whichever tool demangled it.

nsys and Kineto (torch.profiler) demangle the same symbol differently:

    nsys:   void at::native::vectorized_elementwise_kernel<(int)4, ...::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)
    Kineto: void at::native::vectorized_elementwise_kernel<4, ...::{lambda(float)#1}, std::array<char*, 2ul> >(int, ..., std::array<char*, 2ul>)

``canonical_kernel_name`` maps both to one string: the parameter list is
dropped (nsys abbreviates it to template parameter names), integer and
boolean template arguments lose their casts and suffixes (``(int)4`` and
``4``; ``(bool)1`` and ``true``; ``(unsigned long)2`` and ``2ul``), lambdas and
anonymous namespaces get one spelling, a ``const`` before a plain type goes
after it (``const float *`` and ``float const*``), parameter types inside template
arguments go, and so does whitespace.  On the GPT and MLP programs traced by
both tools every kernel name then matches (tests/test_kernel_names.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and pandas load in canonical_column only
    import numpy as np

_INT_CAST = re.compile(r"\((?:unsigned |signed )?(?:char|short|int|long|long long|__int128)\)(-?\d+)")
_INT_SUFFIX = re.compile(r"(?<![\w.])(-?\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
# A lambda's parameter list holds no brackets of its own, so each match attempt stops at the
# next bracket: linear in the name's length, however many "[lambda(" it holds.
_NSYS_LAMBDA = re.compile(r"\[lambda\(([^()\[\]{}]*)\) \(instance (\d+)\)\]")
_KINETO_LAMBDA = re.compile(r"\{lambda\(([^()\[\]{}]*)\)#(\d+)\}")
_VOID_ARGUMENT = re.compile(r"([<,]\s*)void\s+")
# A qualifier written before a plain type ("const float *", nsys) moves after it ("float
# const*", Kineto).  Each match starts at a "const" and reads one run of words, so the
# runs of two matches never overlap: linear in the name's length.
_WEST_CV = re.compile(r"(?<![\w:])(const|volatile)\s+((?:(?:unsigned|signed|long|short)\s+)*[A-Za-z_][\w:]*)"
                      r"(?=\s*[*&,>)])")


# Names come from strangers' traces: every function here is linear in the name's
# length (no pattern that backtracks; tests/test_hostile_names.py times a 1 MB name),
# and the ones called per table row are cached, so each distinct name is worked
# out once however often it is asked for.
NAME_CACHE = 65536


@lru_cache(maxsize=NAME_CACHE)
def canonical_kernel_name(name: str) -> str:
    """The name both nsys and Kineto spellings of one kernel map to (see the module docstring)."""
    text = _strip_parameters(str(name).strip())
    text = text.replace("(bool)1", "true").replace("(bool)0", "false")
    text = _INT_CAST.sub(r"\1", text)
    text = _INT_SUFFIX.sub(r"\1", text)
    text = _NSYS_LAMBDA.sub(r"lambda(\1)#\2", text)
    text = _KINETO_LAMBDA.sub(r"lambda(\1)#\2", text)
    text = text.replace("(anonymous namespace)", "<unnamed>")
    text = _WEST_CV.sub(r"\2 \1", text)
    # Parameter types inside template arguments (a function template argument's
    # signature) are spelled differently ("const T1&" for "at::native::F<float>
    # const&"), and so is a function template argument's return type: keep
    # the names, drop those.
    text = _VOID_ARGUMENT.sub(r"\1", text)
    return "".join(_collapse_parentheses(text).split())


def _collapse_parentheses(text: str) -> str:
    """Each balanced ``(...)`` that holds a non-space character outside its own inner
    groups, once those are collapsed, becomes ``()``, innermost first: what repeating
    the substitution ``\\((?:[^()]|\\(\\))*[^()\\s](?:[^()]|\\(\\))*\\)`` -> ``()`` until
    nothing changes gives, in one pass (that pattern backtracks: minutes on a long
    unclosed group)."""
    if "(" not in text:
        return text
    # One output list; each open group is [where it starts in it, only "()" inner groups
    # so far, holds a character].  A collapsing group cuts its pieces off the end, so
    # every piece is copied once however deep the nesting.
    out: list[str] = []
    stack: list[list] = []
    last = 0
    for match in _PAREN.finditer(text):
        at = match.start()
        if at > last:
            plain = text[last:at]
            out.append(plain)
            if stack and not stack[-1][2] and plain.strip():
                stack[-1][2] = True
        last = at + 1
        if text[at] == "(":
            stack.append([len(out), True, False])
            out.append("(")
        elif not stack:  # a ")" that closes nothing
            out.append(")")
        else:
            start, simple, content = stack.pop()
            collapsed = simple and content
            if collapsed:
                del out[start:]
                out.append("()")
            else:
                out.append(")")
            if stack and not (collapsed or len(out) == start + 2):  # an inner group that is not "()"
                stack[-1][1] = False
    out.append(text[last:])
    return "".join(out)


_PAREN = re.compile(r"[()]")


def _strip_parameters(name: str) -> str:
    """The name without its parameter list: cut at the first "(" outside template arguments
    and outside a lambda's own brackets."""
    depth = 0
    for i, ch in enumerate(name):
        if ch in "<[{":
            depth += 1
        elif ch in ">]}":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith(("(anonymous", "(instance"), i):
            return name[:i]
    return name


def template_base(canonical: str) -> str:
    """A canonical name without its last template argument list: the kernel template that a
    change of template arguments (a block size, a functor) keeps.  ``voidns::k<128,F>`` ->
    ``voidns::k``; a name without one is its own base.  Linear: one scan from the end."""
    if not canonical.endswith(">"):
        return canonical
    depth = 0
    for i in range(len(canonical) - 1, -1, -1):
        depth += {">": 1, "<": -1}.get(canonical[i], 0)
        if depth == 0:
            return canonical[:i]
    return canonical


@lru_cache(maxsize=NAME_CACHE)
def function_name(kernel_name: str) -> str:
    """The bare function name: ``void ns::f<int>(float*)`` -> ``f``; Triton names stay as they are."""
    name = _strip_parameters(kernel_name.strip())
    if name.endswith(">"):  # drop the template argument list
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = name.split("::")[-1]
    return name.split()[-1] if name.split() else name


@lru_cache(maxsize=NAME_CACHE)
def has_parameter_list(kernel_name: str) -> bool:
    """Whether the name is a demangled C++ function's, with its parameter list.  Triton
    kernels (and ``extern "C"`` CUDA kernels) are plain C symbols: ``gelu_kernel``."""
    name = kernel_name.strip()
    return _strip_parameters(name) != name


@lru_cache(maxsize=NAME_CACHE)
def code_key(kernel_name: str) -> str:
    """The key a traced kernel and its machine code are joined on: the bare function name,
    and ``()`` after it for a C++ kernel.  A program can run a Triton ``gelu_kernel`` and a
    CUDA C++ ``gelu_kernel(const float *, float *, int)``: one function name, two kernels."""
    return function_name(kernel_name) + ("()" if has_parameter_list(kernel_name) else "")


def canonical_column(names) -> tuple[np.ndarray, dict[str, str]]:  # noqa: ANN001 (a categorical column)
    """Per row, the canonical name (worked out once per distinct name of a categorical
    column), and for each canonical name the first original spelling, for display."""
    import numpy as np
    import pandas as pd

    cat = names if isinstance(names, pd.Categorical) else pd.Categorical(np.asarray(names, dtype=object))
    originals = [str(c) for c in cat.categories]
    keys = np.array([canonical_kernel_name(c) for c in originals] + [""], dtype=object)
    display: dict[str, str] = {}
    for key, original in zip(keys, originals):
        display.setdefault(key, original)
    codes = np.asarray(cat.codes)
    return keys[np.where(codes < 0, len(originals), codes)], display

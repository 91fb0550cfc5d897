"""Record where in Python each synchronizing call was made.

`profkit trace --python-sync-sites` launches the user's script through
profkit.capture.launch, which calls ``install()`` before the script runs.
Every call that can block the CPU on the GPU (``Tensor.item``, ``.cpu()``,
``.tolist()``, printing or formatting a tensor, tensor truthiness,
``torch.cuda.synchronize`` ...) is wrapped in an NVTX push/pop range whose
text names the cause and the user's ``file:line``.  The CUDA API call that
actually synchronizes (cudaStreamSynchronize, cudaMemcpyAsync ...) then lies
inside that range on the same thread, which is how the stall analysis joins
the two.  nsys's own ``--python-backtrace`` gives no Python frames on our
GPU host (callchainId stays NULL), so this is the attribution that works.

Range text:  ``profkit.sync|<kind>|<file>:<line>|<source line>``
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

DOMAIN = "profkit.sync"
PREFIX = "profkit.sync|"

# kind names, shared with the analysis that reads the ranges back
ITEM = "item"
CPU = "cpu"
TOLIST = "tolist"
FORMAT = "print/format"
TRUTH = "truthiness"
SYNCHRONIZE = "synchronize"

_state = threading.local()
_installed = False
_SKIP_DIRS: tuple[str, ...] = ()


def encode_site(kind: str, filename: str, lineno: int, code: str) -> str:
    code = " ".join(code.split()).replace("|", "¦")
    return f"{PREFIX}{kind}|{filename}:{lineno}|{code}"


def decode_site(text: str) -> tuple[str, str, str] | None:
    """(kind, "file:line", code) from a range text, or None if not ours."""
    if not text or not text.startswith(PREFIX):
        return None
    parts = text[len(PREFIX):].split("|", 2)
    if len(parts) != 3:
        return None
    return parts[0], parts[1], parts[2]


def _user_frame():
    """The innermost frame outside torch, this module and the launcher."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP_DIRS):
        frame = frame.f_back
    return frame


def _push(kind: str) -> bool:
    frame = _user_frame()
    if frame is None:
        return False
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    code = linecache.getline(filename, lineno).strip()
    _push_range(encode_site(kind, os.path.relpath(filename) if not filename.startswith("<") else filename,
                            lineno, code))
    return True


def _wrap(owner: Any, attr: str, kind: str, needs_cuda: Callable[..., bool]) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        # A tensor's repr calls .item()/.tolist() internally: only the
        # outermost call is the user's, so nested ones pass straight through.
        if getattr(_state, "active", False) or not needs_cuda(*args, **kwargs):
            return original(*args, **kwargs)
        _state.active = True
        pushed = False
        try:
            pushed = _push(kind)
            return original(*args, **kwargs)
        finally:
            if pushed:
                _pop_range()
            _state.active = False

    setattr(owner, attr, wrapper)


def _on_cuda(tensor, *args, **kwargs) -> bool:
    return getattr(tensor, "is_cuda", False)


def _always(*args, **kwargs) -> bool:
    return True


def _to_cpu(tensor, *args, **kwargs) -> bool:
    if not getattr(tensor, "is_cuda", False):
        return False
    targets = list(args) + [kwargs.get("device")]
    return any(str(t) == "cpu" or getattr(t, "type", None) == "cpu" for t in targets if t is not None)


def _make_nvtx():
    try:
        import nvtx

        domain = nvtx.get_domain(DOMAIN)

        def push(text: str) -> None:
            domain.push_range(domain.get_event_attributes(message=text))

        return push, domain.pop_range
    except (ImportError, AttributeError):
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


_push_range: Callable[[str], Any] = lambda text: None  # noqa: E731
_pop_range: Callable[[], Any] = lambda: None  # noqa: E731


def install() -> None:
    """Wrap torch's synchronizing calls.  Idempotent."""
    global _installed, _SKIP_DIRS, _push_range, _pop_range
    if _installed:
        return
    import torch

    _push_range, _pop_range = _make_nvtx()
    here = os.path.dirname(os.path.abspath(__file__))
    _SKIP_DIRS = (os.path.dirname(torch.__file__), here, "<frozen")
    tensor = torch.Tensor
    for attr, kind in (("item", ITEM), ("tolist", TOLIST), ("cpu", CPU), ("numpy", CPU),
                       ("__repr__", FORMAT), ("__format__", FORMAT),
                       ("__bool__", TRUTH), ("__int__", ITEM), ("__float__", ITEM)):
        _wrap(tensor, attr, kind, _on_cuda)
    _wrap(tensor, "to", CPU, _to_cpu)
    _wrap(torch.cuda, "synchronize", SYNCHRONIZE, _always)
    _wrap(torch.cuda.Stream, "synchronize", SYNCHRONIZE, _always)
    _wrap(torch.cuda.Event, "synchronize", SYNCHRONIZE, _always)
    _installed = True

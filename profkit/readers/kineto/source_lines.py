"""The line of a call inside a Python frame of a torch.profiler trace, read from the program's source.

torch.profiler names a Python frame ``"train.py(25): train_step"`` with the
function's first line (or, for a frame already running when recording
began, the line it was at then): where inside ``train_step`` it called
``loss.item()`` is not in the trace.  The frame it called is (the built-in
``item``, or ``synchronize``), so where the program's file is at hand the
call is found in it: the calls to that name inside that function's body
(nested functions and classes left out).  Exactly one such call gives its
line; none or several give nothing, and the frame keeps its recorded line.

The file is looked up as the trace names it (torch prints paths relative to
the ``sys.path`` entry they were imported from: a script is its bare name):
as an absolute path, then under each folder of PROFKIT_SOURCE_PATH
(``os.pathsep``-separated), the trace's own folder and the current folder.
A file is taken only where the frame's function is in it at the recorded
line (defined there, or spanning it); otherwise the next folder's is tried,
so a same-named file of another program is passed over where it can be told
apart.  Module-level frames (``<module>``), special methods (``__init__``,
``__call__``: called without their name being written) and names that are
no identifiers are never looked up.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

SOURCE_PATH_ENV = "PROFKIT_SOURCE_PATH"
MAX_SOURCE_BYTES = 1 << 20  # a source file bigger than this is not parsed (a 4 MB one took seconds and 1 GB)

Function = ast.FunctionDef | ast.AsyncFunctionDef


class SourceLines:
    """Call lines from the source files under ``roots``; each file is read and parsed at most once."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = roots
        # file as the trace names it -> each candidate file's functions by name (parsed once)
        self._files: dict[str, list[dict[str, list[Function]]]] = {}
        self._lines: dict[tuple[str, str, int, str], int | None] = {}

    @classmethod
    def for_trace(cls, trace_path: Path | None) -> SourceLines:
        """The roots: PROFKIT_SOURCE_PATH's folders, the trace's folder, the current folder."""
        roots = [Path(p) for p in os.environ.get(SOURCE_PATH_ENV, "").split(os.pathsep) if p]
        if trace_path is not None:
            roots.append(Path(trace_path).resolve().parent)
        try:
            roots.append(Path.cwd())
        except OSError:  # the current folder was deleted
            pass
        return cls(roots)

    def has_file(self, file: str) -> bool:
        return bool(self._candidates(file))

    def call_line(self, file: str, function: str, frame_line: int, callee: str) -> int | None:
        """The one line of ``function`` (recorded at ``frame_line`` in ``file``) that calls ``callee``
        (a bare name: ``item``, ``synchronize``, ``sleep``); None where the file is not at hand, the
        function is not at that line, or the name is called on no line or several."""
        key = (file, function, frame_line, callee)
        if key not in self._lines:
            self._lines[key] = self._find(file, function, frame_line, callee)
        return self._lines[key]

    def _find(self, file: str, function: str, frame_line: int, callee: str) -> int | None:
        if not (function.isidentifier() and callee.isidentifier()) or _is_special(callee):
            return None
        for functions in self._candidates(file):  # the first file whose function is at that line
            scope = _function_at(functions.get(function, []), frame_line)
            if scope is not None:
                lines = {node.lineno for node in _calls(scope) if _called_name(node) == callee}
                return lines.pop() if len(lines) == 1 else None
        return None

    def _candidates(self, file: str) -> list[dict[str, list[Function]]]:
        if file not in self._files:
            self._files[file] = self._parse(file)
        return self._files[file]

    def _parse(self, file: str) -> list[dict[str, list[Function]]]:
        if not file.endswith(".py"):
            return []
        paths = [Path(file)] if os.path.isabs(file) else [root / file for root in self.roots]
        found = []
        for path in paths:
            try:
                if path.is_file() and path.stat().st_size <= MAX_SOURCE_BYTES:
                    found.append(_functions(ast.parse(path.read_bytes(), filename=str(path))))
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        return found


def _is_special(name: str) -> bool:
    """``__init__``, ``__call__``, ``__enter__``: run without their name written at the call."""
    return name.startswith("__") and name.endswith("__")


def _functions(tree: ast.Module) -> dict[str, list[Function]]:
    by_name: dict[str, list[Function]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            by_name.setdefault(node.name, []).append(node)
    return by_name


def _function_at(named: list[Function], line: int) -> Function | None:
    """Of the functions of one name, the one whose first line (its first decorator's, as CPython
    counts) is ``line``, else the innermost one whose body spans ``line``."""
    spanning = None
    for node in named:
        if min([node.lineno, *(d.lineno for d in node.decorator_list)]) == line:
            return node
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if spanning is None or node.lineno > spanning.lineno:
                spanning = node
    return spanning


def _calls(scope: Function) -> list[ast.Call]:
    """The calls in ``scope``'s own body: not in the functions, lambdas and classes defined in it."""
    found: list[ast.Call] = []
    pending: list[ast.AST] = list(scope.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _called_name(call: ast.Call) -> str | None:
    """``item`` for ``loss.item()``, ``sleep`` for ``time.sleep(...)`` and ``sleep(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None

"""Write a copy of a Kineto (torch.profiler) JSON trace without environment or credentials.

torch.profiler records no environment by itself, but a trace carries
whatever the program added (``prof.add_metadata_json``, record_function
names, ``distributedInfo``) and the paths of its stacks.  Every string of
the document, keys included, passes through one ``Redactor``; an object
member named like an environment (``env``, ``environ``, ``environment``)
is dropped whole after its secret values were noted.  The copy keeps the
input's shape (gzip when the output name ends in ``.gz``) and is written
under a temporary name, then renamed.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from profkit.atomic import atomic_path
from profkit.errors import ProfkitError
from profkit.readers.kineto.parse import open_binary, read_events
from profkit.scrub.text import Anonymizer, Redactor, parse_environment, secret_values

ENVIRONMENT_KEYS = {"env", "environ", "environment", "envvars", "environment_variables"}
# orjson refuses documents nested deeper than this; so does the walk below.
MAX_DEPTH = 1024


def scrub_kineto(source: str | os.PathLike[str], output: str | os.PathLike[str], *, anonymize: bool = False,
                 environment: Mapping[str, str] | None = None) -> dict[str, int]:
    """Write a scrubbed copy of the Kineto trace ``source`` to ``output``; return what was removed."""
    src, out = Path(source), Path(output)
    document = _load(src)
    environments = [dict(environment or {})]
    dropped = _drop_environments(document, environments)
    anonymizer = Anonymizer() if anonymize else None
    secrets: set[str] = set()
    for env in environments:
        secrets |= secret_values(env)
        if anonymizer is not None:
            anonymizer.learn(env)
    redact = Redactor(secrets, anonymizer)
    document = _map_strings(document, redact)
    data = _dumps(document, src)
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as fh:
            # mtime=0: the same input gives the same bytes.
            fh.write(gzip.compress(data, mtime=0) if out.name.endswith(".gz") else data)
    removed = {"environment members": dropped, **redact.summary()}
    return {k: v for k, v in removed.items() if v}


def _dumps(document: Any, src: Path) -> bytes:
    """The scrubbed document as JSON.  orjson stops at 255 levels; the reader accepts up to
    the interpreter's recursion limit, and so does the standard library's C encoder."""
    try:
        return orjson.dumps(document)
    except TypeError as exc:
        if "Recursion" not in str(exc):
            raise
    try:
        return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except RecursionError:
        raise ProfkitError(f"{src.name} is nested too deep to write back") from None


class _Count:
    """A sink that keeps nothing: the reader's pass checks the limits before the document is built."""

    def add(self, events: list[Any]) -> None:
        events.clear()


def _load(src: Path) -> Any:
    # The reader's own pass first: the same limits (bytes, events, string length, depth)
    # as every other command, before a million dicts are made.
    read_events(src, _Count)
    try:
        with open_binary(src) as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise ProfkitError(f"{src} is damaged or truncated ({exc})") from None
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProfkitError(f"{src} is not valid JSON ({exc})", hint="is it a complete torch.profiler trace?") from None
    if not isinstance(document, (dict, list)):
        raise ProfkitError(f"{src} is not a Kineto trace (a JSON {type(document).__name__}, not an object)")
    return document


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    if isinstance(node, list):
        return node
    return []


def _drop_environments(document: Any, environments: list[dict[str, str]]) -> int:
    """Remove members named like an environment; collect their NAME=VALUE pairs."""
    dropped = 0
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in [k for k in node if k.lower() in ENVIRONMENT_KEYS]:
                environments.append(_as_environment(node.pop(key)))
                dropped += 1
        stack.extend(c for c in _children(node) if isinstance(c, (dict, list)))
    return dropped


def _as_environment(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, list):
        return parse_environment("\x00".join(str(v) for v in value), "\x00")
    if isinstance(value, str):
        return parse_environment(value, "\x00" if "\x00" in value else "\n")
    return {}


def _map_strings(document: Any, redact: Redactor) -> Any:
    """``document`` with every string (keys too) passed through ``redact``, once per distinct string."""
    seen: dict[str, str] = {}

    def clean(text: str) -> str:
        if text not in seen:
            seen[text] = redact(text)
        return seen[text]

    if isinstance(document, str):
        return clean(document)
    root = [document]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, value in items:
                if isinstance(value, str):
                    value = redact.redact_member(key, clean(value))
                node[clean(key)] = value
                if isinstance(value, (dict, list)):
                    stack.append(value)
        else:
            previous = None
            for i, value in enumerate(node):
                if isinstance(value, str):
                    node[i] = clean(value)
                    if isinstance(previous, str):  # ["--password", "VALUE"]: an argv list
                        node[i] = redact.redact_pair(previous, node[i])
                elif isinstance(value, (dict, list)):
                    stack.append(value)
                previous = value
    return root[0]

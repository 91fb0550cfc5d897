"""The README says what profkit does today: its outputs are current and its commands exist.

- Every figure and output excerpt in README.md and benchmarks/README.md that comes from
  committed data sits between cog markers; cog (https://cog.readthedocs.io, as sqlite-utils
  uses it) reruns each block through ``scripts/readme_cog.py`` and fails when the Markdown
  differs.  After a change that moves an output, rewrite them with

      cog -r -I scripts README.md benchmarks/README.md

- Every ``profkit`` command the README shows (code blocks and inline code) names a command
  of the CLI and only options that command has.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import click
import pytest

from profkit.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
REWRITE = "cog -r -I scripts README.md benchmarks/README.md"



def test_readme_outputs_are_current(monkeypatch: pytest.MonkeyPatch) -> None:
    from cogapp import Cog

    monkeypatch.chdir(ROOT)
    cog = Cog()
    messages = io.StringIO()
    cog.set_output(stdout=messages, stderr=messages)
    status = cog.main(["cog", "--check", "--diff", "-I", "scripts", *(str(p.relative_to(ROOT)) for p in DOCS)])
    assert status == 0, f"README outputs are stale or failed; rewrite them with `{REWRITE}`:\n{messages.getvalue()}"


def _code_commands(text: str) -> list[str]:
    """The profkit command lines of a Markdown text: in fenced blocks (a console block's
    ``$`` lines only), indented blocks, and inline code; continuation lines joined."""
    commands: list[str] = []
    lines = text.splitlines()
    fence: str | None = None
    block: list[str] = []
    for line in lines:
        if line.startswith("```"):
            if fence is None:
                fence = line[3:].strip()
                block = []
            else:
                if fence == "console":
                    block = [b[2:] for b in block if b.startswith("$ ")]
                if fence not in ("pycon", "python"):
                    commands += _join_continuations(block)
                fence = None
            continue
        if fence is not None:
            block.append(line)
        elif line.startswith("    ") and line.lstrip().startswith("profkit "):
            commands += _join_continuations([line])
    for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL)):
        commands.append(span.replace("\\|", "|"))
    found = []
    for command in commands:
        for match in re.finditer(r"(?<![\w./-])profkit\s+([a-z].*)", command):
            found.append("profkit " + match.group(1))
    return found


def _join_continuations(block: list[str]) -> list[str]:
    joined: list[str] = []
    carry = ""
    for line in block:
        if line.rstrip().endswith("\\"):
            carry += line.rstrip()[:-1] + " "
        else:
            joined.append(carry + line)
            carry = ""
    return joined


def _options(command: click.Command) -> set[str]:
    return {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


def _check(command_line: str) -> list[str]:
    """What is wrong with one ``profkit ...`` command line (nothing: [])."""
    # what the shell or the user's script gets is not profkit's: after " -- ", a pipe,
    # a redirection, a comment, the next command; quoted values are values
    line = re.split(r"\s--(?:\s|$)|\s\|\s|\s>>?\s|\s#|;|&&", command_line + " ")[0]
    line = re.sub(r"\"[^\"]*\"|'[^']*'", "VALUE", line)
    words = line.split()[1:]
    if not words:
        return []
    name = words[0]
    context = click.Context(cli)
    command = cli.get_command(context, name)  # the CLI loads its commands lazily
    if command is None:
        return [f"{command_line!r}: no command {name!r}"]
    if isinstance(command, click.Group):
        if len(words) < 2:
            return []  # the group itself, named in a sentence
        sub = command.get_command(context, words[1])
        if sub is None:
            return [f"{command_line!r}: no command {name} {words[1]!r}"]
        name, command = f"{name} {words[1]}", sub
    known = _options(command)
    problems = []
    for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", line):
        if flag in known:
            continue
        problems.append(f"{command_line!r}: `profkit {name}` has no option {flag}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_commands_exist(doc: Path) -> None:
    commands = _code_commands(doc.read_text())
    if doc.name == "README.md" and doc.parent == ROOT:
        assert len(commands) > 40, "the README's commands were not found: the extraction is broken"
    problems = [problem for command in commands for problem in _check(command)]
    assert not problems, "\n".join(problems)


def test_the_check_catches_a_wrong_flag() -> None:
    assert _check("profkit kernels run.sqlite --top 3") == []
    assert _check("profkit kernels run.sqlite --no-such-flag")
    assert _check("profkit no-such-command x")
    assert _check("profkit trace script.py -- --steps 20 --anything") == []
    assert _check('profkit trace x.py --nsys-args "--python-sampling=false"') == []

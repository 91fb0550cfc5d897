"""``--rank N`` and the per-rank blocks of every per-trace command (one place, every command).

A multi-rank input (an export of a whole job, a folder of rank traces, a torchrun run folder;
``profkit.readers.job``) answers for each rank: JSON a list (``profkit.api.Answers.json``), CSV a
leading ``rank`` column, tables and Markdown one block per rank under its heading.  ``--rank N``
keeps rank N's, in the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from profkit.api import Answers, RankAnswer
from profkit.output import Column

rank_option = click.option(
    "--rank", "rank", type=click.IntRange(min=0), default=None, metavar="N",
    help="Of a multi-rank input (an export of a whole job, a folder of rank traces, a torchrun run folder): "
         "only rank N (default: every rank, each in its own block; JSON a list, CSV a rank column).")


def heading(answers: Answers, answer: RankAnswer) -> str:
    """The block's heading of a rank (``"rank 1 (rank from: NCCL payload)"``); "" for a single trace."""
    return answer.label() if answers.multi_rank else ""


def with_rank(answers: Answers, rows_of: Callable[[Any], list[dict[str, Any]]] = lambda value: value,
              ) -> list[dict[str, Any]]:
    """Every rank's rows in one list, each with a leading ``rank`` for a multi-rank input (CSV)."""
    if not answers.multi_rank:
        return rows_of(answers.items[0].value)
    return [{"rank": a.rank, **row} for a in answers.items for row in rows_of(a.value)]


def rank_columns(answers: Answers, columns: list[Column]) -> list[Column]:
    """``columns``, after a ``rank`` column for a multi-rank input."""
    return [Column("rank", "rank"), *columns] if answers.multi_rank else columns


def titled(title: str, answers: Answers, answer: RankAnswer) -> str:
    """A table title, naming the rank for a multi-rank input."""
    label = heading(answers, answer)
    return f"{title}, {label}" if label else title

"""The one exception type that reaches users.

Every failure a user can cause or fix (a bad file, a missing tool, a trace
without the data a report needs) is raised as a ProfkitError.  The CLI turns
it into a single line on stderr and exit code 2; nothing else should print a
traceback for user mistakes.
"""

from __future__ import annotations


class ProfkitError(Exception):
    """A failure with a message a user can act on.

    ``hint`` says how to fix it ("re-run nsys with -t cuda").
    """

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        text = self.message.rstrip(".")
        if self.hint:
            text += f" ({self.hint})"
        return " ".join(text.split())


class ProfkitWarning(UserWarning):
    """Part of an input skipped, the rest still read (a payload schema profkit cannot decode).
    The CLI prints it as one ``profkit: warning:`` line."""

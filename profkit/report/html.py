"""report.html: one self-contained page from a ``Report`` (jinja2, autoescaped).

CSS and figures are inline (figures as PNG data URIs); the page loads
nothing from anywhere, and its Content-Security-Policy forbids scripts, so
a kernel or NVTX name such as ``<script>...`` can only ever be text.
"""

from __future__ import annotations

from functools import lru_cache

from jinja2 import Environment, PackageLoader, StrictUndefined

from profkit.report.model import Report


@lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("profkit.report", "templates"),
        autoescape=True,  # every {{ value }} is HTML-escaped, whatever the template's name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_html(report: Report) -> str:
    return _environment().get_template("report.html.j2").render(report=report)

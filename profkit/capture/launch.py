"""Run a user's script the way `python script.py args` would, with
profkit's hooks installed first.  `profkit trace` puts this under nsys:

    nsys profile ... python -m profkit.capture.launch script.py [args]

PROFKIT_SYNC_SITES=0 turns the sync-site hook off.
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m profkit.capture.launch script.py [args]")
    script = argv[0]
    if os.environ.get("PROFKIT_SYNC_SITES", "1") != "0":
        from profkit.capture import sync_hook

        sync_hook.install()
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

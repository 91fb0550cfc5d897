"""Run a user's script the way `python script.py args` (or `python -m module
args`) would, with profkit's hooks installed first.  `profkit trace` puts
this under nsys:

    nsys profile ... python -m profkit.capture.launch script.py [args]
    nsys profile ... python -m profkit.capture.launch -m package.module [args]

PROFKIT_SYNC_SITES=0 turns the sync-site hook off.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m profkit.capture.launch (script.py | -m module) [args]"


def main(argv: list[str]) -> None:
    if not argv or argv[0] == "-m" and len(argv) < 2:
        raise SystemExit(USAGE)
    if os.environ.get("PROFKIT_SYNC_SITES", "1") != "0":
        from profkit.capture import sync_hook

        sync_hook.install_when_imported()
    # `python -m profkit.capture.launch` put the working directory first on
    # sys.path; `python script.py` would put the script's folder there, and
    # `python -m module` the working directory: do the same.
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]  # runpy sets argv[0] to the module's file
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

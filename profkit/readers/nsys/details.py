"""Facts of an nsys capture that have no place in the trace model (``Trace.details()``).

- ``driver_version`` / ``cuda_runtime_version``: from the library paths that
  nsys's backtraces recorded in StringIds (``.../libcuda.so.580.159.04``),
  never from TARGET_INFO_SYSTEM_ENV or the environment rows of
  META_DATA_CAPTURE, which hold the profiled process's environment;
- ``launched``: the command lines nsys launched (META_DATA_CAPTURE
  ``PROCESS_<n>:COMMAND`` / ``ARGUMENT_<k>`` rows only);
- ``traced``: the CAPTURE_EVENT_TYPE values as nsys spells them ("Cuda", ...);
- ``gpus``: per device id, the chip name and PCI bus location.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import NsysExport

_LIBCUDA = re.compile(r"/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
_LIBCUDART = re.compile(r"/libcudart\.so\.(\d+(?:\.\d+)*)$")


def capture_details(export: NsysExport) -> dict[str, Any]:
    settings = queries.capture_settings(export)
    driver, cudart = library_versions(queries.library_paths(export))
    return {
        "driver_version": driver,
        "cuda_runtime_version": cudart,
        "launched": launched_commands(settings),
        "traced": [value for name, value in settings if name == "CAPTURE_EVENT_TYPE"],
        "gpus": {g.get("id"): {"chip": g.get("chip"), "bus": g.get("bus_location")} for g in queries.gpus(export)},
    }


def library_versions(paths: list[str]) -> tuple[str | None, str | None]:
    driver = next((m.group(1) for p in paths if (m := _LIBCUDA.search(p))), None)
    cudart = max((m.group(1) for p in paths if (m := _LIBCUDART.search(p))), key=len, default=None)
    return driver, cudart


def launched_commands(settings: list[tuple[str, str]]) -> list[str]:
    commands: dict[str, list[str]] = {}
    for name, value in settings:
        if ":" not in name:
            continue
        process, field = name.split(":", 1)
        if field == "COMMAND":
            commands.setdefault(process, []).insert(0, value)
        elif field.startswith("ARGUMENT_"):
            commands.setdefault(process, []).append(value)
    return [" ".join(shlex.quote(a) for a in argv) for argv in commands.values()]

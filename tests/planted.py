"""Fake secrets planted into copies of real exports (``planted_*`` files, built in tests).

Nothing here is committed as a file: a committed export must hold no
environment block, so each test plants into a fresh copy of a real fixture.
The secret goes where nsys puts a real one: the three environment places,
a command-line argument and an NVTX range's text.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from tests.conftest import nsys_fixture

# Secret-looking by its variable's name (…_TOKEN), not by a well-known token
# shape, so only the environment tells scrub what to remove.
SECRET = "pk-fake-5ecret-0f1e2d3c4b5a69788796a5b4"
SECRET_VARIABLE = "PROFKIT_FAKE_TOKEN"
USER = "alicezed"
HOME = f"/home/{USER}"
HOST = "gpu-node-17.example.org"
NVTX_TEXT = f"upload {SECRET}"
ARGUMENT = f"--token={SECRET}"


def plant_secret(fixture: str, dest_dir: Path) -> Path:
    """A copy of real fixture ``fixture`` named ``planted_<fixture>.sqlite`` with the secret planted."""
    dest = dest_dir / f"planted_{fixture}.sqlite"
    shutil.copyfile(nsys_fixture(fixture), dest)
    conn = sqlite3.connect(dest)
    with conn:
        env_entries = [f"{SECRET_VARIABLE}={SECRET}", f"HOME={HOME}", f"USER={USER}", f"HOSTNAME={HOST}",
                       "PATH=/usr/local/bin:/usr/bin:/bin"]
        # 1. TARGET_INFO_SYSTEM_ENV DeviceEnvironment (NAME=VALUE;...)
        conn.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
        conn.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                     "SELECT globalVid, devStateName, 'DeviceEnvironment', 19, ? FROM TARGET_INFO_SYSTEM_ENV "
                     "WHERE name = 'Hostname'", (";".join(env_entries),))
        conn.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE name = 'Hostname'", (HOST,))
        # 2. META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE rows (NAME="VALUE")
        for entry in env_entries:
            name, _, value = entry.partition("=")
            conn.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                         (f'{name}="{value}"',))
        conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'PROCESS_0:USER_NAME'", (USER,))
        conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'DEVICE_DISPLAY_NAME'", (HOST,))
        # 3. a NUL-separated environ block in StringIds
        next_id = conn.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        block = "\x00".join(["OLDPWD=/", *env_entries, "SHLVL=1"])
        conn.execute("INSERT INTO StringIds (id, value) VALUES (?, CAST(? AS TEXT))",
                     (next_id, block.encode()))
        # 4. the command line, and a path in the user's home folder
        last = conn.execute("SELECT max(CAST(substr(name, 20) AS INTEGER)) FROM META_DATA_CAPTURE "
                            "WHERE name GLOB 'PROCESS_0:ARGUMENT_*'").fetchone()[0]
        conn.execute("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)",
                     (f"PROCESS_0:ARGUMENT_{(last or 0) + 1}", ARGUMENT))
        conn.execute("UPDATE META_DATA_CAPTURE SET value = ? WHERE name = 'PROCESS_0:WORKING_DIR'",
                     (f"{HOME}/project",))
        # 5. an NVTX range's text (the first push/pop range)
        cols = {r[1] for r in conn.execute("PRAGMA table_info(NVTX_EVENTS)")}
        rowid = conn.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start LIMIT 1").fetchone()[0]
        if "textId" in cols:
            conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (next_id + 1, NVTX_TEXT))
            conn.execute("UPDATE NVTX_EVENTS SET textId = ? WHERE rowid = ?", (next_id + 1, rowid))
        if "text" in cols:
            conn.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?",
                         (None if "textId" in cols else NVTX_TEXT, rowid))
    conn.close()
    return dest

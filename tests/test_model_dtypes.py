"""Integer column widths of the trace model (schema.NARROW): the same from every source.

Oracles: the schema's declared widths, and the export's own values read with
plain sqlite3 (a column a damaged file pushes past int32 keeps every value).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profkit.model import schema
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

KINETO = Path(__file__).parent / "data" / "kineto" / "gpt_eager.json.gz"


@pytest.mark.parametrize("path", [nsys_fixture("nsys2025_train_print"), nsys_fixture("nsys2023_sync_apis"), KINETO],
                         ids=["nsys2025", "nsys2023", "kineto"])
def test_every_integer_column_has_the_schemas_width(path: Path) -> None:
    with open_trace(path) as trace:
        for table, columns in schema.TABLES.items():
            for column in columns:
                if column.kind != schema.INT:
                    continue
                values = trace.array(table, column.name)
                want = np.int32 if schema.is_narrow(table, column.name) else np.int64
                assert values.dtype == want, (table, column.name, values.dtype)
        assert trace.array("kernels", "duration").dtype == np.int64


def test_a_value_past_int32_keeps_its_column_int64(tmp_path: Path) -> None:
    path = tmp_path / "synthetic_huge_grid.sqlite"
    path.write_bytes(nsys_fixture("nsys2025_gelu").read_bytes())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 1 << 40 WHERE rowid = 3")
        raw = [r[0] for r in conn.execute("SELECT gridX FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    with open_trace(path) as trace:
        grid = trace.array("kernels", "grid_x")
        block = trace.array("kernels", "block_x")
    assert grid.dtype == np.int64 and grid.tolist() == raw
    assert block.dtype == np.int32

"""Reading Nsight Compute (ncu) CSV output: ``read_ncu_csv(path) -> list[NcuLaunch]``."""

from profkit.readers.ncu.csv_reader import NcuCsv, nvtx_ranges, parse_csv_text, read_csv_file
from profkit.readers.ncu.launches import (
           FIELDS,
           NcuLaunch,
           launches_frame,
           launches_from_csv,
           ncu_inputs,
           read_launches,
           read_ncu_csv,
)

__all__ = ["FIELDS", "NcuCsv", "NcuLaunch", "launches_frame", "launches_from_csv", "ncu_inputs", "nvtx_ranges",
           "parse_csv_text", "read_csv_file", "read_launches", "read_ncu_csv"]

"""Writing the output tables as Parquet under <output>/<run_id>/<table>/."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import WriteToParquet

from transforms.schema import arrow_schema


def run_folder(output: str, run_id: str) -> str:
    return FileSystems.join(output, run_id)


def clear_run_output(output: str, run_id: str) -> bool:
    """Delete an earlier attempt's output of this run_id, so that re-running a
    run_id replaces it. Returns whether there was anything to delete."""
    folder = run_folder(output, run_id)
    if not FileSystems.exists(folder):
        return False
    FileSystems.delete([folder])
    return True


class WriteParquetTable(beam.PTransform):
    def __init__(self, output: str, run_id: str, table: str, slice_columns=()):
        super().__init__()
        self._prefix = FileSystems.join(run_folder(output, run_id), table, "part")
        self._schema = arrow_schema(table, slice_columns)

    def expand(self, rows):
        return rows | "WriteParquet" >> WriteToParquet(
            self._prefix, self._schema, file_name_suffix=".parquet", codec="snappy"
        )

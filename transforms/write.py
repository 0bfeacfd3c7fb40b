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
    return delete_tree(run_folder(output, run_id))


def delete_tree(folder: str) -> bool:
    """Delete a folder and everything under it, on a filesystem with folders
    (local) or an object store (gs://, where a folder is only a name prefix).
    Returns whether anything was there."""
    folder = folder.rstrip("/")
    if FileSystems.exists(folder):
        FileSystems.delete([folder])
        return True
    found = [m.path for m in FileSystems.match([folder + "/**"])[0].metadata_list]
    if found:
        FileSystems.delete(found)
    return bool(found)


class WriteParquetTable(beam.PTransform):
    """Rows -> Parquet files; the output is the final file names, emitted once
    every file is written."""

    def __init__(self, output: str, run_id: str, table: str, slice_columns=()):
        super().__init__()
        self._prefix = FileSystems.join(run_folder(output, run_id), table, "part")
        self._schema = arrow_schema(table, slice_columns)

    def expand(self, rows):
        return rows | "WriteParquet" >> WriteToParquet(
            self._prefix, self._schema, file_name_suffix=".parquet", codec="snappy"
        )

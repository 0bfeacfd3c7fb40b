"""Rows of tables an earlier run wrote (judge_cache, rubrics), from Parquet
folders or globs and from BigQuery reads planned by the launcher."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.io.parquetio import ReadFromParquet

from evalbeam.transforms.bigquery import ReadBigQueryRows


class ReadTableRows(beam.PTransform):
    """-> one dict per row of every location given."""

    def __init__(self, parquet_patterns: list[str], bigquery_plans: list):
        super().__init__()
        self._patterns = parquet_patterns
        self._plans = bigquery_plans

    def expand(self, pbegin):
        parts = [pbegin | f"ReadParquet{i}" >> ReadFromParquet(p) for i, p in enumerate(self._patterns)]
        parts += [(pbegin | f"ReadBigQuery{i}" >> ReadBigQueryRows(plan))[0] | f"RowData{i}" >> beam.Map(lambda r: r.data)
                  for i, plan in enumerate(self._plans)]
        if not parts:
            return pbegin | "NoRows" >> beam.Create([])
        return parts | "AllRows" >> beam.Flatten()

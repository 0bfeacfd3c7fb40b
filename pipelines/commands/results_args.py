"""Where `runs`, `show`, `compare` and `report` read results from: the flags, and the results they name."""
from __future__ import annotations

import argparse

from evalbeam.configs import load_config
from evalbeam.pipelines.results import BigQueryResults, ParquetResults, results_for


def results_args(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--config", help="read where this config writes (BigQuery when it has output.bigquery)")
    where.add_argument("--parquet", help="a Parquet output folder (default: output/)")
    where.add_argument("--bigquery", help="a BigQuery dataset, PROJECT.DATASET")


def results_of(args: argparse.Namespace) -> ParquetResults | BigQueryResults:
    if args.config:
        return results_for(load_config(args.config))
    if args.bigquery:
        return BigQueryResults(args.bigquery)
    return ParquetResults(args.parquet or "output/")

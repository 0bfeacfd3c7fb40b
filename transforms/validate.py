"""Records -> instances; a record that cannot be used goes to the dead letters."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from metrics.instance import InvalidField, RowSpec, build_instance
from transforms.read import DEAD_LETTER, DeadLetter, Record


class ToInstanceFn(beam.DoFn):
    def __init__(self, spec: RowSpec):
        self._spec = spec
        self._ok = Metrics.counter("evalbeam", "instances")
        self._bad = Metrics.counter("evalbeam", "records_invalid")

    def process(self, record: Record):
        try:
            instance = build_instance(record.data, self._spec, record.source, record.from_csv)
        except InvalidField as e:
            self._bad.inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, DeadLetter(record.source, str(e), record.raw, e.field))
            return
        self._ok.inc()
        yield instance


class ToInstances(beam.PTransform):
    """Records -> Instances (main) and DeadLetters (tag 'dead_letter')."""

    def __init__(self, spec: RowSpec):
        super().__init__()
        self._spec = spec

    def expand(self, records):
        result = records | "BuildInstances" >> beam.ParDo(ToInstanceFn(self._spec)).with_outputs(
            DEAD_LETTER, main="instances"
        )
        return result.instances, result[DEAD_LETTER]

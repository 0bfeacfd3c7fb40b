"""The Dataflow Flex Template's entry point: `evalbeam run` with the template's
parameters as pipeline options.

    --config    the YAML config (gs://... or a path inside the image)
    --run_date  YYYY-MM-DD, optional: default today (UTC) when the job launches
    --set       optional config overrides, `key.path=value;key.path=value`

Every other option is Beam's (the launcher passes the runner, project,
region, temp location and the worker image)."""
from __future__ import annotations

import logging
import sys

from apache_beam.options.pipeline_options import PipelineOptions

from evalbeam.configs import ConfigError, load_config
from evalbeam.pipelines import evaluate


class TemplateOptions(PipelineOptions):
    # Nothing here is `required`: Beam builds every PipelineOptions parser from
    # all subclasses, so a required option would break every other pipeline in
    # the process. main() checks --config instead.
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--config", default=None, help="the evalbeam YAML config, e.g. gs://bucket/evals/agents.yaml")
        parser.add_argument("--run_date", default=None, help="YYYY-MM-DD; default today (UTC)")
        parser.add_argument("--set", dest="overrides", default="", help="config overrides, key.path=value;key.path=value")


def main(argv: list[str] | None = None) -> int:
    logging.getLogger().setLevel(logging.INFO)
    options = PipelineOptions(sys.argv[1:] if argv is None else argv)
    template = options.view_as(TemplateOptions)
    if not template.config:
        logging.error("evalbeam: the template parameter --config is required")
        return 2
    overrides = [o for o in template.overrides.split(";") if o.strip()]
    if template.run_date:
        overrides.append(f"run_date={template.run_date}")
    try:
        config = load_config(template.config, overrides)
        run_key, _ = evaluate.run(config, options)
    except ConfigError as e:
        logging.error("evalbeam: %s", e)
        return 2
    logging.info("evalbeam run %s (run date %s) launched", run_key.run_id, run_key.run_date)
    return 0


if __name__ == "__main__":
    sys.exit(main())

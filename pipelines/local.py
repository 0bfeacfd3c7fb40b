"""How evalbeam runs on a local runner: the FnApiRunner it builds directly, and the
tuning of local runs (worker processes for large inputs, part sizes, the lean
paths taken where shuffles are held in memory)."""
from __future__ import annotations

import math
import os

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from evalbeam.configs import EvalConfig
from evalbeam.transforms.file_parts import default_part_bytes

LOCAL_RUNNERS = (None, "DirectRunner", "direct", "PrismRunner", "prism")
DIRECT_RUNNERS = (None, "DirectRunner", "direct")  # Beam's Python runner: runs each bundle once, in memory


def new_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A Beam pipeline with these options; on the DirectRunner (the default), run by
    Beam's FnApiRunner itself.

    Beam's DirectRunner first tries to run a pipeline on Prism, a runner written
    in Go whose binary it downloads from GitHub on first use, and falls back to
    the FnApiRunner when it cannot (on a machine without internet access, this
    project's included, after a failed download and some 0.25 s). evalbeam's local
    runs are built for the FnApiRunner and tested on it: bundles run in this
    process or in --direct_num_workers worker processes, none retried (direct
    Parquet writes, the streaming judge path, transforms.progress). So a local run
    goes to it directly, as the DirectRunner's own fallback builds it: the same
    runner on every machine, and nothing fetched at run time."""
    if options.view_as(StandardOptions).runner not in DIRECT_RUNNERS:
        return beam.Pipeline(options=options)
    # start-up time: Beam's runner internals only where used
    from apache_beam.portability.api import beam_provision_api_pb2
    # start-up time: Beam's runner internals only where used
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    # start-up time: Beam's runner internals only where used
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(
        pipeline_options=JobServiceHandle.encode_pipeline_options(options.get_all_options())))
    return beam.Pipeline(runner=fn_runner.FnApiRunner(provision_info=provision), options=options)


# A local run over at least this much input uses every core (worker processes),
# when the user sets no --direct_* flag: below it, starting the workers costs
# more than they save. Measured with bench/compute_throughput.py's rows (ROUGE,
# BLEU and trajectories; 1.4 KB a row) on 2 cores: 8.5 MB took about as long
# either way (two workers slightly longer), 17 MB 20% less time with two, 28 MB 27% less.
# (EVALBEAM_PARALLEL_INPUT_BYTES sets another size.)
PARALLEL_INPUT_BYTES = 16 * 1024 * 1024


def input_bytes(config: EvalConfig) -> int | None:
    """The size of a file input, all files together; None when it cannot be listed
    (preflight reports that) or the input is not files."""
    if config.input.kind != "files":
        return None
    try:
        return sum(m.size_in_bytes for m in FileSystems.match([config.input.uri])[0].metadata_list)
    except Exception:  # noqa: BLE001 - preflight reports an input it cannot list
        return None


def local_worker_args(config: EvalConfig, beam_args: list[str]) -> list[str]:
    """The flags that make a local run of a large file input use every core:
    [] when the runner is not local, the user chose (any --direct_ flag), the
    run calls a judge or runs inference (waiting, not computing), or the input is small."""
    options = PipelineOptions(beam_args)
    cores = os.cpu_count() or 1
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS or any(a.startswith("--direct_") for a in beam_args):
        return []
    if cores < 2 or config.input.kind != "files" or config.judge_specs() or config.inference:
        return []
    size = input_bytes(config)
    if size is None or size < int(os.environ.get("EVALBEAM_PARALLEL_INPUT_BYTES") or PARALLEL_INPUT_BYTES):
        return []
    return [f"--direct_num_workers={cores}", "--direct_running_mode=multi_processing"]


def local_workers(pipeline: beam.Pipeline) -> int:
    """How many worker processes (or threads) a local run spreads its bundles over."""
    options = pipeline.options
    if options.view_as(StandardOptions).runner not in DIRECT_RUNNERS:
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode not in ("multi_processing", "multi_threading"):
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


def part_bytes(pipeline: beam.Pipeline, config: EvalConfig) -> int | None:
    """The size of the parts a large JSONL input is read in, when a local run has
    several workers: a whole multiple of the workers' number of parts (at least two
    each), so that each worker gets an equal share (the local runner deals a stage's
    input out to its workers in turn). None (transforms.file_parts.PART_BYTES) otherwise."""
    workers = local_workers(pipeline)
    size = input_bytes(config) if workers > 1 else None
    if not size:
        return None
    parts = workers * max(2, math.ceil(size / (workers * default_part_bytes())))
    return max(1, math.ceil(size / parts))


def lean_local(pipeline: beam.Pipeline, config: EvalConfig) -> bool:
    """Whether ids are checked by reading the files twice (transforms.validate): on a
    local runner, whose shuffles hold their data in memory, when the input is files."""
    return config.input.kind == "files" and pipeline.options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def local_runner(pipeline: beam.Pipeline) -> bool:
    """Whether the pipeline runs on this machine (the DirectRunner, Prism): what it groups,
    it may group on this machine's disk (transforms.spill)."""
    return pipeline.options.view_as(StandardOptions).runner in LOCAL_RUNNERS


def direct_runner(pipeline: beam.Pipeline) -> bool:
    """Whether the pipeline runs on the DirectRunner, which holds shuffles in memory
    and never retries a bundle: each bundle then writes its own Parquet files
    (transforms.write.WriteParquetTable's `direct`)."""
    return pipeline.options.view_as(StandardOptions).runner in DIRECT_RUNNERS


def stream_judge(pipeline: beam.Pipeline, config: EvalConfig) -> bool:
    """Whether template judge metrics are answered as the rows stream by
    (transforms.judge_stream.StreamJudgeFn): on the DirectRunner with one worker
    process, which then keeps the whole quota, judging online, and with no
    inference or rubric metric (whose stages join on shuffles)."""
    options = pipeline.options
    return (direct_runner(pipeline) and options.view_as(DirectOptions).direct_num_workers == 1
            and config.judge.mode == "online" and not config.inference and not config.rubric_specs())

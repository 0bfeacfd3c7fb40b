"""What a row costs outside the metrics, step by step, in one process: the per-row
work of `evalbeam run` on one worker other than Beam's, on the rows of
bench/compute_throughput.py with its config (id column `id`).

The rows are generated (seed 0; response and reference of about --words words), written as JSON Lines to a temporary file, and
each step is run on every row in turn as the fused stage of a run does (one row
through every step, then the next), its time summed with `time.perf_counter`;
the collector's youngest generation collected as the `evalbeam` command's
process collects it (transforms.worker). Steps:
- id pass: the id check's first pass reading a row (parsing its line as that pass
  does) and taking its id (transforms.validate.record_id);
- parse: the scoring pass parsing a row's line (transforms.parsers.parse_jsonl);
- build: building and checking the instance (metrics.rows.instance.build_instance);
- trajectory: the six trajectory metrics of the config on the instance;
- score rest: the metric rows made around the scores (transforms.score.score_instance with
  every metric of the config scoring a constant: BLEU and ROUGE are not run at all);
- summary: the rows' thresholds and the summary's accumulation (transforms.summary);
- rows: the instances row (metrics.rows.tables.instance_row) and the Arrow batches of
  both tables (transforms.write._ArrowBatches).
And, printed after the total of those, the text metrics themselves: rouge (the config's four
ROUGE metrics, one instance after the other, as a run scores them) and bleu.

Prints microseconds a row per step, best of --rounds; with --ref REF, the same for
that commit's package tree (in a subprocess), and each step's after / before.

    .venv/bin/python bench/row_costs.py [--rows 5000] [--rounds 3] [--words 80] [--ref REF]
"""
from __future__ import annotations

import argparse
import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("id pass", "parse", "build", "trajectory", "score rest", "summary", "rows")
# the text metrics themselves, printed apart from the total of the steps above
METRIC_STEPS = ("rouge", "bleu")


def measure(rows: int, rounds: int, words: int = 80) -> dict[str, float]:
    """This interpreter's evalbeam (as imported): microseconds a row per step, best of rounds."""
    import datetime

    from bench.compute_throughput import CONFIG, generate
    from evalbeam.configs.load import load_config
    from evalbeam.metrics.rows.instance import build_instance
    from evalbeam.metrics.rows.tables import RunKey, arrow_schema, instance_row
    from evalbeam.pipelines.stages.read import row_spec
    from evalbeam.pipelines.stages.summary import thresholds
    from evalbeam.transforms import parsers, summary, worker
    from evalbeam.transforms.records import Record
    from evalbeam.transforms.score import ScoreFn, plan_metrics, score_instance, with_thresholds
    from evalbeam.transforms.validate import record_id
    from evalbeam.transforms.write import _ArrowBatches

    data = generate(rows, seed=0, words=words)
    for i, row in enumerate(data):
        row["id"] = f"row-{i}"
    text = ("\n".join(json.dumps(r) for r in data) + "\n").encode()
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "bench.yaml"
        config_path.write_text(CONFIG.format(data=Path(tmp) / "rows.jsonl", out=Path(tmp) / "out"))
        config = load_config(str(config_path))
    spec = row_spec(config)
    run = RunKey("bench", datetime.date(2026, 11, 27))
    plans = plan_metrics(config.computation_specs())
    score = ScoreFn(run, plans, frozenset(p.output_name for p in plans[len(config.computation_specs()):]))
    score.setup()
    scorers, base = score._scorers, score._base
    trajectory = [scorer for plan, scorer, _ in scorers if plan.name.startswith("trajectory_")]
    text_metrics = {"rouge": [scorer for plan, scorer, _ in scorers if plan.name.startswith("rouge")],
                    "bleu": [scorer for plan, scorer, _ in scorers if plan.name == "bleu"]}
    # every metric scoring 0.5 at no cost: the rows made around the scores, without the metrics
    constant = [(plan, lambda fields: 0.5, optional) for plan, _, optional in scorers]
    limits = thresholds(config)
    id_loads = getattr(parsers, "IdFirstLoads", None)  # the first pass's own parse, where the tree has one
    first_pass = {"loads": id_loads(spec.id_column)} if id_loads else {}
    worker.collect_young_less_often()
    clock = time.perf_counter
    best = dict.fromkeys(STEPS + METRIC_STEPS, float("inf"))
    for _ in range(rounds):
        spent = dict.fromkeys(STEPS + METRIC_STEPS, 0.0)
        moments = summary.SliceMomentsFn()
        accumulator = moments.create_accumulator()
        metric_rows, instance_rows = _ArrowBatches(arrow_schema("metric_results")), _ArrowBatches(arrow_schema("instances"))
        gc.collect()
        ids = parsers.parse_jsonl("rows.jsonl", io.BytesIO(text), **first_pass)
        for record in parsers.parse_jsonl("rows.jsonl", io.BytesIO(text)):  # this parse: timed apart below
            a = clock()
            first = next(ids)
            if isinstance(first, Record):
                record_id(first, spec)
            b = clock()
            spent["id pass"] += b - a
            if not isinstance(record, Record):
                continue
            instance = build_instance(record.data, spec, record.source)
            c = clock()
            spent["build"] += c - b
            for scorer in trajectory:
                scorer(instance.fields)
            d = clock()
            spent["trajectory"] += d - c
            for step, metrics in text_metrics.items():
                for scorer in metrics:
                    scorer(instance.fields)
                d2 = clock()
                spent[step] += d2 - d
                d = d2
            scored = score_instance(run, instance, constant, base)
            e = clock()
            spent["score rest"] += e - d
            scored = with_thresholds(scored, limits)
            for _, values in summary.slice_keys(summary.one_run_case(scored)):
                moments.add_input(accumulator, values)
            f = clock()
            spent["summary"] += f - e
            instance_rows.extend([instance_row(run, instance)])
            metric_rows.extend(scored.results)
            spent["rows"] += clock() - f
        for _ in ids:
            pass
        a = clock()
        for _ in parsers.parse_jsonl("rows.jsonl", io.BytesIO(text)):
            pass
        spent["parse"] = clock() - a
        for step, seconds in spent.items():
            best[step] = min(best[step], seconds / rows * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=80, help="words of each response and reference")
    parser.add_argument("--ref", help="a commit to measure too (before), e.g. main")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one tree's figures, for --ref
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure(args.rows, args.rounds, args.words)))
        return
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        from bench.cli_startup import checkout_tree, tree_of

        trees = {"after": checkout_tree(Path(tmp) / "after")}
        if args.ref:
            trees = {"before": tree_of(args.ref, Path(tmp) / "before"), **trees}
        for name, tree in trees.items():  # each tree in its own interpreter, bench/ from this checkout
            out = subprocess.run([sys.executable, __file__, "--json", "--rows", str(args.rows), "--rounds",
                                  str(args.rounds), "--words", str(args.words)], env={**os.environ, "PYTHONPATH": f"{tree}:{ROOT}"},
                                 check=True, capture_output=True, text=True).stdout
            figures[name] = json.loads(out.strip().splitlines()[-1])
    names = list(figures)
    print(f"{args.rows:,} rows of texts of about {args.words} words, best of {args.rounds} rounds; microseconds a row" +
          (f" (before = {args.ref}, after = this checkout)" if args.ref else ""))
    print(f"{'step':12}" + "".join(f"{n:>10}" for n in names) + ("  after/before" if args.ref else ""))
    for step in (*STEPS, "total", *METRIC_STEPS):
        values = [sum(figures[n][s] for s in STEPS) if step == "total" else figures[n][step] for n in names]
        ratio = f"  {values[-1] / values[0]:12.2f}" if args.ref else ""
        print(f"{step:12}" + "".join(f"{v:10.1f}" for v in values) + ratio)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

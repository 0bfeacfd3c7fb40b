"""Sentence BLEU bit-identical to sacrebleu's `sentence_bleu`, about 3x faster.

Written here because no library offers it: sacrebleu's sentence_bleu spends
most of its time in its tokenizer's regular expressions (one Python template
expansion for every space of the text) and in building and counting n-gram
tuples in Python. This module does the same steps with the same rules, and
only changes how they are computed:

- tokenizer 13a (sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a, the default
  for BLEU): the same replacements in the same order. Its first rule puts
  spaces around each of 29 ASCII characters, one character at a time with no
  context: done here by `str.replace` per character present, not by a regular
  expression expanding a template at every match (every space of the text is
  one). The space itself is one of the 29; tripling spaces only lengthens runs
  of spaces, which the next three rules treat alike (they look at one character
  on each side of ".", "," or "-", and a space is neither a digit nor one of
  those) and which the final split() removes, so it is skipped. The three rules
  with context keep sacrebleu's own regular expressions, run only when the text
  has a character they can match;
- n-gram statistics (sacrebleu.metrics.helpers.extract_all_word_ngrams and
  BLEU._compute_segment_statistics): the same n-gram tuples, built by `zip`
  and counted in C: the reference's once per text (`TextStats`, a frozenset
  per order when no n-gram repeats, else a Counter), the hypothesis' looked up
  in them as they are made (a Counter only against a reference whose n-grams
  repeat);
- the score (BLEU.compute_bleu with smooth_method "exp", sacrebleu's default,
  and one reference): the same floating-point operations in the same order.

tests/metrics/test_text.py compares tokens and scores with sacrebleu on
thousands of generated cases (Unicode, entities, empty and very long texts).
"""
from __future__ import annotations

import math
import re
from collections import Counter

MAX_NGRAM_ORDER = 4  # sacrebleu's BLEU default

# sacrebleu's TokenizerRegexp rule 1, r'([\{-\~\[-\` -\&\(-\+\:-\@\/])' -> r' \1 ':
# exactly these 29 characters, none outside ASCII (checked by the tests).
PUNCTUATION = " !\"#$%&()*+/:;<=>?@[\\]^_`{|}~"
# every one but the space (see the module docstring)
_SPACE_AROUND = tuple((c, f" {c} ") for c in PUNCTUATION if c != " ")
# sacrebleu's TokenizerRegexp rules 2 to 4, unchanged.
_PERIOD_COMMA_AFTER_NON_DIGIT = re.compile(r"([^0-9])([\.,])")
_PERIOD_COMMA_BEFORE_NON_DIGIT = re.compile(r"([\.,])([^0-9])")
_DASH_AFTER_DIGIT = re.compile(r"([0-9])(-)")


def _spaced_after(match: re.Match) -> str:  # r"\1 \2 "
    return f"{match[1]} {match[2]} "


def _spaced_before(match: re.Match) -> str:  # r" \1 \2"
    return f" {match[1]} {match[2]}"


def tokenize_13a(text: str) -> list[str]:
    """The tokens sacrebleu's BLEU scores for `text`: BLEU._preprocess_segment
    (rstrip; no lowercasing by default), then Tokenizer13a, then split()."""
    line = text.rstrip()
    # Tokenizer13a's language-independent part
    line = line.replace("<skipped>", "")
    line = line.replace("-\n", "")
    line = line.replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"')
        line = line.replace("&amp;", "&")
        line = line.replace("&lt;", "<")
        line = line.replace("&gt;", ">")
    line = f" {line} "
    for c, spaced in _SPACE_AROUND:
        if c in line:
            line = line.replace(c, spaced)
    if "." in line or "," in line:  # rules 2 and 3 need one of them (rule 1 adds neither)
        # (the replacements as functions: cheaper than expanding the templates r"\1 \2 ", r" \1 \2")
        line = _PERIOD_COMMA_AFTER_NON_DIGIT.sub(_spaced_after, line)
        line = _PERIOD_COMMA_BEFORE_NON_DIGIT.sub(_spaced_before, line)
    if "-" in line:
        line = _DASH_AFTER_DIGIT.sub(_spaced_after, line)
    # sacrebleu joins line.split() with single spaces, and split()s it again for n-grams
    return line.split()


class TextStats:
    """One text's 13a tokens and, when it is a reference, its n-grams of orders
    1 to 4 (computed once, on first use), each order as a frozenset when no
    n-gram repeats (most texts, for orders >= 2: cheaper to build and to look
    up) or else a Counter."""

    __slots__ = ("tokens", "length", "_reference_ngrams")

    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.length = len(tokens)
        self._reference_ngrams: tuple[frozenset | Counter, ...] | None = None

    def reference_ngrams(self) -> tuple[frozenset | Counter, ...]:
        if self._reference_ngrams is None:
            ngrams: list[frozenset | Counter] = [Counter(self.tokens)]  # words repeat: a Counter
            for n in range(2, MAX_NGRAM_ORDER + 1):
                distinct = frozenset(_ngrams(self.tokens, n))
                ngrams.append(distinct if len(distinct) == max(0, self.length - n + 1)
                              else Counter(_ngrams(self.tokens, n)))
            self._reference_ngrams = tuple(ngrams)
        return self._reference_ngrams


def _ngrams(tokens: list[str], n: int):
    """The n-grams of order n, as sacrebleu makes them (the tuples tokens[i:i+n]), built by zip in C."""
    return zip(*(tokens[k:] for k in range(n))) if n > 1 else iter(tokens)


def text_stats(text: str) -> TextStats:
    return TextStats(tokenize_13a(text))


def _matches(hypothesis: list[str], n: int, ref: frozenset | Counter) -> int:
    """sacrebleu's "correct" count of order n: the sum over n-grams of
    min(count in the hypothesis, count in the reference)."""
    if type(ref) is frozenset:
        # every reference n-gram occurs once: min() is 1 for each distinct hypothesis n-gram in it
        return len(ref.intersection(_ngrams(hypothesis, n)))
    hyp = Counter(_ngrams(hypothesis, n))
    matched = 0
    for gram in hyp.keys() & ref.keys():
        h, r = hyp[gram], ref[gram]
        matched += h if h < r else r
    return matched


def _my_log(num: float) -> float:
    # sacrebleu.utils.my_log
    if num == 0.0:
        return -9999999999
    return math.log(num)


def sentence_bleu(hypothesis: TextStats, reference: TextStats, effective_order: bool = True) -> float:
    """sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=effective_order).score,
    from the two texts' statistics."""
    correct = [_matches(hypothesis.tokens, n, ref) for n, ref in enumerate(reference.reference_ngrams(), start=1)]
    total = [max(0, hypothesis.length - n) for n in range(MAX_NGRAM_ORDER)]  # the hypothesis' n-gram counts
    return _compute_bleu(correct, total, hypothesis.length, reference.length, effective_order)


def _compute_bleu(correct: list[int], total: list[int], sys_len: int, ref_len: int, effective_order: bool) -> float:
    """sacrebleu BLEU.compute_bleu(..., smooth_method="exp", max_ngram_order=4).score:
    the same operations in the same order (so the same floating-point result)."""
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    precisions = [0.0] * MAX_NGRAM_ORDER
    if not any(correct):
        return 0.0
    smooth_mteval = 1.
    eff_order = MAX_NGRAM_ORDER
    for n in range(1, len(precisions) + 1):
        if total[n - 1] == 0:
            break
        if effective_order:
            eff_order = n
        if correct[n - 1] == 0:
            smooth_mteval *= 2
            precisions[n - 1] = 100. / (smooth_mteval * total[n - 1])
        else:
            precisions[n - 1] = 100. * correct[n - 1] / total[n - 1]
    return bp * math.exp(sum([_my_log(p) for p in precisions[:eff_order]]) / eff_order)

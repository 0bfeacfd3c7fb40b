"""Sentence BLEU bit-identical to sacrebleu's `sentence_bleu`, faster.

Written here because no library offers it: sacrebleu's sentence_bleu spends
most of its time in its tokenizer's regular expressions (one Python template
expansion for every space of the text) and in building and counting n-gram
tuples in Python. This module runs sacrebleu's own rules, read from the
installed sacrebleu, and only changes how two of the steps are computed:

- tokenizer 13a: sacrebleu's own `Tokenizer13a` (its language-independent
  replacements run as sacrebleu wrote them), with its post-tokenizer
  `TokenizerRegexp` replaced by `_FastRegexp`, which applies the same rules
  (`TokenizerRegexp()._re`, taken from sacrebleu) in the same order. The first
  rule puts spaces around single ASCII characters with no context: done by
  `str.replace` per character present instead of a template expanded at every
  match (every space of the text is one); the characters are those its
  expression matches. The other three rules (a "." or "," after or before a
  non-digit, a "-" after a digit) are applied by a scan from one such character
  to the next (`_context_rules`), re.sub's leftmost non-overlapping matches with
  its templates' text, where re would try a match at every character; checked
  against sacrebleu's expressions at import, which are used instead (their
  templates made into functions once, `_replacement`) when they differ;
- n-gram statistics: the same n-gram tuples as sacrebleu's
  `extract_all_word_ngrams`, built by `zip` and counted in C: the reference's
  once per text (`TextStats`, a frozenset per order when no n-gram repeats,
  else a Counter), the hypothesis' looked up in them as they are made (a
  Counter only against a reference whose n-grams repeat);
- the score: sacrebleu's own `BLEU.compute_bleu` (smooth_method "exp",
  sacrebleu's default) on those statistics, its code run as it is with one
  name changed (`_scoring_only`): the object it returns keeps the score alone,
  where sacrebleu's BLEUScore also formats its statistics into strings, half
  of compute_bleu's time, never read here.

The post-tokenizer's rules and the n-gram matches run in C when the extension
metrics/_bleu13a.c was built at install (NATIVE; setup.py builds it where a C
compiler is found): the same rules on the same characters, and exact integer
counts of the same n-grams, so the same scores; else in Python, as above. For a
pair of texts (sentence_bleu_of) the C path tokenizes both and counts their
matches in one call, without making a Python string of any token.

tests/metrics/test_text.py compares tokens and scores with sacrebleu on
thousands of generated cases (Unicode, entities, empty and very long texts),
on both paths.
"""
from __future__ import annotations

import re
import types
from collections import Counter

from sacrebleu.metrics.bleu import BLEU, MAX_NGRAM_ORDER
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

try:
    import evalbeam.metrics._bleu13a as _native  # by its full name: `from evalbeam.metrics import` reads as an import of the package (tests/test_imports.py)
except ImportError:  # built without a C compiler: the Python path below
    _native = None
if MAX_NGRAM_ORDER != 4:  # the C module counts orders 1 to 4, sacrebleu's since its first release
    _native = None
NATIVE = _native is not None

C_PATH, PYTHON_PATH = "c", "python"


def path() -> str:
    """Which of BLEU's two paths this process runs: C_PATH (the extension) or PYTHON_PATH (the same rules
    in Python, about a sixth of the C path's speed: an install where no C compiler was found). The runs
    table's bleu_path and the evalbeam/bleu_*_path counters say which each worker ran."""
    return C_PATH if _native is not None else PYTHON_PATH

_SPACED_OUT = " \\1 "  # the first rule's template: the matched character with a space on each side


def _replacement(template: str):
    """A template of two group references and literal text (r"\\1 \\2 ") as a function of the match,
    cheaper than re's expanding it at every match; any other template as it is."""
    pieces = re.split(r"\\(\d)", template)
    literals, groups = pieces[0::2], [int(g) for g in pieces[1::2]]
    if len(groups) != 2 or any("\\" in text for text in literals):
        return template
    (before, between, after), (first, second) = literals, groups
    return lambda match: f"{before}{match[first]}{between}{match[second]}{after}"


class _FastRegexp:
    """sacrebleu's TokenizerRegexp (its rules, in its order), returning the tokens."""

    def __init__(self):
        (first, template), *context_rules = TokenizerRegexp()._re
        if template != _SPACED_OUT or first.groups != 1:
            raise ImportError(f"sacrebleu's first 13a rule is no longer {_SPACED_OUT!r} around one character: "
                              "metrics/sentence_bleu.py must be revised for this sacrebleu")
        # The characters the rule spaces out: ASCII ones only (the tests check all of Unicode).
        # A space is one of them, but tripling spaces only lengthens runs of spaces, which the final
        # split() removes and the context rules treat as any other character neither a digit nor
        # "." "," "-": skipped.
        self.punctuation = "".join(c for c in map(chr, range(128)) if first.fullmatch(c))
        self.spaced = tuple((c, f" {c} ") for c in self.punctuation if c != " ")
        self.context_rules = tuple((expression, _replacement(template)) for expression, template in context_rules)
        # The three context rules as sacrebleu 2.x writes them: applied by _context_rules, a scan
        # from one marked character to the next, where re tries a match at every character
        # (about 3x the time). Any other rules: re, as above.
        self.scanned = [(e.pattern, t) for e, t in context_rules] == CONTEXT_RULES

    def __call__(self, line: str) -> list[str]:
        if self.scanned and _native is not None:
            return _native.tokens(line, self.punctuation)
        for c, spaced in self.spaced:
            if c in line:
                line = line.replace(c, spaced)
        if self.scanned:
            line = _context_rules(line)
        else:
            for expression, replacement in self.context_rules:
                line = expression.sub(replacement, line)
        # sacrebleu joins line.split() with single spaces, and BLEU split()s it again for n-grams
        return line.split()


# sacrebleu's context rules of tokenizer 13a, (pattern, template), in its order: what _context_rules applies.
CONTEXT_RULES = [(r"([^0-9])([\.,])", r"\1 \2 "), (r"([\.,])([^0-9])", r" \1 \2"), (r"([0-9])(-)", r"\1 \2 ")]
_DIGITS = frozenset("0123456789")  # [0-9]: these ten only
_POINTS = re.compile(r"[.,]")
_DASHES = re.compile(r"-")


def _context_rules(line: str) -> str:
    """re.sub of each of CONTEXT_RULES in turn, with their templates. Each rule's matches are
    two characters, one of them a marked one ("." "," or "-") at a fixed side; re.sub takes the
    leftmost match, then looks on after it: so the marked characters are visited left to right,
    and one makes a match when its pair does not reach into the previous match's characters."""
    line = _pairs_before(line, _POINTS, False)  # ([^0-9])([\.,]) -> \1 \2 (a space between and after)
    line = _pairs_after(line, _POINTS)  # ([\.,])([^0-9]) -> " \1 \2" (a space before and between)
    return _pairs_before(line, _DASHES, True)  # ([0-9])(-) -> \1 \2


def _pairs_before(line: str, marked: re.Pattern, digit: bool) -> str:
    """Each marked character at i with a character at i-1 (a digit or not, as `digit` says) not in
    the previous match: line[i-1] + " " + line[i] + " " in place of the two."""
    pieces, done = [], 0  # done: the end of the last match (re.sub searches on from there)
    for m in marked.finditer(line, 1):
        i = m.start()
        if i - 1 >= done and (line[i - 1] in _DIGITS) == digit:
            pieces += (line[done:i - 1], line[i - 1], " ", line[i], " ")
            done = i + 1
    if not pieces:
        return line
    pieces.append(line[done:])
    return "".join(pieces)


def _pairs_after(line: str, marked: re.Pattern) -> str:
    """Each marked character at i not in the previous match, followed by a character that is no
    digit: " " + line[i] + " " + line[i+1] in place of the two."""
    pieces, done = [], 0
    for m in marked.finditer(line, 0, len(line) - 1):
        i = m.start()
        if i >= done and line[i + 1] not in _DIGITS:
            pieces += (line[done:i], " ", line[i], " ", line[i + 1])
            done = i + 2
    if not pieces:
        return line
    pieces.append(line[done:])
    return "".join(pieces)


_TOKENIZER_13A = Tokenizer13a()
_TOKENIZER_13A._post_tokenizer = _FastRegexp()
# Tokenizer13a.__call__ without its lru_cache: a worker's texts are seen once, and the cache would
# keep 65,536 of them alive.
_tokenize_13a = Tokenizer13a.__call__.__wrapped__
PUNCTUATION = _TOKENIZER_13A._post_tokenizer.punctuation


def tokenize_13a(text: str) -> list[str]:
    """The tokens sacrebleu's BLEU scores for `text`: BLEU._preprocess_segment
    (rstrip; no lowercasing by default), then Tokenizer13a, then split()."""
    return _tokenize_13a(_TOKENIZER_13A, text.rstrip())


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


class _Score:
    """What compute_bleu returns when run by _scoring_only: its score, the statistics passed over."""

    __slots__ = ("score",)

    def __init__(self, score: float, *_statistics):
        self.score = score


def _scoring_only(compute_bleu):
    """sacrebleu's compute_bleu (its code object, read from the installed sacrebleu, not a copy),
    with the global name BLEUScore it builds its result by bound to _Score; compute_bleu itself
    where that name is not there to bind."""
    code = compute_bleu.__code__
    if "BLEUScore" not in code.co_names or "BLEUScore" in code.co_varnames or compute_bleu.__closure__:
        return compute_bleu
    namespace = {**compute_bleu.__globals__, "BLEUScore": _Score}
    scoring = types.FunctionType(code, namespace, compute_bleu.__name__, compute_bleu.__defaults__)
    scoring.__kwdefaults__ = compute_bleu.__kwdefaults__
    return scoring


_compute_bleu = _scoring_only(BLEU.compute_bleu)


# Tokenizer13a's language-independent part alone: what its post-tokenizer is given (`str` returns it).
_PREPARE = Tokenizer13a()
_PREPARE._post_tokenizer = str


def sentence_bleu_of(hypothesis: str, reference: str, effective_order: bool = True, stats=text_stats) -> float:
    """sacrebleu.sentence_bleu(hypothesis, [reference], use_effective_order=effective_order).score.
    On the C path both texts are tokenized and their n-grams matched in one call, no token made a
    Python string; else sentence_bleu of the two texts' `stats` (text_stats, or a caller's cache of it)."""
    if _native is None or not _TOKENIZER_13A._post_tokenizer.scanned:
        return sentence_bleu(stats(hypothesis), stats(reference), effective_order)
    *correct, length, reference_length = _native.statistics(
        _tokenize_13a(_PREPARE, hypothesis.rstrip()), _tokenize_13a(_PREPARE, reference.rstrip()), PUNCTUATION)
    total = [max(0, length - n) for n in range(MAX_NGRAM_ORDER)]
    return _compute_bleu(correct, total, length, reference_length,
                         smooth_method="exp", effective_order=effective_order).score


def sentence_bleu(hypothesis: TextStats, reference: TextStats, effective_order: bool = True) -> float:
    """sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=effective_order).score,
    from the two texts' statistics."""
    if _native is not None:
        correct = list(_native.matches(hypothesis.tokens, reference.tokens))
    else:
        correct = [_matches(hypothesis.tokens, n, ref) for n, ref in enumerate(reference.reference_ngrams(), start=1)]
    total = [max(0, hypothesis.length - n) for n in range(MAX_NGRAM_ORDER)]  # the hypothesis' n-gram counts
    return _compute_bleu(correct, total, hypothesis.length, reference.length,
                         smooth_method="exp", effective_order=effective_order).score

"""Text metrics against their reference implementations on many generated cases."""

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from evalbeam.metrics.catalog import get_metric
from evalbeam.metrics.text import ROUGE_TYPES, english_sentence_splitter
from tests.conftest import text_pairs


def scorer(name, **params):
    d = get_metric(name)
    return d.factory(d.params.model_validate(params))


@pytest.fixture(params=["native", "python"])
def bleu_path(request, monkeypatch):
    """BLEU's two paths, each test run on both: the C extension (metrics/_bleu13a.c, which the test
    environment must have built) and the same rules in Python (what an install without a compiler runs)."""
    from evalbeam.metrics import sentence_bleu, text

    assert sentence_bleu.NATIVE, "the C extension metrics/_bleu13a.c was not built: pip install -e . with a C compiler"
    if request.param == "python":
        monkeypatch.setattr(sentence_bleu, "_native", None)
    text._kept_bleu_stats.cache_clear()
    yield request.param
    text._kept_bleu_stats.cache_clear()


@pytest.fixture(params=["native", "rust"])
def rouge_path(request, monkeypatch):
    """ROUGE's two paths, each test run on both: the C extension (metrics/_rouge.c, which the test
    environment must have built) and rouge-score-rs alone (what an install without a compiler runs).
    The shared scorers are made anew, so that no pair scored on one path is read back on the other."""
    from evalbeam.metrics import text

    assert text.NATIVE_ROUGE, "the C extension metrics/_rouge.c was not built: pip install -e . with a C compiler"
    if request.param == "rust":
        monkeypatch.setattr(text, "_rouge_native", None)
    text._shared_rouge.cache_clear()
    yield request.param
    text._shared_rouge.cache_clear()


def test_exact_match_is_character_exact():
    fn = scorer("exact_match")
    assert fn({"response": "Café", "reference": "Café"}) == 1.0
    assert fn({"response": "Café", "reference": "Cafe\u0301"}) == 0.0  # different code points
    assert fn({"response": "a ", "reference": "a"}) == 0.0
    assert fn({"response": "", "reference": ""}) == 1.0


@pytest.mark.parametrize("effective", [True, False])
def test_bleu_equals_sacrebleu_sentence_bleu(effective, bleu_path):
    fn = scorer("bleu", use_effective_order=effective)
    pairs = text_pairs(seed=7, count=300)
    for ref, hyp in pairs:
        expected = sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=effective).score / 100
        assert fn({"response": hyp, "reference": ref}) == expected, (ref, hyp)
    assert any(0 < sacrebleu.sentence_bleu(h, [r]).score < 100 for r, h in pairs), "cases must not be degenerate"


@pytest.mark.slow
@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_equals_rouge_score_every_type(use_stemmer, rouge_path):
    pairs = text_pairs(seed=11, count=250)
    reference = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    ours = {t: scorer("rouge", rouge_type=t, use_stemmer=use_stemmer) for t in ROUGE_TYPES}
    nontrivial = 0
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)
        for t in ROUGE_TYPES:
            got = ours[t]({"response": hyp, "reference": ref})
            assert got == expected[t].fmeasure, (t, ref, hyp)
        nontrivial += 0 < expected["rougeL"].fmeasure < 1
    assert nontrivial > 50


def test_rouge_shorthands_match_rouge(rouge_path):
    for short, t in (("rouge_1", "rouge1"), ("rouge_2", "rouge2"), ("rouge_l", "rougeL"), ("rouge_l_sum", "rougeLsum")):
        a, b = scorer(short, use_stemmer=True), scorer("rouge", rouge_type=t, use_stemmer=True)
        for ref, hyp in text_pairs(seed=3, count=40):
            f = {"response": hyp, "reference": ref}
            assert a(f) == b(f)


# Texts that try what the tokenizers and n-gram counting could get wrong: every
# ASCII punctuation mark, digits around "." "," "-", sacrebleu's entities and
# <skipped>, line breaks, Unicode letters whose lower case changes length (İ, ß),
# other scripts, Unicode whitespace and digits, lone surrogates, empty texts,
# and texts of thousands of words.
HARD_PIECES = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 \n\t\r.,;!?-'\"&<>/()[]{}@#$%^*_+=|\\~`:") + [
    "&quot;", "&amp;", "&lt;", "&gt;", "<skipped>", "-\n", "İ", "K", "ß", "ﬁ", "é", "É", "Σ", "ς", "😀", "中文",
    "\u2028", "\x85", "\xa0", "\u3000", "\u200b", "\x1c", "\x0b", "\ud800", "٣", "²", "Ⅻ", "…", "–", "“", "”",
    " 3.14 ", " 1,000 ", " 10-20 ", " e.g. ", " U.S. ", " don't ", " well-known ", " running ", " generously ",
]


def hard_texts(seed: int, count: int, long_every: int = 100, long_words: int = 2000):
    import random

    from tests.conftest import WORDS

    rng = random.Random(seed)
    texts = []
    for i in range(count):
        if i % long_every == long_every - 1:
            texts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(long_words // 2, long_words))))
        elif rng.random() < 0.5:
            texts.append("".join(rng.choice(HARD_PIECES) for _ in range(rng.randint(0, 80))))
        else:
            texts.append(" ".join(rng.choice(WORDS + HARD_PIECES) for _ in range(rng.randint(0, 60))))
    return texts + ["", " ", "\n", ".", "a", "-"]


def hard_pairs(seed: int, count: int, **kw):
    """Pairs of hard texts; half of them a text and an edited copy of it (so that n-grams match)."""
    import random

    rng = random.Random(seed)
    texts = hard_texts(seed, 2 * count, **kw)
    pairs = list(zip(texts[::2], texts[1::2]))
    for i in range(0, len(pairs), 2):
        ref = pairs[i][0]
        pairs[i] = (ref, " ".join(w for w in ref.split(" ") if rng.random() > 0.25))
    return pairs + [("", ""), ("", "x"), ("x", ""), ("a b c d", "a b c d"), ("a", "a a a a a")]


@pytest.mark.slow
def test_bleu_tokens_are_sacrebleus_13a_tokens(bleu_path):
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

    from evalbeam.metrics.sentence_bleu import PUNCTUATION, tokenize_13a

    # the characters rule 1 spaces out are exactly the ones sacrebleu's rule matches, in all of Unicode
    rule1 = TokenizerRegexp()._re[0][0]
    assert {chr(i) for i in range(0x110000) if rule1.fullmatch(chr(i))} == set(PUNCTUATION)
    assert len(PUNCTUATION) == 29 and " " in PUNCTUATION and "." not in PUNCTUATION
    sacrebleu_13a = Tokenizer13a()
    for text in hard_texts(seed=31, count=3000):
        # what BLEU.sentence_score tokenizes: the text rstrip()ed, through Tokenizer13a, then split()
        assert tokenize_13a(text) == sacrebleu_13a(text.rstrip()).split(), text


def test_context_rules_replace_as_sacrebleus_templates():
    import re

    from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

    from evalbeam.metrics.sentence_bleu import _replacement

    # each of sacrebleu's context rules, its template made a function: the same text as re's expansion
    rules = TokenizerRegexp()._re[1:]
    assert len(rules) == 3
    for expression, template in rules:
        replacement = _replacement(template)
        assert callable(replacement)
        for text in hard_texts(seed=33, count=300) + [" 1,000.5 a.b 3-4 -5 ,x "]:
            assert expression.sub(replacement, text) == expression.sub(template, text), (expression.pattern, text)
    # templates it does not read are used as they are
    for template in (r"\g<1> \2", r"\1\n\2", r"\1 \2 \3", "plain"):
        assert _replacement(template) == template
    assert re.sub(r"(a)(b)", _replacement(r"<\2|\1>"), "xaby") == "x<b|a>y"


@pytest.mark.slow
@pytest.mark.parametrize("effective", [True, False])
def test_bleu_is_bit_identical_to_sacrebleu_on_hard_texts(effective, bleu_path):
    fn = scorer("bleu", use_effective_order=effective)
    pairs = hard_pairs(seed=32, count=2000)
    partial = 0
    for ref, hyp in pairs:
        expected = sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=effective).score / 100
        assert fn({"response": hyp, "reference": ref}) == expected, (ref, hyp)
        partial += 0 < expected < 1
    assert partial > 500, "the cases must not be degenerate"


@pytest.mark.slow
@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_is_bit_identical_to_rouge_score_on_hard_texts(use_stemmer, rouge_path):
    # rouge-score-rs against rouge-score itself: precision, recall and F-measure
    # of every type, in one scorer as evalbeam uses it and through the metrics
    import rouge_score_rs

    pairs = hard_pairs(seed=33, count=300, long_every=150, long_words=600)
    reference = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    rust = rouge_score_rs.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    ours = {t: scorer("rouge", rouge_type=t, use_stemmer=use_stemmer) for t in ROUGE_TYPES}
    partial = 0
    for ref, hyp in pairs:
        expected, got = reference.score(ref, hyp), rust.score(ref, hyp)
        for t in ROUGE_TYPES:
            assert tuple(got[t]) == tuple(expected[t]), (t, ref, hyp)
            assert ours[t]({"response": hyp, "reference": ref}) == expected[t].fmeasure, (t, ref, hyp)
        partial += 0 < expected["rougeL"].fmeasure < 1
    assert partial > 100


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_l_sum_of_texts_without_line_breaks_is_rouge_score_s(use_stemmer, rouge_path):
    # _SharedRouge answers rougeLsum from rougeL for a pair with no "\n" in either text;
    # rouge-score is the judge: its rougeLsum (precision, recall and F-measure) is its
    # rougeL on such pairs, and ours is its rougeLsum on every pair, with or without a
    # line break, when rougeLsum is the only type asked for (rougeL then scored unasked)
    from evalbeam.metrics.text import _SharedRouge

    texts = hard_texts(seed=41, count=400, long_every=200, long_words=300)
    one_line = [t.replace("\n", " ") for t in texts]
    pairs = list(zip(one_line[::2], one_line[1::2])) + [(a, b) for a, b in zip(texts[::2], texts[1::2]) if "\n" in a + b]
    pairs += [("a b\nc", "a b c"), ("a b c", "a b\nc"), ("\n", ""), (" ", " "), ("x", "x\n")]
    reference = rouge_scorer.RougeScorer(["rougeL", "rougeLsum"], use_stemmer=use_stemmer)
    only_sum = _SharedRouge(use_stemmer)
    only_sum.add("rougeLsum")
    both = _SharedRouge(use_stemmer)
    for t in ("rougeLsum", "rouge2", "rougeL"):
        both.add(t)
    without_break = partial = 0
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)
        if "\n" not in ref + hyp:
            without_break += 1
            assert tuple(expected["rougeLsum"]) == tuple(expected["rougeL"]), (ref, hyp)
        assert only_sum.fmeasure(ref, hyp, "rougeLsum") == expected["rougeLsum"].fmeasure, (ref, hyp)
        assert both.fmeasure(ref, hyp, "rougeLsum") == expected["rougeLsum"].fmeasure, (ref, hyp)
        assert both.fmeasure(ref, hyp, "rougeL") == expected["rougeL"].fmeasure, (ref, hyp)
        partial += 0 < expected["rougeLsum"].fmeasure < 1
    assert without_break >= 200 and len(pairs) - without_break >= 50 and partial > 100


@pytest.mark.slow
def test_rouge_metrics_of_one_instance_share_a_scoring_and_never_mix_instances(rouge_path):
    # rouge_1 .. rouge_l_sum share one native call per pair; scoring other pairs
    # in between, or a metric added later, must never return another pair's scores
    pairs = text_pairs(seed=34, count=60)
    reference = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    metrics = {t: scorer("rouge", rouge_type=t, use_stemmer=True) for t in ("rouge1", "rougeL")}
    for i, (ref, hyp) in enumerate(pairs):
        if i == 30:
            metrics["rouge3"] = scorer("rouge", rouge_type="rouge3", use_stemmer=True)
        order = sorted(metrics) if i % 2 else sorted(metrics, reverse=True)
        for t in order:
            other_ref, other_hyp = pairs[(i + 1) % len(pairs)]
            assert metrics[t]({"response": hyp, "reference": ref}) == reference.score(ref, hyp)[t].fmeasure
            assert metrics[t]({"response": other_hyp, "reference": other_ref}) == reference.score(other_ref, other_hyp)[t].fmeasure


def instance_pairs(seed: int, count: int, words: int, line_breaks: bool):
    """Pairs of texts of about `words` words each (the tests' vocabulary and punctuation), half of
    them a text and an edited copy of it; with line_breaks, a "\\n" between some words (where
    rougeLsum's sentences end), else none."""
    import random

    from tests.conftest import random_text

    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        ref = random_text(rng, words * 4 // 5, words * 6 // 5)
        if rng.random() < 0.5:
            hyp = " ".join(w for w in ref.split(" ") if rng.random() > 0.2)
        else:
            hyp = random_text(rng, words * 4 // 5, words * 6 // 5)
        if line_breaks:
            ref, hyp = (" ".join(w + "\n" * (rng.random() < 0.1) for w in t.split(" ")) for t in (ref, hyp))
        else:
            ref, hyp = ref.replace("\n", " "), hyp.replace("\n", " ")
        pairs.append((ref, hyp))
    return pairs


ONE_CONFIG = [("rouge_1", {}), ("rouge_2", {}), ("rouge_l", {}), ("rouge_l_sum", {}), ("rouge", {"rouge_type": "rouge3"})]
ONE_CONFIG_TYPES = {"rouge_1": "rouge1", "rouge_2": "rouge2", "rouge_l": "rougeL", "rouge_l_sum": "rougeLsum", "rouge": "rouge3"}


@pytest.mark.slow
@pytest.mark.parametrize("use_stemmer", [False, True])
@pytest.mark.parametrize("words", [20, 80, 300])
def test_rouge_metrics_of_one_config_equal_rouge_score_on_each_instance(use_stemmer, words, rouge_path):
    # the ROUGE metrics of one config (four shorthands and a rouge3) share one scoring of each
    # instance: each of them is rouge-score's, on texts of 20 to 300 words with and without line breaks
    metrics = {name: scorer(name, use_stemmer=use_stemmer, **params) for name, params in ONE_CONFIG}
    reference = rouge_scorer.RougeScorer(sorted(set(ONE_CONFIG_TYPES.values())), use_stemmer=use_stemmer)
    count = 40 if words < 300 else 10  # rouge-score's LCS of two 300-word texts takes some 30 ms
    pairs = instance_pairs(seed=words, count=count, words=words, line_breaks=False)
    broken = instance_pairs(seed=words + 1, count=count // 2 + 5, words=words, line_breaks=True)
    pairs += broken
    partial = 0
    for ref, hyp in pairs:
        expected, fields = reference.score(ref, hyp), {"response": hyp, "reference": ref}
        for name, metric in metrics.items():
            assert metric(fields) == expected[ONE_CONFIG_TYPES[name]].fmeasure, (name, ref, hyp)
        partial += expected["rougeLsum"].fmeasure != expected["rougeL"].fmeasure
    assert partial >= len(broken) // 3, "the line breaks must make rougeLsum differ from rougeL"


def test_rouge_never_reads_another_instances_tokens(rouge_path):
    # instances whose texts have the same length, the same number of words and the same word
    # lengths, but other words (one letter changed in each, so that their stems differ too), each
    # text a new string object, scored one after the other and interleaved metric by metric: a
    # scoring kept by instance, text or token that answered from another one would give its scores
    import random

    rng = random.Random(45)
    base = ["running", "caresses", "ponies", "generously", "evaluation", "agents", "pipeline", "stems", "dogs",
            "cat", "quickly", "jumped"]
    letters = "bcdfghklmnprstvw"

    def variant(word):
        i = rng.randrange(len(word))
        return word[:i] + rng.choice([c for c in letters if c != word[i]]) + word[i + 1:]

    metrics = {name: scorer(name, use_stemmer=True, **params) for name, params in ONE_CONFIG}
    reference = rouge_scorer.RougeScorer(sorted(set(ONE_CONFIG_TYPES.values())), use_stemmer=True)
    ref_words = [rng.choice(base) for _ in range(30)]
    hyp_words = [w for w in ref_words if rng.random() > 0.3] + [rng.choice(base) for _ in range(5)]
    instances = []
    for _ in range(40):
        # two instances a round: the same shape, the second's words a letter apart from the first's
        a = ("".join([" ".join(ref_words)]), "".join([" ".join(hyp_words)]))
        b = (" ".join(variant(w) for w in ref_words), " ".join(variant(w) for w in hyp_words))
        assert [len(w) for w in a[0].split()] == [len(w) for w in b[0].split()] and a[0] != b[0]
        instances += [a, b]
        rng.shuffle(ref_words)
    differ = 0
    for i, (ref, hyp) in enumerate(instances):
        other_ref, other_hyp = instances[i - 1]
        expected, other = reference.score(ref, hyp), reference.score(other_ref, other_hyp)
        differ += expected["rouge1"] != other["rouge1"]
        for name, metric in metrics.items():
            t = ONE_CONFIG_TYPES[name]
            assert metric({"response": hyp, "reference": ref}) == expected[t].fmeasure, (name, ref, hyp)
            assert metric({"response": other_hyp, "reference": other_ref}) == other[t].fmeasure, (name, other_ref)
    assert differ > 60, "the neighbouring instances' scores must differ"


@pytest.mark.slow
def test_native_rouge_keeps_a_bounded_vocabulary():
    # more distinct tokens than the C module keeps (32,768): the table is emptied past its bound,
    # never larger, and the scores stay rouge-score's before and after
    import random

    from evalbeam.metrics import _rouge, text

    rng = random.Random(46)
    vocabulary = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 10)))
                         for _ in range(45000)})
    rng.shuffle(vocabulary)
    reference = rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)
    kept = []
    for i in range(44):
        words = vocabulary[i * 1000:(i + 1) * 1000] + rng.sample(vocabulary[:(i + 1) * 1000], 200)
        ref = " ".join(words)
        hyp = " ".join(w for w in words if rng.random() > 0.3)
        expected = reference.score(ref, hyp)
        assert _rouge.scores(ref, hyp, (1, 2), text._porter_stem) == (
            expected["rouge1"].fmeasure, expected["rouge2"].fmeasure)
        kept.append(_rouge.kept_sizes()[1])
    tokens = [k[0] for k in kept]
    assert max(tokens) <= 32768 and max(k[1] for k in kept) <= 32768 and max(k[2] for k in kept) <= 1 << 20
    assert any(b < a for a, b in zip(tokens, tokens[1:])), "the table must have been emptied on the way"


def test_native_rouge_stems_each_token_once_and_drops_what_rouge_score_drops():
    # the C module's stemmer contract against rouge-score's tokenizer given the same stemmer: a stem
    # that is empty or not [a-z0-9]+ drops the token (rouge-score's VALID_TOKEN_RE); each distinct
    # token is stemmed once while kept; a stemmer that raises, or returns no str, is an error
    from rouge_score import tokenize

    from evalbeam.metrics import _rouge

    stems = {"running": "run", "ponies": "", "caresses": "a-b", "jumped": "JUMP", "walks": "walk",
             "generously": "gen er", "talking": "talk"}

    class Stemmer:
        def stem(self, token):
            return stems.get(token, token)

    class Tokenizer:
        def tokenize(self, text):
            return tokenize.tokenize(text, Stemmer())

    calls = []

    def stem(token):
        calls.append(token)
        return stems.get(token, token)

    reference = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=Tokenizer())
    pairs = [("Running ponies, caresses; jumped walks run.", "run ponies walk jumped caresses"),
             ("generously talking walks", "gen er talk walks"), ("ponies caresses", "ponies"), ("a b c", "a b c")]
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)
        assert _rouge.scores(ref, hyp, (1, 2, 0), stem) == tuple(expected[t].fmeasure for t in ("rouge1", "rouge2", "rougeL"))
    assert sorted(calls) == sorted(set(calls)), "each distinct token of more than three characters stemmed once"
    assert set(calls) == {w for ref, hyp in pairs for w in tokenize.tokenize(ref + " " + hyp, None) if len(w) > 3}
    # another stemmer: the kept tokens are not its stems
    assert _rouge.scores("running", "run", (1,), lambda t: "run") == (1.0,)
    assert _rouge.scores("running", "run", (1,), stem) == (1.0,)
    assert _rouge.scores("running", "run", (1,), None) == (0.0,)

    def failing(token):
        raise ValueError(f"no stem for {token}")

    with pytest.raises(ValueError, match="no stem for wholly"):
        _rouge.scores("wholly", "new", (1,), failing)
    with pytest.raises(TypeError, match="must return str or None"):
        _rouge.scores("another", "word", (1,), lambda t: 5)
    # and the module is usable again after an error
    assert _rouge.scores("running dogs", "running cats", (1,), stem) == (0.5,)


def test_native_rouge_called_from_its_own_stemmer_keeps_each_calls_tokens():
    # the stemmer runs Python code, which may score another pair (here: itself, as another thread
    # could while it runs): that call must use tokens of its own, not the busy table
    from evalbeam.metrics import _rouge, text

    inner = []

    def stem(token):
        inner.append(_rouge.scores("stemming " + token, "stems " + token, (1, 0), text._porter_stem))
        return text._porter_stem(token)

    reference = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    for ref, hyp in text_pairs(seed=47, count=30):
        expected = reference.score(ref, hyp)
        assert _rouge.scores(ref, hyp, (1, 0), stem) == (expected["rouge1"].fmeasure, expected["rougeL"].fmeasure)
    assert inner and all(got == (1.0, 1.0) for got in inner)


@pytest.mark.slow
def test_native_rouge_l_equals_rouge_scores_lcs_where_tokens_repeat_and_texts_are_long():
    # few distinct tokens, so that many subsequences compete, in texts of up to 200 tokens (the bit
    # sets of more than one 64-bit word); and two long pairs, one each side of the size past which the
    # module runs the plain dynamic programme (more than 2^16 words of bit sets)
    import random

    from evalbeam.metrics import _rouge

    rng = random.Random(48)
    reference = rouge_scorer.RougeScorer(["rougeL"])
    pairs = []
    for _ in range(500):
        alphabet = [f"w{k}" for k in range(rng.randint(1, 6))]
        pairs.append(tuple(" ".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(2)))
    for distinct in (2000, 2100):  # 32 words a bit set x 2000 tokens: bit sets; 33 x 2100: the programme
        words = [f"t{k}" for k in range(distinct)]
        pairs.append((" ".join(words), " ".join(w for w in rng.sample(words, len(words)) if rng.random() > 0.3)))
    for ref, hyp in pairs:
        assert _rouge.scores(ref, hyp, (0,), None) == (reference.score(ref, hyp)["rougeL"].fmeasure,), (ref[:80], hyp[:80])


# The reference for the offline sentence splitter is NLTK's real English Punkt
# model, obtained independently of our code: NLTK's punkt_tab.zip exactly as
# NLTK's downloader serves it (nltk_data packages/tokenizers/punkt_tab.zip,
# whose sha256 is pinned below), bundled in the llama-index-core wheel. `make
# test` installs that wheel with --no-deps, only for its data; nothing imports it.
PUNKT_TAB_DIST = "llama-index-core"
PUNKT_TAB_ZIP = "llama_index/core/_static/nltk_cache/tokenizers/punkt_tab.zip"
PUNKT_TAB_SHA256 = "e57f64187974277726a3417ca6f181ec5403676c717672eef6a748a7b20e0106"


@pytest.fixture(scope="module")
def nltk_punkt_tab_zip():
    import hashlib
    import importlib.metadata
    from pathlib import Path

    try:
        path = Path(importlib.metadata.distribution(PUNKT_TAB_DIST).locate_file(PUNKT_TAB_ZIP))
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"NLTK's punkt_tab data is not installed: run `make punkt-reference` (or `make test`): {PUNKT_TAB_DIST}, --no-deps")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PUNKT_TAB_SHA256, f"{path} is not NLTK's punkt_tab.zip"
    return path


@pytest.fixture
def nltk_english_punkt(nltk_punkt_tab_zip, tmp_path, monkeypatch):
    """NLTK data holding only the verified punkt_tab.zip, so that nltk.sent_tokenize
    (rouge-score's split_summaries path) and PunktTokenizer("english") load NLTK's
    real English model through NLTK's own loader, with no download."""
    import shutil

    import nltk
    from nltk.tokenize import _get_punkt_tokenizer

    (tmp_path / "nltk_data" / "tokenizers").mkdir(parents=True)
    shutil.copyfile(nltk_punkt_tab_zip, tmp_path / "nltk_data" / "tokenizers" / "punkt_tab.zip")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")])
    _get_punkt_tokenizer.cache_clear()
    yield _get_punkt_tokenizer("english")._params
    _get_punkt_tokenizer.cache_clear()


def test_offline_splitter_needs_no_nltk_download(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(LookupError):
        nltk.sent_tokenize("One. Two.")
    fn = scorer("rouge", rouge_type="rougeLsum", split_summaries=True)
    assert fn({"response": "The cat sat. It was happy.", "reference": "The cat sat. It was glad."}) > 0.5


def test_shipped_punkt_parameters_are_nltks_english_punkt_tab(nltk_english_punkt):
    real, ours = nltk_english_punkt, english_sentence_splitter()._params
    for name in ("abbrev_types", "collocations", "sent_starters"):
        mine, theirs = getattr(ours, name), getattr(real, name)
        assert mine == theirs, (name, sorted(mine - theirs)[:20], sorted(theirs - mine)[:20])
    mine, theirs = dict(ours.ortho_context), dict(real.ortho_context)
    differing = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    assert not differing, [(k, mine.get(k), theirs.get(k)) for k in differing[:20]]


def punkt_texts(params, seed, count):
    """Texts whose sentence breaks hinge on each kind of Punkt parameter: known
    abbreviations, collocations, frequent sentence starters, orthographic
    context (after initials, ordinals and ellipses), plus ordinary generated prose."""
    import random

    rng = random.Random(seed)
    abbrevs, starters = sorted(params.abbrev_types), sorted(params.sent_starters)
    collocations = sorted(params.collocations)
    words = sorted(w for w in params.ortho_context if w.isalpha())
    cap = lambda w: w[:1].upper() + w[1:]  # noqa: E731
    texts = []
    for abbr in abbrevs:
        texts.append(f"The note from {abbr}. {cap(rng.choice(words))} was short. {cap(rng.choice(starters))} we left.")
        texts.append(f"They met at {abbr}. {cap(rng.choice(starters))} it rained. Then {abbr}. {rng.choice(words)} came.")
    for first, second in collocations:
        first = str(rng.randint(1, 99)) if first == "##number##" else first
        texts.append(f"It was {first}. {cap(second)} said so. Nobody else did.")
    for word in rng.sample(words, count):
        texts.append(f"Ask J. {cap(word)} about it. The {rng.randint(2, 30)}. {cap(word)} is late... {cap(word)} knows.")
        texts.append(f"It ended at no. {rng.randint(1, 9)}. {cap(word)} and {rng.choice(words)} stayed! Did they? {cap(word)}.")
    texts += [text for pair in text_pairs(seed=seed, count=count) for text in pair]
    return texts


@pytest.mark.slow
def test_sentence_splitter_equals_nltk_sent_tokenize_with_nltks_english_model(nltk_english_punkt):
    import re

    import nltk

    texts = punkt_texts(nltk_english_punkt, seed=5, count=600)
    hinged_on_the_model = 0
    for text in texts:
        expected = nltk.sent_tokenize(text)
        assert english_sentence_splitter().tokenize(text) == expected, text
        hinged_on_the_model += expected != [s for s in re.split(r"(?<=[.!?])\s+", text) if s]
    assert hinged_on_the_model > 500, "the texts must exercise Punkt's parameters, not only '. ' breaks"


@pytest.mark.slow
@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_lsum_split_summaries_equals_rouge_score(nltk_english_punkt, use_stemmer, rouge_path):
    reference = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=use_stemmer, split_summaries=True)
    ours = scorer("rouge", rouge_type="rougeLsum", use_stemmer=use_stemmer, split_summaries=True)
    pairs = text_pairs(seed=21, count=250)
    pairs += [
        ("Dr. Smith arrived at 5 p.m. He left early. The U.S. team won.", "Mr. Smith came at 5. He left.\nThe team won!"),
        ("First line\nsecond line. Third sentence here.", "first line second line. third sentence"),
    ]
    texts = punkt_texts(nltk_english_punkt, seed=22, count=100)
    pairs += list(zip(texts[::2], texts[1::2]))
    differs_from_newline_split = 0
    plain = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=use_stemmer)
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)["rougeLsum"].fmeasure
        assert ours({"response": hyp, "reference": ref}) == expected, (ref, hyp)
        differs_from_newline_split += expected != plain.score(ref, hyp)["rougeLsum"].fmeasure
    assert differs_from_newline_split > 20, "the cases must exercise sentence splitting"


def test_scanned_context_rules_equal_sacrebleus_expressions():
    import random

    from sacrebleu.tokenizers.tokenizer_re import TokenizerRegexp

    from evalbeam.metrics.sentence_bleu import _TOKENIZER_13A, CONTEXT_RULES, _context_rules

    # sacrebleu's rules are the ones _context_rules applies (else the tokenizer keeps re: see the fallback test)
    rules = TokenizerRegexp()._re[1:]
    assert [(e.pattern, t) for e, t in rules] == CONTEXT_RULES and _TOKENIZER_13A._post_tokenizer.scanned
    rng = random.Random(35)
    # dense runs of the marked characters, digits and others, where matches touch and overlap
    texts = ["".join(rng.choice("a1 .,-\n٣") for _ in range(rng.randint(0, 14))) for _ in range(20000)]
    texts += hard_texts(seed=36, count=2000) + [" 1,000.5 a.b 3-4 -5 ,x ", "..,,", "1.,2", "a-1--2-", "5.", ".5", "x,"]
    changed = 0
    for text in texts:
        expected = text
        for expression, template in rules:
            expected = expression.sub(template, expected)
        assert _context_rules(text) == expected, repr(text)
        changed += expected != text
    assert changed > 10000, "most cases must exercise a rule"


def test_tokenizer_falls_back_to_re_for_other_context_rules(monkeypatch):
    from sacrebleu.tokenizers import tokenizer_re

    from evalbeam.metrics import sentence_bleu

    rules = tokenizer_re.TokenizerRegexp()._re
    changed = [rules[0], *rules[1:3], (rules[3][0], r"\1 \2")]  # a sacrebleu whose last rule differed
    monkeypatch.setattr(tokenizer_re.TokenizerRegexp, "__init__", lambda self: setattr(self, "_re", changed))
    tokenizer = sentence_bleu._FastRegexp()
    assert not tokenizer.scanned
    assert tokenizer(" 3-4 a.b ") == ["3", "-4", "a", ".", "b"]


def test_native_matches_equal_pythons_counts_where_ngrams_repeat():
    import random

    from evalbeam.metrics import sentence_bleu

    assert sentence_bleu.NATIVE
    rng = random.Random(37)
    # few distinct words, so that n-grams of every order repeat in both texts; equal words as
    # distinct string objects; words that are no reference word; empty and one-word texts
    cases = 0
    for _ in range(20000):
        vocabulary = [f"w{k}" for k in range(rng.randint(1, 5))] + ["é", "😀", ""]
        reference = [str(rng.choice(vocabulary)) for _ in range(rng.randint(0, 40))]
        hypothesis = ["".join(rng.choice(vocabulary)) for _ in range(rng.randint(0, 40))]
        stats = sentence_bleu.TextStats(reference)
        expected = [sentence_bleu._matches(hypothesis, n, grams)
                    for n, grams in enumerate(stats.reference_ngrams(), start=1)]
        assert list(sentence_bleu._native.matches(hypothesis, reference)) == expected, (hypothesis, reference)
        cases += expected[3] > 1
    assert cases > 1000, "many cases must match more than one 4-gram"
    with pytest.raises(TypeError, match="tokens must be str"):
        sentence_bleu._native.matches(["a", 1], ["a"])


def test_native_tokens_equal_the_python_rules():
    import random

    from evalbeam.metrics import sentence_bleu

    tokenizer = sentence_bleu._TOKENIZER_13A._post_tokenizer
    assert sentence_bleu.NATIVE and tokenizer.scanned
    rng = random.Random(38)
    texts = ["".join(rng.choice("a1 .,-\n٣/!(") for _ in range(rng.randint(0, 14))) for _ in range(20000)]
    texts += hard_texts(seed=39, count=2000)
    for text in texts:
        line = f" {text} "
        python = line
        for c, spaced in tokenizer.spaced:
            python = python.replace(c, spaced)
        assert sentence_bleu._native.tokens(line, tokenizer.punctuation) == sentence_bleu._context_rules(python).split(), repr(text)
    with pytest.raises(ValueError, match="ASCII"):
        sentence_bleu._native.tokens("a", "é")


def test_compute_bleu_scoring_only_is_sacrebleus_code_with_a_lighter_result():
    import random

    from sacrebleu.metrics.bleu import BLEU

    from evalbeam.metrics import sentence_bleu

    scoring = sentence_bleu._compute_bleu
    assert scoring is not BLEU.compute_bleu and scoring.__code__ is BLEU.compute_bleu.__code__
    rng = random.Random(40)
    for _ in range(5000):
        sys_len, ref_len = rng.randint(0, 30), rng.randint(0, 30)
        total = [max(0, sys_len - n) for n in range(4)]
        correct = [rng.randint(0, t) if rng.random() < 0.8 else 0 for t in total]
        for effective in (True, False):
            expected = BLEU.compute_bleu(list(correct), list(total), sys_len, ref_len, smooth_method="exp",
                                         effective_order=effective).score
            got = scoring(list(correct), list(total), sys_len, ref_len, smooth_method="exp", effective_order=effective)
            assert got.score == expected and type(got) is sentence_bleu._Score, (correct, total, sys_len, ref_len)

    def no_such_name(correct):
        return correct

    assert sentence_bleu._scoring_only(no_such_name) is no_such_name


def test_native_statistics_equal_the_tokens_matches_and_lengths():
    import random

    from evalbeam.metrics import sentence_bleu

    native, punctuation = sentence_bleu._native, sentence_bleu.PUNCTUATION
    rng = random.Random(41)
    # texts of each string kind (1, 2 and 4 bytes a character) sharing words, so that equal tokens of
    # texts of different kinds must be found equal; few words, so that n-grams repeat
    words = ["café", "a", "b.", "1-2", "x,y", "Σ", "😀", "ab", "", "\u3000"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(4000)]
    texts += hard_texts(seed=42, count=1000)
    kinds = set()
    for hypothesis, reference in zip(texts, texts[1:] + texts[:1]):
        h, r = sentence_bleu._tokenize_13a(sentence_bleu._PREPARE, hypothesis), sentence_bleu._tokenize_13a(
            sentence_bleu._PREPARE, reference)
        th, tr = native.tokens(h, punctuation), native.tokens(r, punctuation)
        expected = (*native.matches(th, tr), len(th), len(tr))
        assert native.statistics(h, r, punctuation) == expected, (hypothesis, reference)
        kinds.add((max(map(ord, h), default=0) > 255) + (max(map(ord, h), default=0) > 0xFFFF))
    assert kinds == {0, 1, 2}
    assert native.statistics("", "", punctuation) == (0, 0, 0, 0, 0, 0)
    # lines longer than the C module's SMALL (65,536 characters), whose room is counted first: tokens
    # as the Python rules make them, and statistics as tokens()+matches() give them
    tokenizer = sentence_bleu._TOKENIZER_13A._post_tokenizer
    pieces = hard_texts(seed=43, count=400, long_every=10**9)
    long_lines = [" " + " ".join(rng.choice(pieces) for _ in range(2000)) + " " for _ in range(3)]
    long_lines.append(" " + ".,-!1a " * 12000 + " ")  # dense in what every rule adds room for
    for line, other in zip(long_lines, long_lines[1:] + long_lines[:1]):
        assert len(line) > 70000
        python = line
        for c, spaced in tokenizer.spaced:
            python = python.replace(c, spaced)
        assert native.tokens(line, punctuation) == sentence_bleu._context_rules(python).split()
        th, tr = native.tokens(line, punctuation), native.tokens(other, punctuation)
        assert native.statistics(line, other, punctuation) == (*native.matches(th, tr), len(th), len(tr))


# Run under valgrind by the test below: the C module's three functions on texts of every string kind,
# dense in what the rules change, short and over its SMALL, each result checked against the others. The texts
# and their language-independent 13a preparation (pure Python) are made here and handed over in a file: under
# valgrind run only an interpreter, the module loaded from its file, and its calls (importing evalbeam and
# sacrebleu there took most of the test's time).
def _memcheck_pairs() -> list:
    import random

    from evalbeam.metrics import sentence_bleu as sb

    rng = random.Random(5)
    texts = hard_texts(seed=44, count=150, long_every=50, long_words=300)
    texts += ["".join(rng.choice("a1 .,-\n٣/!(😀é") for _ in range(rng.randint(0, 30))) for _ in range(300)]
    texts.append(" " + ".,-!1a " * 12000 + " ")
    return [(sb._tokenize_13a(sb._PREPARE, h), sb._tokenize_13a(sb._PREPARE, r)) for h, r in zip(texts, texts[1:] + texts[:1])]


_MEMCHECK_PROBE = """
import importlib.util, json, os, sys
path = os.environ["NATIVE_MODULE"]
spec = importlib.util.spec_from_file_location(os.path.basename(path).split(".")[0], path)
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)
with open(sys.argv[1], encoding="utf-8") as f:
    punctuation, pairs = json.load(f)
for a, b in pairs:
    th, tr = native.tokens(a, punctuation), native.tokens(b, punctuation)
    assert native.statistics(a, b, punctuation) == (*native.matches(th, tr), len(th), len(tr))
print("probed", len(pairs))
"""


@pytest.mark.slow
def test_native_module_reads_and_writes_only_its_own_memory_under_valgrind(tmp_path):
    import json
    import os
    import re
    import shutil
    import subprocess
    import sys

    from evalbeam.metrics import sentence_bleu

    assert sentence_bleu.NATIVE and shutil.which("valgrind"), "valgrind is on every machine here (env: machines)"
    texts, pairs = tmp_path / "pairs.json", _memcheck_pairs()
    texts.write_text(json.dumps([sentence_bleu.PUNCTUATION, pairs]), encoding="utf-8")
    assert json.loads(texts.read_text(encoding="utf-8"))[1] == [list(pair) for pair in pairs]  # every text as it was
    # -S: no site-packages (the probe needs none). The module's path in the environment, not on the command
    # line: memcheck prints the command, and a report naming the module is an error of the module's.
    result = subprocess.run(
        ["valgrind", "--tool=memcheck", "--num-callers=40", sys.executable, "-S", "-c", _MEMCHECK_PROBE, texts],
        capture_output=True, text=True, cwd=tmp_path, timeout=1200,
        env={**os.environ, "PYTHONMALLOC": "malloc", "NATIVE_MODULE": sentence_bleu._native.__file__})
    assert result.returncode == 0 and "probed 457" in result.stdout, result.stderr[-3000:]
    # memcheck's reports, one per error; CPython's own start-up and shutdown make some (reads of
    # memory it never initialised by design): only those with the module in their stack count
    reports = re.split(r"\n==\d+== \n", result.stderr)
    assert "ERROR SUMMARY" in result.stderr
    assert [r for r in reports if "_bleu13a" in r] == []


# ROUGE's C module under valgrind, as BLEU's above: only an interpreter (-S) and the module loaded from its
# file. Its pairs: the texts above (every string kind, some over 65,536 characters) each against the next,
# and a pair past the bit sets' bound (the plain programme); stemmer on and off. What it cannot import there
# is handed over: each token's stem (rouge-score-rs's, made here; a token missing from them is a KeyError)
# and rouge-score-rs's F-measures. Then a stemmer that scores another pair itself, and one that fails.
def _rouge_memcheck_cases() -> tuple[dict, list]:
    import random
    import re

    import rouge_score_rs

    from evalbeam.metrics import text

    rng = random.Random(5)
    texts = hard_texts(seed=44, count=150, long_every=50, long_words=300)
    texts += ["".join(rng.choice("a1 .,-\n٣/!(😀é") for _ in range(rng.randint(0, 30))) for _ in range(300)]
    texts.append(" " + ".,-!1a " * 12000 + " ")
    words = [f"t{k}" for k in range(2100)]
    pairs = list(zip(texts, texts[1:] + texts[:1])) + [(" ".join(words), " ".join(words[::-1][:1500]))]
    extra = "walking talks walked talking stemming stems wholly"
    tokens = {t for pair in pairs for s in pair for t in re.findall(r"[a-z0-9]+", s.lower())} | set(extra.split())
    stems = {t: text._porter_stem(t) for t in tokens if len(t) > 3}
    types = ["rouge1", "rouge2", "rouge4", "rougeL"]
    cases = []
    for use_stemmer in (False, True):
        rust = rouge_score_rs.RougeScorer(types, use_stemmer=use_stemmer)
        for r, h in pairs:
            expected = rust.score(r, h)
            cases.append([r, h, use_stemmer, [expected[t].fmeasure for t in types]])
    return stems, cases


_ROUGE_MEMCHECK_PROBE = """
import importlib.util, json, os, sys
path = os.environ["NATIVE_MODULE"]
spec = importlib.util.spec_from_file_location(os.path.basename(path).split(".")[0], path)
native = importlib.util.module_from_spec(spec)
spec.loader.exec_module(native)
with open(sys.argv[1], encoding="utf-8") as f:
    stems, cases = json.load(f)
def stem(token):
    return stems[token]
for r, h, use_stemmer, expected in cases:
    assert native.scores(r, h, (1, 2, 4, 0), stem if use_stemmer else None) == tuple(expected), (r[:80], h[:80])
def nested(token):
    native.scores("stemming " + token, "stems", (1, 0), stem)
    return stem(token)
assert native.scores("walking talks", "walked talking", (1,), nested) == (1.0,)
try:
    native.scores("wholly", "new", (1,), lambda token: 5)
    raise SystemExit("no TypeError")
except TypeError:
    pass
print("rouge probed", len(cases))
"""


@pytest.mark.slow
def test_native_rouge_reads_and_writes_only_its_own_memory_under_valgrind(tmp_path):
    import json
    import os
    import re
    import shutil
    import subprocess
    import sys

    from evalbeam.metrics import text

    assert text.NATIVE_ROUGE and shutil.which("valgrind"), "valgrind is on every machine here (env: machines)"
    data, (stems, cases) = tmp_path / "cases.json", _rouge_memcheck_cases()
    data.write_text(json.dumps([stems, cases]), encoding="utf-8")
    assert json.loads(data.read_text(encoding="utf-8"))[1] == cases  # every text and score as it was
    result = subprocess.run(
        ["valgrind", "--tool=memcheck", "--num-callers=40", sys.executable, "-S", "-c", _ROUGE_MEMCHECK_PROBE, data],
        capture_output=True, text=True, cwd=tmp_path, timeout=1200,
        env={**os.environ, "PYTHONMALLOC": "malloc", "NATIVE_MODULE": text._rouge_native.__file__})
    assert result.returncode == 0 and f"rouge probed {len(cases)}" in result.stdout, result.stderr[-3000:]
    assert len(cases) == 916
    reports = re.split(r"\n==\d+== \n", result.stderr)
    assert "ERROR SUMMARY" in result.stderr
    # the module's frames name its file (_rouge.c, _rouge.cpython-...so); the command line, in the first
    # report, names the probe and this test's folder, not the module
    assert [r for r in reports if re.search(r"_rouge\.(c|cpython)", r)] == []

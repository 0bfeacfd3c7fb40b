"""Text metrics against their reference implementations on many generated cases."""
import os

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from metrics import get_metric
from metrics.text import ROUGE_TYPES, english_sentence_splitter
from tests.conftest import text_pairs


def scorer(name, **params):
    d = get_metric(name)
    return d.factory(d.params.model_validate(params))


def test_exact_match_is_character_exact():
    fn = scorer("exact_match")
    assert fn({"response": "Café", "reference": "Café"}) == 1.0
    assert fn({"response": "Café", "reference": "Cafe\u0301"}) == 0.0  # different code points
    assert fn({"response": "a ", "reference": "a"}) == 0.0
    assert fn({"response": "", "reference": ""}) == 1.0


@pytest.mark.parametrize("effective", [True, False])
def test_bleu_equals_sacrebleu_sentence_bleu(effective):
    fn = scorer("bleu", use_effective_order=effective)
    pairs = text_pairs(seed=7, count=300)
    for ref, hyp in pairs:
        expected = sacrebleu.sentence_bleu(hyp, [ref], use_effective_order=effective).score / 100
        assert fn({"response": hyp, "reference": ref}) == pytest.approx(expected, abs=1e-12), (ref, hyp)
    assert any(0 < sacrebleu.sentence_bleu(h, [r]).score < 100 for r, h in pairs), "cases must not be degenerate"


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_equals_rouge_score_every_type(use_stemmer):
    pairs = text_pairs(seed=11, count=250)
    reference = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer)
    ours = {t: scorer("rouge", rouge_type=t, use_stemmer=use_stemmer) for t in ROUGE_TYPES}
    nontrivial = 0
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)
        for t in ROUGE_TYPES:
            got = ours[t]({"response": hyp, "reference": ref})
            assert got == pytest.approx(expected[t].fmeasure, abs=1e-12), (t, ref, hyp)
        nontrivial += 0 < expected["rougeL"].fmeasure < 1
    assert nontrivial > 50


def test_rouge_shorthands_match_rouge():
    for short, t in (("rouge_1", "rouge1"), ("rouge_2", "rouge2"), ("rouge_l", "rougeL"), ("rouge_l_sum", "rougeLsum")):
        a, b = scorer(short, use_stemmer=True), scorer("rouge", rouge_type=t, use_stemmer=True)
        for ref, hyp in text_pairs(seed=3, count=40):
            f = {"response": hyp, "reference": ref}
            assert a(f) == b(f)


@pytest.fixture
def nltk_punkt_data(tmp_path, monkeypatch):
    """Materialise NLTK's punkt_tab/english files from the same parameters, so
    that rouge-score's own split_summaries path (nltk.sent_tokenize) can run
    here as the reference, with no download."""
    import nltk
    from nltk.tokenize import _get_punkt_tokenizer
    from nltk.tokenize.punkt import save_punkt_params

    target = tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    target.parent.mkdir(parents=True)
    target.mkdir(mode=0o700)
    # only directories on nltk.data.path are writable through NLTK's path sandbox
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")] + list(nltk.data.path))
    save_punkt_params(english_sentence_splitter()._params, dir=str(target))
    _get_punkt_tokenizer.cache_clear()
    yield
    _get_punkt_tokenizer.cache_clear()


def test_offline_splitter_needs_no_nltk_download(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(LookupError):
        nltk.sent_tokenize("One. Two.")
    fn = scorer("rouge", rouge_type="rougeLsum", split_summaries=True)
    assert fn({"response": "The cat sat. It was happy.", "reference": "The cat sat. It was glad."}) > 0.5


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_lsum_split_summaries_equals_rouge_score(nltk_punkt_data, use_stemmer):
    reference = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=use_stemmer, split_summaries=True)
    ours = scorer("rouge", rouge_type="rougeLsum", use_stemmer=use_stemmer, split_summaries=True)
    pairs = text_pairs(seed=21, count=250)
    pairs += [
        ("Dr. Smith arrived at 5 p.m. He left early. The U.S. team won.", "Mr. Smith came at 5. He left.\nThe team won!"),
        ("First line\nsecond line. Third sentence here.", "first line second line. third sentence"),
    ]
    differs_from_newline_split = 0
    plain = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=use_stemmer)
    for ref, hyp in pairs:
        expected = reference.score(ref, hyp)["rougeLsum"].fmeasure
        assert ours({"response": hyp, "reference": ref}) == pytest.approx(expected, abs=1e-12), (ref, hyp)
        differs_from_newline_split += expected != plain.score(ref, hyp)["rougeLsum"].fmeasure
    assert differs_from_newline_split > 20, "the cases must exercise sentence splitting"

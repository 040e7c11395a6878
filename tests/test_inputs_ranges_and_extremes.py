"""Regression tests for the edge-case sweep's findings in the package:
index-valued arguments out of range, counts of 0 and below, extreme finite values, NaN at masked slots with
gradients, and lists or arrays passed to a module's forward. Each error names the argument, its range and the
value seen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsurvey import general_model, seq2seq, training
from attnsurvey._checks import InputTypeError
from attnsurvey.data import aspect, documents, sentiment, sequences, stories, vqa
from attnsurvey.data._rows import ExampleIndexError
from attnsurvey.evaluation import extrinsic, intrinsic
from attnsurvey.feature_related import levels
from attnsurvey.general_mechanisms import alignment, scoring
from attnsurvey.query_related import types
from attnsurvey.transformer import model, positional, reformer, synthesizer


def g(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ a picked example's index
@pytest.mark.parametrize(
    ("data", "method"),
    [
        (lambda: aspect.make_aspect(4, generator=g()), "words"),
        (lambda: aspect.make_aspect(4, generator=g()), "describe"),
        (lambda: documents.make_documents(4, generator=g()), "words"),
        (lambda: sentiment.sentiment_reviews(4, generator=g()), "decode"),
        (lambda: stories.two_fact_stories(4, generator=g()), "decode"),
        (lambda: vqa.make_vqa(4, generator=g()), "question_words"),
        (lambda: vqa.make_vqa(4, generator=g()), "describe"),
    ],
)
def test_example_index_out_of_range_is_named(data, method):
    d = data()
    getattr(d, method)(3), getattr(d, method)(-4)  # the last and (counted from the end) the first example
    for bad in (4, -5):
        with pytest.raises(ExampleIndexError, match=r"N=4 examples: an integer in \[-4, 4\), got .*=" + str(bad)):
            getattr(d, method)(bad)
    with pytest.raises(IndexError):  # still an IndexError for code that expects one
        getattr(d, method)(4)
    with pytest.raises(InputTypeError, match=r"needs \w+ to be an integer, got \w+=1.5"):
        getattr(d, method)(1.5)


def test_subset_checks_every_kind_of_index():
    d = sentiment.sentiment_reviews(4, generator=g())
    assert len(d.subset(torch.tensor([0, -1]))) == 2 and len(d.subset(slice(1, 3))) == 2
    assert len(d.subset(torch.tensor([True, False, True, False]))) == 2
    with pytest.raises(ExampleIndexError, match="holding 4"):
        d.subset(torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"shape \(N,\) = \(4,\)"):
        d.subset(torch.tensor([True, False]))
    with pytest.raises(InputTypeError, match="dtype=torch.float32"):
        d.subset(torch.tensor([0.0]))


# ------------------------------------------------------------------ counts and sizes of zero or below
def test_documents_need_polarity_and_filler_tokens():
    for kw in ({"n_polarity": 0}, {"n_filler": 0}, {"n_polarity": -1}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"{name} to be an integer >= 1, got {name}="):
            documents.make_documents(3, **kw)
    assert len(documents.make_documents(0)) == 0  # an empty data set is a count of 0, as for make_aspect(0)


@pytest.mark.parametrize("n", [0, -1])
def test_sample_counts_below_one_are_refused(n):
    a = torch.full((2, 4), 0.25)
    with pytest.raises(ValueError, match=f"num_samples to be an integer >= 1, got num_samples={n}"):
        general_model.sample_selection(a, n)
    with pytest.raises(ValueError, match=f"n_samples to be an integer >= 1, got n_samples={n}"):
        scoring.softmax_saturation(4, n_samples=n)


def test_ngram_order_zero_is_refused():
    with pytest.raises(ValueError, match="n to be an integer >= 1, got n=0"):
        extrinsic.ngram_counts(["a", "b"], 0)
    assert extrinsic.ngram_counts(["a", "b", "a"], 1)[("a",)] == 2


@pytest.mark.parametrize("base", [0.0, -2.0, float("nan"), float("inf")])
def test_sinusoidal_base_must_be_positive(base):
    with pytest.raises(ValueError, match="base to be a finite number > 0"):
        positional.sinusoidal_position_encoding(4, 6, base=base)


@pytest.mark.parametrize("max_len", [0, -1, 2.5])
@pytest.mark.parametrize(
    "make",
    [
        lambda m: positional.SinusoidalPositionEncoding(4, m),
        lambda m: positional.LearnedPositionEncoding(4, m),
        lambda m: synthesizer.DenseSynthesizer(4, m),
        lambda m: synthesizer.RandomSynthesizer(4, m),
    ],
)
def test_table_length_below_one_is_refused(make, max_len):
    with pytest.raises(ValueError, match=f"max_len to be an integer >= 1, got max_len={max_len}"):
        make(max_len)


def test_gaussian_ssim_window_needs_a_positive_sigma():
    x = torch.rand(16, 16, generator=g(), dtype=torch.float64)
    with pytest.raises(ValueError, match="sigma to be a finite number > 0, got sigma=0"):
        extrinsic.ssim(x, x, 1.0, sigma=0.0)
    assert extrinsic.ssim(x, x, 1.0, window="uniform", sigma=0.0) == pytest.approx(1.0)  # sigma unused there


def test_target_lengths_longer_than_the_sequence_are_refused():
    src = torch.tensor([[3, 4, 5], [5, 4, 3]])
    assert sequences.target_positions("reverse", src, torch.tensor([3, 2])).tolist() == [[2, 1, 0], [1, 0, -1]]
    with pytest.raises(ValueError, match=r"lengths must hold integers in \[0, 4\), got lengths holding 4"):
        sequences.target_positions("reverse", src, torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="got lengths holding -1"):
        sequences.target_positions("copy", src, torch.tensor([-1, 2]))


# ------------------------------------------------------------------ index-valued tensors out of range
@pytest.mark.parametrize("bad", [7, -1])
def test_targets_out_of_range_are_named(bad):
    logits = torch.randn(3, 7, generator=g())
    t = torch.tensor([0, 1, bad])
    with pytest.raises(ValueError, match=rf"targets must hold integers in \[0, 7\).*holding {bad}"):
        training.accuracy(logits, t)
    with pytest.raises(ValueError, match=rf"targets must hold integers in \[0, 7\).*holding {bad}"):
        training.cross_entropy_mean(logits, t)
    with pytest.raises(ValueError, match=rf"targets must hold integers in \[0, 7\), got targets holding {bad}"):
        training.tie_split_accuracy(torch.ones(3, 7), t)
    assert training.accuracy(logits, torch.tensor([0, 1, -100]), ignore_index=-100) in (0.0, 0.5, 1.0)


def test_token_ids_out_of_range_are_named():
    tagger = model.SequenceTagger(vocab=5, n_out=3, d_model=8, h=2, d_ff=16, n_layers=1)
    with pytest.raises(ValueError, match=r"tokens must hold integers in \[0, 5\), got tokens holding 5"):
        tagger(torch.tensor([[1, 5]]))
    s2s = model.Seq2SeqTransformer(6, 7, d_model=8, h=2, d_ff=16, n_layers=1)
    with pytest.raises(ValueError, match=r"src must hold integers in \[0, 6\), got src holding -1"):
        s2s.encode(torch.tensor([[1, -1]]))
    M, _ = s2s.encode(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"tgt_in must hold integers in \[0, 7\), got tgt_in holding 9"):
        s2s.decode(torch.tensor([[9]]), M)
    with pytest.raises(ValueError, match="tokens must hold integers in >= 0"):
        seq2seq.sequence_accuracy(torch.tensor([[1, -2]]), torch.tensor([[1, 2]]))


def test_sampled_positions_out_of_range_are_named():
    e, losses = torch.randn(4, generator=g()), torch.rand(4, generator=g())
    assert alignment.reinforce_gradient_samples(e, losses, torch.tensor([0, 3])).shape == (2, 4)
    for bad in (4, -1):
        with pytest.raises(ValueError, match=rf"m must hold integers in \[0, 4\), got m holding {bad}"):
            alignment.reinforce_gradient_samples(e, losses, torch.tensor([0, bad]))


# ------------------------------------------------------------------ lists and arrays given to forward
@pytest.mark.parametrize("conv", [lambda t: t.tolist(), lambda t: t.numpy()])
def test_list_or_array_inputs_get_a_clear_type_error(conv):
    p = torch.softmax(torch.randn(2, 5, generator=g()), -1)
    for fn in (intrinsic.js_divergence, intrinsic.total_variation):
        with pytest.raises(InputTypeError, match="p must be a torch.Tensor"):
            fn(conv(p), p)
        with pytest.raises(InputTypeError, match="q must be a torch.Tensor"):
            fn(p, conv(p))
    with pytest.raises(InputTypeError, match="loss must be a torch.Tensor"):
        alignment.MovingAverageBaseline().update(conv(torch.ones(3)))
    rev = reformer.ReversibleSequence([(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))])
    with pytest.raises(InputTypeError, match="x must be a torch.Tensor"):
        rev(conv(torch.ones(2, 4)))
    with pytest.raises(InputTypeError, match="y must be a torch.Tensor"):
        rev.inverse(conv(torch.ones(2, 4)))
    assert isinstance(np.zeros(1), np.ndarray)


def test_js_divergence_eps_must_be_positive():
    p = torch.full((2, 4), 0.25)
    with pytest.raises(ValueError, match="eps to be a finite number > 0, got eps=nan"):
        intrinsic.js_divergence(p, p, float("nan"))


# ------------------------------------------------------------------ extreme finite values
def test_residual_update_norm_near_1e20_agrees_with_float64():
    F = torch.randn(2, 5, 4, generator=g(), dtype=torch.float64) * 1e20
    C = torch.randn(2, 5, 4, generator=g(1), dtype=torch.float64)
    gamma, beta = torch.rand(4, dtype=torch.float64) + 0.5, torch.randn(4, dtype=torch.float64)
    ref = types.update_residual_norm(F, C, gamma, beta)
    got = types.update_residual_norm(F.float(), C.float(), gamma.float(), beta.float())
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=1e-5)
    # the naive formula (variance first): the variance overflows to inf and every row reads 0, silently
    x = F.float() + C.float()
    naive = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    assert torch.equal(naive.abs(), torch.zeros_like(naive))
    # ordinary rows: torch's LayerNorm
    Fs = F / 1e20
    torch.testing.assert_close(
        types.update_residual_norm(Fs, C, gamma, beta),
        torch.nn.functional.layer_norm(Fs + C, (4,), gamma, beta, 1e-5),
        rtol=0,
        atol=1e-14,
    )


def test_transformer_layer_norm_near_1e20_agrees_with_float64_and_is_torch_elsewhere():
    ln = model.LayerNorm(4)
    with torch.no_grad():
        ln.weight.copy_(torch.tensor([0.5, 1.0, 1.5, 2.0]))
        ln.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0]))
    x = torch.randn(3, 4, generator=g(), dtype=torch.float64)
    x[1] *= 1e20
    ref = ln.double()(x)
    got = ln.float()(x.float())
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), ref, rtol=0, atol=1e-5)
    plain = torch.nn.functional.layer_norm(x[[0, 2]].float(), (4,), ln.weight, ln.bias, ln.eps)
    assert torch.equal(got[[0, 2]], plain)  # ordinary rows: torch's own result, bit for bit


# ------------------------------------------------------------------ NaN in a masked slot: gradients
def test_scaled_word_weights_nan_at_padding_gives_finite_gradients():
    a_word = torch.softmax(torch.randn(2, 3, 4, generator=g(), dtype=torch.float64), -1)
    a_chunk = torch.softmax(torch.randn(2, 3, generator=g(1), dtype=torch.float64), -1)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[..., -1] = False
    mask[1, 2] = False  # a chunk of padding only
    poisoned = a_word.clone()
    poisoned[..., -1] = float("nan")
    poisoned[1, 2] = float("nan")
    chunk = a_chunk.clone()
    chunk[1, 2] = float("nan")
    w, c = poisoned.requires_grad_(), chunk.requires_grad_()
    out = levels.scaled_word_weights(w, c, mask)
    ref = levels.scaled_word_weights(a_word, a_chunk, mask)
    torch.testing.assert_close(out, ref)
    (out * torch.arange(24.0, dtype=torch.float64).reshape(2, 3, 4)).sum().backward()
    assert torch.isfinite(w.grad).all() and torch.isfinite(c.grad).all()


# ------------------------------------------------------------------ sizes that are not integers, models of the chapters
def test_a_fractional_size_is_named_before_it_reaches_torch():
    from attnsurvey.data import sorting

    with pytest.raises(InputTypeError, match=r"sorting_batch needs n to be an integer, got n=2.5"):
        sorting.sorting_batch(2, 2.5)  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="n_samples to be an integer"):
        scoring.dot_product_variance(4, n_samples=2.5)  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="n_layers to be an integer"):
        model.Encoder(2.5, 8, 2, 16)  # type: ignore[arg-type]


def test_chapter_models_name_their_bad_inputs():
    from attnsurvey.experiments import feature_related, general_mechanisms, query_related
    from attnsurvey.experiments import general_model as gm

    with pytest.raises(ValueError, match="n_classes to be an integer >= 1, got n_classes=0"):
        feature_related.DocumentClassifier(vocab_size=7, d_e=4, n_classes=0)
    clf = general_mechanisms.AlignmentClassifier(d_q=4, d_f=4, n_classes=3)
    with pytest.raises(InputTypeError, match="q must be a torch.Tensor"):
        clf(q=torch.zeros(2, 4).tolist(), F=torch.zeros(2, 5, 4))
    tok = query_related.MeanPoolTokenClassifier(vocab_size=7, d=4)
    with pytest.raises(ValueError, match=r"tokens must hold integers in \[0, 7\), got tokens holding 7"):
        tok(torch.tensor([[1, 7]]))
    flat = gm.FlatMLP(d_f=4, d_u=3, n_items=5, n_classes=2, d_hidden=8)
    with pytest.raises(ValueError, match=r"mask must have shape \(B, n\) = \(2, 5\), got \(2, 1, 5\)"):
        flat(torch.zeros(2, 5, 4), torch.zeros(2, 3), torch.ones(2, 1, 5, dtype=torch.bool))


def test_more_lists_get_a_clear_type_error():
    from attnsurvey.attention_step import add_log_prob

    with pytest.raises(InputTypeError, match="lp must be a torch.Tensor"):
        add_log_prob(torch.zeros(2), [0.0, 1.0])  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="buckets must be an integer torch.Tensor"):
        reformer.same_bucket_attention(torch.zeros(1, 4, 2), torch.zeros(1, 4, 2), [[0, 1, 0, 1]])  # type: ignore[arg-type]
    with pytest.raises(InputTypeError, match="a must be a torch.Tensor"):
        intrinsic.permutation_output_change(lambda a: a, [[0.5, 0.5]])  # type: ignore[arg-type]

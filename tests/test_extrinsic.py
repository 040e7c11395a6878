"""Tests for §4.1, extrinsic evaluation: every metric against its library and by hand."""

from __future__ import annotations

import math

import jiwer
import numpy as np
import pytest
import sacrebleu
import torch
import torch.nn.functional as F_
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from attnsurvey.data.evaluation_tasks import signal_token_task
from attnsurvey.evaluation import extrinsic as ex
from attnsurvey.experiments.evaluation import ProbeModel
from attnsurvey.training import seed_everything, train

torch.set_num_threads(1)

HYPS = [
    "the cat sat on the mat",
    "a dog barked at the old man in the park",
    "attention is all we need",
    "there is",
]
REFS = [
    "the cat is sitting on the mat",
    "the dog barked at an old man in a park",
    "attention is all you need",
    "there is a cat",
]
REFS2 = [
    "a cat sat upon the mat",
    "a dog was barking at the old man",
    "attention is what you need",
    "there it is",
]


@pytest.mark.catalog("extra:bleu")
@pytest.mark.parametrize("smooth", ["none", "exp", "floor", "add-k"])
def test_bleu_matches_sacrebleu(smooth):
    # tokenize="none": sacrebleu splits on whitespace only, as our default tokenizer does
    for refs, ours_refs in (([REFS], REFS), ([REFS, REFS2], [list(r) for r in zip(REFS, REFS2)])):
        lib = sacrebleu.corpus_bleu(HYPS, refs, tokenize="none", smooth_method=smooth).score
        assert ex.bleu(HYPS, ours_refs, smooth=smooth) == pytest.approx(lib, abs=1e-9)
    # two references equally far from the hypothesis length: the shorter one is the reference length
    # (sacrebleu's rule). "a b c d e" has references of 4 and 6 words: r = 4, BP = 1, BLEU = 100 (r = 6
    # would give 100 exp(1 - 6/5) = 81.87); listed in either order, so "the first listed" is wrong too
    for hyps, first, second in (
        (
            ["a b c d e", "the cat sat on a mat"],
            ["a b c d", "the cat sat on the"],
            ["a b c d e f", "a cat sat on the mat too"],
        ),
        (
            ["the cat sat on a mat", "a b c d e"],
            ["a cat sat on the mat too", "a b c d e f"],
            ["the cat sat on the", "a b c d"],
        ),
    ):
        lib = sacrebleu.corpus_bleu(hyps, [first, second], tokenize="none", smooth_method=smooth).score
        assert ex.bleu(hyps, [list(r) for r in zip(first, second)], smooth=smooth) == pytest.approx(lib, abs=1e-9)
    lib = sacrebleu.corpus_bleu(["a b c d e"], [["a b c d"], ["a b c d e f"]], tokenize="none", smooth_method=smooth)
    assert lib.score == pytest.approx(100.0) and lib.ref_len == 4
    # a single short sentence with no 4-gram match: only smoothing keeps it above 0
    lib = sacrebleu.corpus_bleu(["the cat sat down"], [["the cat sat up"]], tokenize="none", smooth_method=smooth).score
    assert ex.bleu(["the cat sat down"], ["the cat sat up"], smooth=smooth) == pytest.approx(lib, abs=1e-9)


def test_bleu_13a_tokenizer_matches_sacrebleu():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    hyps, refs = ["Hello, world! It's fine."], ["Hello , world ! It is fine ."]
    tok = Tokenizer13a()
    lib = sacrebleu.corpus_bleu(hyps, [refs], tokenize="13a").score
    assert ex.bleu(hyps, refs, tokenize=lambda s: tok(s).split()) == pytest.approx(lib, abs=1e-9)
    # and whitespace splitting gives a different number on raw text: the tokenizer matters
    assert ex.bleu(hyps, refs) != pytest.approx(lib, abs=1e-3)


@pytest.mark.catalog("extra:bleu")
def test_bleu_hand_computed():
    # hyp "a b c d" vs ref "a b c e": p1 = 3/4, p2 = 2/3, p3 = 1/2, p4 = 0/1; max_n = 3, no smoothing
    assert ex.bleu(["a b c d"], ["a b c e"], max_n=3, smooth="none") == pytest.approx(
        100 * (3 / 4 * 2 / 3 * 1 / 2) ** (1 / 3)
    )
    # clipping: "the the the" vs "the cat": p1 = 1/3; brevity: c = 3 >= r = 2 -> BP = 1
    assert ex.bleu(["the the the"], ["the cat"], max_n=1) == pytest.approx(100 / 3)
    # brevity penalty: c = 2 < r = 4 -> exp(1 - 4/2)
    assert ex.bleu(["a b"], ["a b c d"], max_n=2) == pytest.approx(100 * math.exp(-1.0))
    assert ex.ngram_counts("a b a b".split(), 2) == {("a", "b"): 2, ("b", "a"): 1}


@pytest.mark.catalog("extra:bleu")
def test_bleu_perfect_and_bad_input():
    assert ex.bleu(REFS, REFS) == pytest.approx(100.0)
    assert ex.bleu([""], ["a b c"]) == 0.0  # empty hypothesis sentence: legitimate, scores 0
    with pytest.raises(ValueError, match="at least one hypothesis, got an empty list"):
        ex.bleu([], [])
    with pytest.raises(ValueError, match="got 2 hypotheses and 1 references"):
        ex.bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="lists of sentences"):
        ex.bleu("a b", "a b")
    with pytest.raises(ValueError, match="smooth must be"):
        ex.bleu(["a"], ["a"], smooth="laplace")


@pytest.mark.catalog("extra:perplexity")
def test_perplexity_matches_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(3, 7, 11, generator=g), torch.randint(0, 11, (3, 7), generator=g)
    ce = F_.cross_entropy(logits.reshape(-1, 11).double(), targets.reshape(-1))
    assert ex.perplexity(logits, targets) == pytest.approx(math.exp(float(ce)), rel=1e-9)
    # uniform model over V = 11 tokens has perplexity 11; padding is ignored
    targets[0, :3] = -100
    assert ex.perplexity(torch.zeros(3, 7, 11), targets, ignore_index=-100) == pytest.approx(11.0)
    # a confident correct model approaches 1
    assert ex.perplexity(F_.one_hot(targets.clamp_min(0), 11).float() * 50, targets.clamp_min(0)) == pytest.approx(1.0)


@pytest.mark.catalog("extra:perplexity")
def test_perplexity_bad_input():
    with pytest.raises(ValueError, match=r"logits \(3, 7, 11\) and targets \(3, 6\)"):
        ex.perplexity(torch.zeros(3, 7, 11), torch.zeros(3, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets must lie in \[0, V=11\)"):
        ex.perplexity(torch.zeros(2, 11), torch.tensor([0, 11]))
    with pytest.raises(ValueError, match="at least one scored token"):
        ex.perplexity(torch.zeros(2, 11), torch.tensor([-1, -1]), ignore_index=-1)


@pytest.mark.catalog("extra:wer")
def test_edit_counts_hand_computed():
    # ref "a b c d", hyp "a x c d e": one substitution (b->x), one insertion (e)
    assert ex.edit_counts("a b c d".split(), "a x c d e".split()) == (1, 0, 1, 3)
    assert ex.edit_counts("a b c".split(), []) == (0, 3, 0, 0)
    assert ex.edit_counts([], "a b".split()) == (0, 0, 2, 0)
    assert ex.edit_counts("a b c".split(), "a c".split()) == (0, 1, 0, 2)


@pytest.mark.catalog("extra:wer")
def test_wer_matches_jiwer():
    refs = REFS + ["one two three four five"]
    hyps = HYPS + [""]  # an empty hypothesis is five deletions
    assert ex.wer(refs, hyps) == pytest.approx(jiwer.wer(refs, hyps))
    out = jiwer.process_words(refs, hyps)
    S = D = I = 0
    for r, h in zip(refs, hyps):
        s, d, i, _ = ex.edit_counts(r.split(), h.split())
        S, D, I = S + s, D + d, I + i
    assert S + D + I == out.substitutions + out.deletions + out.insertions
    assert ex.wer(refs, refs) == 0.0
    # WER exceeds 1 with many insertions
    assert ex.wer("a", "a b c d") == pytest.approx(3.0) == pytest.approx(jiwer.wer("a", "a b c d"))


@pytest.mark.catalog("extra:per")
def test_per_matches_jiwer_on_phonemes():
    refs = [["h", "@", "l", "oU"], ["w", "3:", "l", "d"]]
    hyps = [["h", "E", "l", "oU", "u"], ["w", "3:", "d"]]
    lib = jiwer.wer([" ".join(r) for r in refs], [" ".join(h) for h in hyps])
    assert ex.per(refs, hyps) == pytest.approx(lib) == pytest.approx(3 / 8)
    assert ex.per(["h @ l oU"], ["h @ l oU"]) == 0.0


@pytest.mark.catalog("extra:wer")
def test_wer_bad_input():
    with pytest.raises(ValueError, match="at least one hypothesis"):
        ex.wer([], [])
    with pytest.raises(ValueError, match="got 1 hypotheses and 2 references"):
        ex.wer(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty references"):
        ex.wer([""], ["a"])
    # a single sentence paired with a list is refused in either order (was silently scored as one token)
    for refs, hyps in (("a b c", ["a b c"]), (["a b c"], "a b c")):
        with pytest.raises(ValueError, match="not a single string"):
            ex.wer(refs, hyps)


@pytest.mark.catalog("extra:precision-recall-f1")
def test_precision_recall_f1_hand_computed():
    pred = torch.tensor([1, 1, 0, 1, 0, 0])
    true = torch.tensor([1, 0, 0, 1, 1, 0])
    p, r, f = ex.precision_recall_f1(pred, true)  # TP=2, FP=1, FN=1
    assert (p, r, f) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    pred = torch.tensor([0, 1, 2, 2, 2, 1])
    true = torch.tensor([0, 1, 1, 2, 0, 1])
    # class 0: TP1 FP0 FN1 -> P1 R.5; class 1: TP2 FP0 FN1 -> P1 R2/3; class 2: TP1 FP2 FN0 -> P1/3 R1
    p, r, f = ex.precision_recall_f1(pred, true, average="macro")
    f1s = [2 * 1 * 0.5 / 1.5, 2 * 1 * (2 / 3) / (5 / 3), 2 * (1 / 3) / (4 / 3)]
    assert (p, r, f) == pytest.approx(((1 + 1 + 1 / 3) / 3, (0.5 + 2 / 3 + 1) / 3, sum(f1s) / 3))
    # micro averaging over all classes of single-label data equals accuracy
    p, r, f = ex.precision_recall_f1(pred, true, average="micro")
    assert p == r == f == pytest.approx(4 / 6)
    # a class never predicted: precision 0 by convention, not NaN
    assert ex.precision_recall_f1(torch.zeros(3), torch.ones(3)) == (0.0, 0.0, 0.0)


@pytest.mark.catalog("extra:precision-recall-f1")
def test_macro_average_is_over_the_classes_present():
    """scikit-learn's convention: the macro mean runs over the labels in either input, or over range(num_classes)."""
    pred, true = torch.tensor([0, 2, 2]), torch.tensor([0, 2, 0])
    # class 0: TP1 FP0 FN1 -> P 1, R 1/2, F 2/3; class 2: TP1 FP1 FN0 -> P 1/2, R 1, F 2/3; class 1 occurs nowhere
    assert ex.precision_recall_f1(pred, true, average="macro") == pytest.approx((0.75, 0.75, 2 / 3))
    # asked for classes 0..3, the absent classes 1 and 3 count with P = R = F = 0
    assert ex.precision_recall_f1(pred, true, average="macro", num_classes=4) == pytest.approx(
        (1.5 / 4, 1.5 / 4, 4 / 3 / 4)
    )
    # labels need not start at 0: {5, 7} relabelled {0, 1} gives the same scores
    assert ex.precision_recall_f1(pred + 5, true + 5, average="macro") == pytest.approx((0.75, 0.75, 2 / 3))
    # micro pools the counts, so absent classes change nothing: TP 2, FP 1, FN 1
    assert ex.precision_recall_f1(pred, true, average="micro") == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert ex.precision_recall_f1(pred, true, average="micro", num_classes=4) == pytest.approx((2 / 3, 2 / 3, 2 / 3))


@pytest.mark.catalog("extra:precision-recall-f1")
def test_precision_recall_bad_input():
    with pytest.raises(ValueError, match=r"same shape, got \(3,\) and \(4,\)"):
        ex.precision_recall_f1(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="at least one label"):
        ex.precision_recall_f1(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="average must be"):
        ex.precision_recall_f1(torch.zeros(3), torch.zeros(3), average="weighted")
    with pytest.raises(ValueError, match="num_classes must be >= 1, got 0"):
        ex.precision_recall_f1(torch.zeros(3), torch.zeros(3), average="macro", num_classes=0)


@pytest.mark.catalog("extra:iou")
def test_box_iou_equals_pixel_count():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = torch.randint(0, 10, (4,), generator=g).float()
        b = torch.randint(0, 10, (4,), generator=g).float()
        a = torch.stack([a[[0, 2]].min(), a[[1, 3]].min(), a[[0, 2]].max(), a[[1, 3]].max()])
        b = torch.stack([b[[0, 2]].min(), b[[1, 3]].min(), b[[0, 2]].max(), b[[1, 3]].max()])
        ma, mb = torch.zeros(10, 10, dtype=torch.bool), torch.zeros(10, 10, dtype=torch.bool)
        ma[int(a[1]) : int(a[3]), int(a[0]) : int(a[2])] = True  # rows = y, columns = x
        mb[int(b[1]) : int(b[3]), int(b[0]) : int(b[2])] = True
        assert float(ex.box_iou(a, b)) == pytest.approx(float(ex.mask_iou(ma, mb)))
    assert float(ex.box_iou(torch.tensor([0.0, 0, 2, 2]), torch.tensor([1.0, 1, 3, 3]))) == pytest.approx(1 / 7)
    assert float(ex.box_iou(torch.tensor([0.0, 0, 1, 1]), torch.tensor([2.0, 2, 3, 3]))) == 0.0


@pytest.mark.catalog("extra:iou")
def test_iou_bad_input():
    with pytest.raises(ValueError, match=r"box_a must have shape \(\.\.\., 4\)"):
        ex.box_iou(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="x2 < x1"):
        ex.box_iou(torch.tensor([2.0, 0, 1, 1]), torch.zeros(4))
    with pytest.raises(ValueError, match=r"same shape, got \(4, 4\) and \(4, 5\)"):
        ex.mask_iou(torch.zeros(4, 4, dtype=torch.bool), torch.zeros(4, 5, dtype=torch.bool))


def _images(seed=0, shape=(32, 40)):
    rng = np.random.default_rng(seed)
    x = rng.random(shape)
    y = np.clip(x + 0.1 * rng.standard_normal(shape), 0, 1)
    return x, y


@pytest.mark.catalog("extra:psnr")
def test_psnr_matches_skimage():
    x, y = _images()
    ours = ex.psnr(torch.from_numpy(x), torch.from_numpy(y), data_range=1.0)
    assert ours == pytest.approx(peak_signal_noise_ratio(x, y, data_range=1.0), rel=1e-12)
    assert ex.psnr(torch.from_numpy(x) * 255, torch.from_numpy(y) * 255, data_range=255) == pytest.approx(ours)
    assert ex.psnr(torch.from_numpy(x), torch.from_numpy(x), data_range=1.0) == math.inf


def _images_on_a_scale(seed, data_range, shape=(32, 40)):
    """Images whose pixel spread is comparable to C1 = (K1 R)^2 and C2 = (K2 R)^2 at this data_range R.

    R = 1: pixels in [0, 1]. R = 255: x = 100 + 2 N(0, 1), y = x + 2 N(0, 1), so the constants
    (C1 = 6.5, C2 = 58.5) weigh against variances of about 4 and 8: a wrong scaling of C1, C2 with R shows.
    """
    if data_range == 1.0:
        return _images(seed, shape)
    rng = np.random.default_rng(seed)
    x = 100 + 2 * rng.standard_normal(shape)
    return x, x + 2 * rng.standard_normal(shape)


@pytest.mark.catalog("extra:ssim")
@pytest.mark.parametrize("data_range", [1.0, 255.0])
@pytest.mark.parametrize(
    "window,sample_cov", [("gaussian", False), ("gaussian", True), ("uniform", True), ("uniform", False)]
)
def test_ssim_matches_skimage(window, sample_cov, data_range):
    x, y = _images_on_a_scale(1, data_range)
    lib = structural_similarity(
        x, y, data_range=data_range, gaussian_weights=window == "gaussian", sigma=1.5, use_sample_covariance=sample_cov
    )
    ours = ex.ssim(
        torch.from_numpy(x), torch.from_numpy(y), data_range=data_range, window=window, sample_covariance=sample_cov
    )
    assert ours == pytest.approx(lib, abs=1e-12)
    assert ex.ssim(torch.from_numpy(x), torch.from_numpy(x), data_range=data_range, window=window) == pytest.approx(1.0)
    w = ex.ssim_window(window)
    assert float(w.sum()) == pytest.approx(1.0) and w.shape == ((11, 11) if window == "gaussian" else (7, 7))


@pytest.mark.catalog("extra:psnr", "extra:ssim")
def test_image_metrics_bad_input():
    x = torch.zeros(16, 16)
    with pytest.raises(ValueError, match=r"same shape, got x \(16, 16\) and y \(16, 15\)"):
        ex.psnr(x, torch.zeros(16, 15), 1.0)
    with pytest.raises(ValueError, match=r"same shape, got x \(16, 16\) and y \(15, 16\)"):
        ex.ssim(x, torch.zeros(15, 16), 1.0)
    with pytest.raises(ValueError, match="data_range must be positive"):
        ex.psnr(x, x, 0.0)
    with pytest.raises(ValueError, match=r"smaller than the 11x11 SSIM window"):
        ex.ssim(torch.zeros(8, 8), torch.zeros(8, 8), 1.0)
    with pytest.raises(ValueError, match=r"grey images of shape \(H, W\)"):
        ex.ssim(torch.zeros(3, 16, 16), torch.zeros(3, 16, 16), 1.0)


@pytest.mark.catalog("extra:uniform-attention-ablation")
def test_uniform_weights_mask_and_sum():
    a = torch.softmax(torch.randn(2, 3, 5), -1)
    u = ex.uniform_weights(a)
    torch.testing.assert_close(u, torch.full((2, 3, 5), 0.2))
    mask = torch.tensor([True, True, False, False, False]).expand(2, 3, 5).clone()
    mask[1, 2] = False
    u = ex.uniform_weights(a, mask)
    torch.testing.assert_close(u[0, 0], torch.tensor([0.5, 0.5, 0, 0, 0]))
    assert torch.equal(u[1, 2], torch.zeros(5))  # fully masked row: zero weights, zero context
    with pytest.raises(ValueError, match="boolean"):
        ex.uniform_weights(a, mask.float())  # 0/1 floats would pass as weights of 0.5 and 0.5 by accident


@pytest.mark.catalog("extra:uniform-attention-ablation")
def test_ablation_drops_on_trained_model():
    g = seed_everything(0)
    x, y, _ = signal_token_task(600, 8, 3, 12, g)
    model = ProbeModel(12, 3, 8, vocab=15)
    batches = [(x[i : i + 50], y[i : i + 50]) for i in range(0, 600, 50)] * 5
    train(model, lambda m, b: F_.cross_entropy(m(b[0])[0].reshape(-1, 3), b[1].reshape(-1)), batches, lr=2e-2)
    learned, uniform = ex.uniform_attention_ablation(model, x, y)
    assert learned > 0.95
    assert uniform < learned - 0.2
    # the override path with the model's own weights reproduces the forward pass
    logits, a = model(x)
    torch.testing.assert_close(model(x, weights=a)[0], logits)
    with pytest.raises(ValueError, match="exactly one of vocab"):
        ProbeModel(4, 2, 5)

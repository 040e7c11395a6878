"""Task models and training loops of the feature-related chapters (§3.1).

* §3.1.1: the aspect-sentiment model around rotatory attention
  (:class:`AspectModel`, data from :mod:`attnsurvey.data.aspect`) and the VQA
  model around the co-attention modules (:class:`VQAModel`, data from
  :mod:`attnsurvey.data.vqa`);
* §3.1.2: the document classifier around hierarchical attention;
* §3.1.3: the classifier on several representations (meta-embeddings).

Shapes: n examples, n_S sentences, n_w words, E representations, d_{e_i} representation widths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from .._checks import check_index_range, check_integers
from ..attention import align_scores
from ..catalog import catalogued
from ..data.aspect import LABELS, AspectData
from ..data.aspect import VOCAB as ASPECT_VOCAB
from ..data.vqa import ANSWERS, COLOURS, D_CELL, SHAPES, VQAData
from ..data.vqa import VOCAB as VQA_VOCAB
from ..feature_related import co_attention as ca
from ..feature_related.levels import HierarchicalAttention, flat_attention
from ..feature_related.representations import MetaEmbedding
from ..feature_related.rotatory import RotatoryAttention, RotatoryOutput, target_pooling
from ..general_model import OutputModel, keys_values
from ..training import accuracy, train

#: The aspect-sentiment models compared in §3.1.1.
ASPECT_MODELS = ("target-only", "mean-contexts", "mean-contexts-mlp", "rotatory")
#: Hidden width of ``mean-contexts-mlp``: its parameter count is within 2% of one-hop ``rotatory``'s (d = 12).
ASPECT_MLP_HIDDEN = 17
#: The VQA models compared in §3.1.1: two baselines and the co-attention variants.
VQA_VARIANTS = (
    "mean-pooling",
    "question-independent",
    "alternating",
    "interactive",
    "parallel",
    "max-affinity",
    "multi-grained",
)
_MARKERS = {"circle": "o", "square": "s", "triangle": "^", "star": "*", "cross": "X"}


class DocumentOutput(NamedTuple):
    """Output of :class:`DocumentClassifier`: logits ``(..., n_y)``, sentence
    weights ``(..., n_S)`` and word weights ``(..., n_S, n_w)``.

    For the flat model the sentence weight is the total word weight that falls
    in the sentence, and the word weights sum to 1 over the document; for the
    hierarchical model the word weights sum to 1 within each sentence.
    """

    logits: Tensor
    a_chunk: Tensor
    a_word: Tensor


@catalogued("extra:hierarchical-attention")
class DocumentClassifier(nn.Module):
    """Document classifier: embeddings -> attention -> linear output model (Eq. 5 logits).

    Token id 0 is padding.

    Args:
        vocab_size: the number of token ids.
        d_e: the embedding width.
        n_classes: the number of classes.
        kind: ``"hierarchical"``: :class:`HierarchicalAttention` (Fig. 8); ``"flat"``:
            :func:`flat_attention` with a learned query over all words;
            ``"flat-context"``: the same flat attention over word vectors that also
            carry their sentence, ``f_w + mean of f over the real words of w's
            sentence`` (the sentence structure given as input, not as a hierarchy).
        d_k: the key size of the attention (None: d_e).

    Shape:
        - tokens: ``(..., n_S, n_w)`` long.
        - word_mask: boolean ``(..., n_S, n_w)``, ``True`` = a real word (may attend;
          default ``tokens != 0``).
        - Output: a :class:`DocumentOutput`.

    Raises:
        ValueError: for an unknown kind or tokens of rank < 2.
    """

    def __init__(
        self, vocab_size: int, d_e: int, n_classes: int, kind: str = "hierarchical", d_k: int | None = None
    ) -> None:
        super().__init__()
        check_integers("DocumentClassifier", minimum=1, vocab_size=vocab_size, d_e=d_e, n_classes=n_classes)
        if kind not in ("hierarchical", "flat", "flat-context"):
            raise ValueError(f"kind must be 'hierarchical', 'flat' or 'flat-context', got {kind!r}")
        d_k = d_e if d_k is None else d_k
        self.kind = kind
        self.embed = nn.Embedding(vocab_size, d_e, padding_idx=0)
        if kind == "hierarchical":
            self.attention = HierarchicalAttention(d_e, d_k)
        else:
            self.W_K = nn.Linear(d_e, d_k, bias=False)
            self.W_V = nn.Linear(d_e, d_e, bias=False)
            self.q = nn.Parameter(torch.randn(d_k) / d_k**0.5)
        self.out = nn.Linear(d_e, n_classes)

    def forward(self, tokens: Tensor, word_mask: Tensor | None = None) -> DocumentOutput:
        check_index_range(tokens, self.embed.num_embeddings, "tokens", "DocumentClassifier (vocab token ids)")
        if tokens.dim() < 2:
            raise ValueError(f"tokens must have shape (..., n_S, n_w), got {tuple(tokens.shape)}")
        word_mask = tokens != 0 if word_mask is None else word_mask
        F = self.embed(tokens)
        if self.kind == "hierarchical":
            r = self.attention(F, word_mask)
            return DocumentOutput(self.out(r.c), r.a_chunk, r.a_word)
        if self.kind == "flat-context":  # every word also carries the mean of its sentence's real words
            m = word_mask.unsqueeze(-1).to(F.dtype)
            F = F + (F * m).sum(-2, keepdim=True) / m.sum(-2, keepdim=True).clamp_min(1.0)
        K, V = keys_values(F, self.W_K.weight, self.W_V.weight)
        c, a = flat_attention(self.q, K, V, word_mask)
        return DocumentOutput(self.out(c), a.sum(-1), a)


class RepresentationClassifier(nn.Module):
    """Classifier on several representations of one input (the §3.1.3 experiment).

    Args:
        dims: the widths ``d_{e_i}`` of the ``E`` representations.
        d_t: the common width of :class:`MetaEmbedding`.
        n_classes: the number of classes.
        combine: ``"attention"`` or ``"average"``: :class:`MetaEmbedding` to width d_t,
            then a linear output model; ``"concat"``: a linear output model on the plain
            concatenation ``[x^(e_1); ...; x^(e_E)]`` (no attention); ``"mlp"``: the
            concatenation through one hidden layer of ``d_hidden`` ReLU units, then the
            linear output model (a nonlinear baseline without attention).
        d_hidden: the hidden width of ``"mlp"`` (choose it to match another model's
            parameter count).

    Shape:
        - xs: a list of ``E`` tensors ``(..., d_{e_i})``.
        - Output: ``(logits (..., n_classes), a (..., E))``, ``a`` the representation
          weights (None for concat and mlp).

    Raises:
        ValueError: for an unknown ``combine`` or ``"mlp"`` without a positive ``d_hidden``.
    """

    def __init__(
        self, dims: Sequence[int], d_t: int, n_classes: int, combine: str = "attention", d_hidden: int | None = None
    ) -> None:
        super().__init__()
        if combine not in ("attention", "average", "concat", "mlp"):
            raise ValueError(f"combine must be 'attention', 'average', 'concat' or 'mlp', got {combine!r}")
        if combine == "mlp" and (d_hidden is None or d_hidden < 1):
            raise ValueError(f"combine='mlp' needs a hidden width d_hidden >= 1, got {d_hidden}")
        self.combine = combine
        self.meta: MetaEmbedding | None = None
        self.hidden: nn.Linear | None = None
        if combine == "concat":
            self.out = nn.Linear(sum(dims), n_classes)
        elif combine == "mlp":
            assert d_hidden is not None  # checked above
            self.hidden = nn.Linear(sum(dims), d_hidden)
            self.out = nn.Linear(d_hidden, n_classes)
        else:
            self.meta = MetaEmbedding(dims, d_t, combine)
            self.out = nn.Linear(d_t, n_classes)

    def forward(self, xs: Sequence[Tensor]) -> tuple[Tensor, Tensor | None]:
        if self.meta is None:
            x = torch.cat(list(xs), dim=-1)
            if self.hidden is not None:
                x = torch.relu(self.hidden(x))
            return self.out(x), None
        r = self.meta(xs)
        return self.out(r.x_e), r.a


class AspectModel(nn.Module):
    """Task model for :class:`AspectData`.

    Args:
        kind: ``"target-only"``: Eq. (17) alone (the mean target phrase) -> output;
            ``"mean-contexts"``: mean of left, target and right (no attention) -> output;
            ``"mean-contexts-mlp"``: the same three means through one hidden layer of
            :data:`ASPECT_MLP_HIDDEN` ReLU units -> output (a nonlinear baseline of
            rotatory's size); ``"rotatory"``: rotatory attention with ``hops`` rotations
            -> Eq. (20) -> output.
        d: the embedding width.
        hops: the number of rotations of ``"rotatory"``.

    Shape:
        - data: an :class:`AspectData` of ``n`` sentences.
        - Output: ``(logits (n, 2), output of the attention or None)``.

    Raises:
        ValueError: for an unknown kind.
    """

    def __init__(self, kind: str = "rotatory", d: int = 12, hops: int = 1) -> None:
        super().__init__()
        if kind not in ASPECT_MODELS:
            raise ValueError(f"unknown kind {kind!r}; choose one of {ASPECT_MODELS}")
        self.kind = kind
        self.embed = nn.Embedding(len(ASPECT_VOCAB), d)
        self.hidden: nn.Linear | None = None
        if kind == "rotatory":
            self.rot = RotatoryAttention(d_t=d, d_c=d, hops=hops)
            out = self.rot.out_dim
        elif kind == "mean-contexts-mlp":
            self.hidden = nn.Linear(3 * d, ASPECT_MLP_HIDDEN)
            out = ASPECT_MLP_HIDDEN
        else:
            out = d if kind == "target-only" else 3 * d
        self.output = OutputModel(out, len(LABELS))

    def forward(self, data: AspectData) -> tuple[Tensor, RotatoryOutput | None]:
        F_t, F_l, F_r = self.embed(data.target), self.embed(data.left), self.embed(data.right)
        if self.kind == "target-only":
            return self.output.logits(target_pooling(F_t, data.mask_t)), None
        if self.kind in ("mean-contexts", "mean-contexts-mlp"):
            parts = [target_pooling(F, m) for F, m in ((F_l, data.mask_l), (F_t, data.mask_t), (F_r, data.mask_r))]
            x = torch.cat(parts, -1)
            if self.hidden is not None:
                x = torch.relu(self.hidden(x))
            return self.output.logits(x), None
        out = self.rot(F_t, F_l, F_r, data.mask_t, data.mask_l, data.mask_r)
        return self.output.logits(out.r), out


def train_aspect(
    kind: str, data: AspectData, hops: int = 1, steps: int = 200, batch_size: int = 64, lr: float = 2e-2, seed: int = 0
) -> AspectModel:
    """Train an :class:`AspectModel` with Adam and cross-entropy; deterministic given ``seed``.

    Args:
        kind: the model kind (see :class:`AspectModel`).
        data: the training sentences.
        hops: the number of rotations.
        steps: the number of training steps.
        batch_size: sentences per batch.
        lr: the learning rate.
        seed: the seed of the weights and batches.

    Returns:
        The trained model.
    """
    torch.manual_seed(seed)
    model = AspectModel(kind, hops=hops)
    g = torch.Generator().manual_seed(seed)
    batches = (data.subset(torch.randint(len(data), (batch_size,), generator=g)) for _ in range(steps))
    train(model, lambda m, b: nn.functional.cross_entropy(m(b)[0], b.label), batches, lr=lr)
    return model


@torch.no_grad()
def evaluate_aspect(model: AspectModel, data: AspectData) -> dict[str, float]:
    """Accuracy overall and on sentences with an empty context.

    For rotatory models also the mean weight (last hop) on the target's own opinion word.

    Args:
        model: the trained model.
        data: the test sentences.

    Returns:
        ``{"accuracy", "accuracy_empty_context"}`` and, for rotatory models,
        ``"weight_on_opinion"``.
    """
    logits, out = model(data)
    empty = ~data.mask_l.any(-1) | ~data.mask_r.any(-1)
    res = {
        "accuracy": accuracy(logits, data.label),
        "accuracy_empty_context": accuracy(logits[empty], data.label[empty]),
    }
    if out is not None:
        idx = torch.arange(len(data))
        side, at = data.opinion[:, 0], data.opinion[:, 1]
        w = torch.where(side == 0, out.a_l[idx, at.clamp_max(out.a_l.shape[-1] - 1)], out.a_r[idx, at])
        res["weight_on_opinion"] = float(w.mean())
    return res


class VQAModel(nn.Module):
    """Task model for :class:`VQAData` with one of :data:`VQA_VARIANTS` as attention model.

    For ``mean-pooling`` the weights are uniform over cells and real tokens (no
    attention at all); for ``question-independent`` the image weights come from the
    query-less score of Eq. (7) and the question is mean-pooled; for
    ``multi-grained`` they are the average of its coarse and fine weights.

    Args:
        variant: one of :data:`VQA_VARIANTS`.
        d: the feature width.
        d_w: the width of the additive scores.

    Shape:
        - data: a :class:`VQAData` of ``n`` examples.
        - Output: ``(logits (n, len(ANSWERS)), image weights (n, cells),
          question weights (n, QUESTION_LEN))``.

    Raises:
        ValueError: for an unknown variant.
    """

    def __init__(self, variant: str, d: int = 16, d_w: int = 16) -> None:
        super().__init__()
        if variant not in VQA_VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose one of {VQA_VARIANTS}")
        self.variant = variant
        self.image_features = nn.Linear(D_CELL, d)
        self.question_features = nn.Embedding(len(VQA_VOCAB), d)
        out = 2 * d
        self.att: nn.Module
        if variant == "question-independent":
            self.score0 = ca.QuerylessAdditiveScore(d, d_w)
        elif variant == "alternating":
            self.att = ca.AlternatingCoAttention(d, d, d_w, plain=True)
        elif variant == "interactive":
            self.att = ca.InteractiveCoAttention(d, d, d_w, plain=True)
        elif variant == "parallel":
            self.att = ca.ParallelCoAttention(d, d, d_w, plain=True, scores="additive")
        elif variant == "max-affinity":
            # Eq. (13): an unbounded affinity, so the max-pooled scores can be sharp
            self.att = ca.ParallelCoAttention(d, d, d_w, plain=True, scores="max", affinity="concat")
        elif variant == "multi-grained":
            self.att = ca.MultiGrainedCoAttention(d, d, d_w, plain=True, affinity="concat")
            out = 4 * d
        self.output = OutputModel(out, len(ANSWERS))

    def forward(self, data: VQAData) -> tuple[Tensor, Tensor, Tensor]:
        F_img = self.image_features(data.image)
        F_q = self.question_features(data.question)
        mq = data.q_mask
        if self.variant in ("mean-pooling", "question-independent"):
            a_q = align_scores(torch.zeros(mq.shape), mq, "uniform")
            if self.variant == "mean-pooling":
                a_img = torch.full(F_img.shape[:-1], 1.0 / F_img.shape[-2])
            else:
                a_img = align_scores(self.score0(F_img))
            c = torch.cat([(a_q.unsqueeze(-2) @ F_q).squeeze(-2), (a_img.unsqueeze(-2) @ F_img).squeeze(-2)], -1)
            return self.output.logits(c), a_img, a_q
        out = self.att(F_q, F_img, mask1=mq)
        if self.variant == "multi-grained":
            c = out.c  # its two image weightings are averaged (a distribution again)
            a_q, a_img = (out.coarse.a1 + out.fine.a1) / 2, (out.coarse.a2 + out.fine.a2) / 2
        else:
            c = torch.cat([out.c1, out.c2], -1)
            a_q, a_img = out.a1, out.a2
        return self.output.logits(c), a_img, a_q


def train_vqa(
    variant: str, data: VQAData, steps: int = 300, batch_size: int = 64, lr: float = 1e-2, seed: int = 0
) -> VQAModel:
    """Train a :class:`VQAModel` with Adam and cross-entropy; deterministic given ``seed``.

    Args:
        variant: the attention variant (see :class:`VQAModel`).
        data: the training examples.
        steps: the number of training steps.
        batch_size: examples per batch.
        lr: the learning rate.
        seed: the seed of the weights and batches.

    Returns:
        The trained model.
    """
    torch.manual_seed(seed)
    model = VQAModel(variant)
    g = torch.Generator().manual_seed(seed)
    batches = (data.subset(torch.randint(len(data), (batch_size,), generator=g)) for _ in range(steps))
    loss = lambda m, b: nn.functional.cross_entropy(m(b)[0], b.answer)  # noqa: E731
    train(model, loss, batches, lr=lr)
    return model


@torch.no_grad()
def evaluate_vqa(model: VQAModel, data: VQAData) -> dict[str, float]:
    """Accuracy, mean image attention mass on the true region, and how often the most-attended cell is it.

    Args:
        model: the trained model.
        data: the test examples.

    Returns:
        ``{"accuracy", "mass_on_region", "argmax_on_region"}``.
    """
    logits, a_img, _ = model(data)
    idx = torch.arange(len(data))
    return {
        "accuracy": accuracy(logits, data.answer),
        "mass_on_region": float(a_img[idx, data.region].mean()),
        "argmax_on_region": float((a_img.argmax(-1) == data.region).float().mean()),
    }


def plot_vqa_example(
    data: VQAData, i: int, weights: Tensor | None = None, ax: Any = None, title: str | None = None
) -> Any:
    """Draw image ``i`` of ``data``: each object as a coloured marker on its cell.

    The true region gets a dashed frame.

    Args:
        data: the examples.
        i: the index of the example.
        weights: shades each cell by its attention weight (optional).
        ax: the matplotlib axes to draw in (None: a new figure).
        title: the axes' title.

    Shape:
        - weights: ``(grid*grid,)``.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    gsz = data.grid
    if ax is None:
        fig, ax = plt.subplots(figsize=(2.6, 2.6))
    else:
        fig = ax.figure
    if weights is not None:
        w = weights.detach().reshape(gsz, gsz).numpy()
        ax.imshow(w, cmap="Greys", vmin=0.0, vmax=1.0, extent=(-0.5, gsz - 0.5, gsz - 0.5, -0.5))
    img = data.image[i]
    for cell in range(gsz * gsz):
        feats = img[cell]
        if feats[-1] < 0.5:
            continue
        colour = COLOURS[int(feats[: len(COLOURS)].argmax())]
        shape = SHAPES[int(feats[len(COLOURS) : len(COLOURS) + len(SHAPES)].argmax())]
        r, c = divmod(cell, gsz)
        ax.scatter([c], [r], s=420, marker=_MARKERS[shape], color=colour, edgecolors="black", linewidths=0.8)
    r, c = divmod(int(data.region[i]), gsz)
    ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ls="--", lw=2, color="tab:orange"))
    ax.set_xlim(-0.5, gsz - 0.5)
    ax.set_ylim(gsz - 0.5, -0.5)
    ax.set_xticks(range(gsz))
    ax.set_yticks(range(gsz))
    ax.set_title(title if title is not None else " ".join(data.question_words(i)) + "?", fontsize=9)
    return fig

"""A synthetic visual question answering task for co-attention (§3.1.1).

An "image" is a ``grid x grid`` board of cells; some cells hold an object with
one colour and one shape, each object different in both. A cell is a feature
vector: a one-hot colour, a one-hot shape, an "object here" flag, plus
Gaussian noise. A question is a short token sequence of one of two kinds:

* ``what colour is the <shape>``  -> the answer is that object's colour;
* ``what shape is the <colour> thing`` -> the answer is that object's shape.

The answer depends on one region (the cell of the named object), which the
data records, so we can measure how much attention mass a model puts on it.
Neither the mean of the cells nor a question-independent attention can bind
the right colour to the right shape; a model must look where the question says.

:class:`VQAModel` is the task model of Fig. 1 for this data: an image feature
model (a linear layer), a question feature model (an embedding), one of the
co-attention modules of :mod:`attnsurvey.feature_related.co_attention` (set 1
= question words, set 2 = image cells), and an output model (Eq. 5).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..feature_related import co_attention as ca
from ..general_model import OutputModel
from ..masking import masked_softmax
from ..training import accuracy, train

COLOURS = ("red", "green", "blue", "yellow", "purple")
SHAPES = ("circle", "square", "triangle", "star", "cross")
VOCAB = ("<pad>", "what", "colour", "shape", "is", "the", "thing") + SHAPES + COLOURS
ANSWERS = COLOURS + SHAPES
QUESTION_LEN = 6
D_CELL = len(COLOURS) + len(SHAPES) + 1

VARIANTS = ("mean-pooling", "question-independent", "alternating", "interactive", "parallel", "max-affinity", "multi-grained")
"""Task-model variants: two baselines without co-attention, then five co-attention forms."""


@dataclass
class VQAData:
    """A batch of synthetic VQA examples.

    image ``(n, grid*grid, D_CELL)``; question ``(n, QUESTION_LEN)`` token ids;
    q_mask ``(n, QUESTION_LEN)`` (True = real token); answer ``(n,)`` index into
    :data:`ANSWERS`; region ``(n,)`` the cell the answer depends on; grid size.
    """

    image: Tensor
    question: Tensor
    q_mask: Tensor
    answer: Tensor
    region: Tensor
    grid: int

    def __len__(self) -> int:
        return self.image.shape[0]

    def subset(self, idx: Tensor | slice) -> "VQAData":
        return VQAData(self.image[idx], self.question[idx], self.q_mask[idx], self.answer[idx], self.region[idx], self.grid)

    def question_words(self, i: int) -> list[str]:
        """The tokens of question ``i`` (padding dropped)."""
        return [VOCAB[t] for t, m in zip(self.question[i].tolist(), self.q_mask[i].tolist()) if m]

    def describe(self, i: int) -> str:
        """A one-line description: the question and its answer."""
        return " ".join(self.question_words(i)) + " ? -> " + ANSWERS[int(self.answer[i])]


def make_vqa(
    n: int, grid: int = 3, n_objects: int = 4, noise: float = 0.1, generator: torch.Generator | None = None
) -> VQAData:
    """Sample ``n`` synthetic VQA examples (see the module docstring).

    Raises ``ValueError`` if ``n_objects`` exceeds the number of cells, the
    number of colours or the number of shapes.
    """
    cells = grid * grid
    if not 1 <= n_objects <= min(cells, len(COLOURS), len(SHAPES)):
        raise ValueError(f"n_objects must lie in [1, {min(cells, len(COLOURS), len(SHAPES))}], got {n_objects}")
    g = generator
    rows = torch.arange(n).unsqueeze(-1)
    pos = torch.rand(n, cells, generator=g).argsort(-1)[:, :n_objects]  # distinct cells
    col = torch.rand(n, len(COLOURS), generator=g).argsort(-1)[:, :n_objects]  # distinct colours
    shp = torch.rand(n, len(SHAPES), generator=g).argsort(-1)[:, :n_objects]  # distinct shapes
    image = torch.zeros(n, cells, D_CELL)
    image[rows, pos, col] = 1.0
    image[rows, pos, len(COLOURS) + shp] = 1.0
    image[rows, pos, D_CELL - 1] = 1.0
    k = torch.randint(n_objects, (n, 1), generator=g)  # the object the question names
    kind = torch.randint(2, (n,), generator=g)  # 0: ask its colour, 1: ask its shape
    col_k, shp_k = col.gather(1, k).squeeze(1), shp.gather(1, k).squeeze(1)
    region = pos.gather(1, k).squeeze(1)
    answer = torch.where(kind == 0, col_k, len(COLOURS) + shp_k)
    tok = {w: i for i, w in enumerate(VOCAB)}
    question = torch.zeros(n, QUESTION_LEN, dtype=torch.long)
    question[:, :4] = torch.tensor([tok["what"], tok["colour"], tok["is"], tok["the"]])
    question[kind == 1, 1] = tok["shape"]
    shape_tok = torch.tensor([tok[w] for w in SHAPES])
    colour_tok = torch.tensor([tok[w] for w in COLOURS])
    question[:, 4] = torch.where(kind == 0, shape_tok[shp_k], colour_tok[col_k])
    question[kind == 1, 5] = tok["thing"]
    q_mask = torch.ones(n, QUESTION_LEN, dtype=torch.bool)
    q_mask[kind == 0, 5] = False
    image = image + noise * torch.randn(image.shape, generator=g)
    return VQAData(image, question, q_mask, answer, region, grid)


class VQAModel(nn.Module):
    """Task model for :class:`VQAData` with one of :data:`VARIANTS` as attention model.

    ``forward(data)`` returns ``(logits (n, len(ANSWERS)), image weights (n, cells),
    question weights (n, QUESTION_LEN))``. For ``mean-pooling`` the weights are
    uniform over cells and real tokens (no attention at all); for
    ``question-independent`` the image weights come from the query-less score of
    Eq. (7) and the question is mean-pooled; for ``multi-grained`` they are the
    average of its coarse and fine weights.
    """

    def __init__(self, variant: str, d: int = 16, d_w: int = 16) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
        self.variant = variant
        self.image_features = nn.Linear(D_CELL, d)
        self.question_features = nn.Embedding(len(VOCAB), d)
        out = 2 * d
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
            a_q = masked_softmax(torch.zeros(mq.shape), mq)
            if self.variant == "mean-pooling":
                a_img = torch.full(F_img.shape[:-1], 1.0 / F_img.shape[-2])
            else:
                a_img = torch.softmax(self.score0(F_img), -1)
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
    """Train a :class:`VQAModel` with Adam and cross-entropy; deterministic given ``seed``."""
    torch.manual_seed(seed)
    model = VQAModel(variant)
    g = torch.Generator().manual_seed(seed)
    batches = (data.subset(torch.randint(len(data), (batch_size,), generator=g)) for _ in range(steps))
    loss = lambda m, b: nn.functional.cross_entropy(m(b)[0], b.answer)  # noqa: E731
    train(model, loss, batches, lr=lr)
    return model


@torch.no_grad()
def evaluate_vqa(model: VQAModel, data: VQAData) -> dict[str, float]:
    """Accuracy, mean image attention mass on the true region, and how often the
    most-attended cell is the true region."""
    logits, a_img, _ = model(data)
    idx = torch.arange(len(data))
    return {
        "accuracy": accuracy(logits, data.answer),
        "mass_on_region": float(a_img[idx, data.region].mean()),
        "argmax_on_region": float((a_img.argmax(-1) == data.region).float().mean()),
    }


_MARKERS = {"circle": "o", "square": "s", "triangle": "^", "star": "*", "cross": "X"}


def plot_vqa_example(data: VQAData, i: int, weights: Tensor | None = None, ax=None, title: str | None = None):
    """Draw image ``i`` of ``data``: each object as a coloured marker on its cell.

    ``weights`` ``(grid*grid,)`` (optional) shades each cell by its attention
    weight; the true region gets a dashed frame. Returns the matplotlib figure.
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

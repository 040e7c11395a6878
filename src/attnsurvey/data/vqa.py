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

The task model of Fig. 1 for this data is
:class:`attnsurvey.experiments.feature_related.VQAModel`: an image feature
model (a linear layer), a question feature model (an embedding), one of the
co-attention modules of :mod:`attnsurvey.feature_related.co_attention` (set 1
= question words, set 2 = image cells), and an output model (Eq. 5).

Shapes: n examples, grid*grid cells of D_CELL features, QUESTION_LEN question tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .._checks import check_integers
from ._rows import Rows

COLOURS = ("red", "green", "blue", "yellow", "purple")
SHAPES = ("circle", "square", "triangle", "star", "cross")
VOCAB = ("<pad>", "what", "colour", "shape", "is", "the", "thing") + SHAPES + COLOURS
ANSWERS = COLOURS + SHAPES
QUESTION_LEN = 6
D_CELL = len(COLOURS) + len(SHAPES) + 1

"""Task-model variants: two baselines without co-attention, then five co-attention forms."""


@dataclass
class VQAData(Rows):
    """A batch of synthetic VQA examples.

    Attributes:
        image: ``(n, grid*grid, D_CELL)`` cell features.
        question: ``(n, QUESTION_LEN)`` token ids.
        q_mask: ``(n, QUESTION_LEN)`` (True = real token).
        answer: ``(n,)`` index into :data:`ANSWERS`.
        region: ``(n,)`` the cell the answer depends on.
        grid: the grid size.
    """

    image: Tensor
    question: Tensor
    q_mask: Tensor
    answer: Tensor
    region: Tensor
    grid: int

    def question_words(self, i: int) -> list[str]:
        """The tokens of question ``i`` (padding dropped)."""
        i = self.check_example(i)
        return [VOCAB[t] for t, m in zip(self.question[i].tolist(), self.q_mask[i].tolist()) if m]

    def describe(self, i: int) -> str:
        """A one-line description: the question and its answer."""
        i = self.check_example(i)
        return " ".join(self.question_words(i)) + " ? -> " + ANSWERS[int(self.answer[i])]


def make_vqa(
    n: int, grid: int = 3, n_objects: int = 4, noise: float = 0.1, generator: torch.Generator | None = None
) -> VQAData:
    """Sample ``n`` synthetic VQA examples (see the module docstring).

    Args:
        n: the number of examples.
        grid: cells per side of the image.
        n_objects: objects per image.
        noise: the standard deviation of the noise added to the cells.
        generator: the random generator.

    Returns:
        The batch as :class:`VQAData`.

    Raises:
        ValueError: if ``n_objects`` is below 1 or exceeds the number of cells, the
            number of colours or the number of shapes.
    """
    check_integers("make_vqa", grid=grid, n_objects=n_objects)
    check_integers("make_vqa", minimum=0, n=n)
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

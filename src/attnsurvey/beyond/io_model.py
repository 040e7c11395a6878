"""The IO model of attention: elements moved between slow and fast memory, counted (FlashAttention's analysis).

Two levels of memory: a slow memory (a GPU's HBM) that holds every input and
output, and a fast memory (on-chip SRAM) of ``M`` elements where all arithmetic
happens. The cost counted is the number of elements read from and written to
slow memory; FLOPs are the same for both algorithms below.

* :func:`standard_io` counts standard attention as Dao et al. (2022) write it
  (their Algorithm 0): ``S = Q K^T`` is written to slow memory, read back for
  the softmax, ``P`` is written and read back for ``O = P V``:
  ``Theta(n d + n^2)`` accesses.
* :func:`flash_forward` runs their Algorithm 1 (FlashAttention's forward pass)
  with the pieces of :mod:`attnsurvey.beyond.tiled` (:func:`~attnsurvey.beyond.tiled.tile_stats`,
  :func:`~attnsurvey.beyond.tiled.online_softmax_merge`, :func:`~attnsurvey.beyond.tiled.finalize`)
  and counts every block it loads and stores; :func:`flash_io` walks the same
  loop without the arithmetic, for long sequences. Their Theorem 2:
  ``Theta(n^2 d^2 / M)`` accesses; :func:`flash_leading_term` is the leading
  term ``12 n^2 d^2 / M`` of this exact count.

The two counts are made independently. :func:`flash_io` adds up the blocks the
schedule (:func:`algorithm1_schedule`) says Algorithm 1 loads and stores.
:func:`flash_forward` keeps its inputs and outputs in a :class:`SlowMemory`, the
only way its loop reaches them: every block it reads or writes is logged and
counted there, so its count is what the kernel actually moved. The two agree
only if the kernel moves exactly the blocks the analysis assumes; a kernel that
loads a block more often (``reload_kv=True``) or stores one less is caught.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal, NamedTuple, TypedDict

from torch import Tensor

from .._checks import check_integers
from ..catalog import catalogued
from .tiled import check_qkv, finalize, online_softmax_merge, tile_stats

CHAPTER = "chapters/ch06_tiled_attention.ipynb"


class IOCount(TypedDict):
    """Elements moved between slow and fast memory: ``reads``, ``writes``, ``total`` and the ``fast`` peak.

    ``fast`` is the largest number of elements the algorithm keeps in fast memory at
    once (its blocks of inputs, statistics and scores).
    """

    reads: int
    writes: int
    total: int
    fast: int


class Step(NamedTuple):
    """One step of Algorithm 1: key/value block ``ks:ke`` (outer loop ``j``), query block ``qs:qe`` (inner loop ``i``).

    ``first_i`` is True on the first query block of a key/value block: that is when
    ``K_j`` and ``V_j`` are loaded.
    """

    j: int
    ks: int
    ke: int
    i: int
    qs: int
    qe: int
    first_i: bool


def paper_blocks(M: int, d: int) -> tuple[int, int]:
    """Block sizes ``(B_r, B_c)`` of Algorithm 1 for fast memory ``M`` and head size ``d``.

    ``B_c = ceil(M / (4 d))`` keys and ``B_r = min(B_c, d)`` queries per block, so
    that ``K_j, V_j`` (``2 B_c d``), ``Q_i, O_i`` (``2 B_r d``) and the scores
    ``S_ij`` (``B_r B_c <= M / 4``, up to rounding) fit in ``O(M)`` elements.

    Args:
        M: fast-memory size in elements.
        d: head size (``d_k``; the paper has ``d_k = d_v = d``).

    Returns:
        ``(B_r, B_c)``.

    Raises:
        ValueError: if ``d < 1`` or ``M < d`` (Proposition 3's range starts at ``M = d``).
        TypeError: if ``M`` or ``d`` is not an int.
    """
    check_integers("paper_blocks", minimum=1, d=d)
    check_integers("paper_blocks", minimum=d, M=M)
    B_c = math.ceil(M / (4 * d))
    return min(B_c, d), B_c


def algorithm1_schedule(n_q: int, n_f: int, B_r: int, B_c: int) -> Iterator[Step]:
    """The steps of Algorithm 1 in order: key/value blocks outside, query blocks inside.

    Args:
        n_q: number of queries.
        n_f: number of keys (and values).
        B_r: queries per block.
        B_c: keys per block.

    Shape:
        Blocks cover ``0:n_q`` and ``0:n_f``; the last block of each may be shorter.

    Returns:
        An iterator of :class:`Step` (``ceil(n_f / B_c) * ceil(n_q / B_r)`` steps).

    Raises:
        ValueError: for a negative length or a block size below 1.
    """
    check_integers("algorithm1_schedule", minimum=0, n_q=n_q, n_f=n_f)
    check_integers("algorithm1_schedule", minimum=1, B_r=B_r, B_c=B_c)
    return _steps(n_q, n_f, B_r, B_c)


def _steps(n_q: int, n_f: int, B_r: int, B_c: int) -> Iterator[Step]:
    for j, ks in enumerate(range(0, n_f, B_c)):
        ke = min(ks + B_c, n_f)
        for i, qs in enumerate(range(0, n_q, B_r)):
            yield Step(j, ks, ke, i, qs, min(qs + B_r, n_q), i == 0)


class _Tally:
    """Running counts of Algorithm 1's slow-memory traffic and its fast-memory peak."""

    def __init__(self, n_q: int, d_k: int, d_v: int) -> None:
        self.d_k, self.d_v = d_k, d_v
        self.reads = 0
        self.writes = n_q * (d_v + 2)  # line 2: O = 0, l = 0, m = -inf are written to slow memory
        self.kv = 0
        self.fast = 0

    def step(self, s: Step) -> None:
        b_c, b_r = s.ke - s.ks, s.qe - s.qs
        if s.first_i:  # line 6: load K_j, V_j
            self.kv = b_c * (self.d_k + self.d_v)
            self.reads += self.kv
        self.reads += b_r * (self.d_k + self.d_v + 2)  # line 8: load Q_i, O_i, l_i, m_i
        self.writes += b_r * (self.d_v + 2)  # lines 12-13: store O_i, l_i, m_i
        # in fast memory: K_j, V_j, Q_i, O_i, l_i, m_i, the scores S_ij (P_ij overwrites them)
        self.fast = max(self.fast, self.kv + b_r * (self.d_k + self.d_v + 2) + b_r * b_c)

    def count(self) -> IOCount:
        return {"reads": self.reads, "writes": self.writes, "total": self.reads + self.writes, "fast": self.fast}


class Access(NamedTuple):
    """One block moved between slow and fast memory: ``op`` (read or write), tensor ``name``, rows ``start:stop``.

    ``elements`` is the number of elements moved per batch element (one head).
    """

    op: Literal["read", "write"]
    name: str
    start: int
    stop: int
    elements: int


class SlowMemory:
    """Tensors that stand for slow memory; blocks of rows are read and written only through :meth:`read` and :meth:`write`.

    Every access is appended to :attr:`log` and its elements (per batch element,
    i.e. per head) are added to :attr:`reads` or :attr:`writes`. Rows are the
    next-to-last axis of ``(..., n, d)`` tensors and the last axis of ``(..., n)``
    tensors (the statistics ``l`` and ``m``).

    Args:
        batch_ndim: the number of leading batch axes of every tensor.
        **tensors: the tensors held, by name.
    """

    def __init__(self, batch_ndim: int, **tensors: Tensor) -> None:
        self.tensors = tensors
        self.batch_ndim = batch_ndim
        self.log: list[Access] = []
        self.reads = 0
        self.writes = 0

    def _rows(self, name: str, start: int, stop: int) -> tuple[Tensor, tuple[slice, ...]]:
        t = self.tensors[name]
        rows_axis = t.dim() - 1 if t.dim() == self.batch_ndim + 1 else t.dim() - 2
        index = (slice(None),) * rows_axis + (slice(start, stop),)
        return t, index

    def elements(self, block: Tensor) -> int:
        """Elements of ``block`` per batch element."""
        return math.prod(block.shape[self.batch_ndim :])

    def read(self, name: str, start: int, stop: int) -> Tensor:
        """A copy of rows ``start:stop`` of tensor ``name`` (a load into fast memory), counted."""
        t, index = self._rows(name, start, stop)
        block = t[index].clone()
        self.log.append(Access("read", name, start, stop, self.elements(block)))
        self.reads += self.log[-1].elements
        return block

    def write(self, name: str, start: int, stop: int, block: Tensor) -> None:
        """Store ``block`` as rows ``start:stop`` of tensor ``name``, counted."""
        t, index = self._rows(name, start, stop)
        t[index] = block
        self.log.append(Access("write", name, start, stop, self.elements(block)))
        self.writes += self.log[-1].elements


@catalogued(
    "extra:io-model",
    title="IO model: slow-memory accesses of standard attention and of FlashAttention (Dao et al. 2022, Theorem 2)",
)
def flash_io(n: int, d: int, M: int, n_f: int | None = None, d_v: int | None = None) -> IOCount:
    """Exact slow-memory traffic of Algorithm 1 (FlashAttention forward) with the paper's block sizes, no arithmetic.

    Walks :func:`algorithm1_schedule` as :func:`flash_forward` does and adds up the
    elements of each block loaded and stored: ``K_j, V_j`` once per outer step,
    ``Q_i, O_i, l_i, m_i`` read and ``O_i, l_i, m_i`` written on every inner step,
    plus the initial write of ``O, l, m`` (with ``n_q = 0`` no block is loaded).

    Args:
        n: number of queries ``n_q`` (and of keys unless ``n_f`` is given).
        d: head size ``d_k`` (and ``d_v`` unless given).
        M: fast-memory size in elements (:func:`paper_blocks` sets the blocks).
        n_f: number of keys; default ``n``.
        d_v: value size; default ``d``.

    Returns:
        :class:`IOCount` with exact integers.

    Raises:
        ValueError: for negative sizes, ``d < 1`` or ``M < d``.
        TypeError: for sizes that are not ints.
    """
    n_f = n if n_f is None else n_f
    d_v = d if d_v is None else d_v
    check_integers("flash_io", minimum=0, n_q=n, d_v=d_v)
    B_r, B_c = paper_blocks(M, d)
    tally = _Tally(n, d, d_v)
    for s in algorithm1_schedule(n, n_f, B_r, B_c):
        tally.step(s)
    return tally.count()


@catalogued("extra:io-model")
def flash_forward(
    Q: Tensor, K: Tensor, V: Tensor, M: int, reload_kv: bool = False, memory: list[Access] | None = None
) -> tuple[Tensor, IOCount]:
    """Run Algorithm 1 (FlashAttention forward, Dao et al. 2022) and count the slow-memory traffic it causes.

    ``Q``, ``K``, ``V`` and the outputs ``O``, ``l``, ``m`` live in a
    :class:`SlowMemory`; each step loads the blocks it needs from there
    (``K_j``, ``V_j`` on the first query block of a key/value block; ``Q_i``
    and the stored ``O_i, l_i, m_i`` on every step), updates them with one
    tile's statistics (:func:`~attnsurvey.beyond.tiled.tile_stats`) and the
    online-softmax merge, and stores ``O_i`` normalised, as the paper does.
    The reads and writes counted are those the loop performed, not those the
    schedule predicts. Scores are scaled by ``1 / sqrt(d_k)``; no mask.

    Args:
        Q: queries.
        K: keys.
        V: values.
        M: fast-memory size in elements (:func:`paper_blocks` sets the blocks from it and ``d_k``).
        reload_kv: load ``K_j, V_j`` again on every query block, as a kernel that
            does not keep them in fast memory would (same result, more traffic).
        memory: if given, every :class:`Access` is appended to it, in order.

    Shape:
        Q ``(..., n_q, d_k)``, K ``(..., n_f, d_k)``, V ``(..., n_f, d_v)`` with equal batch
        dimensions; counts are per batch element (one head).

    Returns:
        ``(O, counts)``: the context ``(..., n_q, d_v)`` and :class:`IOCount`; with
        ``reload_kv=False`` equal to ``flash_io(n_q, d_k, M, n_f, d_v)``.

    Raises:
        ValueError: for inputs :func:`~attnsurvey.beyond.tiled.check_qkv` refuses, unequal batch
            dimensions, ``d_k < 1`` or ``M < d_k``.
    """
    check_qkv(Q, K, V, "flash_forward")
    if not (Q.shape[:-2] == K.shape[:-2] == V.shape[:-2]):
        raise ValueError(
            f"flash_forward needs equal batch dimensions, got Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)}"
        )
    n_q, d_k, n_f, d_v = Q.shape[-2], Q.shape[-1], K.shape[-2], V.shape[-1]
    B_r, B_c = paper_blocks(M, d_k)
    scale = 1.0 / math.sqrt(d_k)
    batch = Q.shape[:-2]
    slow = SlowMemory(
        len(batch),
        Q=Q,
        K=K,
        V=V,
        O=Q.new_empty((*batch, n_q, d_v)),
        l=Q.new_empty((*batch, n_q)),
        m=Q.new_empty((*batch, n_q)),
    )
    # line 2: O = 0, l = 0, m = -inf written to slow memory
    slow.write("O", 0, n_q, Q.new_zeros((*batch, n_q, d_v)))
    slow.write("l", 0, n_q, Q.new_zeros((*batch, n_q)))
    slow.write("m", 0, n_q, Q.new_full((*batch, n_q), -math.inf))
    fast = 0
    Kj = Vj = Q  # bound on the first step of every outer iteration
    for s in algorithm1_schedule(n_q, n_f, B_r, B_c):
        if s.first_i or reload_kv:  # line 6: load K_j, V_j
            Kj, Vj = slow.read("K", s.ks, s.ke), slow.read("V", s.ks, s.ke)
        Qi, Oi, li, mi = (slow.read(name, s.qs, s.qe) for name in ("Q", "O", "l", "m"))  # line 8
        held = sum(slow.elements(x) for x in (Kj, Vj, Qi, Oi, li, mi)) + (s.qe - s.qs) * (s.ke - s.ks)  # + S_ij
        fast = max(fast, held)
        # back from the stored normalised O_i to the running weighted sum, merge the tile, normalise again
        m_new, l_new, acc = online_softmax_merge(mi, li, Oi * li.unsqueeze(-1), *tile_stats(Qi * scale, Kj, Vj))
        slow.write("O", s.qs, s.qe, finalize(m_new, l_new, acc)[0])  # lines 12-13
        slow.write("l", s.qs, s.qe, l_new)
        slow.write("m", s.qs, s.qe, m_new)
    if memory is not None:
        memory.extend(slow.log)
    counts: IOCount = {"reads": slow.reads, "writes": slow.writes, "total": slow.reads + slow.writes, "fast": fast}
    return slow.tensors["O"], counts


@catalogued("extra:io-model")
def standard_io(n: int, d: int, n_f: int | None = None, d_v: int | None = None) -> IOCount:
    """Exact slow-memory traffic of standard attention (Algorithm 0 of Dao et al. 2022).

    1. read ``Q, K``, write ``S = Q K^T``; 2. read ``S``, write ``P = softmax(S)``;
    3. read ``P, V``, write ``O = P V``. Reads ``n_q d_k + n_f d_k + 2 n_q n_f + n_f d_v``,
    writes ``2 n_q n_f + n_q d_v``. Fast memory holds one row of ``S`` (``n_f``) at a
    time for the softmax; the matrix products are counted as reading each operand once.

    Args:
        n: number of queries ``n_q`` (and of keys unless ``n_f`` is given).
        d: head size ``d_k`` (and ``d_v`` unless given).
        n_f: number of keys; default ``n``.
        d_v: value size; default ``d``.

    Returns:
        :class:`IOCount` with exact integers (``fast`` = ``n_f``).

    Raises:
        ValueError: for a negative ``n_q``/``n_f``, or ``d_k``/``d_v`` below 1.
        TypeError: for sizes that are not ints.
    """
    n_q, d_k = n, d
    n_f = n_q if n_f is None else n_f
    d_v = d_k if d_v is None else d_v
    check_integers("standard_io", minimum=0, n_q=n_q, n_f=n_f)
    check_integers("standard_io", minimum=1, d_k=d_k, d_v=d_v)
    reads = n_q * d_k + n_f * d_k + 2 * n_q * n_f + n_f * d_v
    writes = 2 * n_q * n_f + n_q * d_v
    return {"reads": reads, "writes": writes, "total": reads + writes, "fast": n_f}


@catalogued("extra:io-model")
def flash_leading_term(n: int, d: int, M: int) -> float:
    """Leading term ``12 n^2 d^2 / M`` of Algorithm 1's slow-memory accesses (Theorem 2: ``Theta(n^2 d^2 / M)``).

    ``T_c = n / B_c ~ 4 n d / M`` passes over the queries, each reading ``Q, O``
    (``2 n d``) and writing ``O`` (``n d``). The exact count (:func:`flash_io`) adds
    ``l, m`` (``4 n`` per pass), reading ``K, V`` once and initialising ``O, l, m``
    (about ``4 n d``), and the rounding of ``B_c`` and ``T_c`` up to whole numbers.

    Args:
        n: sequence length (``n_q = n_f``).
        d: head size (``d_k = d_v``).
        M: fast-memory size in elements.

    Returns:
        ``12 n^2 d^2 / M`` as a float.

    Raises:
        ValueError: for ``n < 0``, ``d < 1`` or ``M < d``.
        TypeError: for sizes that are not ints.
    """
    check_integers("flash_leading_term", minimum=0, n=n)
    paper_blocks(M, d)
    return 12 * n * n * d * d / M


def io_table(ns: list[int], Ms: list[int], d: int = 64) -> dict[tuple[int, int], float]:
    """Ratio of :func:`flash_io`'s exact total to :func:`flash_leading_term` for every ``(n, M)``.

    Args:
        ns: sequence lengths.
        Ms: fast-memory sizes in elements.
        d: head size.

    Returns:
        ``{(n, M): measured / leading term}``.

    Raises:
        ValueError: as :func:`flash_io`.
    """
    return {(n, M): flash_io(n, d, M)["total"] / flash_leading_term(n, d, M) for n in ns for M in Ms}


def fast_memory_elements(M: int, d: int) -> int:
    """Peak fast-memory elements of Algorithm 1 with :func:`paper_blocks` (at least two blocks of keys and queries).

    ``2 B_c d + B_r (2 d + 2) + B_r B_c``: ``K_j, V_j``, ``Q_i, O_i, l_i, m_i`` and the scores.

    Args:
        M: fast-memory size in elements.
        d: head size.

    Returns:
        The element count, for sequences at least one block long.

    Raises:
        ValueError: for ``d < 1`` or ``M < d``.
        TypeError: for sizes that are not ints.
    """
    B_r, B_c = paper_blocks(M, d)
    return 2 * B_c * d + B_r * (2 * d + 2) + B_r * B_c


__all__ = [
    "Access",
    "IOCount",
    "SlowMemory",
    "Step",
    "algorithm1_schedule",
    "fast_memory_elements",
    "flash_forward",
    "flash_io",
    "flash_leading_term",
    "io_table",
    "paper_blocks",
    "standard_io",
]

"""Attention that selects: each query reads a few blocks or tokens, chosen by a cheap score (beyond the survey).

Three recent answers to long contexts keep the softmax and the values of dense attention
but let each query read only part of the keys. The choice is a boolean mask
(``True`` = may attend) handed to the package's core (:func:`attnsurvey.attention.attend`);
nothing here computes a softmax of its own.

* **MoBA** (Lu et al. 2025, mixture of block attention): the keys are cut into blocks of
  ``B`` positions; a parameter-free gate scores block ``b`` for query ``t`` by
  ``s_{t,b} = q_t . mean(k_j, j in b)``; blocks entirely in the future are excluded, the
  query's own block is always read (causally), and the ``top_k - 1`` best earlier blocks
  join it (:func:`moba_mask`, :func:`moba_attention`, :class:`MoBALayer`).
* **NSA** (Yuan et al. 2025, native sparse attention): three branches whose outputs are
  mixed by per-query sigmoid gates: attention over compressed blocks, token-level attention
  over the ``top_n`` blocks that the compressed branch weighted most (the own block always
  among them), and a sliding window (:func:`nsa_attention`, :class:`NSALayer`).
* **DSA** (DeepSeek-V3.2, DeepSeek sparse attention): a small *lightning indexer*
  ``I_{t,s} = sum_j w_{t,j} ReLU(q^I_{t,j} . k^I_s)`` with few heads scores every earlier
  token; each query reads its ``top_k`` tokens (:func:`lightning_index_scores`,
  :func:`dsa_mask`, :func:`dsa_attention`, :class:`DSALayer`); the indexer is trained to
  match the dense attention distribution (:func:`indexer_distillation_loss`).

Every selection is top-left causal like the core's ``is_causal`` (query ``i`` may read key
``j <= i``). Ties in a top-k go to the lower index (the earlier block or token): the
candidates are ordered by a stable sort, so the choice does not depend on the kernel. A
``top_k`` (``top_n``) of None, or one at least the number of candidates, selects all of
them, and the attention is then dense causal attention. Selection by top-k has no gradient:
the MoBA gate has no parameters, and the DSA indexer learns only through its distillation
loss. The cost functions (:func:`dense_causal_cost`, :func:`moba_cost`, :func:`nsa_cost`,
:func:`dsa_cost`) count FLOPs and bytes read per query, by arithmetic only.

Shape legend: ``...`` batch axes (heads included), ``n_q`` queries, ``n_f`` keys,
``n_b = ceil(n_f / B)`` blocks, ``d`` the key width, ``d_v`` the value width, ``H_I``
index heads of width ``d_I``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from .._checks import as_tensor, broadcast_batch, check_dim_equal, check_integers, check_min_rank, mean_or_zero
from ..attention import align_scores, attend
from ..catalog import catalogued
from ..masking import band_mask, causal_mask, check_attn_mask, check_key_padding_mask, zero_masked
from ..query_related.multihead import MultiHeadAttention, _merge_heads, _split_heads

CHAPTER = "chapters/ch06_8_selective_attention.ipynb"


# ---------------------------------------------------------------------------------------------------------------
# Shared pieces: checks, deterministic top-k, blocks
# ---------------------------------------------------------------------------------------------------------------
def _check_qkv(what: str, q: Tensor, k: Tensor, v: Tensor | None = None) -> None:
    """q ``(..., n_q, d)``, k ``(..., n_f, d)`` (and v ``(..., n_f, d_v)``): floating, one width, broadcastable."""
    pairs = [("q", q, "(..., n_q, d)"), ("k", k, "(..., n_f, d)")]
    if v is not None:
        pairs.append(("v", v, "(..., n_f, d_v)"))
    for sym, t, layout in pairs:
        as_tensor(t, sym)
        check_min_rank(t, 2, sym, layout)
    check_dim_equal(q.shape[-1], k.shape[-1], what, "d of q", "d of k")
    if v is not None:
        check_dim_equal(k.shape[-2], v.shape[-2], what, "n_f of k", "n_f of v")
    shapes = [t.shape[:-2] for _, t, _ in pairs]
    if broadcast_batch(*shapes) is None:
        raise ValueError(
            f"{what}: batch dimensions of {', '.join(f'{s} {tuple(t.shape)}' for s, t, _ in pairs)} do not broadcast"
        )


def _check_top_k(what: str, **values: int | None) -> None:
    """A top-k count: None (all) or an integer >= 1."""
    check_integers(what, minimum=1, allow_none=True, **values)


def top_k_mask(scores: Tensor, eligible: Tensor, k: int | None) -> Tensor:
    """The ``k`` largest eligible scores of each row, as a boolean mask; ties go to the lower index.

    Ineligible entries are never selected, whatever they hold (NaN included: they are replaced
    with ``torch.where`` before the sort). The candidates are ordered by two stable sorts
    (by score, then eligible first), so equal scores keep their index order and the result
    does not depend on the kernel. A row with fewer than ``k`` eligible entries selects all of them.

    Args:
        scores: the selection scores (gate, compressed weights or index scores).
        eligible: boolean, broadcastable to ``scores``, ``True`` = may be selected.
        k: how many to select per row; None: every eligible entry.

    Shape:
        scores: ``(..., n_q, m)``; eligible: broadcastable to it; returns ``scores``' shape (broadcast).

    Returns:
        Boolean, ``True`` at the selected entries.

    Raises:
        TypeError: if ``scores`` is not a floating-point tensor.
        ValueError: if ``eligible`` is not boolean or does not broadcast, or ``k`` is not None or an integer >= 1.
    """
    as_tensor(scores, "scores")
    check_min_rank(scores, 1, "scores", "(..., n_q, m)")
    _check_top_k("top_k_mask", k=k)
    if not isinstance(eligible, Tensor) or eligible.dtype != torch.bool:
        raise ValueError(f"eligible must be a boolean tensor (True = may be selected), got {type(eligible).__name__}")
    shape = broadcast_batch(scores.shape, eligible.shape)
    if shape is None:
        raise ValueError(f"eligible {tuple(eligible.shape)} does not broadcast to the scores {tuple(scores.shape)}")
    return _top_k(scores.expand(shape), eligible.expand(shape), k)


def _top_k(scores: Tensor, eligible: Tensor, k: int | None) -> Tensor:
    """:func:`top_k_mask` on checked inputs of one shape."""
    m = scores.shape[-1]
    if k is None or k >= m or m == 0:
        return eligible
    s = torch.where(eligible, scores, torch.full((), -math.inf, dtype=scores.dtype, device=scores.device))
    order = torch.sort(s.detach(), dim=-1, descending=True, stable=True).indices  # ties: index order
    eligible_first = torch.sort(eligible.gather(-1, order).to(torch.uint8), dim=-1, descending=True, stable=True)
    top = order.gather(-1, eligible_first.indices)[..., :k]
    chosen = torch.zeros_like(eligible).scatter(-1, top, True)
    return chosen & eligible


def _block_ids(n: int, block_size: int, device: torch.device) -> Tensor:
    """The block of each of ``n`` positions, ``j // B``."""
    return torch.arange(n, device=device) // block_size


def _block_means(k: Tensor, block_size: int, key_padding_mask: Tensor | None) -> Tensor:
    """The mean of each block's (unpadded) keys, ``(..., n_b, d)``; a block of padding only gives 0.

    Padded keys are selected away (``torch.where``), so NaN stored there is inert.
    """
    n_f, n_b = k.shape[-2], -(-k.shape[-2] // block_size)
    keep = torch.ones(n_f, dtype=torch.bool, device=k.device) if key_padding_mask is None else key_padding_mask
    keep = keep.expand(*k.shape[:-2], n_f) if keep.dim() < k.dim() - 1 else keep
    k0 = torch.where(keep[..., None], k, torch.zeros((), dtype=k.dtype, device=k.device))
    pad = n_b * block_size - n_f
    k0 = torch.cat([k0, k0.new_zeros(*k0.shape[:-2], pad, k0.shape[-1])], dim=-2) if pad else k0
    sums = k0.reshape(*k0.shape[:-2], n_b, block_size, k0.shape[-1]).sum(-2)
    counts = torch.cat([keep, keep.new_zeros(*keep.shape[:-1], pad)], -1) if pad else keep
    counts = counts.reshape(*counts.shape[:-1], n_b, block_size).sum(-1, keepdim=True).to(k.dtype)
    return sums / counts.clamp_min(1)


def _check_kpm(key_padding_mask: Tensor | None, q: Tensor, k: Tensor) -> Tensor | None:
    """A key-padding mask ``(..., n_f)`` against the scores ``(..., n_q, n_f)``, as ``(..., 1, n_f)``."""
    if key_padding_mask is None:
        return None
    batch = broadcast_batch(q.shape[:-2], k.shape[:-2]) or ()
    return check_key_padding_mask(key_padding_mask, torch.Size((*batch, q.shape[-2], k.shape[-2])))


def block_selection(block_scores: Tensor, block_size: int, n_f: int, top_k: int | None) -> Tensor:
    """Which blocks each query reads: its own block always, the ``top_k - 1`` best earlier blocks, no later block.

    The rule of MoBA and of NSA's selected branch. Query ``t`` (top-left causal, as the core's
    ``is_causal``) owns block ``t // B``; blocks before it are the candidates, ranked by
    ``block_scores`` (ties to the earlier block, :func:`top_k_mask`); blocks after it lie in
    the future and are never selected. ``top_k`` counts the own block; None or a ``top_k`` at
    least the number of blocks selects every block up to the own one. A query beyond the last
    key (``t >= n_f``) owns no block and reads every earlier candidate's top ``top_k - 1``.

    Args:
        block_scores: the score of each block for each query.
        block_size: ``B``, positions per block (the last block may be shorter).
        n_f: the number of keys.
        top_k: blocks read per query, own block included; None: all.

    Shape:
        block_scores: ``(..., n_q, n_b)`` with ``n_b = ceil(n_f / B)``; returns ``(..., n_q, n_b)``.

    Returns:
        Boolean, ``True`` = the query reads the block.

    Raises:
        TypeError: if ``block_scores`` is not a floating-point tensor.
        ValueError: for ``B < 1``, ``top_k < 1`` or a block axis that is not ``ceil(n_f / B)``.
    """
    as_tensor(block_scores, "block_scores")
    check_min_rank(block_scores, 2, "block_scores", "(..., n_q, n_b)")
    check_integers("block_selection", minimum=1, block_size=block_size)
    check_integers("block_selection", minimum=0, n_f=n_f)
    _check_top_k("block_selection", top_k=top_k)
    check_dim_equal(
        block_scores.shape[-1], -(-n_f // block_size), "block_selection", "n_b of block_scores", "ceil(n_f / B)"
    )
    return _block_selection(block_scores, block_size, top_k)


def _block_selection(block_scores: Tensor, block_size: int, top_k: int | None) -> Tensor:
    """:func:`block_selection` on checked inputs."""
    n_q, n_b = block_scores.shape[-2:]
    own = (torch.arange(n_q, device=block_scores.device) // block_size)[:, None]  # (n_q, 1)
    b = torch.arange(n_b, device=block_scores.device)[None, :]
    earlier = b < own
    chosen = _top_k(block_scores, earlier.expand(block_scores.shape), None if top_k is None else top_k - 1)
    return chosen | (b == own)  # the own block is always read


def _blocks_to_tokens(blocks: Tensor, block_size: int, n_f: int) -> Tensor:
    """A block mask ``(..., n_q, n_b)`` as a token mask ``(..., n_q, n_f)``, causal (``j <= i``)."""
    tokens = blocks.repeat_interleave(block_size, dim=-1)[..., :n_f]
    return tokens & causal_mask(blocks.shape[-2], n_f, device=blocks.device)


# ---------------------------------------------------------------------------------------------------------------
# MoBA
# ---------------------------------------------------------------------------------------------------------------
def moba_gate_scores(q: Tensor, k: Tensor, block_size: int, key_padding_mask: Tensor | None = None) -> Tensor:
    """MoBA's gate: ``s_{t,b} = q_t . mean(k_j, j in block b)``, the mean over the block's unpadded keys.

    Args:
        q: the queries.
        k: the keys.
        block_size: ``B``, keys per block (the last block may be shorter).
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend; padded keys (NaN
            included) are left out of the means; None: no padding.

    Shape:
        q: ``(..., n_q, d)``; k: ``(..., n_f, d)``; returns ``(..., n_q, n_b)``, ``n_b = ceil(n_f / B)``.

    Returns:
        The gate scores (a block of padding only scores 0).

    Raises:
        TypeError: if q or k is not a floating-point tensor.
        ValueError: for mismatched widths or batch axes, ``B < 1`` or a bad key-padding mask.
    """
    _check_qkv("moba_gate_scores", q, k)
    check_integers("moba_gate_scores", minimum=1, block_size=block_size)
    kpm = _check_kpm(key_padding_mask, q, k)
    return q @ _block_means(k, block_size, None if kpm is None else kpm.squeeze(-2)).transpose(-1, -2)


@catalogued(
    "extra:moba",
    title="MoBA: per-query top-k key blocks by the gate q . mean(K_block), own block always, future blocks never",
)
def moba_mask(
    q: Tensor, k: Tensor, block_size: int, top_k: int | None, key_padding_mask: Tensor | None = None
) -> Tensor:
    """MoBA's selection as a token mask: the keys of the ``top_k`` blocks each query reads, causal.

    The gate is :func:`moba_gate_scores`; the block rule is :func:`block_selection` (own
    block always, earlier blocks by the gate, ties to the earlier block, later blocks never);
    inside the selected blocks the query reads the keys ``j <= i``. ``top_k`` None, or at
    least the number of blocks, gives the causal mask.

    Args:
        q: the queries (one head, or heads as a batch axis).
        k: the keys.
        block_size: ``B``, keys per block.
        top_k: blocks per query, own block included; None: all.
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend; None: no padding.

    Shape:
        q: ``(..., n_q, d)``; k: ``(..., n_f, d)``; returns ``(..., n_q, n_f)``.

    Returns:
        Boolean, ``True`` = may attend (padded keys are False).

    Raises:
        TypeError: if q or k is not a floating-point tensor.
        ValueError: for mismatched widths or batch axes, ``B < 1``, ``top_k < 1`` or a bad key-padding mask.
    """
    _check_top_k("moba_mask", top_k=top_k)
    gate = moba_gate_scores(q, k, block_size, key_padding_mask)
    mask = _blocks_to_tokens(_block_selection(gate, block_size, top_k), block_size, k.shape[-2])
    kpm = _check_kpm(key_padding_mask, q, k)
    return mask if kpm is None else mask & kpm


@catalogued("extra:moba")
def moba_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    block_size: int,
    top_k: int | None,
    key_padding_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """MoBA attention: the core's causal attention restricted to :func:`moba_mask`.

    Args:
        q: the queries.
        k: the keys.
        v: the values.
        block_size: ``B``, keys per block.
        top_k: blocks per query, own block included; None: all (dense causal attention).
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend; None: no padding.

    Shape:
        q: ``(..., n_q, d)``; k: ``(..., n_f, d)``; v: ``(..., n_f, d_v)``; returns
        ``(..., n_q, d_v)`` and ``(..., n_q, n_f)``.

    Returns:
        ``(c, a)``: the contexts and the weights (0 outside the selection).

    Raises:
        TypeError: if q, k or v is not a floating-point tensor.
        ValueError: as :func:`moba_mask`, or for mismatched ``n_f`` of k and v.
    """
    _check_qkv("moba_attention", q, k, v)
    mask = moba_mask(q, k, block_size, top_k, key_padding_mask)
    return attend(q, k, v, mask, is_causal=True)


# ---------------------------------------------------------------------------------------------------------------
# NSA
# ---------------------------------------------------------------------------------------------------------------
class NSAOutput(NamedTuple):
    """What :func:`nsa_attention` returns: the gated sum and each branch's context and selection.

    Args:
        c: the gated context ``g_cmp c_cmp + g_slc c_slc + g_win c_win``, ``(..., n_q, d_v)``.
        branches: the three branch contexts (compressed, selected, window), each ``(..., n_q, d_v)``.
        p_cmp: the compressed branch's weights over the blocks, ``(..., n_q, n_b)``.
        selected: the selected branch's token mask, ``(..., n_q, n_f)``, ``True`` = read.
    """

    c: Tensor
    branches: tuple[Tensor, Tensor, Tensor]
    p_cmp: Tensor
    selected: Tensor


@catalogued(
    "extra:nsa",
    title="NSA: gated sum of compressed-block, selected-block (top-n by the compressed weights) "
    "and sliding-window attention",
)
def nsa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    gates: Tensor,
    *,
    block_size: int,
    top_n: int | None,
    window: int,
) -> NSAOutput:
    """Native sparse attention (Yuan et al. 2025), small: three causal branches mixed by per-query gates.

    * compressed: each block of ``B`` keys and values becomes one token, their mean (the paper
      uses a learned MLP with an intra-block position encoding, and overlapping blocks; here
      the mean, blocks of length and stride ``B``); query ``t`` attends, through the core, to
      the compressed blocks that lie entirely in its past, ``(b + 1) B - 1 <= t`` (a query in the
      first block has none: a zero context);
    * selected: the blocks are ranked by that branch's weights ``p_cmp`` and each query reads,
      token by token and causally, the ``top_n`` best blocks with its own block always among
      them (:func:`block_selection`; the paper ranks larger selection blocks, shares the
      choice across a GQA group and always reads the first block and the two most recent
      ones; here each head chooses with the compression blocks);
    * window: the last ``window`` keys, ``t - window < j <= t`` (a band mask).

    The three branches share ``k`` and ``v`` (the paper gives each branch keys and values of its own).

    The gated sum is ``g_cmp c_cmp + g_slc c_slc + g_win c_win`` with ``gates = (g_cmp, g_slc,
    g_win)`` already through a sigmoid (the paper's gates are an MLP of the input, sigmoid).

    Args:
        q: the queries.
        k: the keys.
        v: the values.
        gates: the branch gates in ``[0, 1]`` (compressed, selected, window) per query.
        block_size: ``B``, keys per block.
        top_n: blocks read by the selected branch, own block included; None: all.
        window: keys in the sliding window (>= 1).

    Shape:
        q: ``(..., n_q, d)``; k: ``(..., n_f, d)``; v: ``(..., n_f, d_v)``; gates ``(..., n_q, 3)``.

    Returns:
        :class:`NSAOutput` (the gated context ``(..., n_q, d_v)``, the branch contexts, ``p_cmp``
        and the selection).

    Raises:
        TypeError: if q, k, v or gates is not a floating-point tensor.
        ValueError: for mismatched shapes, gates without a last axis of 3, ``B < 1``, ``top_n < 1``
            or ``window < 1``.
    """
    _check_qkv("nsa_attention", q, k, v)
    as_tensor(gates, "gates")
    check_min_rank(gates, 2, "gates", "(..., n_q, 3)")
    if gates.shape[-1] != 3 or gates.shape[-2] != q.shape[-2]:
        raise ValueError(f"gates must have shape (..., n_q={q.shape[-2]}, 3), got {tuple(gates.shape)}")
    check_integers("nsa_attention", minimum=1, block_size=block_size, window=window)
    _check_top_k("nsa_attention", top_n=top_n)
    n_q, n_f = q.shape[-2], k.shape[-2]
    k_cmp, v_cmp = _block_means(k, block_size, None), _block_means(v, block_size, None)
    n_b = k_cmp.shape[-2]
    last_key = (torch.arange(n_b, device=q.device) + 1) * block_size - 1
    complete = last_key[None, :] <= torch.arange(n_q, device=q.device)[:, None]  # (n_q, n_b): block in the past
    c_cmp, p_cmp = attend(q, k_cmp, v_cmp, complete)
    selected = _blocks_to_tokens(_block_selection(p_cmp, block_size, top_n), block_size, n_f)
    c_slc, _ = attend(q, k, v, selected, need_weights=False)
    recent = band_mask(n_q, window - 1, n_f, device=q.device) & causal_mask(n_q, n_f, device=q.device)
    c_win, _ = attend(q, k, v, recent, need_weights=False)
    g = gates.to(c_slc.dtype)
    c = g[..., 0:1] * c_cmp + g[..., 1:2] * c_slc + g[..., 2:3] * c_win
    return NSAOutput(c, (c_cmp, c_slc, c_win), p_cmp, selected)


# ---------------------------------------------------------------------------------------------------------------
# DSA
# ---------------------------------------------------------------------------------------------------------------
@catalogued(
    "extra:dsa-indexer",
    title="DeepSeek sparse attention: lightning indexer I_ts = sum_j w_tj ReLU(q_tj . k_s), top-k tokens per query",
)
def lightning_index_scores(
    q_index: Tensor, k_index: Tensor, w_index: Tensor, key_padding_mask: Tensor | None = None
) -> Tensor:
    """The lightning indexer of DeepSeek-V3.2: ``I_{t,s} = sum_j w_{t,j} ReLU(q^I_{t,j} . k^I_s)``.

    Args:
        q_index: the index queries, ``H_I`` heads per query.
        k_index: the index keys, one per token, shared by the index heads.
        w_index: the per-query weight of each index head.
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend; padded index keys are set
            to 0 before the product (NaN there is inert); None: no padding.

    Shape:
        q_index: ``(..., n_q, H_I, d_I)``; k_index: ``(..., n_f, d_I)``; w_index: ``(..., n_q, H_I)``;
        returns ``(..., n_q, n_f)``.

    Returns:
        The index scores.

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: for mismatched widths, head counts or batch axes.
    """
    for sym, t, rank, layout in (
        ("q_index", q_index, 3, "(..., n_q, H_I, d_I)"),
        ("k_index", k_index, 2, "(..., n_f, d_I)"),
        ("w_index", w_index, 2, "(..., n_q, H_I)"),
    ):
        as_tensor(t, sym)
        check_min_rank(t, rank, sym, layout)
    check_dim_equal(q_index.shape[-1], k_index.shape[-1], "lightning_index_scores", "d_I of q_index", "d_I of k_index")
    if w_index.shape[-2:] != q_index.shape[-3:-1]:
        raise ValueError(
            f"w_index must have shape (..., n_q, H_I) = (..., {q_index.shape[-3]}, {q_index.shape[-2]}) "
            f"to match q_index {tuple(q_index.shape)}, got {tuple(w_index.shape)}"
        )
    if broadcast_batch(q_index.shape[:-3], k_index.shape[:-2], w_index.shape[:-2]) is None:
        raise ValueError(
            f"batch dimensions of q_index {tuple(q_index.shape)}, k_index {tuple(k_index.shape)} "
            f"and w_index {tuple(w_index.shape)} do not broadcast"
        )
    if key_padding_mask is not None:
        check_key_padding_mask(key_padding_mask, torch.Size((*k_index.shape[:-2], 1, k_index.shape[-2])))
        k_index = zero_masked(k_index, key_padding_mask)
    per_head = torch.relu(q_index.transpose(-2, -3) @ k_index.unsqueeze(-3).transpose(-1, -2))  # (..., H_I, n_q, n_f)
    return (w_index.transpose(-1, -2).unsqueeze(-1) * per_head).sum(-3)


@catalogued("extra:dsa-indexer")
def dsa_mask(index_scores: Tensor, top_k: int | None, key_padding_mask: Tensor | None = None) -> Tensor:
    """DSA's selection: each query reads its ``top_k`` causal tokens by index score (ties to the earlier token).

    Args:
        index_scores: :func:`lightning_index_scores`.
        top_k: tokens per query; None, or at least the number of visible tokens: all of them.
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend; padded tokens are never read.

    Shape:
        index_scores: ``(..., n_q, n_f)``; returns ``(..., n_q, n_f)``.

    Returns:
        Boolean, ``True`` = may attend.

    Raises:
        TypeError: if ``index_scores`` is not a floating-point tensor.
        ValueError: for ``top_k < 1`` or a bad key-padding mask.
    """
    as_tensor(index_scores, "index_scores")
    check_min_rank(index_scores, 2, "index_scores", "(..., n_q, n_f)")
    _check_top_k("dsa_mask", top_k=top_k)
    n_q, n_f = index_scores.shape[-2:]
    eligible = causal_mask(n_q, n_f, device=index_scores.device)
    if key_padding_mask is not None:
        eligible = eligible & check_key_padding_mask(key_padding_mask, index_scores.shape)
    eligible = eligible.expand(broadcast_batch(eligible.shape, index_scores.shape) or index_scores.shape)
    return _top_k(index_scores.expand(eligible.shape), eligible, top_k)


@catalogued("extra:dsa-indexer")
def dsa_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    index_scores: Tensor,
    top_k: int | None,
    key_padding_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """DeepSeek sparse attention: the core's causal attention over each query's :func:`dsa_mask` tokens.

    The selection is shared by the heads (a head axis in q, k, v broadcasts against the index
    scores' batch axes).

    Args:
        q: the queries.
        k: the keys.
        v: the values.
        index_scores: :func:`lightning_index_scores`.
        top_k: tokens per query; None: all (dense causal attention).
        key_padding_mask: boolean ``(..., n_f)``, ``True`` = may attend.

    Shape:
        q: ``(..., n_q, d)``; k: ``(..., n_f, d)``; v: ``(..., n_f, d_v)``; index_scores broadcastable
        to ``(..., n_q, n_f)``; returns ``(..., n_q, d_v)`` and ``(..., n_q, n_f)``.

    Returns:
        ``(c, a)``: the contexts and the weights (0 outside the selection).

    Raises:
        TypeError: if an input is not a floating-point tensor.
        ValueError: for mismatched shapes, ``top_k < 1`` or a bad key-padding mask.
    """
    _check_qkv("dsa_attention", q, k, v)
    as_tensor(index_scores, "index_scores")
    if index_scores.shape[-2:] != (q.shape[-2], k.shape[-2]):
        raise ValueError(
            f"index_scores must have shape (..., n_q={q.shape[-2]}, n_f={k.shape[-2]}), got {tuple(index_scores.shape)}"
        )
    mask = dsa_mask(index_scores, top_k, key_padding_mask)
    return attend(q, k, v, mask, is_causal=True)


@catalogued("extra:dsa-indexer")
def indexer_distillation_loss(index_scores: Tensor, weights: Tensor, mask: Tensor | None = None) -> Tensor:
    """DeepSeek-V3.2's indexer loss: ``sum_t KL(p_t || softmax(I_t))``, ``p_t`` the dense weights summed over heads.

    The target ``p_{t,:}`` is the main attention's weights summed over the heads and
    L1-normalised (detached: the loss trains the indexer only). In the dense warm-up ``mask``
    is the causal mask; in the sparse stage it is the selection, over which both
    distributions are renormalised. The log-softmax is the core's (:func:`attnsurvey.attention.align_scores`).

    Args:
        index_scores: the indexer's scores ``I``.
        weights: the main attention's weights per head.
        mask: boolean, ``True`` = may attend; None: all keys.

    Shape:
        index_scores: ``(..., n_q, n_f)``; weights: ``(..., h, n_q, n_f)``; mask broadcastable to
        ``(..., n_q, n_f)``; returns a scalar.

    Returns:
        The summed KL divergence over the queries (mean over the batch axes; 0 for an empty batch).

    Raises:
        TypeError: if the scores or weights are not floating-point tensors.
        ValueError: for mismatched shapes or a bad mask.
    """
    as_tensor(index_scores, "index_scores")
    as_tensor(weights, "weights")
    check_min_rank(index_scores, 2, "index_scores", "(..., n_q, n_f)")
    check_min_rank(weights, 3, "weights", "(..., h, n_q, n_f)")
    if weights.shape[-2:] != index_scores.shape[-2:]:
        raise ValueError(
            f"weights (..., h, n_q, n_f) {tuple(weights.shape)} and index_scores (..., n_q, n_f) "
            f"{tuple(index_scores.shape)} must share (n_q, n_f)"
        )
    p = weights.detach().sum(-3)
    if mask is not None:
        check_attn_mask(mask, index_scores.shape)
        p = torch.where(mask, p, 0.0)
    p = p / p.sum(-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
    log_q = align_scores(index_scores, mask, log=True)
    kl = torch.xlogy(p, p) - torch.where(p > 0, p * log_q, 0.0)
    return mean_or_zero(kl.sum((-1, -2)))


# ---------------------------------------------------------------------------------------------------------------
# Costs
# ---------------------------------------------------------------------------------------------------------------
class AttentionCost(NamedTuple):
    """FLOPs and bytes read by one head's attention, per query and in total.

    Counted: ``q . k`` and ``a v`` (a multiply-add is 2 FLOPs), the selection scores (MoBA's gate,
    NSA's compressed branch, DSA's indexer), the reads of the key and value rows (and block means,
    index keys) each query makes, and work done once for all queries (``shared_*``: MoBA's and
    NSA's block means). Not counted: the softmax, the top-k, the projections and writing the output.

    Args:
        flops: FLOPs of each query ``t = 0 .. n-1``.
        bytes_read: bytes read by each query.
        shared_flops: FLOPs done once for all queries.
        shared_bytes: bytes read once for all queries.
    """

    flops: list[int]
    bytes_read: list[int]
    shared_flops: int = 0
    shared_bytes: int = 0

    @property
    def total_flops(self) -> int:
        """All FLOPs: the per-query ones summed plus the shared ones."""
        return sum(self.flops) + self.shared_flops

    @property
    def total_bytes(self) -> int:
        """All bytes read: the per-query ones summed plus the shared ones."""
        return sum(self.bytes_read) + self.shared_bytes


def _check_cost(what: str, n: int, d: int, bytes_per_value: int, **sizes: int | None) -> None:
    check_integers(what, minimum=0, n=n)
    check_integers(what, minimum=1, d=d, bytes_per_value=bytes_per_value)
    check_integers(what, minimum=1, allow_none=True, **sizes)


def dense_causal_cost(n: int, d: int, bytes_per_value: int = 2) -> AttentionCost:
    """Cost of dense causal attention: query ``t`` reads ``t + 1`` keys and values, ``4 d (t + 1)`` FLOPs.

    Args:
        n: the sequence length.
        d: the key and value width.
        bytes_per_value: bytes per number (2: bfloat16).

    Returns:
        :class:`AttentionCost`; query ``t`` reads ``2 d (t + 1)`` numbers.

    Raises:
        ValueError: for a negative ``n`` or ``d``, ``bytes_per_value < 1``.
    """
    _check_cost("dense_causal_cost", n, d, bytes_per_value)
    return _token_cost([t + 1 for t in range(n)], d, bytes_per_value)


def _token_cost(keys: list[int], d: int, s: int) -> AttentionCost:
    """``4 d m`` FLOPs and ``2 d m s`` bytes for a query reading ``m`` keys and values."""
    return AttentionCost([4 * d * m for m in keys], [2 * d * m * s for m in keys])


def _moba_keys(t: int, block_size: int, top_k: int | None) -> int:
    own = t // block_size
    earlier = own if top_k is None else min(top_k - 1, own)
    return earlier * block_size + t - own * block_size + 1


@catalogued("extra:moba")
def moba_cost(n: int, d: int, block_size: int, top_k: int | None, bytes_per_value: int = 2) -> AttentionCost:
    """Cost of MoBA: ``2 d`` FLOPs per earlier block for the gate, then attention over the selected keys.

    Query ``t`` owns block ``b = t // B``, scores the ``b`` earlier block means (``2 d b`` FLOPs,
    ``d b`` numbers read) and reads ``min(top_k - 1, b) B + (t - b B + 1)`` keys and values. The
    block means cost ``n d`` FLOPs and ``n d`` numbers read once.

    Args:
        n: the sequence length.
        d: the key and value width.
        block_size: ``B``.
        top_k: blocks per query, own included; None: all.
        bytes_per_value: bytes per number.

    Returns:
        :class:`AttentionCost`.

    Raises:
        ValueError: for negative sizes, ``B < 1``, ``top_k < 1`` or ``bytes_per_value < 1``.
    """
    _check_cost("moba_cost", n, d, bytes_per_value, block_size=block_size, top_k=top_k)
    attn = _token_cost([_moba_keys(t, block_size, top_k) for t in range(n)], d, bytes_per_value)
    gate = [t // block_size for t in range(n)]
    return AttentionCost(
        [f + 2 * d * b for f, b in zip(attn.flops, gate, strict=True)],
        [r + d * b * bytes_per_value for r, b in zip(attn.bytes_read, gate, strict=True)],
        n * d,
        n * d * bytes_per_value,
    )


@catalogued("extra:nsa")
def nsa_cost(
    n: int, d: int, block_size: int, top_n: int | None, window: int, bytes_per_value: int = 2
) -> AttentionCost:
    """Cost of NSA's three branches (mean compression, as :func:`nsa_attention`).

    Query ``t`` attends to the ``(t + 1) // B`` complete earlier blocks' compressed key and value
    (``4 d`` FLOPs, ``2 d`` numbers each), reads the selected keys as MoBA does with ``top_n``, and
    ``min(window, t + 1)`` window keys. The compressed keys and values cost ``2 n d`` FLOPs and
    numbers read once. The gates' ``3`` multiply-adds per value are left out.

    Args:
        n: the sequence length.
        d: the key and value width.
        block_size: ``B``.
        top_n: blocks read by the selected branch, own included; None: all.
        window: keys in the sliding window.
        bytes_per_value: bytes per number.

    Returns:
        :class:`AttentionCost`.

    Raises:
        ValueError: for negative sizes, ``B < 1``, ``top_n < 1``, ``window < 1`` or ``bytes_per_value < 1``.
    """
    _check_cost("nsa_cost", n, d, bytes_per_value, block_size=block_size, top_n=top_n, window=window)
    keys = [(t + 1) // block_size + _moba_keys(t, block_size, top_n) + min(window, t + 1) for t in range(n)]
    cost = _token_cost(keys, d, bytes_per_value)
    return cost._replace(shared_flops=2 * n * d, shared_bytes=2 * n * d * bytes_per_value)


@catalogued("extra:dsa-indexer")
def dsa_cost(
    n: int,
    d: int,
    top_k: int | None,
    index_heads: int,
    d_index: int,
    bytes_per_value: int = 2,
    bytes_per_index_value: int = 1,
    n_heads: int = 1,
) -> AttentionCost:
    """Cost of DSA: the indexer over all ``t + 1`` visible tokens, then attention over ``min(top_k, t + 1)``.

    The indexer costs ``H_I (2 d_I + 2)`` FLOPs per visible token (the product, then the weighted
    sum) and reads its ``d_I`` index-key numbers (FP8 in DeepSeek-V3.2: one byte). One indexer
    serves all ``n_heads`` heads of the main attention, whose cost is counted ``n_heads`` times
    (heads with keys and values of their own; compare with ``n_heads`` times
    :func:`dense_causal_cost`): the indexer pays off only when it is cheap next to all the heads.

    Args:
        n: the sequence length.
        d: the key and value width of the main attention.
        top_k: tokens per query; None: all.
        index_heads: ``H_I``.
        d_index: ``d_I``.
        bytes_per_value: bytes per number of the main attention.
        bytes_per_index_value: bytes per number of the index keys.
        n_heads: heads of the main attention sharing the selection.

    Returns:
        :class:`AttentionCost`.

    Raises:
        ValueError: for negative sizes or a count below 1.
    """
    _check_cost("dsa_cost", n, d, bytes_per_value, top_k=top_k, index_heads=index_heads, d_index=d_index)
    check_integers("dsa_cost", minimum=1, bytes_per_index_value=bytes_per_index_value, n_heads=n_heads)
    attn = _token_cost([t + 1 if top_k is None else min(top_k, t + 1) for t in range(n)], d, bytes_per_value)
    index_flops = [(t + 1) * index_heads * (2 * d_index + 2) for t in range(n)]
    index_bytes = [(t + 1) * d_index * bytes_per_index_value for t in range(n)]
    return AttentionCost(
        [n_heads * a + i for a, i in zip(attn.flops, index_flops, strict=True)],
        [n_heads * a + i for a, i in zip(attn.bytes_read, index_bytes, strict=True)],
    )


# ---------------------------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------------------------
class _SelectiveLayer(nn.Module):
    """A causal token mixer on :class:`~attnsurvey.query_related.multihead.MultiHeadAttention` and one selection mask."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.d_model, self.n_heads = d_model, n_heads

    def selection(self, x: Tensor) -> Tensor | None:  # pragma: no cover - overridden
        """The boolean selection for input ``x`` (``True`` = may attend), or None for dense causal attention."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        as_tensor(x, "x")
        check_min_rank(x, 2, "x", "(B, n, d_model)")
        check_dim_equal(x.shape[-1], self.d_model, type(self).__name__, "d_model of x", "d_model of the layer")
        out, _ = self.attn(x, mask=self.selection(x), is_causal=True, need_weights=False)
        return out


@catalogued("extra:moba")
class MoBALayer(_SelectiveLayer):
    """Causal MoBA self-attention: ``forward(x) -> (B, n, d_model)``, each head reading its ``top_k`` blocks.

    The heads' queries and keys come from the layer's :class:`MultiHeadAttention` projections
    (split by its head split); :func:`moba_mask` per head is then handed to the same module as
    a per-head mask, so ``top_k=None`` (or at least the number of blocks) is exactly dense
    causal attention with the same weights. The projections of q and k are computed twice
    (once for the gate, once inside the stack): clear, not fast. The gate has no parameters and
    top-k has no gradient, so training reaches the gate only through the keys it reads.
    Parameters: ``4 d_model^2`` (W_Q, W_K, W_V, W_O, no biases).

    Args:
        d_model: the model width.
        n_heads: heads (dividing ``d_model``).
        block_size: ``B``, keys per block.
        top_k: blocks per query, own block included; None: all.

    Shape:
        forward: x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: for a bad size (``d_model``, ``n_heads``, ``B < 1``, ``top_k < 1``); ``forward``
            for an input that is not ``(..., n, d_model)`` floating point.
    """

    def __init__(self, d_model: int, n_heads: int, *, block_size: int, top_k: int | None = None) -> None:
        check_integers("MoBALayer", minimum=1, d_model=d_model, n_heads=n_heads, block_size=block_size)
        _check_top_k("MoBALayer", top_k=top_k)
        super().__init__(d_model, n_heads)
        self.block_size, self.top_k = block_size, top_k

    def selection(self, x: Tensor) -> Tensor | None:
        """The per-head MoBA mask ``(..., h, n, n)`` for input ``x``, or None when ``top_k`` is None."""
        if self.top_k is None:
            return None
        q = _split_heads(self.attn.W_Q(x), self.n_heads)
        k = _split_heads(self.attn.W_K(x), self.n_heads)
        return moba_mask(q, k, self.block_size, self.top_k)


@catalogued("extra:dsa-indexer")
class DSALayer(_SelectiveLayer):
    """Causal DeepSeek sparse attention: ``forward(x) -> (B, n, d_model)``, every head reading the indexer's ``top_k`` tokens.

    The lightning indexer owns ``W_qI`` ``(H_I d_I, d_model)``, ``W_kI`` ``(d_I, d_model)`` and
    ``W_w`` ``(H_I, d_model)``; :func:`dsa_mask` of its scores is handed to the layer's
    :class:`MultiHeadAttention` as a mask shared by the heads, so ``top_k=None`` (or ``top_k >= n``)
    is exactly dense causal attention with the same weights. Top-k has no gradient: train the
    indexer with :meth:`indexer_loss` (:func:`indexer_distillation_loss`, DeepSeek's KL to the
    dense weights), or train dense and select at inference. Parameters:
    ``4 d_model^2 + d_model (H_I d_I + d_I + H_I)``.

    Args:
        d_model: the model width.
        n_heads: heads (dividing ``d_model``).
        top_k: tokens per query; None: all.
        index_heads: ``H_I``.
        d_index: ``d_I``.

    Shape:
        forward: x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: for a bad size; ``forward`` for an input that is not ``(..., n, d_model)`` floating point.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, top_k: int | None = None, index_heads: int = 4, d_index: int = 16
    ) -> None:
        check_integers(
            "DSALayer", minimum=1, d_model=d_model, n_heads=n_heads, index_heads=index_heads, d_index=d_index
        )
        _check_top_k("DSALayer", top_k=top_k)
        super().__init__(d_model, n_heads)
        self.top_k, self.index_heads, self.d_index = top_k, index_heads, d_index
        self.W_qI = nn.Linear(d_model, index_heads * d_index, bias=False)
        self.W_kI = nn.Linear(d_model, d_index, bias=False)
        self.W_w = nn.Linear(d_model, index_heads, bias=False)

    def index_scores(self, x: Tensor) -> Tensor:
        """The indexer's scores ``(..., n, n)`` for input ``x`` ``(..., n, d_model)``."""
        q_index = self.W_qI(x).unflatten(-1, (self.index_heads, self.d_index))
        return lightning_index_scores(q_index, self.W_kI(x), self.W_w(x))

    def selection(self, x: Tensor) -> Tensor | None:
        """The DSA mask ``(..., n, n)`` shared by the heads, or None when ``top_k`` is None."""
        return None if self.top_k is None else dsa_mask(self.index_scores(x), self.top_k)

    def indexer_loss(self, x: Tensor) -> Tensor:
        """The indexer's distillation loss on ``x`` against this layer's attention weights (detached).

        Over the causal keys when ``top_k`` is None (DeepSeek's dense warm-up), else over the selection.
        """
        sel = self.selection(x)
        _, a = self.attn(x, mask=sel, is_causal=True)
        mask = causal_mask(x.shape[-2], device=x.device) if sel is None else sel
        return indexer_distillation_loss(self.index_scores(x), a, mask)


@catalogued("extra:nsa")
class NSALayer(nn.Module):
    """Causal native sparse attention: ``forward(x) -> (B, n, d_model)``, each head a gated sum of three branches.

    The heads' q, k, v come from the layer's :class:`MultiHeadAttention` projections and its head
    split; :func:`nsa_attention` runs per head (every branch through the core), the heads are
    merged and mixed by its ``W_O``. The gates are ``sigmoid(W_g x + b_g)``, three per head
    (the paper's gate MLP reduced to one linear map). Unlike MoBA and DSA, NSA is no
    restriction of dense attention: even with every block selected its output is the gated
    sum of three attentions. The selection has no gradient; the compressed branch and the
    gates learn through their own outputs. Parameters: ``4 d_model^2 + 3 h (d_model + 1)``.

    Args:
        d_model: the model width.
        n_heads: heads (dividing ``d_model``).
        block_size: ``B``, keys per block.
        top_n: blocks read by the selected branch, own included; None: all.
        window: keys in the sliding window.

    Shape:
        forward: x ``(B, n, d_model)``; returns ``(B, n, d_model)``.

    Raises:
        ValueError: for a bad size; ``forward`` for an input that is not ``(..., n, d_model)`` floating point.
    """

    def __init__(self, d_model: int, n_heads: int, *, block_size: int, top_n: int | None = None, window: int) -> None:
        check_integers("NSALayer", minimum=1, d_model=d_model, n_heads=n_heads, block_size=block_size, window=window)
        _check_top_k("NSALayer", top_n=top_n)
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.W_g = nn.Linear(d_model, 3 * n_heads)
        self.d_model, self.n_heads = d_model, n_heads
        self.block_size, self.top_n, self.window = block_size, top_n, window

    def forward(self, x: Tensor) -> Tensor:
        as_tensor(x, "x")
        check_min_rank(x, 2, "x", "(B, n, d_model)")
        check_dim_equal(x.shape[-1], self.d_model, "NSALayer", "d_model of x", "d_model of the layer")
        q, k, v = (_split_heads(W(x), self.n_heads) for W in (self.attn.W_Q, self.attn.W_K, self.attn.W_V))
        gates = torch.sigmoid(self.W_g(x)).unflatten(-1, (self.n_heads, 3)).transpose(-2, -3)  # (..., h, n, 3)
        out = nsa_attention(q, k, v, gates, block_size=self.block_size, top_n=self.top_n, window=self.window)
        return self.attn.W_O(_merge_heads(out.c))


__all__ = [
    "AttentionCost",
    "DSALayer",
    "MoBALayer",
    "NSALayer",
    "NSAOutput",
    "block_selection",
    "dense_causal_cost",
    "dsa_attention",
    "dsa_cost",
    "dsa_mask",
    "indexer_distillation_loss",
    "lightning_index_scores",
    "moba_attention",
    "moba_cost",
    "moba_gate_scores",
    "moba_mask",
    "nsa_attention",
    "nsa_cost",
    "top_k_mask",
]

"""Attention across machines: sequence-parallel ring attention (beyond the survey).

The sequence (padded to a multiple of the number of ranks ``P``) is cut into
``P`` equal chunks; rank ``r`` of a ``torch.distributed`` process group holds
chunk ``r`` of the queries, keys and values. In ``P`` steps every rank computes
the online-softmax statistics of its queries against the key/value chunk it
currently holds (tile by tile with :func:`attnsurvey.beyond.tiled.tile_stats`),
merges them into its running ``(m, l, acc)`` with
:func:`attnsurvey.beyond.tiled.online_softmax_merge`, and passes the chunk on
to rank ``r + 1`` while it receives the next one from rank ``r - 1`` (sending
and receiving overlap the computation). After ``P`` steps every rank has seen
every key exactly once and holds the exact context of its own queries. Besides
its own K and V, a rank holds two key/value buffers of the same size: the chunk it
computes with and the one arriving.

The backward pass runs a second ring: each rank keeps its queries, ``dO``
and the log-sum-exp of the forward pass, and the key/value chunks travel
again, now with the gradients ``dK``, ``dV`` that every rank adds its share
to; after ``P`` steps and one last hop each chunk's gradients are back with
its owner.

Which positions a rank holds is its *layout*. ``"contiguous"``: rank ``r``
holds positions ``r c ... (r + 1) c - 1``; under a causal mask rank ``P - 1``
then has ``P`` times the work of rank 0, and the ring runs at the pace of the
busiest rank. ``"zigzag"`` (load-balanced causal ring attention): the
sequence is cut into ``2P`` pieces and rank ``r`` holds pieces ``r`` and
``2P - 1 - r``, an early and a late one, so every rank has the same causal
work (Brandon et al.'s Striped Attention balances it instead by dealing the
tokens out round-robin). Tiles whose keys all lie after their queries (or in the padding) are
skipped, and :func:`ring_attention` can count the score entries it computes
(``work=``), which is how the book measures balance (not by time).

Run it:

* inside an initialised process group: :func:`ring_attention` on each rank
  (cut the sequence with :func:`shard`, join the contexts with :func:`unshard`);
* on one machine, from Python: :func:`run_ring` / :func:`ring_results` spawn
  ``P`` local processes (gloo on 127.0.0.1, meeting through a file, with a
  timeout) and return the whole context (and gradients, and work counts);
* ``python -m attnsurvey.beyond.ring --demo`` checks P = 2 against one process
  (the command line lives in :mod:`attnsurvey.beyond.ring_cli`);
* ``torchrun --nproc-per-node P -m attnsurvey.beyond.ring`` (add ``--nnodes``,
  ``--rdzv-backend c10d --rdzv-endpoint HOST:PORT`` for several hosts) runs
  seeded data and reports the error on rank 0.

:func:`sequence_parallel_bytes` compares the bytes a rank sends in ring
attention with those of all-to-all sequence parallelism (DeepSpeed-Ulysses).
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_integers, check_min_rank
from ..catalog import catalogued
from .tiled import BLOCK_K, BLOCK_Q, Stats, check_qkv, finalize, online_softmax_merge, tile_stats

if __name__ == "__main__":  # ``python -m attnsurvey.beyond.ring``: the command line lives in ring_cli
    import runpy

    runpy.run_module("attnsurvey.beyond.ring_cli", run_name="__main__")
    raise SystemExit(0)


CHAPTER = "chapters/ch06_3_ring_attention.ipynb"
#: Data for seeded runs is generated in this many units, so it is the same for P = 1, 2, 4.
UNITS = 4
#: The ways to assign positions to ranks (see the module docstring).
Layout = Literal["contiguous", "zigzag"]
LAYOUTS: tuple[str, ...] = ("contiguous", "zigzag")


def _check_rank(what: str, rank: int, P: int) -> None:
    check_integers(what, rank=rank)
    if not 0 <= rank < P:
        raise ValueError(f"rank must be an integer in 0..P-1 = 0..{P - 1}, got rank={rank!r}")


def _check_layout(layout: object) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got layout={layout!r}")


@catalogued("extra:ring-attention")
def ring_step_bytes(n: int, d_k: int, d_v: int, P: int, itemsize: int = 4, batch: int = 1) -> dict:
    """Communication of ring attention per rank (analytic): one K and one V chunk per step.

    Each of the ``P - 1`` steps sends ``batch * (n / P) * (d_k + d_v) * itemsize``
    bytes from every rank to the next (``d_k``, ``d_v``: the widths of all
    heads together).

    Args:
        n: the sequence length (divisible by ``P``).
        d_k: the key width.
        d_v: the value width.
        P: the number of ranks.
        itemsize: bytes per number (4 for float32, 2 for bfloat16).
        batch: the number of sequences.

    Returns:
        ``{"per_step": ..., "per_rank": (P - 1) * per_step, "total": P * per_rank}``
        in bytes (total over all ranks).

    Raises:
        ValueError: if a size is negative (``n``, ``d_k``, ``d_v``) or below 1
            (``P``, ``itemsize``, ``batch``), naming it, or ``P`` does not divide ``n``.
    """
    check_integers("ring_step_bytes", minimum=0, n=n, d_k=d_k, d_v=d_v)
    check_integers("ring_step_bytes", minimum=1, P=P, itemsize=itemsize, batch=batch)
    if n % P:
        raise ValueError(f"ring attention needs P >= 1 dividing n, got n={n}, P={P}")
    per_step = batch * (n // P) * (d_k + d_v) * itemsize
    return {"per_step": per_step, "per_rank": (P - 1) * per_step, "total": P * (P - 1) * per_step}


@catalogued(
    "extra:ring-vs-ulysses",
    title="Sequence parallelism: bytes sent per rank by ring attention vs all-to-all (DeepSpeed-Ulysses)",
)
def sequence_parallel_bytes(
    n: int, d: int, h: int, P: int, itemsize: int = 4, batch: int = 1, h_kv: int | None = None
) -> dict:
    """Bytes one rank sends in one forward attention, ring vs all-to-all (Ulysses), analytic.

    Both start with ``n / P`` tokens of Q, K, V (all heads) on every rank and
    end with the rank's ``n / P`` rows of the context.

    * Ring: ``P - 1`` steps, each sending the rank's current K and V chunk,
      ``(P - 1) (n / P) h_kv 2 d`` numbers; steps overlap with computation.
    * Ulysses (Jacobs et al., 2023): all-to-all Q, K and V so that each rank
      holds all ``n`` tokens of ``h / P`` heads, attend locally, all-to-all the
      context back. An all-to-all keeps ``1 / P`` of a rank's tensor and sends
      the rest: ``(P - 1) / P * (n / P) d (2 h + 2 h_kv)`` numbers (Q and the
      context with ``h`` heads, K and V with ``h_kv``). It needs ``P`` to divide
      ``h`` and ``h_kv`` (else ``None`` here), and the communication happens
      before and after the attention, not during it.

    Ring over Ulysses is ``P / 2`` for ``h_kv = h``: equal at ``P = 2``, and
    Ulysses sends less beyond; its volume per rank falls as ``1 / P`` while the
    ring's stays near ``2 n h d``.

    Args:
        n: the sequence length (divisible by ``P``).
        d: the head size (``d_k = d_v``).
        h: the number of query heads.
        P: the number of ranks.
        itemsize: bytes per number.
        batch: the number of sequences.
        h_kv: key/value heads (default ``h``; fewer for grouped-query attention).

    Returns:
        ``{"ring": bytes, "ulysses": bytes or None, "ring_steps": P - 1,
        "ulysses_all_to_alls": 4}``.

    Raises:
        ValueError: if a size is below its minimum (naming it), ``P`` does not
            divide ``n``, or ``h_kv`` does not divide ``h``.
    """
    h_kv = h if h_kv is None else h_kv
    check_integers("sequence_parallel_bytes", minimum=0, n=n)
    check_integers("sequence_parallel_bytes", minimum=1, d=d, h=h, P=P, itemsize=itemsize, batch=batch, h_kv=h_kv)
    if n % P:
        raise ValueError(f"sequence parallelism needs P dividing n, got n={n}, P={P}")
    if h % h_kv:
        raise ValueError(f"h_kv={h_kv} must divide h={h}")
    chunk = batch * (n // P) * d * itemsize  # one head's rows of one rank
    ring = (P - 1) * chunk * 2 * h_kv
    ulysses = None if h % P or h_kv % P else (P - 1) * chunk * (2 * h + 2 * h_kv) // P
    return {"ring": ring, "ulysses": ulysses, "ring_steps": P - 1, "ulysses_all_to_alls": 4}


# --------------------------------------------------------------------------- layouts


@catalogued(
    "extra:ring-balanced-causal",
    title="Load-balanced causal ring attention: zigzag layout, rank r holds pieces r and 2P-1-r",
)
def padded_length(n: int, P: int, layout: Layout = "contiguous") -> int:
    """The length the sequence is padded to: the next multiple of ``P`` (contiguous) or ``2P`` (zigzag).

    Args:
        n: the sequence length.
        P: the number of ranks.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        ``n_pad >= n``.

    Raises:
        ValueError: if ``n`` < 0 or ``P`` < 1 (naming them) or the layout is unknown.
    """
    check_integers("padded_length", minimum=0, n=n)
    check_integers("padded_length", minimum=1, P=P)
    _check_layout(layout)
    m = P if layout == "contiguous" else 2 * P
    return -(-n // m) * m


@catalogued("extra:ring-balanced-causal")
def layout_segments(rank: int, P: int, n_pad: int, layout: Layout = "contiguous") -> list[tuple[int, int]]:
    """The positions rank ``rank`` holds, as ``(start, length)`` segments in the order of its rows.

    Contiguous: ``[(r c, c)]`` with ``c = n_pad / P``. Zigzag: ``[(r s, s),
    ((2P - 1 - r) s, s)]`` with ``s = n_pad / (2P)``.

    Args:
        rank: the rank, ``0 <= rank < P``.
        P: the number of ranks.
        n_pad: the padded length (:func:`padded_length`).
        layout: ``"contiguous"`` or ``"zigzag"``.

    Returns:
        A list of ``(start, length)`` pairs.

    Raises:
        ValueError: for a rank outside ``0..P-1`` or an ``n_pad`` that the layout cannot cut evenly.
    """
    check_integers("layout_segments", minimum=1, P=P)
    check_integers("layout_segments", minimum=0, n_pad=n_pad)
    _check_rank("layout_segments", rank, P)
    if padded_length(n_pad, P, layout) != n_pad:
        raise ValueError(f"the {layout} layout needs n_pad divisible by {P if layout == 'contiguous' else 2 * P}")
    if layout == "contiguous":
        c = n_pad // P
        return [(rank * c, c)]
    s = n_pad // (2 * P)
    return [(rank * s, s), ((2 * P - 1 - rank) * s, s)]


def _positions(rank: int, P: int, n_pad: int, layout: Layout) -> Tensor:
    return torch.cat([torch.arange(a, a + s) for a, s in layout_segments(rank, P, n_pad, layout)])


@catalogued("extra:ring-balanced-causal")
def shard(X: Tensor, P: int, layout: Layout = "contiguous") -> list[Tensor]:
    """Cut a sequence into the ``P`` rank chunks of ``layout``, padding it with zero rows first.

    Args:
        X: the whole sequence.
        P: the number of ranks.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Shape:
        X: ``(..., n, d)``; each chunk: ``(..., n_pad / P, d)``.

    Returns:
        The chunks, in rank order.

    Raises:
        ValueError: if X has fewer than 2 dimensions, or ``P`` / ``layout`` are invalid.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    n = X.shape[-2]
    n_pad = padded_length(n, P, layout)
    Xp = torch.cat([X, X.new_zeros(*X.shape[:-2], n_pad - n, X.shape[-1])], -2) if n_pad > n else X
    return [Xp[..., _positions(r, P, n_pad, layout), :].contiguous() for r in range(P)]


@catalogued("extra:ring-balanced-causal")
def unshard(chunks: Sequence[Tensor], n: int, layout: Layout = "contiguous") -> Tensor:
    """Put the rank chunks of :func:`shard` back in sequence order and drop the padding.

    Args:
        chunks: one tensor per rank, in rank order.
        n: the sequence length before padding.
        layout: the layout the chunks were cut with.

    Shape:
        each chunk: ``(..., c, d)``; output: ``(..., n, d)``.

    Returns:
        The whole sequence.

    Raises:
        ValueError: if the chunks do not hold ``n`` positions in this layout.
    """
    P = len(chunks)
    check_integers("unshard", minimum=1, P=P)
    n_pad = P * chunks[0].shape[-2]
    if padded_length(n, P, layout) != n_pad:
        raise ValueError(f"{P} chunks of {chunks[0].shape[-2]} rows do not hold n={n} in the {layout} layout")
    whole = torch.cat(list(chunks), -2)
    order = torch.argsort(torch.cat([_positions(r, P, n_pad, layout) for r in range(P)]))
    return whole[..., order[:n], :]


# --------------------------------------------------------------------------- one rank's tiles


@dataclass
class _Tile:
    """One tile of local query rows ``q0:q1`` against held key rows ``k0:k1``, with its causal mask (or None)."""

    q0: int
    q1: int
    k0: int
    k1: int
    allowed: Tensor | None


def _tiles(
    q_segs: list[tuple[int, int]],
    k_segs: list[tuple[int, int]],
    n: int,
    is_causal: bool,
    block_q: int,
    block_k: int,
    device: torch.device,
) -> list[_Tile]:
    """The tiles a rank computes for one held chunk: padding and keys after every query of a tile are skipped."""
    tiles = []
    q_local = 0
    for qa, qlen in q_segs:
        k_local = 0
        for ka, klen in k_segs:
            for qs in range(0, min(qlen, n - qa), block_q):  # query rows in the padding are skipped
                qe = min(qs + block_q, qlen, n - qa)
                q_first, q_last = qa + qs, qa + qe - 1
                for ks in range(0, min(klen, n - ka), block_k):  # so are keys in the padding
                    ke = min(ks + block_k, klen, n - ka)
                    k_first, k_last = ka + ks, ka + ke - 1
                    if is_causal and k_first > q_last:
                        continue  # every key after every query: nothing to compute
                    allowed = None
                    if is_causal and k_last > q_first:  # the diagonal crosses the tile
                        qpos = torch.arange(q_first, q_last + 1, device=device)
                        allowed = qpos[:, None] >= torch.arange(k_first, k_last + 1, device=device)[None, :]
                    tiles.append(_Tile(q_local + qs, q_local + qe, k_local + ks, k_local + ke, allowed))
            k_local += klen
        q_local += qlen
    return tiles


def _chunk_forward(Qs: Tensor, K: Tensor, V: Tensor, tiles: list[_Tile], run: Stats) -> None:
    """Merge the statistics of every tile into ``run = (m, l, acc)`` (rows of the local queries), in place."""
    m, l, acc = run
    for t in tiles:
        part = tile_stats(Qs[..., t.q0 : t.q1, :], K[..., t.k0 : t.k1, :], V[..., t.k0 : t.k1, :], t.allowed)
        rows = slice(t.q0, t.q1)
        m[..., rows], l[..., rows], acc[..., rows, :] = online_softmax_merge(
            m[..., rows], l[..., rows], acc[..., rows, :], *part
        )


def _chunk_backward(
    Qs: Tensor,
    K: Tensor,
    V: Tensor,
    dO: Tensor,
    L: Tensor,
    D: Tensor,
    tiles: list[_Tile],
    dQs: Tensor,
    dK: Tensor,
    dV: Tensor,
) -> None:
    """Add the gradients of one held chunk's tiles: ``P = exp(S - L)``, ``dS = P (dO V^T - D)`` (finite inputs)."""
    for t in tiles:
        rq, rk = slice(t.q0, t.q1), slice(t.k0, t.k1)
        S = Qs[..., rq, :] @ K[..., rk, :].transpose(-1, -2)
        if t.allowed is not None:
            S = S.masked_fill(~t.allowed, -math.inf)
        Pt = torch.exp(S - L[..., rq].unsqueeze(-1))
        dV[..., rk, :] += Pt.transpose(-1, -2) @ dO[..., rq, :]
        dS = Pt * (dO[..., rq, :] @ V[..., rk, :].transpose(-1, -2) - D[..., rq].unsqueeze(-1))
        dQs[..., rq, :] += dS @ K[..., rk, :]
        dK[..., rk, :] += dS.transpose(-1, -2) @ Qs[..., rq, :]


@catalogued("extra:ring-balanced-causal")
def ring_work(
    n: int,
    P: int,
    layout: Layout = "contiguous",
    is_causal: bool = True,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
) -> list[dict]:
    """The forward work of every rank, from the tile plan :func:`ring_attention` runs (no processes).

    For each rank and each of the ``P`` chunks that pass it, the same planner
    that :func:`ring_attention` uses lists the tiles it computes (tiles whose
    keys all follow their queries, and padding, are skipped); this sums them.
    ``ring_attention(..., work=d)`` reports the same numbers from a real run.

    Args:
        n: the sequence length.
        P: the number of ranks.
        layout: ``"contiguous"`` or ``"zigzag"``.
        is_causal: whether the causal mask is used.
        block_q: query rows per tile.
        block_k: key rows per tile.

    Returns:
        Per rank, ``{"score_entries": ..., "tiles": ...}``.

    Raises:
        ValueError: if ``n``, ``P`` or the tile sizes are below 1, or the layout is unknown.
    """
    check_integers("ring_work", minimum=1, n=n, P=P, block_q=block_q, block_k=block_k)
    n_pad = padded_length(n, P, layout)
    out = []
    for rank in range(P):
        q = layout_segments(rank, P, n_pad, layout)
        tiles = [
            t
            for src in range(P)
            for t in _tiles(
                q, layout_segments(src, P, n_pad, layout), n, is_causal, block_q, block_k, torch.device("cpu")
            )
        ]
        out.append({"score_entries": sum((t.q1 - t.q0) * (t.k1 - t.k0) for t in tiles), "tiles": len(tiles)})
    return out


def _check_same_shape_on_all_ranks(x: Tensor, group: Any) -> None:
    shape = torch.tensor(list(x.shape), dtype=torch.long, device=x.device)  # NCCL reduces device tensors
    lo, hi = shape.clone(), shape.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    if not torch.equal(lo, hi):
        raise ValueError(
            f"ring attention needs equal chunks on every rank; shapes range from {lo.tolist()} to {hi.tolist()}"
        )


@dataclass
class _Ring:
    """This rank's place on the ring and the settings of one call."""

    rank: int
    P: int
    nxt: int
    prv: int
    group: Any
    is_causal: bool
    n: int
    n_pad: int
    layout: Layout
    block_q: int
    block_k: int

    def tiles(self, src: int, device: torch.device) -> list[_Tile]:
        q = layout_segments(self.rank, self.P, self.n_pad, self.layout)
        k = layout_segments(src, self.P, self.n_pad, self.layout)
        return _tiles(q, k, self.n, self.is_causal, self.block_q, self.block_k, device)

    def exchange(self, send: Tensor, recv: Tensor) -> list[Any]:
        # one batched call: with NCCL, separate blocking sends could wait on each other around the ring
        ops = [dist.P2POp(dist.isend, send, self.nxt, self.group), dist.P2POp(dist.irecv, recv, self.prv, self.group)]
        return dist.batch_isend_irecv(ops)


def _ring_forward(Q: Tensor, K: Tensor, V: Tensor, ring: _Ring, work: dict | None) -> tuple[Tensor, Tensor]:
    """The context and log-sum-exp of this rank's queries, passing K/V chunks around the ring."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Qs, d_k = Q * scale, K.shape[-1]
    batch, c = Q.shape[:-2], Q.shape[-2]
    run = (Qs.new_full((*batch, c), -math.inf), Qs.new_zeros((*batch, c)), Qs.new_zeros((*batch, c, V.shape[-1])))
    kv = torch.cat([K, V], -1).contiguous()  # one message per step
    buf = torch.empty_like(kv)
    entries = n_tiles = 0
    for step in range(ring.P):
        src = (ring.rank - step) % ring.P  # the rank whose chunk we hold in this step
        pending = ring.exchange(kv, buf) if step < ring.P - 1 else []
        tiles = ring.tiles(src, Q.device)
        _chunk_forward(Qs, kv[..., :d_k], kv[..., d_k:], tiles, run)
        entries += sum((t.q1 - t.q0) * (t.k1 - t.k0) for t in tiles)
        n_tiles += len(tiles)
        for req in pending:
            req.wait()
        if pending:
            kv, buf = buf, kv
    if work is not None:
        work.update(score_entries=entries, tiles=n_tiles)
    return finalize(*run)


def _ring_backward(
    Q: Tensor, K: Tensor, V: Tensor, O: Tensor, L: Tensor, dO: Tensor, ring: _Ring
) -> tuple[Tensor, Tensor, Tensor]:
    """dQ of this rank, and dK, dV of its own chunk after they went once around the ring."""
    scale = 1.0 / math.sqrt(Q.shape[-1])
    Qs, d_k = Q * scale, K.shape[-1]
    D = (dO * O).sum(-1)
    L = torch.where(torch.isfinite(L), L, torch.full_like(L, math.inf))  # padded query rows: P = 0
    dQs = torch.zeros_like(Qs)
    kv = torch.cat([K, V], -1).contiguous()
    grads = torch.zeros_like(kv)  # dK | dV of the chunk held, travelling with it
    kv_buf, grads_buf = torch.empty_like(kv), torch.empty_like(grads)
    for step in range(ring.P):
        src = (ring.rank - step) % ring.P
        pending = ring.exchange(kv, kv_buf) if step < ring.P - 1 else []  # K, V overlap the computation
        Kc, Vc = kv[..., :d_k], kv[..., d_k:]
        _chunk_backward(Qs, Kc, Vc, dO, L, D, ring.tiles(src, Q.device), dQs, grads[..., :d_k], grads[..., d_k:])
        for req in pending:
            req.wait()
        if ring.P > 1:  # the gradients are complete for this step only now; the last hop takes them home
            for req in ring.exchange(grads, grads_buf):
                req.wait()
            grads, grads_buf = grads_buf, grads
        if pending:
            kv, kv_buf = kv_buf, kv
    return dQs * scale, grads[..., :d_k], grads[..., d_k:]  # S = (scale Q) K^T: the scale is in Qs for dK


@catalogued(
    "extra:ring-attention-backward",
    title="Ring attention backward: dK and dV travel the ring back to the rank that owns the chunk",
)
class RingAttentionFunction(torch.autograd.Function):
    """Autograd for :func:`ring_attention`: a second ring computes the gradients.

    ``apply(Q, K, V, ring, work)`` returns this rank's context. Saved for
    backward: Q, K, V, the context O and the log-sum-exp L of the rank's own
    rows. Backward: every rank keeps ``dO``, ``D = rowsum(dO * O)`` and L, and
    adds, for each key/value chunk that passes, ``dQ += scale dS K``,
    ``dK += scale dS^T Q`` and ``dV += P^T dO`` with ``P = exp(S - L)`` and
    ``dS = P (dO V^T - D)`` (the formulas of
    :class:`~attnsurvey.beyond.tiled.TiledAttentionFunction`, finite inputs),
    then passes the chunk with its ``dK``, ``dV`` on; one more hop after the
    last step brings them back to the chunk's owner. Every rank of the group
    must call backward. Communication per rank: ``P - 1`` K/V chunks and
    ``P`` dK/dV chunks.

    Args:
        Q: this rank's queries (``forward``).
        K: this rank's keys.
        V: this rank's values.
        ring: the rank's place on the ring and the call's settings (built by :func:`ring_attention`).
        work: None, or a dict that the forward pass fills with its work counts.

    Shape:
        Q, K: ``(..., c, d_k)``; V: ``(..., c, d_v)``; context and ``dO``: ``(..., c, d_v)``.

    Returns:
        ``forward``: the context; ``backward``: ``(dQ, dK, dV, None, None)`` of this rank's rows.

    Raises:
        RuntimeError: from ``torch.distributed`` if a rank fails or does not take part.
    """

    @staticmethod
    def forward(ctx: Any, Q: Tensor, K: Tensor, V: Tensor, ring: _Ring, work: dict | None) -> Tensor:
        """The context ``(..., c, d_v)`` of this rank's queries (arguments as :meth:`apply`)."""
        O, L = _ring_forward(Q, K, V, ring, work)
        ctx.save_for_backward(Q, K, V, O, L)
        ctx.ring = ring
        return O

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dO):
        Q, K, V, O, L = ctx.saved_tensors
        dQ, dK, dV = _ring_backward(Q, K, V, O, L, dO.contiguous(), ctx.ring)
        return dQ, dK, dV, None, None


@catalogued(
    "extra:ring-attention",
    title="Ring attention: the sequence split across processes, K/V chunks passed around a ring, merged online",
)
def ring_attention(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    is_causal: bool = False,
    group: dist.ProcessGroup | None = None,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    *,
    layout: Layout = "contiguous",
    n: int | None = None,
    work: dict | None = None,
) -> Tensor:
    """Exact scaled dot-product attention over a sequence split across the ranks of ``group``, with gradients.

    Call on every rank with that rank's chunk (:func:`shard` cuts a sequence):
    rank ``r`` holds the positions :func:`layout_segments` gives for
    ``n_pad = P c``; all ranks pass equal shapes. Positions ``>= n`` are
    padding: no query attends to them and their own rows get the zero context.
    Differentiable (:class:`RingAttentionFunction`); all ranks must then call
    backward.

    Args:
        Q: this rank's queries.
        K: this rank's keys.
        V: this rank's values.
        is_causal: position ``i`` attends to positions ``j <= i`` of the whole sequence.
        group: the process group (default: the world).
        block_q: query rows per tile (default :data:`~attnsurvey.beyond.tiled.BLOCK_Q`).
        block_k: key rows per tile (default :data:`~attnsurvey.beyond.tiled.BLOCK_K`).
        layout: ``"contiguous"`` or ``"zigzag"`` (balanced causal work).
        n: the sequence length before padding (default ``P c``, no padding).
        work: a dict to fill with this rank's ``score_entries`` (entries of
            the score tiles it computed in the forward pass) and ``tiles``.

    Shape:
        Q, K: ``(..., c, d_k)``; V: ``(..., c, d_v)`` with ``c = n_pad / P``;
        output: ``(..., c, d_v)``.

    Returns:
        This rank's context, equal to its rows of single-process attention up to rounding.

    Raises:
        ValueError: on shape problems, unequal chunks across ranks, a chunk
            the layout cannot hold, an ``n`` outside ``1..P c`` or bad tile sizes.
        RuntimeError: if no process group is initialised.
    """
    if not dist.is_initialized():
        raise RuntimeError("ring_attention needs an initialised torch.distributed process group")
    check_qkv(Q, K, V, "ring attention", "c", "c")
    check_dim_equal(Q.shape[-2], K.shape[-2], "ring attention", "chunk length of Q", "chunk length of K")
    check_integers("ring attention", minimum=1, block_q=block_q, block_k=block_k)
    _check_layout(layout)
    rank, P = dist.get_rank(group), dist.get_world_size(group)
    _check_same_shape_on_all_ranks(torch.cat([K, V], -1), group)
    n_pad = P * Q.shape[-2]
    n = n_pad if n is None else n
    check_integers("ring attention", minimum=1, n=n)
    if n > n_pad or padded_length(n_pad, P, layout) != n_pad:
        raise ValueError(
            f"ring attention with the {layout} layout: chunks of c={Q.shape[-2]} on P={P} ranks "
            f"hold n_pad={n_pad} positions, which must be a multiple of {P if layout == 'contiguous' else 2 * P} "
            f"and >= n={n}"
        )
    # neighbours on the ring, as global ranks (what isend/irecv address)
    nxt, prv = ((dist.get_global_rank(group, (rank + k) % P) if group else (rank + k) % P) for k in (1, -1))
    ring = _Ring(rank, P, nxt, prv, group, is_causal, n, n_pad, layout, block_q, block_k)
    out = RingAttentionFunction.apply(Q, K, V, ring, work)
    return out


# --------------------------------------------------------------------------- local launcher


def seeded_chunk(which: str, rank: int, P: int, n: int, d: int, seed: int = 0, batch: int = 1) -> Tensor:
    """Rank ``rank``'s contiguous chunk of a seeded tensor named ``which`` ("Q", "K" or "V").

    The tensor is drawn in ``UNITS`` row blocks with their own seeds, so the
    whole sequence is identical for every ``P`` dividing ``UNITS``.

    Args:
        which: ``"Q"``, ``"K"`` or ``"V"`` (each has its own seeds).
        rank: the rank, ``0 <= rank < P``.
        P: the number of ranks (dividing ``UNITS``).
        n: the sequence length (divisible by ``UNITS``).
        d: the width.
        seed: the seed of the whole sequence.
        batch: the number of sequences.

    Shape:
        output: ``(batch, n / P, d)``.

    Returns:
        The chunk.

    Raises:
        ValueError: unless ``P`` divides ``UNITS``, ``UNITS`` divides ``n`` and ``0 <= rank < P``.
    """
    if UNITS % P or n % UNITS:
        raise ValueError(f"seeded chunks need P dividing {UNITS} and n divisible by {UNITS}, got P={P}, n={n}")
    _check_rank("seeded_chunk", rank, P)
    per = UNITS // P
    units = [
        torch.randn(
            batch, n // UNITS, d, generator=torch.Generator().manual_seed(seed * 1000 + "QKV".index(which) * 10 + u)
        )
        for u in range(rank * per, (rank + 1) * per)
    ]
    return torch.cat(units, -2)


def _memory_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process from ``/proc/self/status``, in bytes.

    ``VmHWM`` belongs to the process image, so unlike ``ru_maxrss`` it does not
    inherit the parent's peak through fork and exec.
    """
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def _measure(Q: Tensor, K: Tensor, V: Tensor, job: dict) -> dict:
    """The benchmark's part of a rank: peak memory of one ring pass, then the median time of ``repeats``."""
    kw = {"is_causal": job["is_causal"], "layout": job.get("layout", "contiguous")}
    small = 2 * dist.get_world_size()
    ring_attention(Q[..., :2, :], K[..., :2, :], V[..., :2, :], **kw, n=small)  # warm up gloo
    dist.barrier()
    before = _memory_bytes("VmRSS")
    work: dict = {}
    out = ring_attention(Q, K, V, **kw, work=work)
    report = {"out": out, "peak_bytes": _memory_bytes("VmHWM") - before, "work": work}
    times = []
    for _ in range(job.get("repeats", 0)):
        dist.barrier()
        t0 = time.perf_counter()
        ring_attention(Q, K, V, **kw)
        times.append(time.perf_counter() - t0)
    report["seconds"] = statistics.median(times) if times else None
    return report


def _run_file_job(rank: int, P: int, job_dir: str, job: dict) -> dict:
    """One rank of :func:`ring_results`: shard the saved inputs, run every mode, keep outputs, gradients, work."""
    saved = torch.load(Path(job_dir) / "inputs.pt")
    layout, n = job["layout"], saved["Q"].shape[-2]
    Q, K, V = (shard(saved[w], P, layout)[rank] for w in "QKV")
    dO = None if saved["dO"] is None else shard(saved["dO"], P, layout)[rank]
    results = []
    for flag in job["modes"]:
        work: dict = {}
        if dO is None:
            with torch.no_grad():
                out = ring_attention(Q, K, V, is_causal=flag, layout=layout, n=n, work=work)
            results.append({"out": out, "work": work, "grads": None})
            continue
        q, k, v = (x.clone().requires_grad_(True) for x in (Q, K, V))
        out = ring_attention(q, k, v, is_causal=flag, layout=layout, n=n, work=work)
        out.backward(dO)
        results.append({"out": out.detach(), "work": work, "grads": (q.grad, k.grad, v.grad)})
    return {"modes": results}


def _worker(rank: int, P: int, job_dir: str, job: dict) -> None:
    """One rank of :func:`ring_results` / the benchmark: load or draw the chunk, run, save the result.

    The ranks meet through a file in ``job_dir`` (a file store), not a TCP port chosen in advance:
    a port found free before the processes start can be taken by another process before rank 0
    binds it, seconds later. Gloo's own connections bind ports the system gives them."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(job.get("threads", 1))
    dist.init_process_group(
        "gloo",
        init_method=(Path(job_dir) / "rendezvous").as_uri(),
        rank=rank,
        world_size=P,
        timeout=datetime.timedelta(seconds=job["timeout"]),
    )
    try:
        if job["source"] == "file":
            result = _run_file_job(rank, P, job_dir, job)
        else:
            n, d, layout = job["n"], job["d"], job.get("layout", "contiguous")
            full = [torch.cat([seeded_chunk(w, u, UNITS, n, d, job["seed"]) for u in range(UNITS)], -2) for w in "QKV"]
            Q, K, V = (shard(x, P, layout)[rank] for x in full)
            with torch.no_grad():
                result = _measure(Q, K, V, job)
        torch.save(result, Path(job_dir) / f"out{rank}.pt")
    finally:
        dist.destroy_process_group()


def launch(P: int, job: dict, job_dir: str, timeout: float = 60.0) -> list[dict]:
    """Spawn ``P`` local ranks running ``job``; return each rank's saved result, in rank order.

    Args:
        P: the number of processes.
        job: what each rank does (``source``: ``"file"`` for :func:`ring_results`,
            ``"seeded"`` for the benchmark), passed to the worker.
        job_dir: a folder for the rendezvous file, inputs and results.
        timeout: seconds the whole launch may take.

    Returns:
        One dict per rank.

    Raises:
        TimeoutError: (after stopping the processes) if they take longer than ``timeout`` seconds.
        RuntimeError: if a rank fails.
    """
    import torch.multiprocessing as mp

    job = {"timeout": timeout, **job}
    ctx = mp.start_processes(_worker, args=(P, job_dir, job), nprocs=P, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ring attention with P={P} did not finish within {timeout} s")
    except mp.ProcessRaisedException as err:
        raise RuntimeError(f"a ring attention rank failed:\n{err}") from None
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    return [torch.load(Path(job_dir) / f"out{r}.pt") for r in range(P)]


@dataclass
class RingResult:
    """What :func:`ring_results` returns for one mask: the whole context, per-rank work, gradients.

    Args:
        out: the context ``(..., n, d_v)``, in sequence order, padding dropped.
        work: per rank, ``{"score_entries": ..., "tiles": ...}`` counted by :func:`ring_attention`.
        grads: ``(dQ, dK, dV)`` of the whole sequence when ``dO`` was given, else None.

    Shape:
        out: ``(..., n, d_v)``; dQ, dK: ``(..., n, d_k)``; dV: ``(..., n, d_v)``.
    """

    out: Tensor
    work: list[dict]
    grads: tuple[Tensor, Tensor, Tensor] | None


def _check_inputs(Q: Tensor, K: Tensor, V: Tensor, P: int) -> None:
    for x, name in ((Q, "Q"), (K, "K"), (V, "V")):
        as_tensor(x, name)
        check_min_rank(x, 2, name, "(..., n, d)")
    check_dim_equal(Q.shape[-2], K.shape[-2], "ring attention (self-attention)", "n of Q", "n of K")
    check_dim_equal(K.shape[-2], V.shape[-2], "ring attention", "n of K", "n of V")
    check_dim_equal(Q.shape[-1], K.shape[-1], "ring attention", "d_k of Q", "d_k of K")
    check_integers("ring attention", minimum=1, P=P, n=Q.shape[-2])


@catalogued("extra:ring-attention-backward")
def ring_results(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    P: int,
    is_causal: bool | Sequence[bool] = False,
    *,
    layout: Layout = "contiguous",
    dO: Tensor | None = None,
    timeout: float = 60.0,
) -> list[RingResult]:
    """Ring attention over ``P`` local processes (gloo, 127.0.0.1): contexts, work per rank and gradients.

    The sequence is padded to :func:`padded_length` and cut by :func:`shard`;
    each spawned rank runs :func:`ring_attention` once per flag of
    ``is_causal`` (starting processes is the slow part), and, if ``dO`` is
    given, backward with its rows of ``dO``.

    Args:
        Q: queries of the whole sequence.
        K: keys.
        V: values.
        P: the number of processes.
        is_causal: one flag or a sequence of flags (one run each).
        layout: ``"contiguous"`` or ``"zigzag"``.
        dO: the gradient of a loss with respect to the context, or None (no backward).
        timeout: seconds the launch may take.

    Shape:
        Q, K: ``(..., n, d_k)``; V, dO: ``(..., n, d_v)``; any ``n >= 1``.

    Returns:
        One :class:`RingResult` per flag.

    Raises:
        ValueError: if the shapes differ or ``P`` < 1.
        TimeoutError: after ``timeout`` seconds.
    """
    _check_inputs(Q, K, V, P)
    _check_layout(layout)
    if dO is not None:
        as_tensor(dO, "dO")
        if dO.shape[-2:] != V.shape[-2:]:
            raise ValueError(f"dO must have the shape of the context (..., n, d_v), got {tuple(dO.shape)}")
    modes = [bool(is_causal)] if isinstance(is_causal, bool) else [bool(f) for f in is_causal]
    n = Q.shape[-2]
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"Q": Q, "K": K, "V": V, "dO": dO}, Path(tmp) / "inputs.pt")
        ranks = launch(P, {"source": "file", "modes": modes, "layout": layout}, tmp, timeout)
    results = []
    for i in range(len(modes)):
        per_rank = [r["modes"][i] for r in ranks]
        grads = None
        if dO is not None:
            dq, dk, dv = (unshard([r["grads"][j] for r in per_rank], n, layout) for j in range(3))
            grads = (dq, dk, dv)
        results.append(
            RingResult(unshard([r["out"] for r in per_rank], n, layout), [r["work"] for r in per_rank], grads)
        )
    return results


@catalogued("extra:ring-attention")
def run_ring(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    P: int,
    is_causal: bool | Sequence[bool] = False,
    timeout: float = 60.0,
    layout: Layout = "contiguous",
) -> Tensor | list[Tensor]:
    """Ring attention over ``P`` local processes (gloo, 127.0.0.1): the whole context, gathered.

    :func:`ring_results` without gradients, returning only the contexts.

    Args:
        Q: queries of the whole sequence.
        K: keys.
        V: values.
        P: the number of processes.
        is_causal: one flag, or a sequence of flags run by the same processes.
        timeout: seconds the launch may take.
        layout: ``"contiguous"`` or ``"zigzag"``.

    Shape:
        Q, K: ``(..., n, d_k)``; V: ``(..., n, d_v)``; any ``n >= 1`` (padded
        to the layout's multiple of ``P``, the padding masked); output: ``(..., n, d_v)``.

    Returns:
        The context, or a list of contexts (one per flag) when ``is_causal`` is a sequence.

    Raises:
        ValueError: if the shapes differ or ``P`` < 1.
        TimeoutError: after ``timeout`` seconds.
    """
    results = ring_results(Q, K, V, P, is_causal, layout=layout, timeout=timeout)
    contexts = [r.out for r in results]
    return contexts[0] if isinstance(is_causal, bool) else contexts

"""KV caches as inference servers keep them: a paged cache and a sliding-window cache (beyond the survey).

The contiguous :class:`~attnsurvey.beyond.decoding.KVCache` reserves ``max_len``
positions per sequence up front. A server that decodes many sequences of unknown
length at once wastes most of that memory. Two layouts avoid it:

* **Paged KV cache** (vLLM's PagedAttention, Kwon et al. 2023): one pool of
  fixed-size physical *blocks* of ``block_size`` positions is shared by all
  sequences; each sequence owns a *block table*, the list of its physical
  blocks in logical order. Position ``t`` of a sequence lives in block
  ``table[t // block_size]`` at offset ``t % block_size``. Blocks are taken
  from a free list when a sequence grows and returned when it is freed, so
  memory is reserved one block at a time. Sequences may share blocks (beam
  search forks a prefix); a shared block is copied before it is written
  (copy-on-write), tracked by a reference count per block.
* **Sliding-window cache** (the rolling buffer of Mistral 7B, Jiang et al.
  2023): a model whose query ``i`` attends only to keys ``i - w < j <= i``
  never needs more than the last ``w`` positions, so a ring buffer of ``w``
  slots holds the whole cache, whatever the sequence length.

Attention over either cache gathers the keys and values it holds and calls the
package's attention through
:func:`~attnsurvey.beyond.decoding.grouped_query_attention` (which calls the core
:func:`attnsurvey.general_model.attend`): the caches decide *which* keys a query
sees (a boolean mask, ``True`` = may attend), never how the weights are computed.

Shapes: ``g`` K/V heads, ``h`` query heads (``g`` divides ``h``), ``d_head`` per head.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from .._checks import as_tensor, check_dim_equal, check_integers, check_rank
from ..catalog import catalogued
from .decoding import grouped_query_attention

CHAPTER = "chapters/ch06_1_decoding.ipynb"


def _check_block(sym: str, t: Tensor, expected: tuple[int, ...], dtype: torch.dtype, layout: str, where: str) -> None:
    as_tensor(t, sym)
    if tuple(t.shape) != expected or t.dtype != dtype:
        raise ValueError(
            f"{where}: {sym} must have shape {layout} = {expected} and dtype {dtype}, got {tuple(t.shape)} {t.dtype}"
        )


def check_step_inputs(K_buffer: Tensor, q: Tensor, k: Tensor, v: Tensor, where: str) -> int:
    """Check one decoding step's queries and new keys and values against a cache's key buffer.

    Args:
        K_buffer: the cache's keys, ``(B, g, slots, d_head)``.
        q: the new queries; k, v: the new keys and values.
        where: the caller, for the messages.

    Shape:
        q: ``(B, h, n, d_head)``; k, v: ``(B, g, n, d_head)``.

    Returns:
        ``n``, the number of new positions.

    Raises:
        ValueError: if a tensor has the wrong rank, shape or dtype.
    """
    B, g, _, d = K_buffer.shape
    as_tensor(q, "q")
    check_rank(q, 4, "q", "(B, h, n, d_head)")
    n = q.shape[-2]
    for sym, t in (("k", k), ("v", v)):
        _check_block(sym, t, (B, g, n, d), K_buffer.dtype, "(B, g, n, d_head)", where)
    check_dim_equal(q.shape[-1], d, where, "d_head of q", "d_head of the cache")
    return n


@catalogued("extra:paged-kv-cache", title="Paged KV cache: a block pool and per-sequence block tables (vLLM)")
class PagedKVCache:
    """A pool of fixed-size key/value blocks shared by many sequences, each with its own block table.

    Keys and values live in ``K_pool`` and ``V_pool`` of shape
    ``(n_blocks, g, block_size, d_head)``. Sequence ``s`` owns the block table
    ``tables[s]`` (physical block ids in logical order) and ``lengths[s]``
    positions; position ``t`` is stored in block ``tables[s][t // block_size]`` at
    offset ``t % block_size``. Free blocks are kept on a free list (a block that
    is freed is the next one handed out); a block may be shared by several
    sequences (after :meth:`fork` or :meth:`reorder`) and is copied before a
    shared block is written (copy-on-write).

    Args:
        n_blocks: number of physical blocks in the pool.
        block_size: positions per block.
        n_kv_heads: ``g``, key/value heads per position.
        d_head: size of one key or value head.
        dtype: dtype of the pool (default float32).
        device: device of the pool (default the default device).

    Shape:
        K_pool, V_pool: ``(n_blocks, g, block_size, d_head)``.

    Raises:
        ValueError: if a size is not an integer >= 1.
    """

    def __init__(
        self,
        n_blocks: int,
        block_size: int,
        n_kv_heads: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_integers(
            "PagedKVCache", minimum=1, n_blocks=n_blocks, block_size=block_size, n_kv_heads=n_kv_heads, d_head=d_head
        )
        self.K_pool = torch.zeros(n_blocks, n_kv_heads, block_size, d_head, dtype=dtype, device=device)
        self.V_pool = torch.zeros_like(self.K_pool)
        self.block_size = block_size
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}
        self._refs = [0] * n_blocks
        self._free = list(range(n_blocks - 1, -1, -1))  # a stack: pop() hands out block 0 first

    @property
    def n_free(self) -> int:
        """Number of blocks on the free list."""
        return len(self._free)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (keys and values), used or not."""
        return self.K_pool.element_size() * (self.K_pool.numel() + self.V_pool.numel())

    def ref_count(self, block: int) -> int:
        """How many block tables hold physical block ``block`` (0 = free).

        Args:
            block: a physical block id, ``0 <= block < n_blocks``.

        Returns:
            The number of sequences whose table lists the block.
        """
        return self._refs[block]

    def _table(self, seq_id: Hashable) -> list[int]:
        if seq_id not in self.tables:
            raise ValueError(
                f"unknown sequence {seq_id!r}: allocate it first (known: {sorted(map(repr, self.tables))})"
            )
        return self.tables[seq_id]

    def _take(self) -> int:
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def _release(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)

    def allocate(self, seq_id: Hashable) -> None:
        """Register an empty sequence (no block is taken until it is appended to).

        Args:
            seq_id: any hashable name of the new sequence.

        Raises:
            ValueError: if ``seq_id`` is already allocated.
        """
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} is already allocated")
        self.tables[seq_id], self.lengths[seq_id] = [], 0

    def free(self, seq_id: Hashable) -> None:
        """Forget a sequence and return the blocks only it held to the free list.

        Args:
            seq_id: an allocated sequence.

        Raises:
            ValueError: if ``seq_id`` is not allocated.
        """
        self._release(self._table(seq_id))
        del self.tables[seq_id], self.lengths[seq_id]

    def fork(self, src: Hashable, dst: Hashable) -> None:
        """Make a new sequence ``dst`` that shares every block of ``src`` (no copy).

        Args:
            src: an allocated sequence.
            dst: a name not yet allocated.

        Raises:
            ValueError: if ``src`` is not allocated or ``dst`` already is.
        """
        table = self._table(src)
        self.allocate(dst)
        for block in table:
            self._refs[block] += 1
        self.tables[dst], self.lengths[dst] = list(table), self.lengths[src]

    def reorder(self, seq_ids: Sequence[Hashable], beam_indices: Sequence[int] | Tensor) -> None:
        """Beam-search reordering: sequence ``seq_ids[i]`` becomes a copy of ``seq_ids[beam_indices[i]]``.

        Only block tables are copied; the blocks become shared (reference
        counts go up), and a later :meth:`append` copies a shared block before
        writing into it. Blocks no longer held by any sequence are freed.

        Args:
            seq_ids: the beams, allocated sequences.
            beam_indices: for each beam, the index into ``seq_ids`` of the beam it continues.

        Shape:
            beam_indices: ``(len(seq_ids),)`` integers in ``[0, len(seq_ids))``.

        Raises:
            ValueError: if a sequence is not allocated, ``beam_indices`` has the wrong length or an index out of range.
        """
        idx = [int(i) for i in (beam_indices.tolist() if isinstance(beam_indices, Tensor) else beam_indices)]
        n = len(seq_ids)
        if len(idx) != n or any(not 0 <= i < n for i in idx):
            raise ValueError(f"beam_indices must hold {n} indices in [0, {n}), got {idx}")
        old = [self._table(s) for s in seq_ids]
        lengths = [self.lengths[s] for s in seq_ids]
        new = [list(old[i]) for i in idx]
        for table in new:  # take the new references before releasing the old ones
            for block in table:
                self._refs[block] += 1
        for table in old:
            self._release(table)
        for s, table, i in zip(seq_ids, new, idx, strict=True):
            self.tables[s], self.lengths[s] = table, lengths[i]

    def slot(self, seq_id: Hashable, position: int) -> tuple[int, int]:
        """The block-table lookup: where position ``position`` of a sequence is stored.

        Args:
            seq_id: an allocated sequence.
            position: ``0 <= position < lengths[seq_id]``.

        Returns:
            ``(block, offset)``: the physical block id and the offset inside it.

        Raises:
            ValueError: if ``seq_id`` is not allocated or the position is not cached.
        """
        table = self._table(seq_id)
        if not 0 <= position < self.lengths[seq_id]:
            raise ValueError(
                f"position {position} of sequence {seq_id!r} is not cached (length {self.lengths[seq_id]})"
            )
        return table[position // self.block_size], position % self.block_size

    def append(self, seq_id: Hashable, k: Tensor, v: Tensor) -> None:
        """Write the keys and values of ``n_new`` new positions after what sequence ``seq_id`` holds.

        Takes new blocks from the free list as needed and copies a shared last
        block before writing into it. Nothing changes if it raises.

        Args:
            seq_id: an allocated sequence.
            k: keys of the new positions.
            v: values of the new positions.

        Shape:
            k, v: ``(g, n_new, d_head)``.

        Raises:
            ValueError: if ``seq_id`` is not allocated, ``k`` or ``v`` has the wrong shape or dtype, or the pool has too few free blocks.
        """
        table = self._table(seq_id)
        g, bs, d = self.K_pool.shape[1], self.block_size, self.K_pool.shape[-1]
        n_new = k.shape[-2] if isinstance(k, Tensor) and k.dim() == 3 else -1
        for sym, t in (("k", k), ("v", v)):
            _check_block(sym, t, (g, n_new, d), self.K_pool.dtype, "(g, n_new, d_head)", "PagedKVCache.append")
        length = self.lengths[seq_id]
        n_blocks_after = -(-(length + n_new) // bs)
        partial = length % bs != 0 and n_new > 0  # the first write lands in the last, partly filled block
        cow = partial and self._refs[table[-1]] > 1
        need = n_blocks_after - len(table) + int(cow)
        if need > len(self._free):
            raise ValueError(
                f"KV block pool exhausted: sequence {seq_id!r} needs {need} free block(s) of {bs} positions "
                f"for {n_new} new position(s), {len(self._free)} of {len(self._refs)} are free"
            )
        if cow:  # copy-on-write: the last block is shared with another sequence
            src, dst = table[-1], self._take()
            self.K_pool[dst], self.V_pool[dst] = self.K_pool[src], self.V_pool[src]
            self._release([src])
            table[-1] = dst
        while len(table) < n_blocks_after:
            table.append(self._take())
        pos = torch.arange(length, length + n_new)
        blocks = torch.tensor(table, dtype=torch.long)[pos // bs]
        self.K_pool[blocks, :, pos % bs] = k.transpose(0, 1)  # advanced indices first: (n_new, g, d_head)
        self.V_pool[blocks, :, pos % bs] = v.transpose(0, 1)
        self.lengths[seq_id] = length + n_new

    def gather(self, seq_ids: Sequence[Hashable]) -> tuple[Tensor, Tensor, Tensor]:
        """Read the keys and values of several sequences through their block tables, padded to the longest.

        Args:
            seq_ids: allocated sequences, one batch row each.

        Shape:
            K, V: ``(B, g, n_max, d_head)`` with ``B = len(seq_ids)`` and ``n_max`` the longest length.
            valid: ``(B, n_max)``.

        Returns:
            ``(K, V, valid)``: ``valid`` is boolean, ``True`` where a position is
            cached (the rest is padding, whose keys must be masked).

        Raises:
            ValueError: if ``seq_ids`` is empty or a sequence is not allocated.
        """
        if len(seq_ids) == 0:
            raise ValueError("gather needs at least one sequence")
        tables = [self._table(s) for s in seq_ids]
        lengths = torch.tensor([self.lengths[s] for s in seq_ids])
        n_max = int(lengths.max())
        pos = torch.arange(n_max)
        valid = pos[None, :] < lengths[:, None]
        width = max(1, max(len(t) for t in tables))
        table_t = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long)  # pad with block 0
        logical = torch.where(valid, pos[None, :] // self.block_size, 0)
        blocks = table_t.gather(1, logical)  # (B, n_max) physical block of every position
        offsets = torch.where(valid, pos[None, :] % self.block_size, 0)
        dev = self.K_pool.device
        blocks, offsets = blocks.to(dev), offsets.to(dev)
        K = self.K_pool[blocks, :, offsets].transpose(1, 2)  # (B, n_max, g, d) -> (B, g, n_max, d)
        V = self.V_pool[blocks, :, offsets].transpose(1, 2)
        return K, V, valid.to(dev)


@catalogued("extra:paged-kv-cache")
def paged_attention(q: Tensor, cache: PagedKVCache, seq_ids: Sequence[Hashable]) -> tuple[Tensor, Tensor]:
    """Causal attention of the newest ``n_q`` positions of each sequence to everything its block table holds.

    The keys and values are gathered through the block tables
    (:meth:`PagedKVCache.gather`), then
    :func:`~attnsurvey.beyond.decoding.grouped_query_attention` runs with a
    boolean mask (``True`` = may attend) that admits, for query ``i`` of a
    sequence of length ``n``, the cached keys ``j <= i + n - n_q`` and no padding.
    Append the new positions' keys and values before calling it.

    Args:
        q: queries of the last ``n_q`` positions of each sequence.
        cache: the paged cache holding the sequences.
        seq_ids: the sequences, one per batch row of ``q``.

    Shape:
        q: ``(B, h, n_q, d_head)``; returns c ``(B, h, n_q, d_head)`` and a ``(B, h, n_q, n_max)``.

    Returns:
        ``(c, a)``: the contexts and the weights over the gathered (padded) positions.

    Raises:
        ValueError: if a sequence is not allocated, ``q`` has the wrong rank, batch or head size, ``g`` does not divide
            ``h``, or a sequence holds fewer than ``n_q`` positions.
    """
    as_tensor(q, "q")
    check_rank(q, 4, "q", "(B, h, n_q, d_head)")
    B, _, n_q, d = q.shape
    if B != len(seq_ids) or d != cache.K_pool.shape[-1]:
        raise ValueError(
            f"q {tuple(q.shape)} must be (B, h, n_q, d_head) with B = {len(seq_ids)} sequences "
            f"and d_head = {cache.K_pool.shape[-1]}"
        )
    K, V, valid = cache.gather(seq_ids)
    lengths = valid.sum(-1)
    if bool((lengths < n_q).any()):
        raise ValueError(f"every sequence must hold the n_q={n_q} query positions, lengths {lengths.tolist()}")
    i = torch.arange(n_q, device=q.device)[:, None]
    j = torch.arange(K.shape[-2], device=q.device)[None, :]
    causal = j[None] <= i[None] + (lengths[:, None, None] - n_q)  # (B, n_q, n_max)
    mask = (causal & valid[:, None, :])[:, None]  # (B, 1, n_q, n_max): shared by the heads
    return grouped_query_attention(q, K, V, mask)


@catalogued("extra:sliding-window-cache", title="Sliding-window KV cache: a ring buffer of the last w positions")
class SlidingWindowCache:
    """A ring buffer of the keys and values of the last ``w`` positions, for sliding-window attention.

    Query ``i`` attends to keys ``i - w < j <= i`` (``w`` keys, its own
    included). Position ``p`` is stored in slot ``p % w``; ``positions`` records
    which absolute position each slot holds (-1 = empty). The memory is
    ``2 * B * g * w * d_head`` numbers whatever the sequence length.

    Args:
        batch: ``B``, sequences decoded together.
        n_kv_heads: ``g``, key/value heads.
        window: ``w``, keys per query.
        d_head: size of one head.
        dtype: dtype of the buffer (default float32).
        device: device of the buffer (default the default device).

    Shape:
        K, V: ``(B, g, w, d_head)``; positions: ``(w,)``.

    Raises:
        ValueError: if a size is not an integer >= 1.
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        window: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        check_integers(
            "SlidingWindowCache", minimum=1, batch=batch, n_kv_heads=n_kv_heads, window=window, d_head=d_head
        )
        self.K = torch.zeros(batch, n_kv_heads, window, d_head, dtype=dtype, device=device)
        self.V = torch.zeros_like(self.K)
        self.positions = torch.full((window,), -1, dtype=torch.long, device=device)
        self.window = window
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the ring buffer (keys and values)."""
        return self.K.element_size() * (self.K.numel() + self.V.numel())

    def step(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Attend from ``n`` new positions with a window of ``w`` keys, then keep the last ``w`` positions.

        The new keys and values are placed after the buffer's, the mask (boolean,
        ``True`` = may attend) admits key ``j`` for query ``i`` when ``i - w < j <= i``,
        and :func:`~attnsurvey.beyond.decoding.grouped_query_attention` computes the
        attention; then the last ``min(n, w)`` new positions overwrite the oldest slots.

        Args:
            q: queries of the new positions.
            k: their keys.
            v: their values.

        Shape:
            q: ``(B, h, n, d_head)``; k, v: ``(B, g, n, d_head)``; returns c ``(B, h, n, d_head)``
            and a ``(B, h, n, w + n)`` (weights over the buffer's slots, then the new keys).

        Returns:
            ``(c, a)``: contexts and weights.

        Raises:
            ValueError: if a tensor has the wrong shape or dtype, or ``g`` does not divide ``h``.
        """
        n = check_step_inputs(self.K, q, k, v, "SlidingWindowCache.step")
        mask = self.next_mask(n)[None]  # (1, n, w + n): shared by batch and heads
        return grouped_query_attention(q, *self.extend(k, v), mask)

    def next_mask(self, n: int) -> Tensor:
        """The window of the next ``n`` positions over the buffer's slots and then the new keys.

        Query ``i`` (position ``length + i``) may attend the key of position ``p`` when
        ``length + i - w < p <= length + i``; empty slots are masked.

        Args:
            n: the number of new positions.

        Shape:
            returns ``(n, w + n)``, boolean, ``True`` = may attend.

        Returns:
            The mask, for keys in the order of :meth:`extend`'s result.

        Raises:
            ValueError: if ``n`` is not an integer >= 0.
        """
        check_integers("SlidingWindowCache.next_mask", minimum=0, n=n)
        new_pos = self.length + torch.arange(n, device=self.positions.device)
        p_q, p_k = new_pos[:, None], torch.cat([self.positions, new_pos])[None, :]
        return (p_k >= 0) & (p_k <= p_q) & (p_k > p_q - self.window)

    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The buffer's keys and values followed by ``n`` new ones; then the last ``min(n, w)`` new ones are kept.

        A ``kv_transform`` for the multi-head module: call :meth:`next_mask` first (it reads
        the slots as they are before this call).

        Args:
            k: the new keys.
            v: the new values.

        Shape:
            k, v: ``(B, g, n, d_head)``; returns two ``(B, g, w + n, d_head)``.

        Returns:
            ``(K, V)`` over the buffer's slots and then the new positions (copies: the buffer is
            overwritten afterwards).

        Raises:
            ValueError: if k or v has the wrong shape or dtype.
        """
        B, g, w, d = self.K.shape
        n = k.shape[-2] if isinstance(k, Tensor) and k.dim() == 4 else -1
        for sym, t in (("k", k), ("v", v)):
            _check_block(sym, t, (B, g, n, d), self.K.dtype, "(B, g, n, d_head)", "SlidingWindowCache.extend")
        K_all, V_all = torch.cat([self.K, k], -2), torch.cat([self.V, v], -2)
        new_pos = self.length + torch.arange(n, device=self.positions.device)
        keep = slice(max(0, n - w), n)  # positions beyond the last w are never needed again
        slots = new_pos[keep] % w
        self.K[:, :, slots], self.V[:, :, slots] = k[:, :, keep], v[:, :, keep]
        self.positions[slots] = new_pos[keep]
        self.length += n
        return K_all, V_all

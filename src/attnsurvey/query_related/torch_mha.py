"""A drop-in replacement for ``torch.nn.MultiheadAttention`` on the package's one multi-head stack.

:class:`TorchMultiheadAttention` takes torch's constructor and ``forward`` arguments
and **torch's mask polarity** (a boolean mask is ``True`` where attention is
*blocked*; a float mask is added to the scores), and computes with
:func:`attnsurvey.query_related.multihead.multi_head_attention`, whose own masks
are ``True`` = may attend. :func:`from_torch_state_dict` maps torch's parameter
names to the package's, so torch's weights load as they are.

Shape legend: ``B`` batch, ``L`` (= ``n_q``) target length, ``S`` (= ``n_f``)
source length, ``E`` embedding size (``d_model``), ``h`` (``num_heads``) heads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from .._checks import as_tensor
from .multihead import MultiHeadAttention

CHAPTER = "chapters/ch03_3_2_query_multiplicity.ipynb"


def _torch_mask(mask: Tensor | None, symbol: str) -> Tensor | None:
    """torch polarity (bool ``True`` = blocked; float = additive) -> ours (bool ``True`` = may attend)."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or not (mask.dtype == torch.bool or mask.is_floating_point()):
        raise ValueError(
            f"{symbol} must be a boolean or floating tensor, got {getattr(mask, 'dtype', type(mask).__name__)}"
        )
    return ~mask if mask.dtype == torch.bool else mask


def _check_torch_mask_shape(mask: Tensor, query: Tensor, key: Tensor, h: int, batch_first: bool) -> None:
    """torch's ``attn_mask``: ``(L, S)`` or ``(B * num_heads, L, S)``; refuse another shape, showing the one passed.

    query/key: batched ``(B, L, E)``/``(B, S, E)`` (``(L, B, E)``/``(S, B, E)`` unless batch_first).
    ``(L, S)`` may broadcast (a size 1 stands for all), as the core allows; the leading
    size of a 3-D mask must be ``B * num_heads`` (it is split into the two).
    """
    if query.dim() != 3 or key.dim() != 3 or mask.dim() not in (2, 3):
        return  # the module reports the inputs' shapes, the core a mask of another rank
    B, L = (query.shape[0], query.shape[1]) if batch_first else (query.shape[1], query.shape[0])
    S = key.shape[1] if batch_first else key.shape[0]
    try:
        fits = torch.broadcast_shapes(mask.shape[-2:], (L, S)) == (L, S)
    except RuntimeError:
        fits = False
    if mask.dim() == 3 and mask.shape[0] != B * h or not fits:
        want = f"(L, S) = ({L}, {S})" if mask.dim() == 2 else f"(B * num_heads, L, S) = ({B * h}, {L}, {S})"
        sizes = "" if mask.dim() == 2 else f" (B={B}, num_heads={h})"
        raise ValueError(f"a {mask.dim()}-D attn_mask must have shape {want}{sizes}, got {tuple(mask.shape)}")


def _check_unbatched_padding(kpm: object, S: int) -> None:
    """torch's key_padding_mask of unbatched inputs is ``(S,)``: checked before the batch axis is added."""
    if isinstance(kpm, Tensor) and (kpm.dim() != 1 or kpm.shape[0] not in (S, 1)):
        raise ValueError(f"key_padding_mask of unbatched inputs must have shape (S,) = ({S},), got {tuple(kpm.shape)}")


class TorchMultiheadAttention(MultiHeadAttention):
    """A drop-in replacement for ``torch.nn.MultiheadAttention`` built on the one multi-head stack.

    Differences from torch: a fully-masked row gives a zero output (torch: NaN);
    ``is_causal=True`` without ``attn_mask`` applies the causal mask (torch raises).
    Load torch's weights with :meth:`from_torch` or
    ``load_state_dict(torch_module.state_dict())`` (names mapped by :func:`from_torch_state_dict`).

    Args:
        embed_dim: ``E``, the query and output size.
        num_heads: ``h``; it must divide ``embed_dim``.
        dropout: attention dropout (training mode only).
        bias: biases on the four projections.
        add_bias_kv: one learned extra key and value.
        add_zero_attn: one extra zero key and value.
        kdim: the key feature size (default ``embed_dim``).
        vdim: the value feature size (default ``embed_dim``).
        batch_first: ``(B, L, E)`` inputs; False (torch's default): ``(L, B, E)``.
        device: where the parameters live.
        dtype: the parameters' dtype.

    Shape:
        forward: query ``(B, L, E)`` (``(L, B, E)`` unless batch_first, or unbatched ``(L, E)``),
        key ``(B, S, kdim)``, value ``(B, S, vdim)``; output like query; weights
        ``(B, L, S)`` averaged or ``(B, h, L, S)``.

    Raises:
        ValueError: as :class:`~attnsurvey.query_related.multihead.MultiHeadAttention`
            (``num_heads`` not dividing ``embed_dim``, dropout outside ``[0, 1]``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads,
            bias=bias,
            dropout=dropout,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            kdim=kdim,
            vdim=vdim,
            batch_first=batch_first,
            average_attn_weights=True,
            device=device,
            dtype=dtype,
        )
        self.embed_dim, self.num_heads = embed_dim, num_heads

    # ignore: a drop-in for torch.nn.MultiheadAttention takes torch's arguments, not MultiHeadAttention's
    def forward(  # type: ignore[override]
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """torch's ``forward``: a boolean ``attn_mask``/``key_padding_mask`` is ``True`` where attention is *blocked*.

        Args:
            query: the queries.
            key: the key features.
            value: the value features.
            key_padding_mask: boolean (``True`` = padding, blocked) or float (added), one entry per key.
            need_weights: return the weights.
            attn_mask: boolean (``True`` = blocked) or float (added), ``(L, S)`` or ``(B * h, L, S)``.
            average_attn_weights: average the weights over the heads.
            is_causal: the causal mask (applied when ``attn_mask`` is None).

        Shape:
            as the class: query ``(B, L, E)``, key/value ``(B, S, ·)``, key_padding_mask ``(B, S)``
            (``(S,)`` unbatched); returns ``(B, L, E)`` and ``(B, L, S)`` or ``(B, h, L, S)``.

        Returns:
            ``(output, weights or None)``.

        Raises:
            ValueError: for masks of another dtype or shape, or inputs that do not fit the module.
        """
        for sym, t in (("query", query), ("key", key), ("value", value)):
            as_tensor(t, sym)
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = (x.unsqueeze(1 if not self.batch_first else 0) for x in (query, key, value))
            if key_padding_mask is not None:
                _check_unbatched_padding(key_padding_mask, key.shape[-2] if self.batch_first else key.shape[0])
                key_padding_mask = key_padding_mask.unsqueeze(0)
        mask = _torch_mask(attn_mask, "attn_mask")
        if mask is not None:
            _check_torch_mask_shape(mask, query, key, self.h, self.batch_first)
        if mask is not None and mask.dim() == 3:  # torch: (B * num_heads, L, S)
            mask = mask.reshape(-1, self.h, *mask.shape[-2:])
        elif mask is not None and mask.dim() == 2:  # torch: (L, S), shared by the batch whatever its size
            mask = mask[None]
        kpm = _torch_mask(key_padding_mask, "key_padding_mask")
        bias = None
        if kpm is not None and kpm.is_floating_point():
            bias, kpm = kpm[..., None, None, :], None  # float key padding: additive, per batch row
        out, a = super().forward(
            query,
            key,
            mask,
            X_v=value,
            key_padding_mask=kpm,
            bias=bias,
            is_causal=is_causal and attn_mask is None,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
        )
        if unbatched:
            out = out.squeeze(1 if not self.batch_first else 0)
            a = None if a is None else a.squeeze(0)
        return out, a

    # -> Any as torch's own (it returns its private _IncompatibleKeys named tuple, unannotated)
    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load this module's own state dict, or torch's (``in_proj_weight``, ``out_proj.weight``, ...).

        Args:
            state_dict: either naming.
            strict: as ``nn.Module.load_state_dict``.
            assign: as ``nn.Module.load_state_dict``.

        Returns:
            torch's result (missing and unexpected keys).

        Raises:
            ValueError: for a torch state dict that lacks a weight (:func:`from_torch_state_dict`).
        """
        if any(k in state_dict for k in ("in_proj_weight", "q_proj_weight", "out_proj.weight")):
            state_dict = from_torch_state_dict(state_dict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> TorchMultiheadAttention:
        """A copy of a ``torch.nn.MultiheadAttention``: same configuration, same weights, same mode.

        Args:
            module: the torch module.

        Returns:
            The copy.
        """
        ours = cls(
            module.embed_dim,
            module.num_heads,
            dropout=module.dropout,
            bias=module.in_proj_bias is not None,
            add_bias_kv=module.bias_k is not None,
            add_zero_attn=module.add_zero_attn,
            kdim=module.kdim,
            vdim=module.vdim,
            batch_first=module.batch_first,
            device=module.out_proj.weight.device,
            dtype=module.out_proj.weight.dtype,
        )
        ours.load_state_dict(module.state_dict())
        return ours.train(module.training)


def from_torch_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Map a ``torch.nn.MultiheadAttention`` state dict to :class:`MultiHeadAttention`'s names.

    ``in_proj_weight`` (or ``q/k/v_proj_weight``) -> ``W_Q/W_K/W_V.weight``;
    ``in_proj_bias`` -> their biases; ``out_proj.*`` -> ``W_O.*``; ``bias_k``/``bias_v`` kept.

    Args:
        state_dict: torch's parameters by torch's names.

    Shape:
        ``in_proj_weight`` ``(3*d_model, d_model)`` is split into three ``(d_model, d_model)`` row
        blocks (likewise ``in_proj_bias`` into three ``(d_model,)``); the other tensors keep their shapes.

    Returns:
        The same tensors by the package's names.

    Raises:
        ValueError: naming the key, if a required weight is missing (the input projection
            ``in_proj_weight`` or all three ``q/k/v_proj_weight``, and ``out_proj.weight``).
    """
    sd = dict(state_dict)
    out: dict[str, Tensor] = {}
    separate = ("q_proj_weight", "k_proj_weight", "v_proj_weight")
    if sd.get("in_proj_weight") is not None:
        wq, wk, wv = sd.pop("in_proj_weight").chunk(3)
    elif any(name in sd for name in separate):
        if missing := [name for name in separate if sd.get(name) is None]:
            raise ValueError(f"torch.nn.MultiheadAttention state dict lacks {', '.join(missing)}")
        wq, wk, wv = (sd.pop(name) for name in separate)
    else:
        raise ValueError("not a torch.nn.MultiheadAttention state dict: no in_proj_weight or q_proj_weight")
    sd.pop("in_proj_weight", None)
    out["W_Q.weight"], out["W_K.weight"], out["W_V.weight"] = wq, wk, wv
    if sd.get("in_proj_bias") is not None:
        out["W_Q.bias"], out["W_K.bias"], out["W_V.bias"] = sd.pop("in_proj_bias").chunk(3)
    if "out_proj.weight" not in sd:
        raise ValueError("torch.nn.MultiheadAttention state dict lacks out_proj.weight")
    out["W_O.weight"] = sd.pop("out_proj.weight")
    if "out_proj.bias" in sd:
        out["W_O.bias"] = sd.pop("out_proj.bias")
    for name in ("bias_k", "bias_v"):
        if sd.get(name) is not None:
            out[name] = sd.pop(name)
    return out


__all__ = ["TorchMultiheadAttention", "from_torch_state_dict"]

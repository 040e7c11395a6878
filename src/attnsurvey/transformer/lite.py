"""Lite Transformer: long-short range attention (LSRA; Wu et al., 2020).

The channels are split in two halves. One half goes through multi-head
self-attention, which is free to look anywhere (long range); the other
through a depthwise convolution over the sequence, which only sees a window
of ``kernel_size`` neighbours (short range). The outputs are concatenated.
Wu et al. use lightweight or dynamic convolutions (kernels softmax-normalised
and shared across channel groups, or predicted from the input); here the branch
is a plain depthwise convolution with one free kernel per channel.
Attention no longer has to spend heads on local patterns, so a smaller
model does as well.

Shapes: ``...`` leading batch axes, n tokens, d (d_model) width, h heads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import as_tensor, check_integers, check_min_rank, check_weight
from ..catalog import catalogued
from ..masking import attended_keys, check_boolean, zero_masked
from ..query_related.multihead import MultiHeadAttention
from .model import FeedForward, LayerNorm, residual_norm

CHAPTER = "chapters/ch03_3_4_transformer_variants.ipynb"


@catalogued("extra:lite-transformer")
def depthwise_conv(X: Tensor, W: Tensor, b: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
    """Depthwise 1-D convolution over the sequence axis with 'same' padding.

    ``out[i, c] = sum_t W[c, t] X[i - r + t, c] + b[c]``, ``r = kernel_size // 2``.
    A padded position counts as the zero padding beyond the ends (its value, even
    NaN, is inert), so a real token's output equals that of the unpadded sequence.
    ``n = 0`` gives an empty ``(..., 0, d)`` result.

    Args:
        X: the sequence.
        W: one filter per channel, of odd size.
        b: the bias per channel, or None.
        mask: boolean, ``True`` = a real token.

    Shape:
        - X: ``(..., n, d)``; W: ``(d, kernel_size)``; b: ``(d,)``; mask: ``(..., n)``.
        - Output: ``(..., n, d)``.

    Returns:
        The convolved sequence.

    Raises:
        ValueError: for an even kernel, mismatched widths or a mask that is not
            boolean ``(..., n)``.
        TypeError: if X is not a floating-point tensor.
    """
    as_tensor(X, "X")
    check_min_rank(X, 2, "X", "(..., n, d)")
    d, ks = X.shape[-1], W.shape[-1]
    if ks % 2 == 0:
        raise ValueError(f"kernel_size must be odd for 'same' padding, got {ks}")
    check_weight(W, (d, ks), "W_conv", "(d, kernel_size)")
    batch, n = X.shape[:-2], X.shape[-2]
    if mask is not None:
        check_boolean(mask, "mask", "a real token")
        if mask.shape[-1:] != (n,):
            raise ValueError(f"mask must have shape (..., n) with n={n} (the length of X), got {tuple(mask.shape)}")
        X = torch.where(mask[..., None], X, torch.zeros((), dtype=X.dtype, device=X.device))
    if n == 0 or X.numel() == 0:
        return X.new_zeros(X.shape)
    x = X.reshape(-1, n, d).transpose(-1, -2)  # (B, d, n)
    y = F_.conv1d(x, W[:, None, :], b, padding=ks // 2, groups=d)
    return y.transpose(-1, -2).reshape(*batch, n, d)


@catalogued(
    "extra:lite-transformer",
    title="Lite Transformer long-short range attention: attention branch + depthwise convolution branch",
)
def long_short_range_attention(
    X: Tensor,
    attention: Callable[[Tensor], tuple[Tensor, Tensor]],
    W_conv: Tensor,
    b_conv: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """LSRA: ``concat(attention(X_left), conv(X_right))`` with the channels split in half.

    Padded positions are zero (inert) in the convolution branch; the attention
    callable handles its own mask.

    Args:
        X: the sequence (even width).
        attention: maps ``(..., n, d/2)`` to ``(output, weights)``.
        W_conv: the depthwise filters of the convolution branch.
        b_conv: their bias, or None.
        key_padding_mask: boolean, ``True`` = real token (may attend, the key-padding polarity).

    Shape:
        - X: ``(..., n, d)``; W_conv: ``(d/2, kernel_size)``; key_padding_mask: ``(..., n)``.
        - Output: ``(Y (..., n, d), weights)`` (the weights as the attention callable returns them).

    Returns:
        ``(Y, weights)``.

    Raises:
        ValueError: if ``d`` is odd (or as :func:`depthwise_conv`).
        TypeError: if X is not a floating-point tensor.
    """
    as_tensor(X, "X")
    d = X.shape[-1]
    if d % 2:
        raise ValueError(f"LSRA splits d_model in two halves; got odd d_model={d}")
    left, right = X[..., : d // 2], X[..., d // 2 :]
    global_part, a = attention(left)
    return torch.cat([global_part, depthwise_conv(right, W_conv, b_conv, key_padding_mask)], dim=-1), a


@catalogued("extra:lite-transformer")
class LiteTransformerBlock(nn.Module):
    """A Lite Transformer encoder block: LSRA and FFN, each with residual + LayerNorm (post-norm).

    key_padding_mask is applied to both branches, so padding reaches no real token
    (the convolution treats padded positions as zeros beyond the end). Without a
    key_padding_mask, the keys a boolean mask lets no query attend count as padding
    for the convolution branch too.

    Args:
        d_model: the model width (even; ``d_model/2`` divisible by ``h``).
        h: the number of heads of the attention branch.
        d_ff: the FFN width.
        kernel_size: the size of the depthwise convolution (odd).

    Shape:
        - X: ``(..., n, d_model)``.
        - mask: attention mask ``(..., n, n)`` for the attention branch, boolean with
          ``True`` = may attend (or a float additive bias).
        - key_padding_mask: boolean ``(..., n)``, ``True`` = real token (may attend).
        - Output: ``(X' (..., n, d_model), weights (..., h, n, n))``.

    Raises:
        ValueError: if ``d_model`` is odd or ``h`` does not divide ``d_model/2``.
    """

    def __init__(self, d_model: int, h: int, d_ff: int, kernel_size: int = 3) -> None:
        check_integers("LiteTransformerBlock", minimum=1, d_model=d_model, h=h, d_ff=d_ff, kernel_size=kernel_size)
        super().__init__()
        if d_model % 2 or (d_model // 2) % h:
            raise ValueError(f"d_model={d_model} must be even and d_model/2 divisible by h={h}")
        self.attn = MultiHeadAttention(d_model // 2, h, bias=True)
        self.W_conv = nn.Parameter(torch.randn(d_model // 2, kernel_size) / kernel_size**0.5)
        self.b_conv = nn.Parameter(torch.zeros(d_model // 2))
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)

    def forward(
        self, X: Tensor, mask: Tensor | None = None, *, key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        box: list[Tensor] = []
        as_tensor(X, "X")
        # keys that no query may attend are padding for the convolution branch too
        padding = key_padding_mask
        if padding is None and isinstance(mask, Tensor) and mask.dtype == torch.bool and 2 <= mask.dim() <= X.dim():
            keys = attended_keys(mask)
            try:
                if keys is not None and torch.broadcast_shapes(keys.shape, X.shape[:-1]) == X.shape[:-1]:
                    padding = keys.expand(X.shape[:-1])
            except RuntimeError:
                pass  # a mask that does not fit: the attention branch reports it
        X = zero_masked(X, padding)  # a padded token holding NaN is inert in the gradients too

        def lsra(Z: Tensor) -> Tensor:
            out, a = long_short_range_attention(
                Z,
                lambda L: self.attn(L, L, mask, key_padding_mask=key_padding_mask),
                self.W_conv,
                self.b_conv,
                padding,
            )
            box.append(a)
            return out

        X = residual_norm(X, lsra, self.norm1, False)
        return residual_norm(X, self.ffn, self.norm2, False), box[0]

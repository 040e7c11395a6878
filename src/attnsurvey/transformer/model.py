"""The Transformer's encoder and decoder (Vaswani et al., 2017; survey §3.3.2).

An encoder layer is two sub-layers, each wrapped in a residual connection and
a layer normalisation:

1. multi-head self-attention, Eq. (38)-(40) with the scaled multiplicative
   score (review eq. 13): every token queries every other token;
2. a position-wise feed-forward network ``FFN(x) = W_2 relu(W_1 x + b_1) + b_2``.

A decoder layer has three: causal (masked) self-attention, cross-attention
whose queries come from the decoder and keys/values from the encoder output,
and the feed-forward network.

Residual + normalisation comes in two orders:

* post-norm (the original paper): ``x = LayerNorm(x + sublayer(x))``;
* pre-norm: ``x = x + sublayer(LayerNorm(x))``, with one more LayerNorm after
  the last layer. The identity path is then untouched from input to output,
  which keeps gradients well scaled in deep stacks (Xiong et al., 2020).

The survey reads the stack as multi-hop attention: ``F`` is only the input of
the first hop, and each layer refines the feature matrix for the next.
Masks are boolean, ``True`` = may attend.

The layers take the options of ``torch.nn.TransformerEncoderLayer`` /
``DecoderLayer``, declared once in :class:`LayerOptions` (keyword-only; the
defaults, :data:`LAYER_OPTIONS`, reproduce the layers the chapters use):
``activation`` (``"relu"``, ``"gelu"`` or a callable), ``dropout`` (on the
attention weights, inside the FFN and on each sub-layer's output, as torch
places it; 0 by default, since the book's experiments are tiny and
deterministic), ``bias=False`` (no bias in any projection or LayerNorm),
``layer_norm_eps``; ``forward`` takes ``key_padding_mask`` and ``is_causal``
(the decoder: :class:`DecoderMasks`); :class:`Encoder` and :class:`Decoder`
take ``final_norm`` (default: only with pre-norm; ``torch.nn.Transformer``
always has one). The models built from these stacks (:class:`SequenceTagger`,
:class:`Seq2SeqTransformer`) take their sizes as :class:`TransformerSize`
(defaults :data:`TRANSFORMER_SIZE`). An option name that a declaration does
not hold raises ``TypeError``. With copied weights
(:func:`from_torch_transformer_state_dict`) the outputs equal torch's (tests:
float64, eval mode, 1e-10).

Shapes: ``...`` leading batch axes (B batch), n tokens (n_x source, n_y target), d_model model
width, h heads, d_ff FFN width.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, ClassVar, Final, TypedDict, Unpack

import torch
import torch.nn.functional as F_
from torch import Tensor, nn

from .._checks import (
    Default,
    as_tensor,
    check_dim_equal,
    check_index_range,
    check_integers,
    check_min_rank,
    check_probability,
    check_weight,
    option_defaults,
    require_tensor,
    with_defaults,
)
from ..catalog import catalogued
from ..masking import padding_mask, zero_unattended
from ..query_related.multihead import MultiHeadAttention, SelfAttentionVariant
from ..query_related.torch_mha import from_torch_state_dict
from ..query_related.types import normalize_rows
from .positional import LearnedPositionEncoding, SinusoidalPositionEncoding
from .relative import GaussianLocalSelfAttention, RelativeSelfAttention

CHAPTER = "chapters/ch03_3_3_transformer.ipynb"

Activation = Callable[[Tensor], Tensor]
ACTIVATIONS: dict[str, Activation] = {"relu": F_.relu, "gelu": F_.gelu}


def _activation(activation: str | Activation) -> Activation:
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or a callable, got {activation!r}")
        return ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"activation must be a name or a callable Tensor -> Tensor, got {type(activation).__name__}")
    return activation


def _check_dropout(p: float) -> float:
    check_probability("Transformer layer", dropout=p)
    return p


class LayerOptions(TypedDict, total=False):
    """The options of ``torch.nn.TransformerEncoderLayer`` / ``DecoderLayer`` that the layers and stacks here take.

    Keyword-only; an option left out takes its value in :data:`LAYER_OPTIONS`.
    activation: ``"relu"``, ``"gelu"`` or a callable; dropout: the probability
    (attention weights, FFN, each sub-layer's output); bias: False drops the
    bias of every projection and LayerNorm; layer_norm_eps: the LayerNorms' epsilon.
    """

    activation: Annotated[str | Activation, Default(F_.relu)]
    dropout: Annotated[float, Default(0.0)]
    bias: Annotated[bool, Default(True)]
    layer_norm_eps: Annotated[float, Default(1e-5)]


#: The defaults of :class:`LayerOptions` (torch's, except dropout 0: the book's experiments are tiny and deterministic).
LAYER_OPTIONS: Final[LayerOptions] = option_defaults(LayerOptions)


@catalogued("extra:transformer-encoder")
def position_wise_ffn(
    X: Tensor, W_1: Tensor, b_1: Tensor, W_2: Tensor, b_2: Tensor, activation: Activation = F_.relu
) -> Tensor:
    """The position-wise feed-forward network ``FFN(x) = W_2 act(W_1 x + b_1) + b_2``, applied to every row.

    Args:
        X: the inputs.
        W_1: the first weight.
        b_1: the first bias, or None (no bias).
        W_2: the second weight.
        b_2: the second bias, or None (no bias).
        activation: the activation ``act``, a callable ``Tensor -> Tensor``.

    Shape:
        - X: ``(..., n, d_model)``; W_1: ``(d_ff, d_model)``; b_1: ``(d_ff,)``;
          W_2: ``(d_model, d_ff)``; b_2: ``(d_model,)``.
        - Output: ``(..., n, d_model)``.

    Returns:
        The FFN applied to every row of X.

    Raises:
        ValueError: on shape mismatches.
    """
    for symbol, x in {"X": X, "W_1": W_1, "b_1": b_1, "W_2": W_2, "b_2": b_2}.items():
        if x is not None or symbol.startswith(("X", "W")):  # the biases may be None
            as_tensor(x, symbol)
    d_model, d_ff = X.shape[-1], W_1.shape[0]
    check_weight(W_1, (d_ff, d_model), "W_1", "(d_ff, d_model)")
    check_weight(W_2, (d_model, d_ff), "W_2", "(d_model, d_ff)")
    if b_1 is not None:
        check_weight(b_1, (d_ff,), "b_1", "(d_ff,)")
    if b_2 is not None:
        check_weight(b_2, (d_model,), "b_2", "(d_model,)")
    H = X @ W_1.T  # matmul then add, as before the bias became optional (bit-identical outputs)
    H = activation(H if b_1 is None else H + b_1) @ W_2.T
    return H if b_2 is None else H + b_2


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the last axis that also normalises rows near the dtype's range.

    torch's LayerNorm squares the deviations, so a float32 row near ``1e20``
    (variance ``1e40``) comes out NaN. Rows whose largest magnitude exceeds
    ``max ** (1/4)`` of the dtype go through :func:`~attnsurvey.query_related.types.normalize_rows`
    (scaled before squaring) instead; every other row gets torch's own result, bit for bit.
    Parameters and state-dict keys are ``nn.LayerNorm``'s.

    Shape:
        - x: ``(..., d_model)``. Output: ``(..., d_model)``.
    """

    def forward(self, x: Tensor) -> Tensor:
        out = super().forward(x)
        if len(self.normalized_shape) != 1 or not x.is_floating_point() or not x.numel():
            return out
        big_entries = x.detach().abs() > torch.finfo(x.dtype).max ** 0.25
        if not bool(big_entries.any()):  # the common case: one comparison, no reduction over rows
            return out
        big = big_entries.any(-1, keepdim=True)
        y = normalize_rows(x, self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return torch.where(big, y.to(out.dtype), out)


@catalogued(
    "extra:pre-post-norm",
    title="Residual + normalisation: post-norm LayerNorm(x + f(x)) vs pre-norm x + f(LayerNorm(x))",
)
def residual_norm(
    X: Tensor, sublayer: Callable[[Tensor], Tensor], norm: Callable[[Tensor], Tensor], norm_first: bool
) -> Tensor:
    """One residual sub-layer: post-norm ``norm(X + f(X))`` or pre-norm ``X + f(norm(X))``.

    Args:
        X: the sub-layer's input.
        sublayer: ``f``, shape-preserving.
        norm: the normalisation (e.g. a LayerNorm).
        norm_first: pre-norm (True) or post-norm (False).

    Shape:
        - X: ``(..., n, d_model)``.
        - Output: ``(..., n, d_model)``.

    Returns:
        The sub-layer's output with the residual added.

    Raises:
        TypeError: if X is not a floating-point tensor.
    """
    as_tensor(X, "X")
    if norm_first:
        return X + sublayer(norm(X))
    return norm(X + sublayer(X))


class FeedForward(nn.Module):
    """Module form of :func:`position_wise_ffn` (``linear1``: ``W_1``, ``linear2``: ``W_2``).

    Args:
        d_model: the model width.
        d_ff: the hidden width of the FFN.
        activation: ``"relu"``, ``"gelu"`` or a callable.
        dropout: applied after the activation (training mode only), as in torch.
        bias: False drops ``b_1``, ``b_2``.

    Shape:
        - X: ``(..., n, d_model)``.
        - Output: ``(..., n, d_model)``.

    Raises:
        ValueError: if dropout lies outside ``[0, 1]`` or ``activation`` is an unknown name.
        TypeError: if ``activation`` is neither a name nor a callable.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str | Activation = F_.relu,
        *,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        check_integers("FeedForward", minimum=1, d_model=d_model, d_ff=d_ff)
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = _activation(activation)
        self.dropout = nn.Dropout(_check_dropout(dropout))

    def forward(self, X: Tensor) -> Tensor:
        act = self.activation if self.dropout.p == 0.0 else (lambda H: self.dropout(self.activation(H)))
        return position_wise_ffn(X, self.linear1.weight, self.linear1.bias, self.linear2.weight, self.linear2.bias, act)


def _attention_sublayer(
    attention: nn.Module,
    memory: Tensor | None,
    mask: Tensor | None,
    key_padding_mask: Tensor | None,
    is_causal: bool,
    drop: nn.Module,
    box: list[Tensor],
    finite_inputs: bool = False,
) -> Callable[[Tensor], Tensor]:
    """The attention sub-layer ``Z -> dropout(attention(Z, memory or Z, mask))``, its weights kept in ``box``.

    key_padding_mask and is_causal are passed only when set (a replacement
    attention module need not accept them); ``finite_inputs`` (see :class:`Seq2SeqTransformer`)
    only to the package's own multi-head modules.
    """
    options: dict[str, object] = {}
    if key_padding_mask is not None:
        options["key_padding_mask"] = key_padding_mask
    if is_causal:
        options["is_causal"] = True
    if finite_inputs and type(attention).forward in (MultiHeadAttention.forward, SelfAttentionVariant.forward):
        options["_finite_inputs"] = True

    # a rank-2 mask is (n_q, n_f), one for every example: an explicit batch axis keeps it so when B == n_q
    batched_mask = mask[None] if mask is not None and mask.dim() == 2 else mask

    def run(Z: Tensor) -> Tensor:
        out, a = attention(Z, Z if memory is None else memory, batched_mask if Z.dim() > 2 else mask, **options)
        box.append(a)
        return drop(out)

    return run


def _check_model_input(X: Tensor, d_model: int, sym: str, who: str) -> None:
    as_tensor(X, sym)
    check_min_rank(X, 2, sym, "(..., n, d_model)")
    check_dim_equal(X.shape[-1], d_model, who, f"d_model of {sym}", "d_model of the layer")


class DecoderMasks(TypedDict, total=False):
    """The keyword-only masks of :meth:`DecoderLayer.forward`; :class:`Decoder` passes them to every layer.

    self_key_padding_mask: boolean ``(..., n_y)``, ``True`` = real decoder token (may
    attend); memory_key_padding_mask: boolean ``(..., n_x)``, ``True`` = real encoder
    token (may attend); self_is_causal: adds the causal mask to the self-attention.
    Defaults in :data:`DECODER_MASKS` (no padding masks, not causal).
    """

    self_key_padding_mask: Annotated[Tensor | None, Default(None)]
    memory_key_padding_mask: Annotated[Tensor | None, Default(None)]
    self_is_causal: Annotated[bool, Default(False)]


#: The defaults of :class:`DecoderMasks`.
DECODER_MASKS: Final[DecoderMasks] = option_defaults(DecoderMasks)


class _Layer(nn.Module):
    """What encoder and decoder layers share: attention, the FFN, one LayerNorm and one dropout per sub-layer.

    Args: d_model, h (heads), d_ff (FFN width), norm_first (False: post-norm as
    in the original; True: pre-norm), self_attn (optional replacement attention
    module with signature ``(X_q, X_kv, mask) -> (out, weights)``, e.g.
    :class:`~attnsurvey.transformer.relative.RelativeSelfAttention`), and the
    keyword options of :class:`LayerOptions` (defaults in :data:`LAYER_OPTIONS`).
    A decoder layer (``has_cross_attention``) adds ``cross_attn`` and a third norm
    and dropout. Raises ``ValueError`` if ``h`` does not divide ``d_model`` or
    dropout lies outside ``[0, 1]``, ``TypeError`` for an unknown option.
    """

    has_cross_attention: ClassVar[bool]
    norm1: nn.LayerNorm
    norm2: nn.LayerNorm
    dropout1: nn.Dropout
    dropout2: nn.Dropout

    def __init__(
        self,
        d_model: int,
        h: int,
        d_ff: int,
        norm_first: bool = False,
        self_attn: nn.Module | None = None,
        **options: Unpack[LayerOptions],
    ) -> None:
        check_integers(type(self).__name__, minimum=1, d_model=d_model, h=h, d_ff=d_ff)
        super().__init__()
        o = with_defaults(options, LAYER_OPTIONS, "LayerOptions")
        bias, dropout = o["bias"], _check_dropout(o["dropout"])
        self.d_model, self.norm_first = d_model, norm_first
        self.self_attn = (
            self_attn if self_attn is not None else MultiHeadAttention(d_model, h, bias=bias, dropout=dropout)
        )
        if self.has_cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, h, bias=bias, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, o["activation"], dropout=dropout, bias=bias)
        n_sublayers = 3 if self.has_cross_attention else 2
        for i in range(1, n_sublayers + 1):  # registered in this order: norm1, norm2, ..., then dropout1, ...
            self.add_module(f"norm{i}", LayerNorm(d_model, eps=o["layer_norm_eps"], bias=bias))
        for i in range(1, n_sublayers + 1):
            self.add_module(f"dropout{i}", nn.Dropout(dropout))


@catalogued(
    "extra:transformer-encoder",
    title="Transformer encoder: multi-head self-attention + position-wise FFN, residual + LayerNorm, padding masks",
)
@catalogued("extra:pre-post-norm")
class EncoderLayer(_Layer):
    """One Transformer encoder layer: self-attention and FFN, each with residual + LayerNorm.

    A rank-2 ``(n, n)`` mask serves every example, whatever the batch size. A padded
    token (by key_padding_mask or a mask of X's rank) holding NaN/Inf is set to 0
    first, so it reaches no real output and no weight's gradient.

    Args:
        d_model, h, d_ff, norm_first, self_attn: see :class:`_Layer`.
        options: :class:`LayerOptions`, as ``torch.nn.TransformerEncoderLayer``: activation,
            dropout, bias, layer_norm_eps.

    Shape:
        - X: ``(..., n, d_model)``.
        - mask: boolean ``(..., n, n)`` or ``(..., 1, n)`` for padding, ``True`` = may attend.
        - key_padding_mask: boolean ``(..., n)``, ``True`` = real token, may attend;
          ``is_causal`` adds the causal mask.
        - Output: ``(X' (..., n, d_model), weights (..., h, n, n))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model``, X has the wrong width, or dropout
            lies outside ``[0, 1]``.
    """

    has_cross_attention = False

    def forward(
        self,
        X: Tensor,
        mask: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        _finite_inputs: bool = False,
    ) -> tuple[Tensor, Tensor]:
        _check_model_input(X, self.d_model, "X", "EncoderLayer")
        if not _finite_inputs:  # NaN in a padded token reaches no weight's gradient
            X = zero_unattended(X, key_padding_mask, mask)
        box: list[Tensor] = []
        attn = _attention_sublayer(
            self.self_attn, None, mask, key_padding_mask, is_causal, self.dropout1, box, _finite_inputs
        )
        X = residual_norm(X, attn, self.norm1, self.norm_first)
        X = residual_norm(X, lambda Z: self.dropout2(self.ffn(Z)), self.norm2, self.norm_first)
        return X, box[0]


@catalogued(
    "extra:transformer-decoder", title="Transformer decoder: causal self-attention, cross-attention to the encoder, FFN"
)
class DecoderLayer(_Layer):
    """One Transformer decoder layer: causal self-attention, cross-attention, FFN.

    As in :class:`EncoderLayer`, a rank-2 mask serves every example and padded tokens
    of Y and M holding NaN/Inf reach no real output and no gradient.

    Args:
        d_model, h, d_ff, norm_first, self_attn: as :class:`EncoderLayer` (see :class:`_Layer`).
        options: :class:`LayerOptions`, as ``torch.nn.TransformerDecoderLayer``: activation,
            dropout, bias, layer_norm_eps.

    Shape:
        - Y: ``(..., n_y, d_model)`` decoder states; M: ``(..., n_x, d_model)`` encoder output.
        - self_mask: boolean ``(..., n_y, n_y)``, ``True`` = may attend (pass a causal mask, see
          :func:`attnsurvey.masking.causal_mask`).
        - memory_mask: boolean ``(..., n_y or 1, n_x)``, ``True`` = may attend.
        - keyword-only masks (:class:`DecoderMasks`): ``self_key_padding_mask`` ``(..., n_y)``,
          ``memory_key_padding_mask`` ``(..., n_x)``, ``self_is_causal``.
        - Output: ``(Y' (..., n_y, d_model), self weights (..., h, n_y, n_y),
          cross weights (..., h, n_y, n_x))``.

    Raises:
        ValueError: if ``h`` does not divide ``d_model``, dropout lies outside ``[0, 1]``,
            or Y or M has the wrong width.
        TypeError: for an unknown mask option.
    """

    has_cross_attention = True
    cross_attn: MultiHeadAttention
    norm3: nn.LayerNorm
    dropout3: nn.Dropout

    def forward(
        self,
        Y: Tensor,
        M: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        _finite_inputs: bool = False,
        **masks: Unpack[DecoderMasks],
    ) -> tuple[Tensor, Tensor, Tensor]:
        _check_model_input(Y, self.d_model, "Y", "DecoderLayer")
        _check_model_input(M, self.d_model, "M", "DecoderLayer")
        m = with_defaults(masks, DECODER_MASKS, "DecoderMasks")
        if not _finite_inputs:  # as in EncoderLayer
            Y = zero_unattended(Y, m["self_key_padding_mask"], self_mask)
        box: list[Tensor] = []
        self_kpm, memory_kpm = m["self_key_padding_mask"], m["memory_key_padding_mask"]
        self_sub = _attention_sublayer(
            self.self_attn, None, self_mask, self_kpm, m["self_is_causal"], self.dropout1, box, _finite_inputs
        )
        cross_sub = _attention_sublayer(
            self.cross_attn, M, memory_mask, memory_kpm, False, self.dropout2, box, _finite_inputs
        )
        Y = residual_norm(Y, self_sub, self.norm1, self.norm_first)
        Y = residual_norm(Y, cross_sub, self.norm2, self.norm_first)
        Y = residual_norm(Y, lambda Z: self.dropout3(self.ffn(Z)), self.norm3, self.norm_first)
        return Y, box[0], box[1]


class _Stack(nn.Module):
    """A stack of ``n_layers`` layers of type ``layer_type`` (plus a final LayerNorm when pre-norm).

    Args: n_layers, d_model, h, d_ff, norm_first as the layer's;
    ``self_attn_factory`` (optional) builds the self-attention module of each
    layer; ``final_norm`` (default: ``norm_first``) adds a LayerNorm after the
    last layer (same eps and bias as the layers'); the keyword options of
    :class:`LayerOptions` go to every layer. Raises ``ValueError`` unless
    ``n_layers >= 1``, and what the layer raises.
    """

    layer_type: ClassVar[type[_Layer]]

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        h: int,
        d_ff: int,
        norm_first: bool = False,
        self_attn_factory: Callable[[], nn.Module] | None = None,
        *,
        final_norm: bool | None = None,
        **layer_options: Unpack[LayerOptions],
    ) -> None:
        check_integers(type(self).__name__, n_layers=n_layers)
        check_integers(type(self).__name__, minimum=1, d_model=d_model, h=h, d_ff=d_ff)
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.layers = nn.ModuleList(
            self.layer_type(
                d_model, h, d_ff, norm_first, self_attn_factory() if self_attn_factory else None, **layer_options
            )
            for _ in range(n_layers)
        )
        self.final_norm: nn.Module = nn.Identity()
        if norm_first if final_norm is None else final_norm:
            o = with_defaults(layer_options, LAYER_OPTIONS, "LayerOptions")
            self.final_norm = LayerNorm(d_model, eps=o["layer_norm_eps"], bias=o["bias"])


@catalogued("extra:transformer-encoder")
class Encoder(_Stack):
    """A stack of ``n_layers`` :class:`EncoderLayer` (plus a final LayerNorm when pre-norm).

    The masks (boolean, ``True`` = may attend) go to every layer as in :class:`EncoderLayer`.

    Args:
        n_layers: the number of layers (>= 1).
        d_model, h, d_ff, norm_first: as :class:`EncoderLayer`.
        self_attn_factory: builds each layer's self-attention module (None: the standard one).
        final_norm: whether to end with a LayerNorm (None: when ``norm_first``); see :class:`_Stack`.
        options: :class:`LayerOptions`, passed to every layer.

    Shape:
        - X: ``(..., n, d_model)``; mask, key_padding_mask: as :class:`EncoderLayer`.
        - Output: ``(X' (..., n, d_model), [weights (..., h, n, n) per layer])``.

    Raises:
        ValueError: if ``n_layers < 1`` or a layer rejects its arguments or input (see :class:`EncoderLayer`).
    """

    layer_type = EncoderLayer

    def forward(
        self,
        X: Tensor,
        mask: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        _finite_inputs: bool = False,
    ) -> tuple[Tensor, list[Tensor]]:
        weights = []
        for layer in self.layers:
            X, a = layer(X, mask, key_padding_mask=key_padding_mask, is_causal=is_causal, _finite_inputs=_finite_inputs)
            weights.append(a)
        return self.final_norm(X), weights


@catalogued("extra:transformer-decoder")
class Decoder(_Stack):
    """A stack of ``n_layers`` :class:`DecoderLayer`.

    The masks (:class:`DecoderMasks`, the same for every layer; every mask boolean,
    ``True`` = may attend) are shaped as in :class:`DecoderLayer`.

    Args:
        n_layers, d_model, h, d_ff, norm_first, self_attn_factory, final_norm, options:
            as :class:`Encoder` (see :class:`_Stack`).

    Shape:
        - Y: ``(..., n_y, d_model)`` decoder states; M: ``(..., n_x, d_model)`` encoder output.
        - Output: ``(Y' (..., n_y, d_model), [self weights (..., h, n_y, n_y) per layer],
          [cross weights (..., h, n_y, n_x) per layer])``.

    Raises:
        ValueError: if ``n_layers < 1`` or a layer rejects its arguments or inputs (see :class:`DecoderLayer`).
    """

    layer_type = DecoderLayer

    def forward(
        self,
        Y: Tensor,
        M: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        _finite_inputs: bool = False,
        **masks: Unpack[DecoderMasks],
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        self_w, cross_w = [], []
        for layer in self.layers:
            Y, a_s, a_c = layer(Y, M, self_mask, memory_mask, _finite_inputs=_finite_inputs, **masks)
            self_w.append(a_s)
            cross_w.append(a_c)
        return self.final_norm(Y), self_w, cross_w


_TORCH_NAMES = (("multihead_attn.", "cross_attn."), ("linear1.", "ffn.linear1."), ("linear2.", "ffn.linear2."))


def from_torch_transformer_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Map the state dict of a torch Transformer module to this module's names.

    Accepts ``torch.nn.TransformerEncoderLayer``, ``DecoderLayer``, ``TransformerEncoder``,
    ``TransformerDecoder`` or ``Transformer``. Every attention block (``self_attn``,
    ``multihead_attn`` -> ``cross_attn``) goes through
    :func:`~attnsurvey.query_related.torch_mha.from_torch_state_dict`;
    ``linear1``/``linear2`` -> ``ffn.linear1``/``ffn.linear2``; a stack's final
    ``norm`` -> ``final_norm``. Load the result into the matching
    :class:`EncoderLayer`, :class:`DecoderLayer`, :class:`Encoder` or :class:`Decoder`
    (for ``nn.Transformer``, ``encoder.*`` and ``decoder.*`` keys for the two stacks).

    Args:
        state_dict: the torch module's ``state_dict()``.

    Shape:
        Every tensor keeps its shape except the packed ``in_proj`` weights and biases,
        split into ``W_Q``/``W_K``/``W_V`` weights ``(d_model, d_model)`` and biases ``(d_model,)``.

    Returns:
        A new dict with this module's parameter names.

    Raises:
        ValueError: if an attention block lacks its input projection weights.
    """
    out: dict[str, Tensor] = {}
    blocks: dict[str, dict[str, Tensor]] = {}
    for key, value in state_dict.items():
        head, sep, tail = key.rpartition("attn.")
        if sep and (head.endswith("self_") or head.endswith("multihead_")):
            blocks.setdefault(head + sep, {})[tail] = value
            continue
        for old, new in _TORCH_NAMES:
            key = key.replace(old, new)
        if key.startswith(("norm.", "encoder.norm.", "decoder.norm.")) or key == "norm":
            key = (
                key.replace("norm.", "final_norm.", 1)
                if key.startswith("norm.")
                else key.replace(".norm.", ".final_norm.", 1)
            )
        out[key] = value
    for prefix, block in blocks.items():
        prefix = prefix.replace("multihead_attn.", "cross_attn.")
        out.update({prefix + k: v for k, v in from_torch_state_dict(block).items()})
    return out


class TransformerSize(TypedDict, total=False):
    """The size options of :class:`SequenceTagger` and :class:`Seq2SeqTransformer` (keyword-only).

    d_model: the model width; h: the number of heads (must divide d_model); d_ff:
    the FFN width; n_layers: layers per stack; max_len: the longest sequence the
    position code covers; norm_first: pre-norm (True) or post-norm (False).
    An option left out takes its value in :data:`TRANSFORMER_SIZE`.
    """

    d_model: Annotated[int, Default(32)]
    h: Annotated[int, Default(2)]
    d_ff: Annotated[int, Default(64)]
    n_layers: Annotated[int, Default(2)]
    max_len: Annotated[int, Default(64)]
    norm_first: Annotated[bool, Default(False)]


#: The defaults of every :class:`TransformerSize` option: a post-norm model small enough to train in seconds on a CPU.
TRANSFORMER_SIZE: Final[TransformerSize] = option_defaults(TransformerSize)


def _position_module(position: str, d_model: int, max_len: int) -> nn.Module:
    if position == "sinusoidal":
        return SinusoidalPositionEncoding(d_model, max_len)
    if position == "learned":
        return LearnedPositionEncoding(d_model, max_len)
    if position in ("none", "relative", "gaussian"):
        return nn.Identity()
    raise ValueError(f"position must be 'sinusoidal', 'learned', 'relative', 'gaussian' or 'none', got {position!r}")


@catalogued("extra:transformer-encoder")
class SequenceTagger(nn.Module):
    """Token embeddings + position information + :class:`Encoder` + a linear read-out per position.

    Args:
        vocab: the vocabulary size.
        n_out: the number of output classes per position.
        position: ``"sinusoidal"``, ``"learned"`` (absolute codes added to the
            embeddings), ``"relative"`` (each layer uses
            :class:`~attnsurvey.transformer.relative.RelativeSelfAttention` with clipping ``b``),
            ``"gaussian"`` (each layer uses
            :class:`~attnsurvey.transformer.relative.GaussianLocalSelfAttention`) or
            ``"none"`` (position-blind: permutation-equivariant).
        b: the clipping distance of ``"relative"``.
        embed_scale: multiplies the embeddings (the paper uses ``sqrt(d_model)``).
        size: the other keyword options, the sizes of :class:`TransformerSize` (defaults
            in :data:`TRANSFORMER_SIZE`).

    Shape:
        - tokens: ``(batch, n)`` integers.
        - mask: the encoder's attention mask, boolean ``(batch, n, n)`` or ``(batch, 1, n)``,
          ``True`` = may attend (any other rank raises ``ValueError``: a ``(batch, n)``
          mask would be read per query when ``batch == n``).
        - Output: ``(logits (batch, n, n_out), [weights (batch, h, n, n) per layer])``.

    Raises:
        ValueError: for an unknown ``position``, a size the layers reject, or (in ``forward``)
            a mask of another rank.
    """

    def __init__(
        self,
        vocab: int,
        n_out: int,
        *,
        position: str = "sinusoidal",
        b: int = 8,
        embed_scale: float = 1.0,
        **size: Unpack[TransformerSize],
    ) -> None:
        check_integers("SequenceTagger", minimum=1, vocab=vocab, n_out=n_out)
        super().__init__()
        full = with_defaults(size, TRANSFORMER_SIZE, "TransformerSize")
        d_model, h = full["d_model"], full["h"]
        self.embed = nn.Embedding(vocab, d_model)
        self.position = _position_module(position, d_model, full["max_len"])
        factory: Callable[[], nn.Module] | None = None
        if position == "relative":
            factory = lambda: RelativeSelfAttention(d_model, h, b)  # noqa: E731
        elif position == "gaussian":
            factory = lambda: GaussianLocalSelfAttention(d_model, h)  # noqa: E731
        self.encoder = Encoder(full["n_layers"], d_model, h, full["d_ff"], full["norm_first"], factory)
        self.readout = nn.Linear(d_model, n_out)
        # nn.Embedding starts at N(0, 1), already the size of the position code;
        # the paper's sqrt(d_model) factor would drown the code in small models.
        self.scale = embed_scale

    def forward(self, tokens: Tensor, mask: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
        require_tensor(tokens, "tokens")
        if mask is not None and (not isinstance(mask, Tensor) or mask.dim() != 3):
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(
                f"SequenceTagger: mask must have shape (batch, n, n) or (batch, 1, n), got {got}; "
                "a (batch, n) key-padding mask is mask[:, None, :]"
            )
        check_index_range(tokens, self.embed.num_embeddings, "tokens", "SequenceTagger (vocab token ids)")
        X = self.position(self.embed(tokens) * self.scale)
        H, weights = self.encoder(X, mask)
        return self.readout(H), weights


@catalogued("extra:transformer-decoder")
class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder Transformer with sinusoidal positions and a linear generator.

    The decoder's self-attention is causal; tgt_in is the target shifted right.

    Masked slots are made inert once, here at the model's edge: the inputs are tokens, so
    the only non-finite values a hidden state could hold come from a parameter, and the
    padded source rows are set to 0 after the embedding (a NaN in the padding token's
    embedding reaches no output and no gradient). Every row is then finite, and the
    layers, the multi-head stacks and the attention core inside skip their own clearing
    (their private ``_finite_inputs`` flag).

    Args:
        vocab_src: the source vocabulary size.
        vocab_tgt: the target vocabulary size.
        size: keyword options, the sizes of :class:`TransformerSize` (defaults in
            :data:`TRANSFORMER_SIZE`), the same for the encoder and the decoder stack.

    Shape:
        - src: ``(batch, n_x)`` integer tokens; tgt_in: ``(batch, n_y)`` integer tokens.
        - src_lengths: ``(batch,)``, masks padded source positions.
        - Output: logits ``(batch, n_y, vocab_tgt)``.
    """

    def __init__(
        self,
        vocab_src: int,
        vocab_tgt: int,
        **size: Unpack[TransformerSize],
    ) -> None:
        super().__init__()
        full = with_defaults(size, TRANSFORMER_SIZE, "TransformerSize")
        d_model = full["d_model"]
        self.src_embed = nn.Embedding(vocab_src, d_model)
        self.tgt_embed = nn.Embedding(vocab_tgt, d_model)
        self.position = SinusoidalPositionEncoding(d_model, full["max_len"])
        stack = (full["n_layers"], d_model, full["h"], full["d_ff"], full["norm_first"])
        self.encoder = Encoder(*stack)
        self.decoder = Decoder(*stack)
        self.generator = nn.Linear(d_model, vocab_tgt)
        self.scale = d_model**0.5

    def encode(self, src: Tensor, src_lengths: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        check_index_range(src, self.src_embed.num_embeddings, "src", "Seq2SeqTransformer (vocab_src token ids)")
        mask = None if src_lengths is None else padding_mask(src_lengths, src.shape[-1])
        X = zero_unattended(self.position(self.src_embed(src) * self.scale), None, mask)  # the one clearing
        M, _ = self.encoder(X, mask, _finite_inputs=True)
        return M, mask

    def decode(self, tgt_in: Tensor, M: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        """Logits ``(batch, n_y, vocab_tgt)`` of the causal decoder over the encoder output M.

        tgt_in: ``(batch, n_y)`` tokens; M: ``(batch, n_x, d_model)``; memory_mask:
        boolean ``(batch, 1, n_x)`` (as :meth:`encode` returns it), ``True`` = may attend.
        """
        check_index_range(tgt_in, self.tgt_embed.num_embeddings, "tgt_in", "Seq2SeqTransformer (vocab_tgt token ids)")
        Y = self.position(self.tgt_embed(tgt_in) * self.scale)
        Y, _, _ = self.decoder(
            Y, M, None, memory_mask, _finite_inputs=True, self_is_causal=True
        )  # tokens: every row finite
        return self.generator(Y)

    def forward(self, src: Tensor, tgt_in: Tensor, src_lengths: Tensor | None = None) -> Tensor:
        M, mask = self.encode(src, src_lengths)
        return self.decode(tgt_in, M, mask)

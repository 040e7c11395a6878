"""Edge-case sweep over every public callable of the ``attnsurvey`` package.

The cases are generated, not listed by hand. For every importable name that
does not start with ``_`` (functions and classes, in every module whose path
has no ``_`` component) the sweep builds a *baseline call* from the callable's
signature, its type hints and the shapes its docstring documents
(``K: ``(..., n_f, d_k)``;`` becomes a ``(B, n_f, d_k)`` tensor with the sizes
in :data:`SIZES`), and, when the baseline runs, derives these cases from it:

* ``B=0``, ``n_f=0``, ``n_q=0``, ``length 1``: the same call with that size changed;
* ``nan in masked slot`` / ``inf in masked slot``: the last feature slot masked
  and poisoned; outputs and gradients (inputs' and parameters') must equal the
  clean run's on every unmasked position;
* ``fully masked``: every key masked: no NaN in the output;
* ``mask <shape>``: the mask in every rank the contract names (``(B, n_q, n_f)``,
  ``(B, 1, n_f)``, ``(B, n_f)``, ``(n_f,)``, ``(1, n_f)``), and a rank-2 mask
  that is ambiguous because ``B == n_q``; an accepted shape must give the
  result of the documented one;
* ``int tensor`` (wrong dtype), ``numpy`` and ``list`` for each tensor argument;
* ``float16``: every float input (and module) in half precision;
* ``hyper <name>=<value>``: an invalid size (0, -1, 2.5) or a NaN / negative
  width, scale or probability (and 0 for a base or width that must be positive);
* ``index <name>=<value>``: an index-valued argument (targets, tokens, pointer
  targets, sampled positions, lengths) holding a value outside its range
  (``10000`` and ``-1``); accepted is ``silent``; so is a picked example's index
  (``describe(i)``, ``decode(i)`` ... of a data set a callable returns) at
  ``len`` and ``-len - 1``;
* ``1e20 <name>``: one float input scaled to about ``1e20``, run in float32 and
  compared with the same call in float64 (a sum of squares overflows float32
  there): a clear refusal, or outputs within ``1e-3`` of the float64 ones
  (relative to the largest; an output beyond float32's range may read +-inf),
  else ``silent``.

Modules are called, not only built (``forward``, or the method :data:`METHODS`
names for a module that has none), so the ``numpy`` and ``list`` cases reach the
``forward`` of every module. :data:`ARG_OVERRIDES` gives the layout and range of
the arguments a signature does not describe well enough to build a baseline.

Each case is classified:

* ``ok``      -- the result passes the case's check;
* ``clear``   -- a ``ValueError``/``TypeError`` raised by the package itself (a ``raise`` in its code, not a
  builtin or torch failing on a package line);
* ``crash``   -- any other exception (``AttributeError``, ``IndexError``, one raised deep inside torch, ...);
* ``silent``  -- a result that fails its check (NaN where a value is expected, a masked slot that
  changes the output or a gradient, a mask shape read differently, an invalid hyper-parameter accepted);
* ``n/a``     -- the case does not apply or the harness cannot build it (no baseline, no mask ...).

Modules that train models or draw figures (:data:`NOT_CALLED`) are listed with ``n/a``: their inputs are
checked by the functions they call; so are the callables that spawn processes (:data:`SPAWNS_PROCESSES`). Usage::

    python scripts/edge_case_sweep.py [-v] [--only SUBSTRING]

prints the counts per kind of case and per module; ``-v`` lists every crash and silent case. The exit
status is 1 when any case is ``crash`` or ``silent``. The API is :func:`sweep` (returns :class:`Result` rows).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import math
import os
import pkgutil
import re
import signal
import sys
import time
import traceback
import typing
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

PKG = os.sep + "attnsurvey" + os.sep
KINDS = ("ok", "clear", "crash", "silent", "n/a")

#: sizes of the survey's symbols in the baseline call (all distinct, so an axis's size tells its symbol)
SIZES = {"B": 2, "n_q": 3, "n_f": 5, "d": 4, "h": 2, "C": 7}
#: modules whose callables train, draw, grade notebooks or re-execute the interpreter: not called
NOT_CALLED = (
    "attnsurvey.experiments",
    "attnsurvey.figures",
    "attnsurvey.plotting",
    "attnsurvey.widgets",
    "attnsurvey.numeric_env",
    "attnsurvey.exercises",
    "attnsurvey.catalog",
    "attnsurvey.registry",
    "attnsurvey.architecture",
    "attnsurvey.evaluation.intrinsic.adversarial_attention",
    "attnsurvey.training.seed_everything",  # changes global state
    "attnsurvey.stats.MeanSD",  # a record of numbers, not an input checker
)
#: callables that spawn processes: on the 2-core CI machine a launch (each rank starts an interpreter and imports
#: torch) takes longer than a baseline call may (12 s), so they ended ``n/a`` after waiting for it; listed at once
#: with ``n/a`` instead. tests/test_beyond_ring.py runs them.
SPAWNS_PROCESSES = ("attnsurvey.beyond.ring.ring_results", "attnsurvey.beyond.ring.run_ring")
#: in those modules, the ``nn.Module`` classes are called all the same (a model's ``forward`` trains nothing)
MODULES_CALLED = ("attnsurvey.experiments.",)
#: seconds one call may take before the case is abandoned (``n/a``, or ``silent`` for an accepted hyper-parameter)
CALL_LIMIT = 4.0

# ------------------------------------------------------------------------------------------------
# Per-name overrides, where a signature and docstring are not enough (kept short).
# ------------------------------------------------------------------------------------------------
#: tensor shapes by (callable suffix, parameter); symbols as in SIZES
#: Callables whose contract fixes the output dtype whatever the input's (ranks are float64 by definition).
FIXED_OUTPUT_DTYPE = {"attnsurvey.evaluation.intrinsic.rankdata"}

SHAPE_OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = {
    ("band_to_dense", "a_band"): ("B", "n_f", "5"),  # (..., n, 2w + 1) with w = 2
    ("differential_attention", "lam"): ("B", "1", "1"),  # one lambda per example, (..., 1, 1)
}
#: hyper-parameter values that are valid for that callable (documented limits)
VALID_HYPER: dict[tuple[str, str], set[str]] = {
    ("", "sigma"): {"0"},
    # documented counts >= 0 of the cost formulas: an empty model, cache or batch costs 0
    **{
        (f, n): {"0"}
        for f in ("decode_step_cost", "decoder_weight_count", "kv_cache_bytes", "TinyDecoderLM")
        for n in ("n_layers", "n_kv_heads", "n_tokens", "n_context", "batch")
    },
    ("document_vocab", "n_polarity"): {"0"},  # a vocabulary without polarity words (make_documents needs >= 1)
}
#: extra keyword arguments under which a callable is swept again (a variant its defaults do not reach)
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "attnsurvey.feature_related.co_attention.bidirectional_attention": [{"granularity": "fine"}],
    "attnsurvey.query_related.types.LearnedQueryAttention": [{"d_k": 3}],
    "attnsurvey.query_related.capsule.CapsuleAttention": [{"d_k": 3}],
}
#: callables that follow torch's rule for a rank-2 attention mask (always ``(n_q, n_f)``, documented)
RANK2_IS_QUERIES = (
    "attnsurvey.transformer.model.",
    "attnsurvey.transformer.reformer.shared_qk_attention",
    "attnsurvey.transformer.synthesizer.",
)
#: callables whose ``*mask`` argument is data they turn into a mask, not a mask they apply
MASK_IS_DATA = ("attnsurvey.feature_related.levels.sentence_mask",)
#: integer sizes for which 0 is valid (an empty count, a window of half-width 0, no sink tokens); every other size
#: must be >= 1
ZERO_OK = re.compile(
    r"^(n|n_f|n_q|n_k|n_x|n_y|n_src|n_tgt|n_pad|n_new|n_filler|n_test|n_m|n_docs|steps|w|k|D|window|length|L|n_sink)$"
)
#: float hyper-parameters that must be > 0 (0 is probed too): a base of powers, a Gaussian's width in SSIM
POSITIVE_FLOAT: dict[tuple[str, str], set[str]] = {("", "base"): set(), ("ssim", "sigma"): set()}
#: the method called on a module that has no ``forward`` of its own
METHODS: dict[str, str] = {"attnsurvey.general_mechanisms.alignment.MovingAverageBaseline": "update"}
#: constructor arguments that cannot be synthesized (a factory per name, given SIZES)
CTOR_OVERRIDES: dict[str, Callable[[dict[str, int]], dict[str, Any]]] = {
    "attnsurvey.transformer.reformer.ReversibleSequence": lambda sz: {
        "blocks": [(torch.nn.Linear(sz["d"] // 2, sz["d"] // 2), torch.nn.Linear(sz["d"] // 2, sz["d"] // 2))]
    },
}
#: the values an index-valued argument is probed with: far above every size, and negative
INDEX_PROBES = (10_000, -1)
#: (callable suffix, parameter) whose probe value is valid (documented: e.g. -1 = "ignore this position")
VALID_INDEX: dict[tuple[str, str], set[int]] = {
    # token ids compared without a vocabulary: no upper bound to check
    ("sequence_accuracy", "tokens"): {10_000},
    ("sequence_accuracy", "targets"): {10_000},
    ("length_penalty", "lengths"): {10_000},  # a hypothesis's length: no upper bound
    ("toy_translation_task", "m"): {10_000},
    ("same_bucket_attention", "buckets"): {
        10_000
    },  # bucket ids: any non-negative label  # m is the sentence length there, a size (probed as one)
}


@dataclass
class Result:
    """One case: which callable, which variation, its verdict and why."""

    name: str
    case: str
    verdict: str
    why: str = ""


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


# ------------------------------------------------------------------------------------------------
# Discovery
# ------------------------------------------------------------------------------------------------
def public_callables(only: str = "") -> list[tuple[str, Any]]:
    """Every public callable ``(module.name, object)`` of the package (defined in that module)."""
    import attnsurvey

    found: list[tuple[str, Any]] = []
    mods = [attnsurvey.__name__] + [m.name for m in pkgutil.walk_packages(attnsurvey.__path__, "attnsurvey.")]
    for modname in mods:
        if any(part.startswith("_") for part in modname.split(".")):
            continue
        mod = importlib.import_module(modname)
        for n, o in sorted(vars(mod).items()):
            if n.startswith("_") or not callable(o) or getattr(o, "__module__", None) != modname:
                continue
            full = f"{modname}.{n}"
            if only in full:
                found.append((full, o))
    return found


# ------------------------------------------------------------------------------------------------
# Argument synthesis
# ------------------------------------------------------------------------------------------------
_DOC_SHAPE = re.compile(r"\b([A-Za-z_][\w']*)\s*(?:\([^()`]*\))?\s*:?\s*``\(([^`]*?)\)``")
FEATURES = re.compile(r"^(K|V|F|X|H|x|K\d|V\d|F\d|X_\w+|F_\w+|K_\w+|V_\w+|memory|story|Y|U|G|E|M|C|S|values|keys)$")
QUERIES = re.compile(r"^(Q|Q\d|Q_\w+|queries)$")
ONE_QUERY = re.compile(r"^(q|q\d|q_\w+|query|s|h_t|state)$")
SCORES = re.compile(r"^(e|scores|e\d|A|logits_a)$")
WEIGHTS = re.compile(r"^(a|a\d|a_\w+|weights|p|P|probs)$")
MATRIX = re.compile(r"^(W|W\d|W_\w+|Ws?\d?|U_\w+)$")
VECTOR = re.compile(r"^(w|w\d|w_\w+|b|b\d|b_\w+|v|u)$")
LONGS = re.compile(r"^(tokens|src|tgt|tgt_in|tgt_out|targets?|labels?|y|gold|pred|ids|words|answer|question)$")
MASKS = re.compile(r"(^|_)mask($|_)|^attn_mask$|^key_padding_mask$")
SIZE_INT = re.compile(
    r"^(d|d_\w+|n|n_\w+|num_\w+|h|k|w|D|hops|n_hops|heads|n_heads|size|\w+_size|vocab|n_classes|L|batch|order|"
    r"max_len|length|steps|epochs|block_\w+|T)$"
)
FLOAT_HYPER = re.compile(r"^(sigma|temperature|scale|D|window|p|dropout|dropout_p|alpha|eps|s|tau|base)$")
#: integer scalars that pick a position or an example (probed with INDEX_PROBES)
INDEX_INT = re.compile(r"^(i|t|m|index|idx|position|example|doc)$")


#: layouts and ranges of arguments a signature and docstring do not describe well enough for a baseline
#: (``Arg`` is defined below; filled in after it)
ARG_OVERRIDES: dict[tuple[str, str], Any] = {}


def _symbol_size(sym: str, sizes: dict[str, int]) -> list[int] | None:
    sym = sym.strip().strip("()")
    if sym in ("", "..."):
        return [sizes["B"]] if sym == "..." else []
    if sym.isdigit():
        return [int(sym)]
    base = sym.split("^")[0].split("(")[0].strip("'")
    if base in ("B", "batch", "N"):
        return [sizes["B"]]
    if base in ("n_q", "n_Q", "n_y", "n_tgt", "t", "T"):
        return [sizes["n_q"]]
    if base.startswith("n") or base in ("l", "L", "length", "n_max"):
        return [sizes["n_f"]]
    if base in ("h", "heads"):
        return [sizes["h"]]
    if base in ("c", "C", "n_classes", "vocab", "classes"):
        return [sizes["C"]]
    if base.startswith("d") or base in ("k",):
        return [sizes["d"]]
    if re.fullmatch(r"[\w*+ ]+", base) and any(ch in base for ch in "*+"):
        try:
            env = {"h": sizes["h"], "n_f": sizes["n_f"], "n_classes": sizes["C"]}
            return [int(eval(re.sub(r"d_\w+|d\b", str(sizes["d"]), base), {}, env))]
        except Exception:
            return None
    return None


def documented_shapes(obj: Any) -> dict[str, str]:
    """``{parameter: "(..., n_f, d_k)"}`` from the docstring(s) of ``obj`` (class: also ``forward``)."""
    docs = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj):
        for meth in ("forward", "__call__"):
            if meth in vars(obj):
                docs.append(inspect.getdoc(getattr(obj, meth)) or "")
    out: dict[str, str] = {}
    for doc in docs:
        for nm, shape in _DOC_SHAPE.findall(doc):
            out.setdefault(nm, shape)
    return out


@dataclass
class Arg:
    """One synthesized tensor argument and what its axes mean."""

    axes: tuple[str, ...]  # symbol per axis: "B", "n_q", "n_f", "d", "h", "C" or "<size>"
    kind: str  # "float", "long", "bool"
    documented: bool = False  # the axes come from the docstring
    high: str = ""  # long: the exclusive upper bound of its values (a symbol of SIZES or a number); "" = the default
    simplex: bool = False  # float: weights on the simplex over the last axis (softmax of random scores)


_SIMPLEX_F = ("B", "n_f")
ARG_OVERRIDES.update(
    {
        # weights on the simplex, indices with their own range
        **{(f, n): Arg(_SIMPLEX_F, "float", simplex=True) for f in ("js_divergence", "total_variation") for n in "pq"},
        **{
            (f, "target"): Arg(("B",), "long", high="n_f")
            for f in ("sparsemax_loss", "entmax15_loss", "entmax_bisect_loss")
        },
        ("supervised_attention_loss", "y"): Arg(("B",), "long", high="d"),
        ("supervised_attention_loss", "logits"): Arg(("B", "d"), "float"),
        ("supervised_attention_loss", "gold"): Arg(("B", "n_q", "n_f"), "bool"),
        ("supervised_attention_loss", "a"): Arg(("B", "n_q", "n_f"), "float", simplex=True),
        ("capsule_loss", "y"): Arg(("B",), "long", high="d"),
        ("same_bucket_attention", "buckets"): Arg(("B", "n_f"), "long", high="2"),
        ("same_bucket_attention", "QK"): Arg(("B", "n_f", "d"), "float"),
        ("same_bucket_attention", "V"): Arg(("B", "n_f", "d"), "float"),
        ("redundancy_penalty", "A"): Arg(("B", "n_q", "n_f"), "float", simplex=True),  # rows of attention weights
        ("perplexity", "logits"): Arg(("B", "n_f", "C"), "float"),
        ("perplexity", "targets"): Arg(("B", "n_f"), "long", high="C"),
        **{(f, n): Arg(("16", "16"), "float") for f in ("ssim", "psnr") for n in "xy"},
        **{(f, n): Arg(("n_f",), "float") for f in ("kendall_tau", "spearman") for n in "xy"},
        ("monotonic_position", "t"): Arg(("B",), "long", high="n_f"),
        ("MovingAverageBaseline", "loss"): Arg(("B",), "float"),
        ("reinforce_gradient_samples", "e"): Arg(("n_f",), "float"),
        ("reinforce_gradient_samples", "losses"): Arg(("n_f",), "float"),
        ("reinforce_gradient_samples", "m"): Arg(("B",), "long", high="n_f"),
        # the hierarchical chapter's scaled word weights: (B, n_S, n_w) words in n_S chunks
        **{
            (f, n): a
            for f in ("scaled_word_weights", "hierarchical_scaled_attention")
            for n, a in (
                ("a_word", Arg(("B", "n_q", "n_f"), "float", simplex=True)),
                ("a_chunk", Arg(("B", "n_q"), "float", simplex=True)),
                ("word_mask", Arg(("B", "n_q", "n_f"), "bool")),
                ("V", Arg(("B", "n_q", "n_f", "d"), "float")),
            )
        },
    }
)


def _shape_from_doc(shape: str) -> tuple[str, ...] | None:
    axes: list[str] = []
    for sym in shape.split(","):
        s = sym.strip().strip("()").strip()
        if s == "" and shape.strip().endswith(","):
            continue
        if s == "...":
            axes.append("B")
            continue
        size = _symbol_size(s, {"B": -1, "n_q": -2, "n_f": -3, "d": -4, "h": -5, "C": -6})
        if size is None:
            return None
        for v in size:
            axes.append({-1: "B", -2: "n_q", -3: "n_f", -4: "d", -5: "h", -6: "C"}.get(v, str(v)))
    return tuple(axes)


def _tensor_spec(name: str, ann: str, doc: dict[str, str], qualname: str) -> Arg | None:
    for (suffix, pname), arg in ARG_OVERRIDES.items():
        if qualname.endswith(suffix) and pname == name:
            return Arg(arg.axes, arg.kind, True, arg.high, arg.simplex)
    for (suffix, pname), axes in SHAPE_OVERRIDES.items():
        if qualname.endswith(suffix) and pname == name:
            return Arg(axes, "bool" if MASKS.search(name) else "float")
    is_mask = bool(MASKS.search(name))
    kind = (
        "bool" if is_mask else "long" if LONGS.match(name) or name in ("lengths", "positions", "indices") else "float"
    )
    if name in doc:
        axes = _shape_from_doc(doc[name])
        if axes is not None and len(axes) > 0:
            return Arg(axes, kind, True)
    if is_mask:
        return Arg(("B", "n_q", "n_f") if name in ("mask", "attn_mask") else ("B", "n_f"), "bool")
    if name == "lengths":
        return Arg(("B",), "long")
    if kind == "long":
        return Arg(("B", "n_f"), "long")
    for pat, axes in (
        (QUERIES, ("B", "n_q", "d")),
        (FEATURES, ("B", "n_f", "d")),
        (ONE_QUERY, ("B", "d")),
        (SCORES, ("B", "n_q", "n_f")),
        (WEIGHTS, ("B", "n_q", "n_f")),
        (MATRIX, ("d", "d")),
        (VECTOR, ("d",)),
    ):
        if pat.match(name):
            return Arg(axes, kind)
    if "Tensor" in ann:
        return Arg(("B", "n_f", "d"), kind)
    return None


def _sizes_of(axes: tuple[str, ...], sizes: dict[str, int]) -> list[int]:
    return [sizes[a] if a in sizes else int(a) for a in axes]


def make_tensor(name: str, spec: Arg, sizes: dict[str, int], dtype: torch.dtype, salt: int) -> torch.Tensor:
    shape = _sizes_of(spec.axes, sizes)
    g = torch.Generator().manual_seed(1000 + salt)
    if spec.kind == "bool":
        m = torch.ones(shape, dtype=torch.bool)
        if "n_f" in spec.axes and sizes["n_f"] > 1:
            m.select(spec.axes.index("n_f"), sizes["n_f"] - 1).fill_(False)  # the last feature slot is padding
        return m
    if spec.kind == "long":
        if name == "lengths":
            return torch.full(shape, sizes["n_f"], dtype=torch.long)
        if spec.high:
            hi = sizes[spec.high] if spec.high in sizes else int(spec.high)
            return torch.randint(0, max(hi, 1), shape, generator=g)
        hi = sizes["C"] if not name.startswith(("tgt", "src", "tok")) else 4
        return torch.randint(1, max(hi, 2), shape, generator=g)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if WEIGHTS.match(name) or spec.simplex:
        x = x.softmax(-1)
    elif MATRIX.match(name) and shape:
        x = x / math.sqrt(shape[-1])
    return x.to(dtype)


def _annotation(p: inspect.Parameter) -> str:
    a = p.annotation
    if isinstance(a, typing.ForwardRef):
        return a.__forward_arg__
    return a if isinstance(a, str) else getattr(a, "__name__", str(a))


def _scalar(name: str, ann: str, sizes: dict[str, int]) -> tuple[bool, Any]:
    """A value for a required non-tensor parameter (``ok=False`` when none can be made)."""
    if "Generator" in ann:
        return True, torch.Generator().manual_seed(0)
    if re.search(r"\bint\b", ann) and "Tensor" not in ann:
        if name in ("n_q", "n_tgt"):
            return True, sizes["n_q"]
        if name in ("h", "heads", "n_heads", "n_kv_heads"):
            return True, sizes["h"]
        if name.startswith(("d", "k")) or name in ("dim",):
            return True, sizes["d"]
        if name in ("n_classes", "vocab", "vocab_size", "classes") or name.startswith("vocab_"):
            return True, sizes["C"]
        if name.startswith(("n", "length", "max_len", "L", "w", "P", "block", "chunk", "batch")):
            return True, sizes["n_f"] if name.startswith(("n", "length", "max_len", "L")) else 2
        if name in ("seed", "steps", "hops", "n_hops"):
            return True, 1
        return True, 2
    if re.search(r"\bfloat\b", ann):
        return True, 1.0
    if re.search(r"\bbool\b", ann):
        return True, False
    if "Activation" in ann or "Callable[[Tensor], Tensor]" in ann:
        return True, torch.tanh
    if "ScoreFn" in ann or "Callable[[Tensor, Tensor], Tensor]" in ann:
        from attnsurvey.general_mechanisms.scoring import dot_score

        return True, dot_score
    if "torch.dtype" in ann:
        return True, torch.float32
    if "torch.Size" in ann:
        return True, torch.Size([sizes["B"], sizes["n_q"], sizes["n_f"]])
    return False, None


@dataclass
class Plan:
    """How to call one public callable: constructor kwargs (classes) and call kwargs."""

    qualname: str
    obj: Any
    is_module: bool
    ctor: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Arg] = field(default_factory=dict)  # tensor parameters of the call
    scalars: dict[str, Any] = field(default_factory=dict)  # non-tensor parameters of the call
    index_ints: list[str] = field(default_factory=list)  # integer scalars that pick a position or an example
    hypers: list[tuple[str, str, Any]] = field(default_factory=list)  # (where, name, default)
    masks: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=lambda: dict(SIZES))
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # a VARIANTS entry

    def call_target(self) -> Callable[..., Any] | None:
        if inspect.isclass(self.obj) and not self.is_module:
            return None
        return self.obj if not self.is_module else self.obj.forward


def _signature(fn: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def plan_for(qualname: str, obj: Any) -> Plan:
    is_module = inspect.isclass(obj) and issubclass(obj, torch.nn.Module)
    plan = Plan(qualname, obj, is_module)
    doc = documented_shapes(obj)
    if inspect.isclass(obj):
        if issubclass(obj, BaseException) or typing.is_typeddict(obj) or (hasattr(obj, "__members__")):
            plan.error = "exception, TypedDict or enum: nothing to call"
            return plan
        if getattr(obj, "_is_protocol", False):
            plan.error = "protocol: nothing to call"
            return plan
        sig = _signature(obj)
        if sig is None:
            plan.error = "no signature"
            return plan
        for p in sig.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            ann = _annotation(p)
            if qualname in CTOR_OVERRIDES and p.name in CTOR_OVERRIDES[qualname](plan.sizes):
                continue
            if p.default is p.empty:
                ok, val = _scalar(p.name, ann, plan.sizes)
                if not ok:
                    if "Tensor" in ann and (spec := _tensor_spec(p.name, ann, doc, qualname)) is not None:
                        plan.ctor[p.name] = ("tensor", spec)
                        continue
                    plan.error = f"cannot synthesize constructor argument {p.name}: {ann}"
                    return plan
                plan.ctor[p.name] = val
            _maybe_hyper(plan, "ctor", p, ann)
        if not is_module:
            return plan
        target = getattr(obj, METHODS[qualname]) if qualname in METHODS else obj.forward
    else:
        target = obj
    sig = _signature(target)
    if sig is None:
        plan.error = "no signature"
        return plan
    for p in list(sig.parameters.values()):
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = _annotation(p)
        is_tensor = "Tensor" in ann and "Callable" not in ann or (ann == "object" and MASKS.search(p.name))
        if is_tensor and MASKS.search(p.name) and not qualname.startswith(MASK_IS_DATA):
            spec = _tensor_spec(p.name, ann, doc, qualname)
            if spec is not None:
                plan.masks.append(p.name)
                plan.args[p.name] = spec
            continue
        if p.default is not p.empty:
            _maybe_hyper(plan, "call", p, ann)
            continue
        if is_tensor:
            spec = _tensor_spec(p.name, ann, doc, qualname)
            if spec is None:
                plan.error = f"cannot synthesize tensor {p.name}"
                return plan
            plan.args[p.name] = spec
            continue
        ok, val = _scalar(p.name, ann, plan.sizes)
        if not ok:
            plan.error = f"cannot synthesize argument {p.name}: {ann}"
            return plan
        plan.scalars[p.name] = val
        if re.search(r"\bint\b", ann) and INDEX_INT.match(p.name):
            plan.index_ints.append(p.name)
        _maybe_hyper(plan, "call", p, ann)
    return plan


def _maybe_hyper(plan: Plan, where: str, p: inspect.Parameter, ann: str) -> None:
    if "Tensor" in ann or "Callable" in ann:
        return
    if re.search(r"\bint\b", ann) and SIZE_INT.match(p.name) and p.default != 0 and "seed" not in p.name:
        plan.hypers.append((where, p.name, "int"))
    elif re.search(r"\bfloat\b", ann) and FLOAT_HYPER.match(p.name):
        plan.hypers.append((where, p.name, "float"))


# ------------------------------------------------------------------------------------------------
# Running a plan
# ------------------------------------------------------------------------------------------------
def _ctor_kwargs(plan: Plan, sizes: dict[str, int], dtype: torch.dtype) -> dict[str, Any]:
    out: dict[str, Any] = dict(plan.extra) if inspect.isclass(plan.obj) else {}
    if plan.qualname.split("[")[0] in CTOR_OVERRIDES:
        torch.manual_seed(0)
        out.update(CTOR_OVERRIDES[plan.qualname.split("[")[0]](sizes))
    for i, (k, v) in enumerate(plan.ctor.items()):
        if isinstance(v, tuple) and v and v[0] == "tensor":
            out[k] = make_tensor(k, v[1], sizes, dtype, 50 + i)
        else:
            out[k] = v
    return out


def build_inputs(
    plan: Plan, sizes: dict[str, int], dtype: torch.dtype = torch.float64, with_masks: bool = False
) -> dict[str, Any]:
    kw: dict[str, Any] = dict(plan.scalars)
    if not inspect.isclass(plan.obj):
        kw.update(plan.extra)
    for i, (k, spec) in enumerate(plan.args.items()):
        if k in plan.masks and not with_masks:
            continue
        kw[k] = make_tensor(k, spec, sizes, dtype, i)
    return kw


def invoke(
    plan: Plan, kw: dict[str, Any], dtype: torch.dtype = torch.float64, ctor: dict[str, Any] | None = None
) -> Any:
    """Build (classes) and call; returns the output (or the instance for a plain class)."""
    torch.manual_seed(0)
    if inspect.isclass(plan.obj):
        inst = plan.obj(**(ctor if ctor is not None else _ctor_kwargs(plan, plan.sizes, dtype)))
        if not plan.is_module:
            return inst
        inst = inst.to(dtype).eval()
        invoke.last_module = inst  # type: ignore[attr-defined]
        if plan.qualname.split("[")[0] in METHODS:
            return getattr(inst, METHODS[plan.qualname.split("[")[0]])(**kw)
        return inst(**kw)
    invoke.last_module = None  # type: ignore[attr-defined]
    return plan.obj(**kw)


def tensors_of(x: Any, depth: int = 0) -> list[torch.Tensor]:
    if depth > 4:
        return []
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x[:64] for t in tensors_of(y, depth + 1)]
    if isinstance(x, dict):
        return [t for y in list(x.values())[:64] for t in tensors_of(y, depth + 1)]
    if hasattr(x, "__dataclass_fields__"):
        return [t for f in x.__dataclass_fields__ for t in tensors_of(getattr(x, f, None), depth + 1)]
    if isinstance(x, float):
        return [torch.tensor(x)]
    return []


def has_nan(x: Any) -> bool:
    return any(bool(torch.isnan(t).any()) for t in tensors_of(x) if t.is_floating_point())


def unmasked(t: torch.Tensor, n_f: int) -> torch.Tensor:
    """``t`` without the last index along every axis of size ``n_f`` (the padded slot)."""
    for ax in range(t.dim()):
        if t.shape[ax] == n_f:
            t = t.narrow(ax, 0, n_f - 1)
    return t


def same(a: Any, b: Any, n_f: int, tol: float = 1e-7) -> bool:
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if x.shape != y.shape:
            return False
        if not x.is_floating_point():
            if not torch.equal(unmasked(x, n_f), unmasked(y, n_f)):
                return False
            continue
        xu, yu = unmasked(x.detach(), n_f).double(), unmasked(y.detach(), n_f).double()
        if not torch.allclose(xu, yu, atol=tol, rtol=tol, equal_nan=True):
            return False
    return True


def classify_exception(exc: BaseException) -> tuple[str, str]:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1].filename if frames else "?"
    msg = f"{type(exc).__name__}: {str(exc)[:200]}"
    if isinstance(exc, _Timeout):
        return "n/a", f"slower than {CALL_LIMIT} s"
    # clear: a ValueError/TypeError that the package raises itself (the failing line is a ``raise``), not one a
    # builtin or torch raises from a package line (``tanh(): argument 'input' must be Tensor``)
    line = (frames[-1].line or "").strip() if frames else ""
    own = line.startswith("raise") or line.endswith("from None") or isinstance(exc, KeyError)
    if isinstance(exc, (ValueError, TypeError)) and PKG in last and own:
        return "clear", msg
    return "crash", f"{msg} (raised in {last.split(os.sep)[-1]}:{frames[-1].lineno if frames else '?'})"


def run_call(fn: Callable[[], Any], limit: float = CALL_LIMIT) -> tuple[str, Any]:
    """``("ok", output)`` or ``(verdict, why)`` for an exception."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return "ok", fn()
    except _Timeout as exc:
        return classify_exception(exc)
    except Exception as exc:
        return classify_exception(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------
def _resize(sizes: dict[str, int], **change: int) -> dict[str, int]:
    return {**sizes, **change}


def cases_for(plan: Plan) -> Iterator[Result]:
    name = plan.qualname
    if name.startswith(NOT_CALLED) and not (plan.is_module and name.startswith(MODULES_CALLED)):
        yield Result(name, "all", "n/a", "not called: trains, draws, grades or re-executes (covered by its own tests)")
        return
    if name.startswith(SPAWNS_PROCESSES):
        yield Result(name, "all", "n/a", "not called: spawns processes (covered by its own tests)")
        return
    if name.rsplit(".", 1)[1] in ("main", "cli", "demo"):
        yield Result(name, "all", "n/a", "command-line entry point: not called")
        return
    if plan.error:
        yield Result(name, "all", "n/a", plan.error)
        return
    dtype = torch.float64
    # baseline: documented sizes, then with n_q == n_f (self-attention written as n)
    base = None
    first_err = ("n/a", "")
    for trial in (plan.sizes, _resize(plan.sizes, n_q=plan.sizes["n_f"])):
        verdict, out = run_call(
            lambda trial=trial: invoke(plan, build_inputs(plan, trial), dtype, _ctor_kwargs(plan, trial, dtype)),
            3 * CALL_LIMIT,
        )
        if verdict == "ok":
            plan.sizes = dict(trial)
            base = out
            break
        if trial is plan.sizes:
            first_err = (verdict, out)
        if verdict == "n/a":
            break
    if base is None:
        yield Result(name, "baseline", "n/a", f"no baseline from the signature: {first_err[1]}")
        return
    sizes = plan.sizes
    yield Result(name, "baseline", "silent" if has_nan(base) else "ok", "NaN in the output" if has_nan(base) else "")

    def case(label: str, thunk: Callable[[], Any], check: Callable[[Any], bool] | None = None, why: str = "") -> Result:
        verdict, out = run_call(thunk)
        if verdict != "ok":
            return Result(name, label, verdict, out)
        try:
            good = (not has_nan(out)) if check is None else bool(check(out))
        except Exception as exc:  # a check that cannot read the output: the output is wrong
            return Result(name, label, "silent", f"check failed: {type(exc).__name__}: {exc}")
        return Result(name, label, "ok" if good else "silent", "" if good else why or "NaN in the output")

    def call(sz: dict[str, int], dt: torch.dtype = dtype, edit: Callable[[dict[str, Any]], None] | None = None) -> Any:
        kw = build_inputs(plan, sz, dt)
        if edit is not None:
            edit(kw)
        return invoke(plan, kw, dt, _ctor_kwargs(plan, sz, dt))

    tensor_names = [k for k in plan.args if k not in plan.masks]
    axes_used = {a for k in plan.args for a in plan.args[k].axes}
    # empty and degenerate sizes
    if tensor_names:
        for label, change in (
            ("B=0", {"B": 0}),
            ("n_f=0", {"n_f": 0}),
            ("n_q=0", {"n_q": 0}),
            ("length 1", {"n_q": 1, "n_f": 1}),
        ):
            if not set(change) & axes_used:
                continue
            sz = _resize(sizes, **change)
            if sizes["n_q"] == sizes["n_f"] and "n_f" in change:
                sz["n_q"] = sz["n_f"]
            yield case(label, lambda sz=sz: call(sz))
    # half precision
    if any(plan.args[k].kind == "float" for k in tensor_names) or plan.is_module:

        def half_ok(out: Any) -> bool:
            ts = [t for t in tensors_of(out) if t.is_floating_point() and t.dim() > 0]
            fixed = plan.qualname in FIXED_OUTPUT_DTYPE
            return not has_nan(out) and (fixed or all(t.dtype == torch.float16 for t in ts))

        yield case("float16", lambda: call(sizes, torch.float16), half_ok, "NaN, or an output that is not float16")
    # wrong dtype, numpy and lists, one tensor argument at a time
    for k in tensor_names:
        if plan.args[k].kind != "float":
            continue

        def swap(fn: Callable[[torch.Tensor], Any], k: str = k) -> Callable[[dict[str, Any]], None]:
            def edit(kw: dict[str, Any]) -> None:
                kw[k] = fn(kw[k])

            return edit

        for label, conv in (
            ("int tensor", lambda t: (t * 3).long()),
            ("numpy", lambda t: t.numpy()),
            ("list", lambda t: t.tolist()),
        ):
            yield case(f"{label} {k}", functools.partial(call, sizes, edit=swap(conv)))
    # index-valued arguments out of range: tensors (one entry changed) and integer scalars
    yield from index_cases(plan, sizes, base, case, call)
    # extreme finite values, one float input at a time: float32 against float64
    for k in tensor_names:
        if plan.args[k].kind == "float" and not (plan.args[k].simplex or WEIGHTS.match(k)):
            yield big_case(plan, sizes, k)
    # masks
    for mk in plan.masks:
        yield from mask_cases(plan, mk, sizes, case, call)
    # hyper-parameters
    for where, hp, kind in plan.hypers:
        values = ["0", "-1", "2.5"] if kind == "int" else ["nan", "-1"]
        if kind == "int" and ZERO_OK.match(hp):
            values.remove("0")
        if kind == "float" and any(name.endswith(sfx) and hp == p for sfx, p in POSITIVE_FLOAT):
            values.append("0")
        for v in values:
            if any(name.endswith(s) and hp == p and v in ok for (s, p), ok in VALID_HYPER.items()) and not (
                v == "0" and any(name.endswith(s) and hp == p for s, p in POSITIVE_FLOAT)
            ):
                continue
            if kind == "float" and v == "-1" and hp in ("scale", "eps", "s", "alpha"):
                continue
            val = float(v) if kind == "float" or v == "2.5" else int(v)
            yield hyper_case(plan, where, hp, val, sizes)


def index_cases(plan: Plan, sizes: dict[str, int], base: Any, case: Any, call: Any) -> Iterator[Result]:
    """``index <name>=<value>``: an out-of-range value in every index-valued argument (accepted = ``silent``)."""
    name = plan.qualname

    def refused(out: Any) -> bool:
        return False  # any result is an out-of-range index accepted

    why = "out-of-range index accepted"
    for k, spec in plan.args.items():
        if k in plan.masks or spec.kind != "long":
            continue
        for v in INDEX_PROBES:
            if any(name.endswith(s) and k == p and v in ok for (s, p), ok in VALID_INDEX.items()):
                continue

            def edit(kw: dict[str, Any], k: str = k, v: int = v) -> None:
                t = kw[k].clone()
                if t.numel():
                    t.view(-1)[0] = v
                kw[k] = t

            yield case(f"index {k}={v}", functools.partial(call, sizes, edit=edit), refused, why)
    for k in plan.index_ints:
        for v in INDEX_PROBES:
            if any(name.endswith(s) and k == p and v in ok for (s, p), ok in VALID_INDEX.items()):
                continue

            def edit_int(kw: dict[str, Any], k: str = k, v: int = v) -> None:
                kw[k] = v

            yield case(f"index {k}={v}", functools.partial(call, sizes, edit=edit_int), refused, why)
    # a picked example of a data set the callable returns: describe(i), decode(i), words(i) ...
    if type(base).__module__.startswith("attnsurvey.") and hasattr(base, "__len__") and not isinstance(base, tuple):
        for meth, fn in sorted(inspect.getmembers(type(base), inspect.isfunction)):
            if meth.startswith("_"):
                continue
            params = [p for p in (_signature(fn) or inspect.Signature()).parameters.values() if p.name != "self"]
            if len(params) != 1 or not INDEX_INT.match(params[0].name):
                continue
            n = len(base)
            for v in (n, -n - 1):
                yield case(f"index {meth}({params[0].name}={v})", lambda m=meth, v=v: getattr(base, m)(v), refused, why)


def big_case(plan: Plan, sizes: dict[str, int], big_arg: str) -> Result:
    """``1e20 <arg>``: one float input of about 1e20, in float32, against the same call in float64."""

    def thunk(dt: torch.dtype) -> Any:
        kw = build_inputs(plan, sizes, torch.float64)
        for k, spec in plan.args.items():
            if k not in plan.masks and spec.kind == "float" and isinstance(kw.get(k), torch.Tensor):
                kw[k] = (kw[k] * 1e20 if k == big_arg else kw[k]).to(dt)
        return invoke(plan, kw, dt, _ctor_kwargs(plan, sizes, dt))

    label = f"1e20 {big_arg}"
    v32, out32 = run_call(lambda: thunk(torch.float32))
    if v32 != "ok":
        return Result(plan.qualname, label, v32, out32)
    v64, out64 = run_call(lambda: thunk(torch.float64))
    if v64 != "ok":
        return Result(plan.qualname, label, "n/a", f"no float64 reference: {out64}")
    ta, tb = tensors_of(out32), tensors_of(out64)
    if len(ta) != len(tb):
        return Result(plan.qualname, label, "silent", "float32 and float64 outputs differ in structure")
    big = torch.finfo(torch.float32).max
    for x, y in zip(ta, tb):
        if not (x.is_floating_point() and y.is_floating_point()) or x.shape != y.shape:
            continue
        x, y = x.detach().double(), y.detach().double()
        if bool(torch.isnan(y).any()):
            return Result(plan.qualname, label, "silent", "NaN in the output (in float64 too)")
        # an output that float32 cannot hold may read +-inf there; everything else must agree
        same_inf = (y.abs() > big) & (x == y.clamp(-big, big).sign() * float("inf"))
        finite = torch.isfinite(y) & ~same_inf
        scale = y[finite].abs().max() if bool(finite.any()) else torch.tensor(0.0, dtype=torch.float64)
        if not bool(torch.isfinite(x[finite]).all()):
            return Result(plan.qualname, label, "silent", "inf or NaN in float32 where float64 is finite")
        if bool(((x - y)[finite].abs() > 1e-3 * scale).any()):
            err = float((x - y)[finite].abs().max() / scale.clamp_min(1e-300))
            return Result(plan.qualname, label, "silent", f"float32 is {err:.2g} (relative) from float64")
    return Result(plan.qualname, label, "ok")


def hyper_case(plan: Plan, where: str, hp: str, val: Any, sizes: dict[str, int]) -> Result:
    label = f"hyper {hp}={val}"

    def thunk() -> Any:
        ctor = _ctor_kwargs(plan, sizes, torch.float64)
        kw = build_inputs(plan, sizes, torch.float64, with_masks=False)
        if where == "ctor":
            ctor[hp] = val
            if inspect.isclass(plan.obj):
                return plan.obj(**ctor)  # rejected when the module is built
        kw[hp] = val
        return invoke(plan, kw, torch.float64, ctor)

    verdict, out = run_call(thunk)
    if verdict == "ok":
        return Result(plan.qualname, label, "silent", "invalid hyper-parameter accepted")
    if verdict == "n/a":  # still running: accepted
        return Result(
            plan.qualname, label, "silent", f"invalid hyper-parameter accepted (still running after {CALL_LIMIT} s)"
        )
    return Result(plan.qualname, label, verdict, out)


def _mask_in(axes: tuple[str, ...], km: torch.Tensor, sizes: dict[str, int]) -> torch.Tensor:
    """The (B, S) slot mask ``km`` laid out with the given axes (broadcast over the others; S is the last axis)."""
    shape = _sizes_of(axes, sizes)
    if len(axes) == 1:
        return km[0].clone()
    if axes[0] == "B":
        view = [km.shape[0]] + [1] * (len(axes) - 2) + [km.shape[1]]
        return km.reshape(view).expand(shape).clone()
    return km[0].expand(shape).clone()


def _suffix(name: str) -> str:
    """What a mask's name says it covers: ``mask_l`` -> ``_l``, ``mask1`` -> ``1``, ``word_mask`` -> ``_word``."""
    if name in ("mask", "key_padding_mask", "attn_mask"):
        return ""
    m = re.fullmatch(r"([a-z]\w*?)_mask", name)
    if m:
        return "_" + m.group(1)
    m = re.search(r"(_[a-z]\w*|\d)$", name)
    return m.group(1) if m else ""


def governs(mask: str, arg: str, masks: list[str]) -> bool:
    """Whether ``mask`` covers the feature slots of ``arg`` (``mask_l`` covers ``F_l``; ``mask`` the rest)."""
    suf = _suffix(mask).lstrip("_").lower()
    if suf:
        return arg.lower().endswith(suf)
    claimed = {_suffix(m).lstrip("_").lower() for m in masks} - {""}
    return not any(arg.lower().endswith(c) for c in claimed)


def mask_cases(plan: Plan, mk: str, sizes: dict[str, int], case: Any, call: Any) -> Iterator[Result]:
    name = plan.qualname
    spec = plan.args[mk]
    candidates = [spec.axes] if spec.documented else []
    defaults = (("B", "n_q", "n_f"), ("B", "n_f"), ("B", "1", "n_f"), ("n_f",), ("B", "n_q"), ("n_q",))
    candidates += [a for a in defaults if a not in candidates]
    B = sizes["B"]
    poison_names: list[str] = []

    def with_mask(axes: tuple[str, ...], km: torch.Tensor, poison: float | None = None, grads: bool = False) -> Any:
        slot = axes[-1]
        S = sizes[slot]

        def edit(kw: dict[str, Any]) -> None:
            kw[mk] = _mask_in(axes, km, sizes)
            for k in plan.masks:
                if k != mk:
                    kw[k] = None
            if poison is not None:
                for k in poison_names:
                    t = kw[k].clone()
                    t.narrow(plan.args[k].axes.index(slot, 1), S - 1, 1).fill_(poison)
                    kw[k] = t
            if grads:
                for k, sp in plan.args.items():
                    if k not in plan.masks and sp.kind == "float":
                        kw[k] = kw[k].detach().requires_grad_(True)
            edit.kw = kw  # type: ignore[attr-defined]

        out = call(sizes, edit=edit)
        if not grads:
            return out
        ts = [t for t in tensors_of(out) if t.is_floating_point() and t.requires_grad]
        if not ts:
            return out, []
        # every output, padded rows included (made finite): a padded slot's own output must not poison a gradient
        sum(t.nan_to_num(0.0, 0.0, 0.0).sum() for t in ts).backward()
        grads_in = [edit.kw[k].grad for k in plan.args if isinstance(edit.kw.get(k), torch.Tensor)]  # type: ignore[attr-defined]
        got = [unmasked(g, S) for g in grads_in if g is not None]
        mod = getattr(invoke, "last_module", None)
        if mod is not None:
            got += [p.grad for p in mod.parameters() if p.grad is not None]
        return out, got

    axes: tuple[str, ...] = ()
    clean: tuple[str, Any] = ("n/a", "no layout")
    for lay in candidates:
        if lay[-1] not in ("n_f", "n_q"):
            continue
        km0 = torch.ones(B, sizes[lay[-1]], dtype=torch.bool)
        km0[:, -1] = False
        clean = run_call(lambda lay=lay, km0=km0: with_mask(lay, km0))
        if clean[0] == "ok":
            axes = lay
            break
    if not axes:
        yield Result(name, f"mask {mk}", "n/a", f"no mask layout accepted: {clean[1]}")
        return
    ref = clean[1]
    slot = axes[-1]
    S = sizes[slot]
    km = torch.ones(B, S, dtype=torch.bool)
    km[:, -1] = False
    poison_names[:] = [
        k
        for k, sp in plan.args.items()
        if k not in plan.masks
        and sp.kind == "float"
        and sp.axes[:1] == ("B",)
        and slot in sp.axes[1:]
        and governs(mk, k, plan.masks)
    ]
    for value in (float("nan"), float("inf")):
        if not poison_names:
            break
        yield case(
            f"{value} in masked slot ({mk})",
            lambda v=value: with_mask(axes, km, v),
            lambda out: same(out, ref, S),
            "a masked slot changes the output",
        )
    if poison_names:
        clean_g = run_call(lambda: with_mask(axes, km, None, grads=True))
        if clean_g[0] == "ok" and clean_g[1][1]:
            yield case(
                f"grad, nan in masked slot ({mk})",
                lambda: with_mask(axes, km, float("nan"), grads=True),
                lambda og: not any(bool(torch.isnan(g).any()) for g in og[1]),
                "NaN reaches a gradient through a masked slot",
            )
    yield case(f"fully masked ({mk})", lambda: with_mask(axes, torch.zeros_like(km)), why="NaN for a fully masked row")
    # every mask layout, with per-example content (example b masks b + 1 keys), against the documented layout
    per = torch.ones(B, S, dtype=torch.bool)
    for b in range(B):
        per[b, S - 1 - min(b, S - 1) :] = False
    other = "n_q" if slot == "n_f" else "n_f"
    layouts: list[tuple[str, ...]] = [("B", other, slot), ("B", "1", slot), ("B", slot), (slot,), ("1", slot)]
    if axes not in layouts:
        layouts.insert(0, axes)
    ref_per = run_call(lambda: with_mask(axes, per))
    ref_shared = run_call(lambda: with_mask(axes, per[:1].expand(B, -1)))
    for lay in layouts:
        if lay == axes:
            continue
        shared = lay[0] != "B"
        content = per[:1].expand(B, -1) if shared else per
        r = ref_shared if shared else ref_per
        if r[0] != "ok":
            continue
        label = f"mask {mk} (" + ", ".join(lay) + ")"
        yield case(
            label,
            lambda lay=lay, content=content: with_mask(lay, content),
            lambda out, r=r: same(out, r[1], 10**9),
            "this mask layout is read differently from the documented one",
        )
    # a rank-2 (B, n) mask with B == n_q: ambiguous (batch or queries?): refused, or read as documented
    n_f = sizes["n_f"]
    if (
        "n_q" in {a for s in plan.args.values() for a in s.axes}
        and slot == "n_f"
        and len(axes) == 3
        and not name.startswith(RANK2_IS_QUERIES)
    ):
        sq = _resize(sizes, B=sizes["n_q"])
        per_q = torch.ones(sq["B"], n_f, dtype=torch.bool)
        for b in range(sq["B"]):
            per_q[b, n_f - 1 - b :] = False

        def amb(m: torch.Tensor) -> Any:
            def edit(kw: dict[str, Any]) -> None:
                kw[mk] = m
                for k in plan.masks:
                    if k != mk:
                        kw[k] = None

            return call(sq, edit=edit)

        r3 = run_call(lambda: amb(_mask_in(axes, per_q, sq)))
        if r3[0] == "ok" and per_q.shape[0] == sizes["n_q"]:
            yield case(
                f"mask {mk} ambiguous (B == n_q, n_f)",
                lambda: amb(per_q[:, : sq["n_f"]] if axes[1] != "n_f" else per_q),
                lambda out: same(out, r3[1], 10**9),
                "a (B, n_f) mask with B == n_q is read per query, not per example",
            )


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------
#: seconds spent on each callable in the last sweep
TIMES: dict[str, float] = {}


def sweep(only: str = "", callables: list[tuple[str, Any]] | None = None) -> list[Result]:
    """Run every case for the public callables whose qualified name contains ``only``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cases provoke warnings on purpose
            return _sweep(only, callables)
    finally:
        torch.set_num_threads(threads)


def _sweep(only: str, callables: list[tuple[str, Any]] | None) -> list[Result]:
    # modules torch imports lazily on a first call: imported now, so that a call abandoned at CALL_LIMIT
    # cannot leave one half-imported for every later case
    for lazy in ("sympy", "sympy.printing", "torch._dynamo", "matplotlib.pyplot"):
        try:
            importlib.import_module(lazy)
        except Exception:  # an optional speed-up of the later cases only
            pass
    results: list[Result] = []
    for qualname, obj in callables if callables is not None else public_callables(only):
        for extra in [{}, *VARIANTS.get(qualname, [])]:
            label = qualname + ("[" + ", ".join(f"{k}={v!r}" for k, v in extra.items()) + "]" if extra else "")
            try:
                plan = plan_for(qualname, obj)
            except Exception as exc:  # the harness cannot read this signature
                results.append(Result(label, "all", "n/a", f"harness: {type(exc).__name__}: {exc}"))
                continue
            plan.extra, plan.qualname = extra, label
            t = time.perf_counter()
            results.extend(cases_for(plan))
            TIMES[label] = time.perf_counter() - t
    return results


def case_kind(case: str) -> str:
    return (
        re.sub(r"[ =(].*", "", case)
        if not case.startswith(("nan", "inf", "mask", "grad", "fully", "1e20"))
        else case.split(" (")[0]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="list every crash and silent case")
    ap.add_argument("--only", default="", help="only the callables whose qualified name contains this")
    ap.add_argument("--list-na", action="store_true", help="also list the n/a cases")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = sweep(args.only)
    names = {r.name for r in results}
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    by_mod: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        by_kind[case_kind(r.case)][r.verdict] += 1
        by_mod[r.name.rsplit(".", 1)[0]][r.verdict] += 1
    for title, table in (("case", by_kind), ("module", by_mod)):
        print(f"\n{title:<44}" + "".join(f"{k:>7}" for k in KINDS) + f"{'total':>7}")
        for key in sorted(table):
            row = table[key]
            print(f"{key:<44}" + "".join(f"{row[k]:>7}" for k in KINDS) + f"{sum(row.values()):>7}")
    total = Counter(r.verdict for r in results)
    print(f"\n{'TOTAL':<44}" + "".join(f"{total[k]:>7}" for k in KINDS) + f"{len(results):>7}")
    print(f"{len(names)} public callables, {len(results)} cases")
    if args.verbose or args.list_na:
        show = ("crash", "silent") + (("n/a",) if args.list_na else ())
        for r in results:
            if r.verdict in show:
                print(f"{r.verdict:<7} {r.name} [{r.case}]: {r.why[:240]}")
    print(f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    if args.verbose:
        slow = sorted(TIMES.items(), key=lambda kv: -kv[1])[:8]
        print("slowest: " + ", ".join(f"{k} {v:.1f} s" for k, v in slow), file=sys.stderr)
    return 1 if total["crash"] or total["silent"] else 0


if __name__ == "__main__":
    sys.exit(main())

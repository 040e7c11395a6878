"""Self-checks for the exercises of chapter 6.6 (attention sinks, gates and FlexAttention).

Each check raises ``AssertionError`` with a hint when the answer is wrong and
prints a confirmation when it is right.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from ..attention import attend
from ..beyond.sinks import StreamingCache
from ..experiments.sinks_gates import WindowTagger, sink_measures

CHAPTER = "chapters/ch06_6_sinks_and_gates.ipynb"

#: Exercise 3: the window of the variation (one key fewer than the copy rule needs, lag 4).
EX3_WINDOW = 4


def _sink_case(seed: int, n: int, d: int) -> tuple[float, float, float]:
    """``(p_sink, g . c, dL/ds)`` of one row with a sink, ``L = g . c``, the gradient by autograd in float64."""
    gen = torch.Generator().manual_seed(seed)
    q, K, V = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((1, d), (n, d), (n, d)))
    g = torch.randn(d, generator=gen, dtype=torch.float64)
    s = torch.randn(1, 1, generator=gen, dtype=torch.float64).mul(2).requires_grad_()
    c, a = attend(q, K, V, sink=s)
    (c[0] @ g).backward()
    if s.grad is None:  # s requires grad and reaches the loss: not expected
        raise RuntimeError("_sink_case: the sink logit received no gradient")
    return 1.0 - float(a.sum().detach()), float(c[0].detach() @ g), float(s.grad)


def _sink_gradient_hint(
    sink_gradient: Callable[[float, float], float], cases: Sequence[tuple[int, int, int]]
) -> str | None:
    for seed, n, d in cases:
        p, gc, want = _sink_case(seed, n, d)
        got = float(sink_gradient(p, gc))
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        if math.isclose(got, -want, rel_tol=1e-6, abs_tol=1e-9):
            return "the size is right, the sign is not: raising s takes weight from every key"
        if math.isclose(got, -(1 - p) * gc, rel_tol=1e-6, abs_tol=1e-9):
            return "which share scales the derivative of every a_l with respect to s?"
        return "not right: differentiate a_l with respect to s first, then the context"
    return None


def check_sink_gradient(sink_gradient: Callable[[float, float], float]) -> None:
    """Exercise 1: ``sink_gradient(p_sink, g_dot_c)`` is dL/ds for ``L = g . c`` in one attention row with a sink.

    Compared with autograd on rows of 3 to 9 keys (float64). Raises ``AssertionError`` with a hint.
    """
    hint = _sink_gradient_hint(sink_gradient, [(0, 3, 2), (1, 6, 4), (2, 9, 3)])
    if hint:
        raise AssertionError(hint)
    print("sink gradient check passed")


def hidden_check_sink_gradient(sink_gradient: Callable[[float, float], float]) -> None:
    """Hidden test of Exercise 1: other rows (1 key, 40 keys). Raises ``AssertionError``."""
    if _sink_gradient_hint(sink_gradient, [(10, 1, 5), (11, 40, 8), (12, 2, 1)]):
        raise AssertionError("sink_gradient is not right on other rows")


def streaming_offsets(t: int, n_sink: int, window: int) -> dict[int, int]:
    """``{text position: offset}`` of the keys a :class:`~attnsurvey.beyond.sinks.StreamingCache` holds after ``t`` tokens.

    Runs the cache ``t`` steps and reads the text positions it holds. The cache rotates key ``i`` to position ``i``
    and the newest query to its own index ``m - 1`` (``m`` positions held), so key ``i``'s offset is ``m - 1 - i``.
    """
    cache = StreamingCache(1, 1, 2, n_sink, window)
    for _ in range(t):
        x = torch.zeros(1, 1, 1, 2)
        cache.step(x, x, x)
    held = cache.positions.tolist()
    return {p: len(held) - 1 - i for i, p in enumerate(held)}


def _offsets_hint(
    key_offsets: Callable[[int, int, int], Mapping[int, int]], cases: Sequence[tuple[int, int, int]]
) -> str | None:
    if key_offsets is streaming_offsets:
        return "that is the check's own reference, which runs the cache: write the rule in t, n_sink and window"
    for t, n_sink, window in cases:
        answer = key_offsets(t, n_sink, window)
        if not isinstance(answer, Mapping):
            return "give a dict {text position: offset}, one entry per key the cache holds"
        got = {int(p): int(o) for p, o in answer.items()}
        want = streaming_offsets(t, n_sink, window)
        if got == want:
            continue
        if sorted(got) != sorted(want):
            return f"the keys held are not right for t={t}, n_sink={n_sink}, window={window}: which tokens does the cache keep?"
        if got == {p: t - 1 - p for p in got}:
            return "these are offsets in the text: where does the cache put the newest query and each key?"
        return f"not right for t={t}, n_sink={n_sink}, window={window}: count the query's and the key's places in the cache"
    return None


def check_key_offsets(key_offsets: Callable[[int, int, int], Mapping[int, int]]) -> None:
    """Exercise 2: ``key_offsets(t, n_sink, window)`` maps each text position StreamingLLM's cache holds to its offset.

    The offset is the newest query's position minus the key's, both counted inside the cache, after ``t`` tokens.
    Compared with :func:`streaming_offsets`, which runs :class:`~attnsurvey.beyond.sinks.StreamingCache`.
    Raises ``AssertionError`` with a hint.
    """
    hint = _offsets_hint(key_offsets, [(3, 2, 4), (10, 2, 4), (6, 2, 4), (7, 2, 4), (7, 1, 3), (12, 0, 5)])
    if hint:
        raise AssertionError(hint)
    print("key offsets check passed")


def hidden_check_key_offsets(key_offsets: Callable[[int, int, int], Mapping[int, int]]) -> None:
    """Hidden test of Exercise 2: an empty cache, a cache filling and just full, a long run with many sinks.

    Raises ``AssertionError``.
    """
    if _offsets_hint(key_offsets, [(0, 4, 2), (5, 4, 2), (6, 4, 2), (7, 4, 2), (40, 6, 3), (9, 3, 1)]):
        raise AssertionError("key_offsets is not right on other sizes")


def _window_losses(model: WindowTagger) -> tuple[float, float]:
    m = sink_measures(model, window=EX3_WINDOW)
    return m["copy_evicted"], m["copy_kept"]


def _window_hint(answer: object, model: WindowTagger, rel: float) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "give a pair (evicted, kept) of two numbers"
    got = [float(x) for x in answer]
    want = _window_losses(model)
    if all(math.isclose(g, w, rel_tol=rel) for g, w in zip(got, want)):
        return None
    default = sink_measures(model)
    if all(math.isclose(g, default[k], rel_tol=rel) for g, k in zip(got, ("copy_evicted", "copy_kept"))):
        return "these are the losses of the chapter's window: pass the exercise's window to the measure"
    if all(math.isclose(g, w, rel_tol=rel) for g, w in zip(got[::-1], want)):
        return "the pair is in the wrong order"
    return "not the copy losses of this model with that window: which positions and which mask?"


def check_window_losses(answer: object, model: WindowTagger) -> None:
    """Exercise 3: ``(evicted, kept)``, the copy losses of ``model`` with a window of :data:`EX3_WINDOW` keys.

    The check recomputes both with :func:`~attnsurvey.experiments.sinks_gates.sink_measures` (to 1e-3, relative).
    Raises ``AssertionError`` with a hint.
    """
    hint = _window_hint(answer, model, 1e-3)
    if hint:
        raise AssertionError(hint)
    print("window losses check passed")


def hidden_check_window_losses(answer: object, model: WindowTagger) -> None:
    """Hidden test of Exercise 3: the same pair to a tighter tolerance (1e-5, relative). Raises ``AssertionError``."""
    if _window_hint(answer, model, 1e-5):
        raise AssertionError("the window losses are not right to five digits")


__all__ = [
    "EX3_WINDOW",
    "check_key_offsets",
    "check_sink_gradient",
    "check_window_losses",
    "hidden_check_key_offsets",
    "hidden_check_sink_gradient",
    "hidden_check_window_losses",
    "streaming_offsets",
]

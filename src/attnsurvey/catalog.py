"""The equation catalog: which code implements each survey item, which tests check it.

The catalog is declared where the code is, never in a separate table:

* **Code** carries a decorator naming the survey items it implements. The
  object that *defines* an item also gives its title and the chapter that
  teaches it (by default the ``CHAPTER`` constant of its module; ``chapter=``
  overrides it); every other object implementing the same item names the id only::

      from ..catalog import catalogued

      CHAPTER = "chapters/ch03_2_1_attention_scoring.ipynb"  # once per module

      @catalogued("table2:additive", title="Additive score w^T act(W_1 q + W_2 k_l + b)")
      def additive_score(...): ...

      @catalogued("table2:additive")
      class AdditiveScore(nn.Module): ...

  Decorators stack (one per titled id) and one decorator may list several ids
  without a title. The decorator only records ``obj.__module__`` and
  ``obj.__qualname__`` in this module's registry and returns the object
  unchanged. Objects a decorator cannot reach (a module constant, an alias)
  are declared with :func:`declare` right after their definition.
* **Tests** carry a pytest marker, ``@pytest.mark.catalog("table2:additive")``
  (registered in ``pyproject.toml``). ``tools/catalog_index.py`` reads ``tests/``
  with :mod:`ast` (nothing is run) and writes the index ``catalog_tests.json``
  that ships with the package; ``tests/test_catalog.py`` fails when it is stale.
  A parametrised test whose parameter ids are catalog ids marks itself with
  ``by_param=True``; its node ids then carry the parameter, ``test_x[table3:row01]``.

:func:`entries` imports every module of the package (which runs the
decorators) and joins the declarations with the markers.

Ids: ``eq1`` ... ``eq46`` for the survey's numbered equations; ``table2:<row>``
for the score functions of Table II; ``table3:row01`` ... ``table3:row17`` for
Table III; ``extra:<name>`` for material from the other sources.

Command line::

    python -m attnsurvey.catalog           # coverage summary
    python -m attnsurvey.catalog --json    # the catalog as a JSON array
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from .display_table import Table, table

FIELDS = ("id", "title", "chapter", "implemented_by", "tested_by")

TABLE2_IDS = [
    "table2:additive",
    "table2:multiplicative",
    "table2:scaled-multiplicative",
    "table2:general",
    "table2:biased-general",
    "table2:activated-general",
    "table2:similarity",
]
#: Every survey item the book promises to cover, in survey order.
EXPECTED_IDS = [f"eq{i}" for i in range(1, 47)] + TABLE2_IDS + [f"table3:row{i:02d}" for i in range(1, 18)]

#: The titles that state an equation, with the equation in LaTeX between ``$...$``
#: (the survey's symbols, as the chapters display them). The book's tables show
#: these; ``entries()`` and ``--json`` keep the plain titles. Ids not listed
#: here are shown with their plain title.
MATH_TITLES: dict[str, str] = {
    "eq1": r"Keys and values from the feature matrix, $\boldsymbol K = \boldsymbol W_K \boldsymbol F$, "
    r"$\boldsymbol V = \boldsymbol W_V \boldsymbol F$",
    "eq2": r"Attention score per key, $e_l = \operatorname{score}(\boldsymbol q, \boldsymbol k_l)$",
    "eq3": r"Alignment of the scores into weights, $a_l = \operatorname{align}(e_l; \boldsymbol e)$ (softmax)",
    "eq4": r"Context vector as the weighted average of values, $\boldsymbol c = \sum_{l=1}^{n_f} a_l \boldsymbol v_l$",
    "eq5": r"Output model $\hat{\boldsymbol y} = \operatorname{softmax}(\boldsymbol W_c \boldsymbol c + \boldsymbol b_c)$",
    "eq6": r"General additive score "
    r"$\boldsymbol w^T \operatorname{act}(\boldsymbol W_1 \boldsymbol q + \boldsymbol W_2 \boldsymbol k_l + \boldsymbol b)$, "
    "the score of alternating co-attention",
    "eq7": r"Query-less additive score "
    r"$e^{(0)}_l = \boldsymbol w^{(1)T} \operatorname{act}(\boldsymbol W^{(1)} \boldsymbol k^{(1)}_l + \boldsymbol b^{(1)})$",
    "eq8": r"Alternating co-attention, step 2: $\boldsymbol c^{(0)}$ queries the second feature set",
    "eq9": r"Alternating co-attention, step 3: $\boldsymbol c^{(2)}$ queries the first feature set again",
    "eq12": r"Bilinear affinity matrix "
    r"$\boldsymbol A = \operatorname{act}(\boldsymbol K^{(1)T} \boldsymbol W_A \boldsymbol K^{(2)})$",
    "eq13": r"Concatenation affinity $A_{i,j} = \boldsymbol w_A^T \operatorname{concat}(\boldsymbol k^{(1)}_i, "
    r"\boldsymbol k^{(2)}_j, \boldsymbol k^{(1)}_i \circ \boldsymbol k^{(2)}_j)$",
    "eq14": r"Parallel co-attention scores of set 1, $\boldsymbol e^{(1)} = \boldsymbol w_1 "
    r"\operatorname{act}(\boldsymbol W_2 \boldsymbol K^{(2)} \boldsymbol A^T + \boldsymbol W_1 \boldsymbol K^{(1)})$",
    "eq15": r"Parallel co-attention scores of set 2, $\boldsymbol e^{(2)} = \boldsymbol w_2 "
    r"\operatorname{act}(\boldsymbol W_1 \boldsymbol K^{(1)} \boldsymbol A + \boldsymbol W_2 \boldsymbol K^{(2)})$",
    "eq16": r"Max-pooled affinity scores $e^{(1)}_i = \max_j A_{i,j}$, $e^{(2)}_j = \max_i A_{i,j}$",
    "eq17": r"Mean-pooled target phrase $\boldsymbol r^t$ (rotatory attention)",
    "eq18": r"Target-to-context scores $e^l_i = \operatorname{score}(\boldsymbol r^t, \boldsymbol k^l_i)$, "
    r"giving $\boldsymbol r^l$ and $\boldsymbol r^r$",
    "eq19": r"Context-to-target scores $e^{l_t}_i = \operatorname{score}(\boldsymbol r^l, \boldsymbol k^t_i)$, "
    r"giving $\boldsymbol r^{l_t}$ and $\boldsymbol r^{r_t}$",
    "eq20": r"Final representation "
    r"$\boldsymbol r = \operatorname{concat}(\boldsymbol r^l, \boldsymbol r^r, \boldsymbol r^{l_t}, \boldsymbol r^{r_t})$",
    "eq21": r"Size-normalised representations "
    r"$\boldsymbol x^{(t_i)} = \boldsymbol W_{e_i} \boldsymbol x^{(e_i)} + \boldsymbol b_{e_i}$",
    "eq22": r"Meta-embedding as attention-weighted sum $\boldsymbol x^{(e)} = \sum_{i=1}^{E} a_i \boldsymbol x^{(t_i)}$ "
    "(self-attention scores)",
    "eq23": r"Attention score of one key, $e_l = \operatorname{score}(\boldsymbol q, \boldsymbol k_l)$, "
    "for all queries and keys at once",
    "eq24": r"Context vector as the weighted sum of value vectors, $\boldsymbol c = \sum_{l=1}^{n_f} a_l \boldsymbol v_l$",
    "eq25": r"Soft / global alignment, $a_l = \exp(e_l) / \sum_{j=1}^{n_f} \exp(e_j)$",
    "eq26": r"Hard alignment $\boldsymbol c = \boldsymbol v_m$, $m$ the arg-max or drawn from "
    r"$\operatorname{Multinomial}(a_1, \dots, a_{n_f})$",
    "eq27": r"Local alignment: softmax restricted to the window $[p - D, p + D]$",
    "eq28": r"Predictive position "
    r"$p = S \cdot \operatorname{sigmoid}(\boldsymbol w_p^T \tanh(\boldsymbol W_p \boldsymbol q))$",
    "eq29": r"Gaussian emphasis around $p$, $\exp(-(l - p)^2 / (2 \sigma^2))$, $\sigma = D/2$ (not renormalised)",
    "eq30": r"Multi-dimensional context, $\boldsymbol c = \sum_{l=1}^{n_f} \boldsymbol a_l \circ \boldsymbol v_l$ "
    "(element-wise weights)",
    "eq31": r"Multi-dimensional score vector, $\boldsymbol e_l = \boldsymbol W_d^T "
    r"\operatorname{act}(\boldsymbol W_1 \boldsymbol q + \boldsymbol W_2 \boldsymbol k_l + \boldsymbol b)$",
    "eq33": r"Self-attention score without a query, "
    r"$\boldsymbol w^T \operatorname{act}(\boldsymbol W \boldsymbol k_l + \boldsymbol b)$",
    "eq34": r"Self-attention with a learned query vector, $\boldsymbol q^T \boldsymbol k_l$",
    "eq35": r"Queries from the feature vectors, $\boldsymbol Q = \boldsymbol W_Q \boldsymbol F$",
    "eq36": r"Feature update by replacement, $\boldsymbol f^{(\text{new})} = \boldsymbol c$",
    "eq37": r"Feature update by residual and normalisation, "
    r"$\boldsymbol f^{(\text{new})} = \operatorname{Normalize}(\boldsymbol f^{(\text{old})} + \boldsymbol c)$",
    "eq38": r"Per-head projections of query, keys and values, $\boldsymbol q^{(j)} = \boldsymbol W_q^{(j)} \boldsymbol q$, "
    r"$\boldsymbol K^{(j)} = \boldsymbol W_K^{(j)} \boldsymbol F$, $\boldsymbol V^{(j)} = \boldsymbol W_V^{(j)} \boldsymbol F$",
    "eq39": r"One context vector per head, $\boldsymbol c^{(j)} = \sum_{l=1}^{n_f} a_l^{(j)} \boldsymbol v_l^{(j)}$",
    "eq40": r"Concatenate the head contexts and mix, "
    r"$\boldsymbol c = \boldsymbol W_O \operatorname{concat}(\boldsymbol c^{(1)}, \dots, \boldsymbol c^{(d)})$",
    "eq41": r"Multi-hop query update "
    r"$\boldsymbol q^{(s+1)} = \operatorname{transform}(\boldsymbol q^{(s)}, \boldsymbol c^{(s)})$",
    "eq42": r"Hop score on the concatenated query and context, "
    r"$\operatorname{score}(\operatorname{concat}(\boldsymbol q^{(s+1)}, \boldsymbol c^{(s)}), \boldsymbol k_l)$",
    "eq43": r"Capsule attention score with a per-class learned query, $e_{c,l} = \boldsymbol q_c^T \boldsymbol k_l$",
    "eq44": r"Capsule probability module, $p_c = \operatorname{sigmoid}(\boldsymbol w_c^T \boldsymbol c_c + b_c)$",
    "eq45": r"Capsule reconstruction module, $\boldsymbol r_c = p_c \boldsymbol c_c$",
    "table2:additive": r"Additive score "
    r"$\boldsymbol w^T \operatorname{act}(\boldsymbol W_1 \boldsymbol q + \boldsymbol W_2 \boldsymbol k_l + \boldsymbol b)$",
    "table2:multiplicative": r"Multiplicative score $\boldsymbol q^T \boldsymbol k_l$",
    "table2:scaled-multiplicative": r"Scaled multiplicative score $\boldsymbol q^T \boldsymbol k_l / \sqrt{d_k}$",
    "table2:general": r"General score $\boldsymbol k_l^T \boldsymbol W \boldsymbol q$",
    "table2:biased-general": r"Biased general score $\boldsymbol k_l^T (\boldsymbol W \boldsymbol q + \boldsymbol b)$",
    "table2:activated-general": r"Activated general score "
    r"$\operatorname{act}(\boldsymbol k_l^T \boldsymbol W \boldsymbol q + b)$",
    "extra:bilinear-score": r"Bilinear score $\boldsymbol q^T \boldsymbol W \boldsymbol k_l$: nndl eq. 8.5's "
    r"$\boldsymbol x^T \boldsymbol W \boldsymbol q$ (the general score) written query-first, $\boldsymbol W$ transposed",
    "extra:concat-score": r"Concat score $\boldsymbol v^T \tanh(\boldsymbol W [\boldsymbol q; \boldsymbol k_l])$ "
    r"(Luong et al.; NLP review eq. 1) = additive with $\boldsymbol W = [\boldsymbol W_1, \boldsymbol W_2]$, "
    r"$\boldsymbol b = \boldsymbol 0$",
    "extra:scaling-variance": r"$\operatorname{Var}(\boldsymbol q^T \boldsymbol k) = d_k$ for unit-variance entries; "
    r"softmax saturation and vanishing gradients without $1/\sqrt{d_k}$",
    "extra:linformer": r"Linformer: keys and values projected to length $k$, "
    r"$\operatorname{softmax}(\boldsymbol Q (\boldsymbol E \boldsymbol K)^T / \sqrt{d_k}) (\boldsymbol F \boldsymbol V)$",
    "extra:memory-network-hops": r"End-to-end memory network hops, "
    r"$\boldsymbol q_{s+1} = \boldsymbol q_s + \boldsymbol c_s$ (article 4.3)",
    "extra:multihead-matrix-form": r"Review eq. 10-11: $\mathrm{head}_i = \operatorname{Attention}(\boldsymbol Q "
    r"\boldsymbol W_i^Q, \boldsymbol K \boldsymbol W_i^K, \boldsymbol V \boldsymbol W_i^V)$, "
    r"$\operatorname{MultiHead} = \operatorname{Concat}(\mathrm{heads}) \boldsymbol W^O$",
    "extra:structured-self-attention": r"Structured self-attentive sentence embedding "
    r"$\boldsymbol A = \operatorname{softmax}(\boldsymbol W_{s2} \tanh(\boldsymbol W_{s1} \boldsymbol H^T))$, "
    r"$\boldsymbol M = \boldsymbol A \boldsymbol H$, penalty "
    r"$\lVert \boldsymbol A \boldsymbol A^T - \boldsymbol I \rVert_F^2$ (review eq. 12)",
    "extra:reversible-layers": r"Reversible residual layers: $\boldsymbol y_1 = \boldsymbol x_1 + F(\boldsymbol x_2)$, "
    r"$\boldsymbol y_2 = \boldsymbol x_2 + G(\boldsymbol y_1)$, inverted in the backward pass",
    "extra:local-window-attention": r"Local (sliding-window) self-attention, $|i - j| \le w$, in $O(n w)$ memory",
    "extra:wer": r"Word error rate $(S + D + I) / N$ from a Levenshtein alignment",
    "extra:key-value-vs-plain": r"Key-value attention vs plain attention "
    r"($\boldsymbol K = \boldsymbol V = \boldsymbol F$)",
    "extra:bahdanau-decoder": r"Bahdanau decoder: previous state as query, additive score over encoder states "
    r"($\boldsymbol K = \boldsymbol V = \boldsymbol H$)",
    "extra:attention-as-expectation": r"Attention as the expectation of a selection variable "
    r"$z \sim p(z \mid \boldsymbol X, \boldsymbol q)$ (nndl 8.2, Eq. 8.1 and 8.7)",
    "extra:gaussian-local-bias": r"Learnable Gaussian local bias added to the scores, "
    r"$\operatorname{softmax}(e_{ij} + G_{ij})$ (review eq. 16; Yang et al. 2018)",
    "extra:attention-via-attention": r"Attention-via-attention: word-level context, then character attention with "
    r"$[\boldsymbol q; \boldsymbol c^{(w)}]$ (Fig. 7)",
    "extra:supervised-attention": r"Supervised attention: task loss + $\lambda$ * alignment loss against gold alignments",
    "extra:pre-post-norm": r"Residual + normalisation: post-norm $\operatorname{LayerNorm}(\boldsymbol x + f(\boldsymbol x))$ "
    r"vs pre-norm $\boldsymbol x + f(\operatorname{LayerNorm}(\boldsymbol x))$",
    "extra:gated-attention": r"Gated attention: $\boldsymbol c^{(j)} \odot \sigma(\boldsymbol W_G \boldsymbol x)$ "
    r"per head before $\boldsymbol W_O$ (Qiu et al. 2025)",
    "extra:moba": r"MoBA: per-query top-$k$ key blocks by the gate $\boldsymbol q_t^T \operatorname{mean}_{j \in b} "
    r"\boldsymbol k_j$, own block always, future blocks never",
    "extra:nsa": r"NSA: $\boldsymbol o_t = \sum_{c \in \{\mathrm{cmp}, \mathrm{slc}, \mathrm{win}\}} g_t^c "
    r"\operatorname{Attn}(\boldsymbol q_t, \tilde{\boldsymbol K}_t^c, \tilde{\boldsymbol V}_t^c)$: gated sum of "
    r"compressed-block, selected-block (top-$n$ by the compressed weights) and sliding-window attention",
    "extra:dsa-indexer": r"DeepSeek sparse attention: lightning indexer "
    r"$I_{t,s} = \sum_j w_{t,j} \operatorname{ReLU}(\boldsymbol q^I_{t,j} \cdot \boldsymbol k^I_s)$, "
    r"top-$k$ tokens per query",
    "extra:linear-attention": r"Causal linear attention (Katharopoulos et al. 2020): "
    r"$\boldsymbol o_t = \boldsymbol S_t^T \phi(\boldsymbol q_t) / \boldsymbol z_t^T \phi(\boldsymbol q_t)$, "
    r"$\boldsymbol S_t = \boldsymbol S_{t-1} + \phi(\boldsymbol k_t) \boldsymbol v_t^T$, "
    r"$\boldsymbol z_t = \boldsymbol z_{t-1} + \phi(\boldsymbol k_t)$",
    "extra:linear-attention-chunked": r"Chunked linear attention: parallel inside chunks of $C$ positions, "
    r"the state $\boldsymbol S$ carried between chunks",
    "extra:gated-decay": r"Decay and gates: $\boldsymbol S_t = g_t \boldsymbol S_{t-1} + \phi(\boldsymbol k_t) "
    r"\boldsymbol v_t^T$ (RetNet: fixed $g_t = \gamma$; Mamba-2, GLA: data-dependent), "
    r"$D_{ij} = \prod_{l=j+1}^{i} g_l$",
    "extra:delta-rule": r"The delta rule (DeltaNet): "
    r"$\boldsymbol S_t = (\boldsymbol I - \beta_t \boldsymbol k_t \boldsymbol k_t^T) \boldsymbol S_{t-1} "
    r"+ \beta_t \boldsymbol k_t \boldsymbol v_t^T$, $\boldsymbol o_t = \boldsymbol S_t^T \boldsymbol q_t$",
    "extra:gated-delta-rule": r"The gated delta rule (Gated DeltaNet): "
    r"$\boldsymbol S_t = \alpha_t (\boldsymbol I - \beta_t \boldsymbol k_t \boldsymbol k_t^T) \boldsymbol S_{t-1} "
    r"+ \beta_t \boldsymbol k_t \boldsymbol v_t^T$, $\alpha_t = e^{g_t}$, $g_t \le 0$",
    "extra:differential-attention": r"Differential attention: "
    r"$\operatorname{softmax}(\boldsymbol Q_1 \boldsymbol K_1^T / \sqrt d) - \lambda "
    r"\operatorname{softmax}(\boldsymbol Q_2 \boldsymbol K_2^T / \sqrt d)$ (Ye et al. 2024)",
}

T = TypeVar("T")


@dataclass(frozen=True)
class _Declaration:
    title: str
    chapter: str
    target: str  # the dotted path that declared the title


#: id -> title and chapter, given once per id.
_DECLARED: dict[str, _Declaration] = {}
#: id -> dotted paths implementing it, in registration order (the declaring one first).
_IMPLEMENTED: dict[str, list[str]] = {}


def _check_arguments(target: str, ids: tuple[str, ...], title: str | None, chapter: str | None) -> None:
    if not ids:
        raise ValueError(f"catalog declaration for {target} names no id")
    if (title is not None or chapter is not None) and (len(ids) != 1 or not title or chapter == ""):
        raise ValueError(f"{target}: a title and a chapter go with exactly one id, got ids={ids}")


def _module_chapter(target: str) -> str:
    """The ``CHAPTER`` constant of the module that defines the dotted path ``target``."""
    module = target
    while "." in module:
        module = module.rpartition(".")[0]
        if module in sys.modules:
            chapter = getattr(sys.modules[module], "CHAPTER", None)
            if isinstance(chapter, str) and chapter:
                return chapter
            raise ValueError(f"{target}: a title needs a chapter; pass chapter= or define CHAPTER in {module}")
    raise ValueError(f"{target}: a title needs a chapter, and no imported module defines it")


def declare(target: str, *ids: str, title: str | None = None, chapter: str | None = None) -> None:
    """Record that the object at dotted path ``target`` implements the catalog items ``ids``.

    Declaring the same pair again (a module reloaded) is a no-op.

    Args:
        target: dotted path of the implementing object (``"attnsurvey.attention.attend"``).
        *ids: catalog ids (``"eq3"``, ``"table2:additive"``, ``"extra:<name>"``).
        title: the item's title; with it exactly one id is allowed and ``target``
            becomes the item's defining object.
        chapter: the notebook that teaches the item; defaults to the ``CHAPTER``
            constant of the module that defines ``target``.

    Raises:
        ValueError: no ids, a title or chapter with several ids, a title with no
            chapter (none given and the module has no ``CHAPTER``), or an id given a
            title by two different objects.
    """
    _check_arguments(target, ids, title, chapter)
    if title is not None:
        chapter = _module_chapter(target) if chapter is None else chapter
        previous = _DECLARED.get(ids[0])
        if previous is not None and previous.target != target:
            raise ValueError(f"catalog id {ids[0]!r} defined twice: by {previous.target} and by {target}")
        _DECLARED[ids[0]] = _Declaration(title, chapter, target)
    for id_ in ids:
        paths = _IMPLEMENTED.setdefault(id_, [])
        if target not in paths:
            paths.append(target)


def catalogued(*ids: str, title: str | None = None, chapter: str | None = None) -> Callable[[T], T]:
    """Decorator: the decorated function or class implements the catalog items ``ids``.

    Args:
        *ids: catalog ids, as for :func:`declare`.
        title: the item's title (one id only); see :func:`declare`.
        chapter: the teaching notebook; by default the ``CHAPTER`` of the object's module.

    Returns:
        A decorator that records the object and returns it unchanged.

    Raises:
        ValueError: as :func:`declare`, for the ids, title and chapter given.
    """
    _check_arguments("@catalogued", ids, title, chapter)

    def register(obj: T) -> T:
        named: Any = obj  # a function or class: it has __module__ and __qualname__
        declare(f"{named.__module__}.{named.__qualname__}", *ids, title=title, chapter=chapter)
        return obj

    return register


# --------------------------------------------------------------------------- tests


#: The tests index: catalog id -> pytest node ids, written from ``tests/`` by
#: ``tools/catalog_index.py`` and installed with the package (so the catalog
#: names its tests without the repository around it).
TESTS_INDEX = "catalog_tests.json"


def tested_by() -> dict[str, list[str]]:
    """The pytest node ids that check each catalog id, from the installed tests index.

    Returns:
        ``{id: [node id, ...]}`` in file order, as ``tools/catalog_index.py`` read
        the ``@pytest.mark.catalog(...)`` markers of ``tests/``;
        ``tests/test_catalog.py`` fails when the index is out of date.
    """
    text = resources.files(__package__ or "attnsurvey").joinpath(TESTS_INDEX).read_text()
    index: dict[str, list[str]] = json.loads(text)
    return index


# --------------------------------------------------------------------------- the catalog


#: Modules the catalog does not import: they declare no entry and import a heavy optional dependency
#: (the Triton kernels, which :mod:`attnsurvey.beyond.triton_flash` imports on its first launch; importing
#: Triton costs every chapter's table a quarter of a second). ``tests/test_catalog.py`` checks both claims.
#: Names are relative to the package, so that no static reader of imports (tests/test_install_cells.py)
#: mistakes the table for an import of the module.
NOT_WALKED = frozenset({"beyond.triton_kernels"})


def _iter_modules() -> Iterable[str]:
    package = importlib.import_module(__package__ or "attnsurvey")
    yield package.__name__
    for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
        if info.name.split(".")[-1] != "__main__" and info.name.removeprefix(package.__name__ + ".") not in NOT_WALKED:
            yield info.name


def _sort_key(entry_id: str) -> tuple[int, int, str]:
    if entry_id.startswith("eq"):
        return (0, int(entry_id[2:]), "")
    if entry_id.startswith("table2:"):
        return (1, TABLE2_IDS.index(entry_id) if entry_id in TABLE2_IDS else 99, entry_id)
    if entry_id.startswith("table3:"):
        return (2, 0, entry_id)
    return (3, 0, entry_id)


def entries() -> list[dict[str, Any]]:
    """All catalog entries of the package, sorted in survey order.

    Imports every module of the package (which runs the decorators).

    Returns:
        One dict per entry with the fields of ``FIELDS`` and ``module`` (the module
        of the defining object).

    Raises:
        ValueError: an id is implemented somewhere but never given a title and chapter.
    """
    for name in _iter_modules():
        importlib.import_module(name)
    untitled = sorted(set(_IMPLEMENTED) - set(_DECLARED))
    if untitled:
        raise ValueError(
            f"catalog ids without a title and chapter: {untitled} (implemented by {[_IMPLEMENTED[i] for i in untitled]})"
        )
    tests = tested_by()
    rows = []
    for id_, decl in _DECLARED.items():
        impl = _IMPLEMENTED[id_]
        rows.append(
            {
                "id": id_,
                "title": decl.title,
                "chapter": decl.chapter,
                "implemented_by": [decl.target] + [p for p in impl if p != decl.target],
                "tested_by": tests.get(id_, []),
                "module": decl.target.rsplit(".", 1)[0],
            }
        )
    return sorted(rows, key=lambda e: _sort_key(e["id"]))


def for_chapter(chapter: str) -> list[dict[str, Any]]:
    """The catalog entries one chapter teaches.

    Args:
        chapter: a notebook path, e.g. ``"chapters/ch02_general_attention_model.ipynb"``.

    Returns:
        The entries of :func:`entries` whose ``chapter`` is ``chapter`` (maybe none).
    """
    return [e for e in entries() if e["chapter"] == chapter]


#: The share of the width (percent) of the columns item, what, implemented by, tested by.
CATALOG_WIDTHS = (17, 33, 25, 25)


def display_title(entry: dict[str, Any]) -> str:
    """The title of a catalog entry as the book's tables show it.

    Args:
        entry: one entry of :func:`entries`.

    Returns:
        Its ``MATH_TITLES`` form (LaTeX between ``$...$``) or else its plain title.
    """
    return MATH_TITLES.get(entry["id"], entry["title"])


def _table(rows: list[dict[str, Any]]) -> Table:
    header = ("item", "what", "implemented by", "tested by")
    cells = [
        (
            e["id"],
            display_title(e),
            "\n".join(f"`{p}`" for p in e["implemented_by"]),
            "\n".join(f"`{t}`" for t in e["tested_by"]),
        )
        for e in rows
    ]
    plain = [(e["id"], e["title"], "\n".join(e["implemented_by"]), "\n".join(e["tested_by"])) for e in rows]
    return table(header, cells, plain, widths=CATALOG_WIDTHS)


def chapter_table(chapter: str) -> Table:
    """The "where is this implemented" table of one chapter (for notebooks).

    Args:
        chapter: a notebook path such as ``"chapters/ch02_general_attention_model.ipynb"``.

    Returns:
        A :class:`attnsurvey.display_table.Table` with one row per catalog entry of
        ``chapter``: item, title (equations typeset), implementing objects, tests;
        shown as an HTML table in the book and in Jupyter, as text records elsewhere.

    Raises:
        ValueError: the chapter has no catalog entries.
    """
    rows = for_chapter(chapter)
    if not rows:
        raise ValueError(f"no catalog entries for chapter {chapter!r}")
    return _table(rows)


def full_table() -> Table:
    """The whole catalog as one table.

    Returns:
        A :class:`attnsurvey.display_table.Table`, like :func:`chapter_table`, over every entry.
    """
    return _table(entries())


def summary() -> str:
    """A coverage summary of the catalog.

    Returns:
        Text lines: how many of the survey's expected items are catalogued, how many
        extra items there are, and the expected ids not yet catalogued.
    """
    ids = {e["id"] for e in entries()}
    missing = [i for i in EXPECTED_IDS if i not in ids]
    extras = sorted(i for i in ids if i.startswith("extra:"))
    lines = [
        f"catalogued survey items: {len(EXPECTED_IDS) - len(missing)}/{len(EXPECTED_IDS)}",
        f"extra items from other sources: {len(extras)}",
        f"total entries: {len(ids)}",
    ]
    if missing:
        lines.append("not yet catalogued: " + ", ".join(missing))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: a coverage summary, or the catalog as JSON with ``--json``.

    Args:
        argv: the arguments (``sys.argv[1:]`` when ``None``).

    Returns:
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(prog="python -m attnsurvey.catalog", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the catalog as a JSON array")
    args = parser.parse_args(argv)
    if args.json:
        rows = [{f: e[f] for f in FIELDS} for e in entries()]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(summary())
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the decorators
    # register into ``attnsurvey.catalog``'s registry.
    from attnsurvey.catalog import main as _main

    raise SystemExit(_main())

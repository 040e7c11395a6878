"""The package's own architecture, read from its source: layers, imports, cycles.

:func:`import_graph` reads every module of :mod:`attnsurvey` with :mod:`ast`
(nothing is imported) and returns which package modules each one imports,
*including imports written inside functions*, so a cycle cannot hide there.
:func:`cycles` lists the import cycles; :func:`layer_violations` lists imports
that point the wrong way between the layers of :data:`LAYERS`;
:func:`architecture_figure` draws the layers and the imports between them
(the figure of the book's architecture page).
:func:`normaliser_calls` and :func:`weight_files` find the files that compute
attention weights themselves instead of through the core
:func:`attnsurvey.attention.attend` (the rule is in their docstrings).

This module is a development tool: it lives in ``tools/``, outside the installed
package, and reads ``src/attnsurvey`` in a checkout.

Layers, lowest first (a module may import from its own layer and those below)::

    foundations   _checks, catalog, registry, masking, training, numeric_env, stats, plotting, widgets
    data          data.*                       (generates data only)
    mechanisms    attention (the core attend), general_model, feature_related.*, general_mechanisms.*, query_related.*,
                  transformer.*, seq2seq, taxonomy, builder, attention_step, describe,
                  evaluation.*, beyond.*
    chapter support  experiments.* (task models and training loops of chapters),
                  exercises (self-checks), figures (the survey's drawings)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

PACKAGE = "attnsurvey"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE

#: Layer names, lowest first.
LAYERS = ("foundations", "data", "mechanisms", "chapter support")
_FOUNDATIONS = {
    "_checks",
    "catalog",
    "display_table",
    "registry",
    "masking",
    "training",
    "numeric_env",
    "stats",
    "plotting",
    "widgets",
}
_CHAPTER_SUPPORT = {"experiments", "exercises", "figures"}


def module_names(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Dotted names of every module under ``root`` (packages by their ``__init__``), sorted."""
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] == "__main__":
            continue
        names.append(".".join([package, *parts]))
    return names


def _module_path(name: str, root: Path, package: str) -> Path:
    rel = Path(*name.split(".")[1:]) if name != package else Path()
    return root / rel / "__init__.py" if (root / rel).is_dir() else (root / rel).with_suffix(".py")


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its source (functions included).

    ``from .x import y`` counts as importing ``x`` and, when ``x.y`` is a
    module, ``x.y``. Imports under ``if TYPE_CHECKING:`` are skipped (they do
    not run). Importing a submodule also runs its packages' ``__init__``, which
    is not counted as an edge (those only hold docstrings here).
    """
    names = set(module_names(root, package))
    graph: dict[str, set[str]] = {}
    for name in sorted(names):
        path = _module_path(name, root, package)
        tree = ast.parse(path.read_text(), filename=str(path))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for sub in node.body for n in ast.walk(sub))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            edges.update(t for t in targets if t in names and t != name)
        graph[name] = edges
    return graph


def unresolved_imports(root: Path = ROOT, package: str = PACKAGE) -> list[tuple[str, int, str]]:
    """Imports of the package (relative or absolute) naming a module that does not exist.

    Returns ``(module, line, imported module)`` for each; an import inside a
    function that fails only when the function runs shows up here.
    """
    names = set(module_names(root, package))
    bad = []
    for name in sorted(names):
        path = _module_path(name, root, package)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                if (node.level > 0 or base.split(".")[0] == package) and base not in names:
                    bad.append((name, node.lineno, base))
            elif isinstance(node, ast.Import):
                bad += [
                    (name, node.lineno, a.name)
                    for a in node.names
                    if a.name.split(".")[0] == package and a.name not in names
                ]
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the package is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def layer_of(module: str) -> str:
    """The layer (one of :data:`LAYERS`) of a module of the package."""
    parts = module.split(".")[1:]
    head = parts[0] if parts else ""
    if head in _FOUNDATIONS:
        return "foundations"
    if head == "data":
        return head
    if head in _CHAPTER_SUPPORT:
        return "chapter support"
    return "mechanisms" if head or not parts else "foundations"


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports ``(importer, imported)`` that point from a lower layer to a higher one."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted(
        (a, b)
        for a, targets in graph.items()
        for b in targets
        if rank[layer_of(b)] > rank[layer_of(a)] and a != PACKAGE
    )


def section_of(module: str) -> str:
    """A short label for a module: its name below the package, or the subpackage for ``x.y.z``."""
    parts = module.split(".")[1:]
    return ".".join(parts[:1]) if len(parts) > 1 else (parts[0] if parts else PACKAGE)


def _group_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for a, targets in graph.items():
        for b in targets:
            key = (section_of(a), section_of(b))
            if key[0] != key[1]:
                counts[key] = counts.get(key, 0) + 1
    return counts


def architecture_figure(graph: dict[str, set[str]] | None = None) -> Any:
    """Draw the layers (rows, lowest at the bottom) and the imports between module groups.

    Each box is a module or a subpackage of :mod:`attnsurvey` placed in its
    layer's row; an arrow ``A -> B`` means "A imports B" (grey when it points
    down a layer, red if it ever pointed up, which the tests forbid). Returns the
    ``matplotlib.figure.Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    graph = import_graph() if graph is None else graph
    groups: dict[str, list[str]] = {layer: [] for layer in LAYERS}
    for module in graph:
        if module == PACKAGE:
            continue
        label = section_of(module)
        layer = layer_of(module)
        if label not in groups[layer]:
            groups[layer].append(label)
    rows = [layer for layer in LAYERS if groups[layer]]
    width = max(len(groups[layer]) for layer in rows)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.7 * width), 1.6 * len(rows) + 0.5))
    ax.set_axis_off()
    pos: dict[str, tuple[float, float]] = {}
    for y, layer in enumerate(rows):
        labels = sorted(groups[layer])
        ax.text(-0.9, y, layer, ha="right", va="center", fontsize=10, fontweight="bold")
        for i, label in enumerate(labels):
            x = (i + 0.5) * width / len(labels) - 0.5
            dy = 0.18 * (1 if i % 2 else -1) if len(labels) > 4 else 0.0  # stagger crowded rows
            pos[label] = (x, y + dy)
            ax.text(
                x,
                y + dy,
                label,
                ha="center",
                va="center",
                fontsize=7,
                bbox=dict(boxstyle="round,pad=0.3", fc="white", ec="0.4"),
            )
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    layer_by_label = {section_of(m): layer_of(m) for m in graph if m != PACKAGE}
    for (a, b), n in sorted(_group_edges(graph).items()):
        if a not in pos or b not in pos:
            continue
        up = rank[layer_by_label[b]] > rank[layer_by_label[a]]
        ax.add_patch(
            FancyArrowPatch(
                pos[a],
                pos[b],
                arrowstyle="-|>",
                mutation_scale=8,
                connectionstyle="arc3,rad=0.08",
                lw=0.4 + 0.15 * min(n, 6),
                color="tab:red" if up else "0.6",
                alpha=0.7,
                shrinkA=12,
                shrinkB=12,
            )
        )
    ax.set_xlim(-2.2, width)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_title("attnsurvey: layers (bottom to top) and imports between modules (arrow: 'imports')", fontsize=10)
    return fig


def summary_data(graph: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """The layers, their module groups and the imports between groups (what the figure shows)."""
    graph = import_graph() if graph is None else graph
    layers: dict[str, list[str]] = {layer: [] for layer in LAYERS}
    for module in graph:
        if module != PACKAGE and section_of(module) not in layers[layer_of(module)]:
            layers[layer_of(module)].append(section_of(module))
    return {
        "layers": {layer: sorted(groups) for layer, groups in layers.items()},
        "imports": sorted(f"{a} -> {b}" for a, b in _group_edges(graph)),
        "cycles": cycles(graph),
    }


def report(graph: dict[str, set[str]] | None = None) -> str:
    """A text summary: modules, imports, cycles and wrong-way imports."""
    graph = import_graph() if graph is None else graph
    cyc = cycles(graph)
    bad = layer_violations(graph)
    lines = [
        f"modules: {len(graph)}",
        f"imports between them: {sum(len(v) for v in graph.values())}",
        f"import cycles: {len(cyc)}",
        *("  " + " <-> ".join(c) for c in cyc),
        f"imports pointing up a layer: {len(bad)}",
        *(f"  {a} -> {b}" for a, b in bad),
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- who computes attention weights
#: torch's normalisers, matched by the name called: ``torch.softmax``, ``F.softmax``, ``x.softmax(...)``,
#: ``nn.Softmax(...)``, ``torch.special.log_softmax``, ...
TORCH_NORMALISERS = frozenset(
    {"softmax", "log_softmax", "softmin", "gumbel_softmax", "Softmax", "LogSoftmax", "Softmin"}
)
#: The package's normalisers: the masked and sparse maps, the alignment registry's functions, ``align``
#: (Eq. 3) and the alignment functions of the survey (Eq. 25-27, reinforced alignment).
PACKAGE_NORMALISERS = frozenset(
    {
        "masked_softmax",
        "masked_log_softmax",
        "sparsemax",
        "entmax15",
        "entmax_bisect",
        "softmax_align",
        "uniform_align",
        "argmax_align",
        "align",
        "soft_align",
        "hard_align",
        "local_align",
        "reinforced_align",
    }
)
#: Every name whose call turns scores into a distribution.
NORMALISERS = TORCH_NORMALISERS | PACKAGE_NORMALISERS
#: Factories whose result is an alignment: ``alpha_entmax_align(1.5)(e, mask)`` is a normaliser call.
_NORMALISER_FACTORIES = frozenset({"alpha_entmax_align"})
#: The core's entry points. A normaliser inside their ``align=`` argument (written there, or in a lambda
#: assigned to the name passed as ``align=name``) is a hook that the core runs between its masking steps
#: (masked scores filled before, masked weights zeroed after).
CORE_ENTRY_POINTS = frozenset(
    {"attend", "attend_scores", "align_scores", "multi_head_attention", "MultiHeadAttention", "TorchMultiheadAttention"}
)
#: (a) The core and the modules that define the normalisers (paths below the package root).
CORE_FILES = (
    "attention.py",
    "masking.py",
    "general_mechanisms/alignment.py",
    "general_mechanisms/sparse_maps.py",
)
#: (c) Output distributions over classes or a vocabulary, not attention: file -> {function: why}.
#: Declared one function at a time (a function listed here must not also compute attention weights).
OUTPUT_DISTRIBUTIONS: dict[str, dict[str, str]] = {
    "general_model.py": {"output_model": "Eq. (5): y = softmax(W_c c + b_c) over the classes"},
    "experiments/trained_transformer.py": {
        "step_function.step": "log-probabilities of the next token over the vocabulary (decoding)",
    },
}
#: Categories of :func:`weight_files`, in report order; the first two compute attention weights.
WEIGHT_CATEGORIES = ("core", "mechanism", "output", "exercise")


class NormaliserCall(NamedTuple):
    """One call site of a normaliser: file (below the package root), line, enclosing function,
    the callee as written, the normaliser's name (aliases resolved), category."""

    file: str
    line: int
    function: str
    call: str
    name: str
    category: str


def _callee(func: ast.expr, aliases: dict[str, str]) -> str | None:
    """The name a call's ``func`` calls, or None (aliases resolved: ``aliases`` maps a name, or an
    attribute as ``".attr"``, to what it stands for)."""
    if isinstance(func, ast.Name):
        return aliases.get(func.id, func.id)
    if isinstance(func, ast.Attribute):
        return aliases.get(f".{func.attr}", func.attr)
    if isinstance(func, ast.Subscript) and ast.unparse(func.value).split(".")[-1] == "ALIGNMENTS":
        return "ALIGNMENTS[...]"
    if isinstance(func, ast.Call) and _callee(func.func, aliases) in _NORMALISER_FACTORIES:
        return f"{_callee(func.func, aliases)}(...)"
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Other names of normalisers in a module: ``import ... as x`` of any name, and a name or an
    attribute (``self._soft = align``, key ``"._soft"``) assigned a normaliser itself (not a call)."""
    aliases = {
        a.asname: a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names if a.asname
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            name = _callee(node.value, aliases)
            if _is_normaliser(name):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        aliases[t.id] = str(name)
                    elif isinstance(t, ast.Attribute):
                        aliases[f".{t.attr}"] = str(name)
    return aliases


def _is_normaliser(name: str | None) -> bool:
    return name is not None and (name in NORMALISERS or name.endswith("(...)") or name == "ALIGNMENTS[...]")


def _hook_nodes(tree: ast.AST, aliases: dict[str, str]) -> set[int]:
    """ids of the nodes of alignment hooks: inside the ``align=`` argument of a call to a core entry
    point, or inside a lambda assigned to a name that a core entry point receives as ``align=name``
    in the same function."""
    inside: set[int] = set()
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        passed: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and _callee(node.func, aliases) in CORE_ENTRY_POINTS:
                for kw in node.keywords:
                    if kw.arg == "align":
                        inside.update(id(n) for n in ast.walk(kw.value))
                        if isinstance(kw.value, ast.Name):
                            passed.add(kw.value.id)
        for node in ast.walk(scope):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id in passed for t in targets):
                    for lam in ast.walk(node.value):
                        if isinstance(lam, ast.Lambda):
                            inside.update(id(n) for n in ast.walk(lam))
    return inside


def _enclosing_functions(tree: ast.AST) -> dict[int, str]:
    """id of every node -> the dotted name of its innermost enclosing function ('<module>' at top level)."""
    where: dict[int, str] = {}

    def visit(node: ast.AST, name: str, scope: str) -> None:
        where[id(node)] = name
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
                visit(child, inner if not isinstance(child, ast.ClassDef) else name, inner)
            else:
                visit(child, name, scope)

    visit(tree, "<module>", "")
    return where


def _category(file: str, function: str) -> str:
    if file in CORE_FILES:
        return "core"
    if function in OUTPUT_DISTRIBUTIONS.get(file, {}):
        return "output"
    if file.startswith("exercises/"):
        return "exercise"
    return "mechanism"


def normaliser_calls(root: Path = ROOT) -> list[NormaliserCall]:
    """Every call of a normaliser in the package's source, with its category.

    The rule. A *call site* is a call (read with :mod:`ast`, so docstrings and
    comments never count) whose callee is written as a name of
    :data:`NORMALISERS` -- ``softmax(...)``, ``torch.softmax``, ``F.log_softmax``,
    ``x.softmax(...)``, ``nn.Softmax(...)``, the package's ``masked_softmax``,
    ``sparsemax``, ``entmax15``, ``entmax_bisect``, the alignment registry's
    functions (``softmax_align``, ``ALIGNMENTS[name](...)``,
    ``alpha_entmax_align(alpha)(...)``), ``align`` (Eq. 3 of ``general_model``, or
    an alignment hook called directly as ``self.align(e, mask)``) and the survey's
    alignment functions (``soft_align``, ``hard_align``, ``local_align``, ...) --
    with aliases resolved: ``import ... as x``, and a name or attribute assigned
    a normaliser (``self._soft = align`` makes ``self._soft(e)`` a call site). Not call sites: the core's entry points
    (:data:`CORE_ENTRY_POINTS`: ``attend``, ``attend_scores``, ``align_scores``,
    the multi-head module), and a normaliser inside an alignment hook: written
    in the ``align=`` argument of such an entry point, or in a lambda assigned
    to a name that an entry point receives as ``align=name`` in the same
    function (the core runs hooks between its masking steps; a named function
    used as a hook is counted). Hand-written exponentials are not seen (the
    online softmax of ``beyond/tiled.py``, the CRF marginals of
    ``general_mechanisms/structured.py``): the rule counts calls, not arithmetic.

    Categories, by a declared rule (no guessing): ``core``, the files of
    :data:`CORE_FILES` (the core and the modules defining the normalisers; their
    definitions are counted, not skipped); ``output``, a call inside a function
    declared in :data:`OUTPUT_DISTRIBUTIONS` (a distribution over classes or a
    vocabulary, not over feature vectors); ``exercise``, a file under
    ``exercises/`` (self-checks are independent oracles, as tests are);
    ``mechanism``, every other call site. Returns the call sites sorted by
    file, line and column.
    """
    found: list[tuple[str, int, int, NormaliserCall]] = []
    for path in sorted(root.rglob("*.py")):
        file = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = _aliases(tree)
        hooks = _hook_nodes(tree, aliases)
        where = _enclosing_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or id(node) in hooks:
                continue
            name = _callee(node.func, aliases)
            if name is not None and _is_normaliser(name):
                function = where[id(node)]
                category = _category(file, function)
                call = NormaliserCall(file, node.lineno, function, ast.unparse(node.func), name, category)
                found.append((file, node.lineno, node.col_offset, call))
    return [call for *_, call in sorted(found)]


def weight_files(root: Path = ROOT) -> dict[str, list[str]]:
    """Category -> the files with a normaliser call site of that category (:func:`normaliser_calls`).

    A file with call sites of two categories is listed under both. The files
    that compute attention weights themselves are those of ``core`` and
    ``mechanism``; the book's rule allows at most 6 of them.
    """
    return files_by_category(normaliser_calls(root))


def files_by_category(calls: Iterable[NormaliserCall]) -> dict[str, list[str]]:
    """Category -> the files of the call sites ``calls`` of that category (:func:`weight_files` of read calls)."""
    files: dict[str, set[str]] = {category: set() for category in WEIGHT_CATEGORIES}
    for call in calls:
        files[call.category].add(call.file)
    return {category: sorted(names) for category, names in files.items()}


def weights_report(root: Path = ROOT) -> str:
    """A text list of the normaliser call sites per category (``python -m tools.architecture --weights``)."""
    calls = normaliser_calls(root)
    files = files_by_category(calls)
    computing = sorted(set(files["core"]) | set(files["mechanism"]))
    lines = [f"files computing attention weights themselves (core + mechanism): {len(computing)}"]
    for category in WEIGHT_CATEGORIES:
        lines.append(f"{category}: {len(files[category])} files")
        for file in files[category]:
            sites = [f"{c.line} {c.function}: {c.call}" for c in calls if c.file == file and c.category == category]
            lines.append(f"  {file} ({len(sites)}): " + "; ".join(sites))
    return "\n".join(lines)


def _main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    print(weights_report() if "--weights" in args else report())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

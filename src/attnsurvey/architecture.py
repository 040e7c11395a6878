"""The package's own architecture, read from its source: layers, imports, cycles.

:func:`import_graph` reads every module of :mod:`attnsurvey` with :mod:`ast`
(nothing is imported) and returns which package modules each one imports,
*including imports written inside functions*, so a cycle cannot hide there.
:func:`cycles` lists the import cycles; :func:`layer_violations` lists imports
that point the wrong way between the layers of :data:`LAYERS`;
:func:`architecture_figure` draws the layers and the imports between them
(the figure of the book's architecture page).

Layers, lowest first (a module may import from its own layer and those below)::

    foundations   _checks, catalog, registry, masking, training, numeric_env, stats, plotting, widgets
    data          data.*                       (generates data only)
    mechanisms    attention (the core attend), general_model, feature_related.*, general_mechanisms.*, query_related.*,
                  transformer.*, seq2seq, taxonomy, builder, attention_step, describe,
                  evaluation.*, beyond.*
    chapter support  experiments.* (task models and training loops of chapters),
                  exercises (self-checks), figures (the survey's drawings)
    tooling       architecture                 (reads the others; imported by none)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PACKAGE = "attnsurvey"
ROOT = Path(__file__).resolve().parent

#: Layer names, lowest first.
LAYERS = ("foundations", "data", "mechanisms", "chapter support", "tooling")
_FOUNDATIONS = {"_checks", "catalog", "registry", "masking", "training", "numeric_env", "stats", "plotting", "widgets"}
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
    if head == "architecture":
        return "tooling"
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


def _main(argv: Iterable[str] | None = None) -> int:
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

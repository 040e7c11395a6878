"""The package's shape: no import cycles (not even inside functions), layers point down,
every module imports on its own in a fresh interpreter, data/ only generates data, and every
``# type: ignore`` says why."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest
from tools import architecture as arch

SRC = arch.ROOT  # src/attnsurvey
GRAPH = arch.import_graph()


@pytest.fixture(scope="module")
def calls() -> list[arch.NormaliserCall]:
    """The package's normaliser call sites (:func:`arch.normaliser_calls` parses every source file), read once
    for the tests of this module that use them."""
    return arch.normaliser_calls()


def test_no_import_cycles():
    assert arch.cycles(GRAPH) == []


def test_every_package_import_names_an_existing_module():
    assert arch.unresolved_imports() == []


def test_cycle_finder_sees_imports_hidden_in_functions(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n    return x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\nimport pkg.sub.b\n"
    )
    graph = arch.import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.sub.b"}  # the TYPE_CHECKING import does not run
    assert arch.cycles(graph) == [["pkg.a", "pkg.sub.b"]]
    assert arch.cycles({"x": {"y"}, "y": {"z"}, "z": set()}) == []
    (pkg / "d.py").write_text("def g():\n    from .data.missing import h\n")
    assert arch.unresolved_imports(pkg, "pkg") == [("pkg.d", 2, "pkg.data.missing")]


def test_layers_point_down():
    assert arch.layer_violations(GRAPH) == []
    assert arch.layer_of("attnsurvey.data.vqa") == "data"
    assert arch.layer_of("attnsurvey.experiments.evaluation") == "chapter support"
    assert arch.layer_of("attnsurvey.general_mechanisms.scoring") == "mechanisms"
    assert arch.layer_violations(
        {"attnsurvey.data.x": {"attnsurvey.general_model"}, "attnsurvey.general_model": set()}
    ) == [("attnsurvey.data.x", "attnsurvey.general_model")]


def test_only_chapter_support_imports_experiments():
    """Mechanisms, data and foundations never import the experiments; only the chapter-support
    layer does (experiments themselves, and exercises whose self-checks re-evaluate a reader's
    trained model with the chapter's task model)."""
    importers = {a for a, targets in GRAPH.items() for b in targets if ".experiments" in b}
    assert all(arch.layer_of(a) == "chapter support" for a in importers), sorted(importers)


def test_data_defines_no_models_or_training():
    """data/ generates data: no nn.Module subclasses, no train/fit/evaluate functions."""
    for path in sorted((SRC / "data").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                assert not any("Module" in b for b in bases), f"{path.name}: {node.name} is a model"
            if isinstance(node, ast.FunctionDef):
                assert not node.name.startswith(("train", "fit", "evaluate")), f"{path.name}: {node.name}"


def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Each module is imported first in its own forked child of an interpreter that has
    only torch, numpy and matplotlib loaded, so an import that works only after another
    module was imported (a cycle, a missing import) fails here."""
    names = [m for m in arch.module_names() if m != "attnsurvey.catalog"] + ["attnsurvey.catalog"]
    script = textwrap.dedent(
        """
        import importlib, os, sys, traceback
        import matplotlib
        matplotlib.use("Agg")
        import numpy, torch, matplotlib.pyplot
        failed = []
        for name in sys.argv[1:]:
            pid = os.fork()
            if pid == 0:
                try:
                    importlib.import_module(name)
                except BaseException:
                    traceback.print_exc()
                    os._exit(1)
                os._exit(0)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                failed.append(name)
        print("FAILED", failed)
        sys.exit(1 if failed else 0)
        """
    )
    out = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FAILED []" in out.stdout


def test_architecture_figure_draws_every_layer():
    import matplotlib

    matplotlib.use("Agg")
    fig = arch.architecture_figure(GRAPH)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert set(arch.LAYERS) <= texts
    assert {"general_model", "experiments", "data", "catalog"} <= texts
    assert "import cycles: 0" in arch.report(GRAPH)


def test_book_figure_data_matches_the_code():
    """book/_static/architecture.{png,json} are drawn by scripts/draw_architecture.py; run it
    again when this fails."""
    import json

    stored = json.loads((SRC.parents[1] / "book" / "_static" / "architecture.json").read_text())
    assert stored == json.loads(json.dumps(arch.summary_data(GRAPH))), "run scripts/draw_architecture.py"


#: The files allowed to compute attention weights themselves (at most 6): the core and the
#: modules defining the normalisers; scoring.py's softmax Jacobian/saturation teaching helpers
#: (scoring.py cannot import the core: the core imports its score functions); attention_step.py
#: (its alignments are called directly; to be routed through attend_scores with hooks, as
#: experiments.general_mechanisms.AlignmentClassifier is, once the concurrent edits there have landed).
WEIGHT_FILES = {
    "core": [
        "attention.py",
        "general_mechanisms/alignment.py",
        "general_mechanisms/sparse_maps.py",
        "masking.py",
    ],
    "mechanism": ["attention_step.py", "general_mechanisms/scoring.py"],
}


def test_only_the_pinned_files_compute_attention_weights_themselves(calls):
    files = arch.files_by_category(calls)
    for category, allowed in WEIGHT_FILES.items():
        new = sorted(set(files[category]) - set(allowed))
        sites = [f"{c.file}:{c.line} {c.call}" for c in calls if c.file in new]
        assert not new, (
            f"{new} compute attention weights themselves ({sites}): route them through "
            "attnsurvey.attention.attend (or attend_scores / align_scores, with the score, align and "
            "mask hooks), so masking, NaN handling and fully-masked rows are handled in one place; an "
            "output distribution over classes goes in architecture.OUTPUT_DISTRIBUTIONS"
        )
        assert files[category] == allowed, f"{category}: update WEIGHT_FILES, these no longer compute weights"
    assert len(WEIGHT_FILES["core"] + WEIGHT_FILES["mechanism"]) <= 6


def test_declared_output_distributions_exist_and_are_used(calls):
    for file, functions in arch.OUTPUT_DISTRIBUTIONS.items():
        for function in functions:
            assert any(c.file == file and c.function == function for c in calls), f"stale: {file} {function}"


def test_exercise_checks_use_torch_not_the_package_as_their_oracle(calls):
    """Self-checks are independent oracles: reference weights come from torch, never from the package."""
    own = [c for c in calls if c.category == "exercise" and c.name not in arch.TORCH_NORMALISERS]
    assert own == [], own


def test_normaliser_counter_sees_calls_and_the_declared_exceptions(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "exercises").mkdir(parents=True)
    (pkg / "attention.py").write_text("def attend(*a, **k):\n    return a\n")
    (pkg / "mech.py").write_text(
        '"""torch.softmax(e) in a docstring is not a call."""\n'
        "import torch\n"
        "from .masking import masked_softmax as ms\n"
        "from .attention import attend, ALIGNMENTS\n"
        "def weights(e, m):\n"
        "    a = ms(e, m)  # torch.softmax(e) in a comment\n"
        "    b = e.softmax(-1) + torch.nn.functional.log_softmax(e, -1) + ALIGNMENTS['sparsemax'](e, m)\n"
        "    hook = lambda s, k: torch.softmax(s, -1)\n"
        "    attend(e, e, e, align=hook)\n"
        "    return attend(e, e, e, align=lambda s, k: torch.softmax(s, -1)), a, b\n"
        "def output_model(c):\n"
        "    return torch.softmax(c, -1)\n"
        "class Step:\n"
        "    def __init__(self):\n"
        "        self._norm = torch.softmax\n"
        "    def forward(self, e):\n"
        "        return self._norm(e, -1)\n"
    )
    (pkg / "exercises" / "ex.py").write_text("import torch\ndef check(x):\n    return torch.softmax(x, 0)\n")
    calls = arch.normaliser_calls(pkg)
    assert [(c.file, c.line, c.name, c.category) for c in calls] == [
        ("exercises/ex.py", 3, "softmax", "exercise"),
        ("mech.py", 6, "masked_softmax", "mechanism"),
        ("mech.py", 7, "softmax", "mechanism"),
        ("mech.py", 7, "log_softmax", "mechanism"),
        ("mech.py", 7, "ALIGNMENTS[...]", "mechanism"),
        ("mech.py", 12, "softmax", "mechanism"),  # not declared as an output distribution for pkg
        ("mech.py", 17, "softmax", "mechanism"),  # self._norm = torch.softmax, then self._norm(e)
    ]
    assert arch.weight_files(pkg)["mechanism"] == ["mech.py"]
    assert "core + mechanism): 1" in arch.weights_report(pkg)


def unexplained_ignores(lines: list[str]) -> list[int]:
    """1-based numbers of the lines whose ``# type: ignore[...]`` has no reason: neither a comment after it
    nor a ``# ignore: ...`` comment on the line above (CONTRIBUTING, "Lint and types")."""
    bad = []
    for i, line in enumerate(lines):
        _, found, rest = line.partition("# type: ignore")
        if found and "#" not in rest and not (i and lines[i - 1].strip().startswith("# ignore:")):
            bad.append(i + 1)
    return bad


def test_every_type_ignore_says_why():
    bad = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if (found := unexplained_ignores(path.read_text(encoding="utf-8").splitlines()))
    }
    assert bad == {}
    lines = ["x = f()  # type: ignore[arg-type]", "# ignore: torch's stub", "y = g()  # type: ignore[misc]"]
    lines += ["z = h()  # type: ignore[misc]  # torch's stub", "w = k()  # type: ignore"]
    assert unexplained_ignores(lines) == [1, 5]  # the checker itself flags what it should

"""Imports run one way: a module imports only from its own layer or the layers below it.

Layers, top-down (scripts/ sit above all of them, and may import anything in ocrcli/):

1. entry points: the command line, `-o -`, and the test harness that drives the real CLI
2. runs: convert, --workers, the distributed runs, `ocrcli eval`, `ocrcli status`, training
3. run library: a run's settings, plan, fingerprint, model setup, ledger and summary
4. page assembly: a page's record from its requests, its verdict and its quality checks
5. engine and renderer
6. models
7. foundations: inputs, output, errors, faults, progress, the PDF text layer, the package
   root (`__version__`), and evaluation's measures (pure functions of text that import
   nothing of ocrcli outside their package; `ocrcli.quality` builds on them)

Every import statement counts: at the top of a module, inside a function, and under
`if TYPE_CHECKING:` (an annotation-only import still couples the two modules). Dynamic imports
(`importlib.import_module`) are not seen.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

ROOT = "ocrcli"  # the package root is named alone: `ocrcli` does not stand for its modules
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("ocrcli.cli", "ocrcli.cli_options", "ocrcli.pipe", "ocrcli.testing")),
    ("runs", ("ocrcli.convert", "ocrcli.workers", "ocrcli.distributed", "ocrcli.evaluation.run",
              "ocrcli.status", "ocrcli.training")),
    ("run library", ("ocrcli.settings", "ocrcli.plan", "ocrcli.fingerprint", "ocrcli.model_setup",
                     "ocrcli.ledger", "ocrcli.summary")),
    ("page assembly", ("ocrcli.pages", "ocrcli.verdict", "ocrcli.quality")),
    ("engine and renderer", ("ocrcli.engine", "ocrcli.render")),
    ("models", ("ocrcli.models",)),
    ("foundations", (ROOT, "ocrcli.inputs", "ocrcli.output", "ocrcli.errors", "ocrcli.faults",
                     "ocrcli.progress", "ocrcli.text_layer", "ocrcli.evaluation")),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / "ocrcli").rglob("*.py"))}


def names(entry: str, module: str) -> bool:
    """Whether a LAYERS entry names `module`: the module itself, or a package holding it."""
    return module == entry or (entry != ROOT and module.startswith(entry + "."))


def layer_of(module: str) -> int | None:
    """The layer of the longest entry that names `module` (ocrcli.evaluation.run is a run;
    the rest of ocrcli.evaluation is a foundation)."""
    matches = [(len(entry), i) for i, (_, entries) in enumerate(LAYERS) for entry in entries
               if names(entry, module)]
    return max(matches)[1] if matches else None


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ocrcli that `source` imports anywhere in it; `from X import name` counts
    as importing X.name where that is a module."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.update(f"{name}.{a.name}" if f"{name}.{a.name}" in known else name
                         for a in node.names)
    return {m for m in found if m == ROOT or m.startswith(ROOT + ".")}


def upward_imports(module: str, source: str, is_package: bool, known: set[str]) -> list[str]:
    own = layer_of(module)
    return [f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
            for target in sorted(imported_modules(source, module, is_package, known))
            if layer_of(target) is not None and layer_of(target) < own]


def test_the_layer_map_names_every_module_and_nothing_else():
    modules = package_modules()
    unplaced = [m for m in modules if layer_of(m) is None]
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"
    stale = [entry for _, entries in LAYERS for entry in entries
             if not any(names(entry, m) for m in modules)]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_imports_run_one_way():
    modules = package_modules()
    known = set(modules)
    violations = [v for module, path in modules.items()
                  for v in upward_imports(module, path.read_text(encoding="utf-8"),
                                          path.name == "__init__.py", known)]
    assert not violations, "imports from a higher layer:\n" + "\n".join(violations)


def test_the_check_sees_upward_imports_in_functions_and_relative_ones():
    known = set(package_modules())
    in_function = "def f():\n    from ocrcli.convert import Converter\n"
    assert upward_imports("ocrcli.pages", in_function, False, known) == [
        "ocrcli.pages (page assembly) imports ocrcli.convert (runs)"]
    relative = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine import guard\n"
    assert upward_imports("ocrcli.models.base", relative, False, known) == [
        "ocrcli.models.base (models) imports ocrcli.engine.guard (engine and renderer)"]
    downward = "import ocrcli.errors\nfrom ocrcli import __version__\n"
    assert upward_imports("ocrcli.convert", downward, False, known) == []


def test_nothing_imports_the_test_suite():
    """The harness that scripts share with the tests is ocrcli.testing, not tests/."""
    files = [*sorted((REPO / "ocrcli").rglob("*.py")), *sorted((REPO / "scripts").glob("*.py"))]
    offenders = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            offenders += [f"{path.relative_to(REPO)}: {n}" for n in names
                          if n == "tests" or n.startswith("tests.")]
    assert not offenders, offenders

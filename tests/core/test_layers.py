"""The layers app/core/__init__.py and app/gui/__init__.py state: a module imports only from its own
package and from lower layers (every import counts, those inside functions too), nothing in app/
imports in a circle, no module is over MAX_LINES, app/core never imports Qt, only app/core/llama
imports llama_cpp, and no front end reads an engine's internals (it uses app/core/frontdoor.py)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
CORE = APP / "core"
QT = re.compile(r"^\s*(from|import)\s+(PySide6|shiboken6|qasync|PyQt\d)", re.M)
MAX_LINES = 450
# llama-cpp-python is bound in one place: a new version changes one package, and the rest runs on test
# models without it
LLAMA_CPP_PACKAGES = ("app.core.llama",)
# the front ends talk to an engine through the AnswerEngine protocol only, so a remote engine (and the
# next kinds of engine) serve them all; these are the local Engine's own parts
FRONT_ENDS = ("app.cli", "app.gui", "app.server")
ENGINE_INTERNALS = {"main", "draft", "mtp_drafter", "main_info", "draft_info", "shared_vocab"}

# per tree, its groups: (layer, the packages and modules in the group); a module belongs to the group
# of the longest prefix that names it, and imports only from its own group and from lower layers
LAYERS = {
    "app.core": {
        "foundation": (0, ("app.core.errors", "app.core.params", "app.core.lm")),
        "gguf": (1, ("app.core.gguf",)),
        "llama": (2, ("app.core.llama",)),
        "speculation": (3, ("app.core.speculation",)),
        "chat": (3, ("app.core.chat",)),
        "frontdoor": (4, ("app.core.frontdoor",)),
        "remote": (5, ("app.core.remote",)),
        "engine": (6, ("app.core.engine", "app.core.pair_costs", "app.core.compare", "app.core.slot_files")),
    },
    "app.gui": {
        "widgets": (0, ("app.gui.widgets",)),
        "runtime": (1, ("app.gui.runtime",)),
        "chat": (2, ("app.gui.chat",)),
        "panels": (2, ("app.gui.panels",)),
        "models": (2, ("app.gui.models",)),
        "window": (3, ("app.gui.app", "app.gui.main_window", "app.gui.smoke")),
    },
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


MODULES = {module_name(p): p for p in APP.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The app modules ``name`` imports, anywhere in it (a package counts as its __init__)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - max(0, node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES}
            if target in MODULES and not any(f"{target}.{a.name}" in MODULES for a in node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
    found.discard(name)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def group_of(name: str, groups: dict) -> str | None:
    matches = [(len(prefix), group) for group, (_, prefixes) in groups.items() for prefix in prefixes
               if name == prefix or name.startswith(prefix + ".")]
    return max(matches)[1] if matches else None


def test_every_module_of_core_and_gui_has_a_layer():
    for top, groups in LAYERS.items():
        unplaced = [m for m in MODULES if m.startswith(top + ".") and group_of(m, groups) is None]
        assert unplaced == [], f"add these to LAYERS[{top!r}] (and to {top}'s docstring): {unplaced}"


def test_modules_import_only_their_own_package_and_lower_layers():
    wrong = []
    for groups in LAYERS.values():
        for name in MODULES:
            group = group_of(name, groups)
            if group is None:
                continue
            for target in GRAPH[name]:
                other = group_of(target, groups)
                if other is not None and other != group and groups[other][0] >= groups[group][0]:
                    wrong.append(f"{name} ({group}, layer {groups[group][0]}) imports {target} "
                                 f"({other}, layer {groups[other][0]})")
    assert wrong == []


def test_nothing_in_app_imports_in_a_circle():
    """Tarjan's strongly connected components over every import in app/: each must be one module."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
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
                circles.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in GRAPH:
        if v not in index:
            visit(v)
    # a package's __init__ importing its own modules is not a circle with them
    circles = [c for c in circles if not all(m.startswith(min(c, key=len)) for m in c)]
    assert circles == []


def test_no_module_is_too_long():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_layer_tables_are_checked_against_the_packages_docstrings():
    for top in LAYERS:
        doc = ast.get_docstring(ast.parse(MODULES[top].read_text(encoding="utf-8")))
        assert doc and "tests/core/test_layers.py" in doc
    for name, path in MODULES.items():
        if path.name == "__init__.py" and (name.startswith("app.core.") or name.startswith("app.gui.")):
            assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), f"{name} says what it owns"


def test_core_sources_do_not_import_qt():
    offenders = [str(p.relative_to(CORE)) for p in CORE.rglob("*.py") if QT.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_importing_the_engine_loads_no_qt():
    code = ("import sys, app.core.engine, app.core.speculation.loop, app.cli.commands, app.cli.bench; "
            "print([m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'qasync')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == "[]"


def _inside(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _trees():
    for name, path in MODULES.items():
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def test_only_the_llama_package_imports_llama_cpp():
    offenders = []
    for name, tree in _trees():
        for node in ast.walk(tree):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(m.split(".")[0] == "llama_cpp" for m in imported) and not _inside(name, LLAMA_CPP_PACKAGES):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == [], f"only {LLAMA_CPP_PACKAGES} may import llama_cpp"


def _names_an_engine(node: ast.expr) -> bool:
    """``engine``, ``self._engine``, ``served.engine``: an expression whose last name is an engine."""
    last = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return last.lstrip("_").endswith("engine")


def test_no_front_end_reads_an_engines_internals():
    offenders = [f"{name}:{node.lineno} .{node.attr}" for name, tree in _trees() if _inside(name, FRONT_ENDS)
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in ENGINE_INTERNALS and _names_an_engine(node.value)]
    assert offenders == [], "front ends use app/core/frontdoor.py's AnswerEngine and LoadedPair"

"""The package's import layers, read from the source: which parts may import which, and no circles.

Every module of ``notebook_launcher`` is parsed (nothing is imported); each ``import`` and
``from ... import`` naming a module of the package is an edge, at module level or inside a
function alike. Importing ``a.b.c`` from outside ``a.b`` also runs ``a/b/__init__.py``, so that is
an edge too (the root package, the public facade everyone passes through, excepted).

The parts and the rules (docs/architecture.md, "Layout"):

* ``utils`` imports no other part; ``protocol`` only ``utils``; ``backends`` only those two.
* The kernel side (``launch``, ``ui``, ``panel``, ``magics``) and the worker side (``worker``, ``state``,
  ``data``, ``ops``, ``accelerator``) import only each other's common ground: ``protocol``,
  ``backends`` and ``utils``. ``ui`` never imports ``launch`` or ``panel``; ``launch`` never
  imports ``panel``.
* On the worker side, ``state`` imports no other worker part, ``ops`` only ``state``, ``data``
  those two; ``live`` (``log``, ``progress``, ``set_status``) only the common ground;
  ``integrations`` (the adapters feeding other libraries' metrics to the panels) ``live`` and
  ``state``; ``worker`` (the bootstrap) those three: one way, ``worker -> integrations ->
  live``. ``accelerator`` sits on top.
* Module-level imports form no circle (the order of imports can never break ``import``), and
  neither do all imports together: an import moved into a function must not hide a circle.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

PACKAGE = "notebook_launcher"
ROOT = Path(os.environ.get("LAYERS_ROOT", Path(__file__).resolve().parent.parent)) / PACKAGE

COMMON = {"protocol", "backends", "utils"}
KERNEL = {"launch", "ui", "panel", "magics"}
WORKER = {"worker", "integrations", "live", "state", "data", "ops", "accelerator"}
TOP = {"__init__", "demo", "run"}  # the public facade and the two command-line entry points
ALLOWED = {
    "utils": {"utils"},
    "protocol": {"protocol", "utils"},
    "backends": {"backends", "protocol", "utils"},
    "ui": {"ui", "protocol", "utils"},
    "launch": {"launch", "ui"} | COMMON,
    "panel": KERNEL | COMMON,
    "magics": {"launch"} | COMMON,
    "state": {"state"} | COMMON,
    "ops": {"ops", "state"} | COMMON,
    "data": {"data", "ops", "state"} | COMMON,
    "live": {"live"} | COMMON,
    "integrations": {"integrations", "live", "state"} | COMMON,
    "worker": {"worker", "integrations", "live", "state"} | COMMON,
    "accelerator": WORKER | COMMON,
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's __init__)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


MODULES = _modules()


def _absolute(module: str, package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if package else module.split(".")[:-1]
    base = base[: len(base) - level + 1]
    return ".".join(base + ([name] if name else []))


def _targets(module: str, package: bool, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        source = node.module or ""
        if node.level:
            source = _absolute(module, package, node.level, node.module)
        named = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
            for alias in node.names
        ]
    targets = []
    for name in named:
        if name.split(".")[0] != PACKAGE:
            continue
        while name not in MODULES:  # ``import a.b.c`` of a name that is an attribute
            name = name.rpartition(".")[0]
        targets.append(name)
        # Packages above the target that the importer is not inside run their __init__ first.
        parts = name.split(".")
        for depth in range(2, len(parts)):
            above = ".".join(parts[:depth])
            if not module.startswith(above + ".") and module != above:
                targets.append(above)
    return targets


def _walk(node: ast.AST, top: bool = True):
    """Every import statement under ``node``, with whether it runs when the module is imported
    (module and class bodies) rather than when a function is called."""
    for child in ast.iter_child_nodes(node):
        inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, inner
        yield from _walk(child, inner)


# Modules that import by a name known only when they run, and why that name is no layer's
# business: everything else that calls importlib.import_module names a constant (read as an
# import below). A lazy facade's names are in a module-level ``_EXPORTS`` table of relative
# module names (read likewise, as imports made when a name is first asked for).
DYNAMIC = {
    "notebook_launcher.protocol.names": "a worker's entry point, named by the kernel as torchrun names a script",
    "notebook_launcher.launch.processes.warmup": "the worker's entry module, imported early so forks inherit it",
    "notebook_launcher.worker.torchrun": "the user's training module",
    "notebook_launcher.integrations.lightning_trainer": "the Lightning package in use",
    "notebook_launcher.utils.lazy": "a facade's names, from its _EXPORTS table (read there)",
}


def _dynamic_targets(module: str, package: bool, tree: ast.AST) -> list[tuple[str, bool]]:
    """What a module imports through ``importlib.import_module`` (constant names), and the
    relative names of its ``_EXPORTS`` table (a lazy facade), imported on first use."""
    found: list[tuple[str, bool]] = []
    exports = [
        key.value
        for node in getattr(tree, "body", [])
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets)
        and isinstance(node.value, ast.Dict)
        for key in node.value.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    ]
    named = [(target, False) for target in exports]
    for node, top in _walk_calls(tree):
        name = node.args[0] if node.args else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            named.append((name.value, top))
        else:
            assert module in DYNAMIC, f"{module} imports a module it names at run time"
    for target, top in named:
        level = len(target) - len(target.lstrip("."))
        stripped = target.lstrip(".") or None
        absolute = _absolute(module, package, level, stripped) if level else target
        if absolute.split(".")[0] == PACKAGE:
            found.append((absolute, top))
    return found


def _walk_calls(node: ast.AST, top: bool = True):
    """Every ``import_module(...)`` call under ``node``, with whether it runs at import."""
    for child in ast.iter_child_nodes(node):
        inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.Call):
            func = child.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "import_module":
                yield child, inner
        yield from _walk_calls(child, inner)


def _imports() -> dict[str, set[tuple[str, bool]]]:
    """Module -> {(imported module, at module level)}, dynamic imports included."""
    edges: dict[str, set[tuple[str, bool]]] = {}
    for module, (path, package) in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges[module] = {
            (target, top)
            for node, top in _walk(tree)
            for target in _targets(module, package, node)
            if target != module
        }
        for target, top in _dynamic_targets(module, package, tree):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target != module:
                edges[module].add((target, top))
    return edges


IMPORTS = _imports()


def part(module: str) -> str:
    """The part a module belongs to: the folder (or root module) under the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_belongs_to_a_part():
    known = set(ALLOWED) | TOP
    strays = sorted(m for m in MODULES if part(m) not in known)
    assert not strays, f"modules outside the layout (docs/architecture.md, 'Layout'): {strays}"


def test_each_part_imports_only_what_its_layer_allows():
    broken = []
    for module, targets in sorted(IMPORTS.items()):
        allowed = ALLOWED.get(part(module))
        if allowed is None:  # the facade, the entry points (and strays, reported above)
            continue
        for target, _ in sorted(targets):
            if part(target) not in allowed:
                broken.append(f"{module} -> {target}")
    assert not broken, "imports across the layers:\n" + "\n".join(broken)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _graph(module_level_only: bool) -> dict[str, set[str]]:
    return {
        module: {
            target
            for target, top in targets
            if target != PACKAGE and (top or not module_level_only)
        }
        for module, targets in IMPORTS.items()
        if module != PACKAGE
    }


def test_module_level_imports_form_no_circle():
    circles = _cycles(_graph(module_level_only=True))
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_no_circle_hides_in_imports_inside_functions():
    circles = _cycles(_graph(module_level_only=False))
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _private(name: str) -> bool:
    """One leading underscore; not a dunder, nor a protocol name such as ``_repr_html_``."""
    return name.startswith("_") and not name.endswith("_")


def _outside_names(tree: ast.AST) -> set[str]:
    """The names a module binds to other libraries (``os``, ``dist``, ``np`` ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] != PACKAGE:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _private_names_by_part() -> dict[str, set[str]]:
    """Each part -> the private names it defines (functions, classes, module and instance
    attributes, class fields, keyword arguments)."""
    defined: dict[str, set[str]] = {}
    for module, (path, _) in MODULES.items():
        names = defined.setdefault(_part(module), set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # a key of a shared dictionary, a __slots__ entry
        defined[_part(module)] = {n for n in names if _private(n)}
    return defined


def test_no_part_reads_another_parts_private_names():
    """A private name (one underscore) defined by one part of the package is used only there:
    other parts go through public names (``PartialState.current()``, ``device_backend`` ...)."""
    defined = _private_names_by_part()
    found = []
    for module, (path, package) in MODULES.items():
        part = _part(module)
        own = defined.get(part, set())
        others = set().union(*(names for p, names in defined.items() if p != part)) - own
        tree = ast.parse(path.read_text(encoding="utf-8"))
        outside = _outside_names(tree) | {"self", "cls"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                receiver = node.value
                if isinstance(receiver, ast.Name) and receiver.id in outside:
                    continue  # its own, or another library's (os._exit)
                if node.attr in others:
                    found.append(f"{module}:{node.lineno} reads .{node.attr}")
            elif isinstance(node, ast.ImportFrom):
                source = (
                    _absolute(module, package, node.level, node.module)
                    if node.level
                    else node.module
                )
                if not source or source.split(".")[0] != PACKAGE or _part(source) == part:
                    continue
                for alias in node.names:
                    if _private(alias.name):
                        found.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
    assert not found, "private names read across parts:\n" + "\n".join(found)


def _loaded_after(script: str) -> set[str]:
    """The package's modules a fresh interpreter holds after running ``script``."""
    import subprocess
    import sys

    shown = (
        f"{script}\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith('{PACKAGE}.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", shown], capture_output=True, text=True, timeout=120, check=True
    )
    return set(ast.literal_eval(done.stdout.strip().splitlines()[-1]))


def _parts(modules: set[str]) -> set[str]:
    return {module.split(".")[1] for module in modules}


def test_a_rank_loads_no_kernel_side_module():
    # What a rank started by spawn or on a Ray node imports, then what a training function asks for.
    loaded = _loaded_after(
        "import notebook_launcher.worker.bootstrap, notebook_launcher.worker.remote_rank\n"
        "from notebook_launcher import PartialState, gather, log\n"
        "PartialState"
    )
    assert {"worker", "state", "ops", "live"} <= _parts(loaded)
    assert not _parts(loaded) & KERNEL, sorted(m for m in loaded if m.split(".")[1] in KERNEL)
    assert not _parts(loaded) & {"data", "accelerator"}  # not asked for, not loaded


def test_every_public_name_is_found_where_its_exports_table_says():
    import importlib

    import notebook_launcher

    homes = notebook_launcher._WHERE
    assert set(notebook_launcher.__all__) == {*homes, "load_ipython_extension"}
    for name, home in homes.items():
        module = importlib.import_module(home, PACKAGE)
        assert getattr(notebook_launcher, name) is getattr(module, name), name
    assert set(notebook_launcher.__all__) <= set(dir(notebook_launcher))

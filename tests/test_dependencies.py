"""Every import of the project is declared, and every module of the package imports on its own.

A package installed by hand must never be what makes the suite pass: each third-party module that
the package, the tests, the tutorials or the benchmarks import has to come from a distribution that
``pyproject.toml`` lists for that part of the tree.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Import name -> distribution, for distributions this test may meet uninstalled (optional extras).
NOT_INSTALLED_HERE = {
    "torch_xla": "torch-xla",
    "lightning": "lightning",
    "tomli": "tomli",
    "ray": "ray",
    "submitit": "submitit",
}

# Which dependency lists each part of the tree may draw from.
PARTS = {
    "notebook_launcher": ("runtime", "tpu", "integrations", "ray"),
    "tests": ("runtime", "test", "browser", "tpu", "ray"),
    "notebooks": ("runtime", "test", "ray"),
    "benchmarks": ("runtime", "test", "bench", "ray"),
    "scripts": ("runtime",),
}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(lists: tuple[str, ...]) -> set[str]:
    """The distributions these lists declare, following an extra that names others of this
    project's ("notebook_launcher[integrations]")."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    names = set()
    for which in lists:
        reqs = PYPROJECT["project"]["dependencies"] if which == "runtime" else extras[which]
        for requirement in reqs:
            own = re.fullmatch(r"notebook[-_]launcher\[([\w,\s-]+)\]", requirement)
            if own:
                names |= _declared(tuple(e.strip() for e in own[1].split(",")))
            else:
                names.add(_name(requirement))
    return names


def _sources(part: str):
    base = ROOT / part
    if part == "notebooks":
        for path in sorted(base.glob("*.ipynb")):
            cells = json.loads(path.read_text())["cells"]
            code = [
                "".join(c["source"])
                for c in cells
                if c["cell_type"] == "code" and not "".join(c["source"]).lstrip().startswith("%%")
            ]
            # IPython magics and shell escapes (`x = %magic` too) become Python as IPython
            # turns them into it.
            to_python = TransformerManager().transform_cell
            yield path, "\n".join(to_python(block) for block in code)
        return
    for path in sorted(base.rglob("*.py")):
        yield path, path.read_text()


def _top_level_imports(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _local_names(part: str) -> set[str]:
    """Modules that live in the tree itself (helpers beside the tests, files a tutorial writes)."""
    names = {"notebook_launcher", "tests"}
    base = ROOT / part
    if part == "notebook_launcher":  # the package imports itself as notebook_launcher only, so
        return names  # notebook_launcher/integrations/transformers.py does not hide transformers
    names.update(p.stem for p in base.rglob("*.py"))
    names.update(p.name for p in base.rglob("*") if p.is_dir())
    if part == "benchmarks":  # some reuse the tests' workloads and helpers (tests/helpers)
        names.update(p.stem for p in (ROOT / "tests").rglob("*.py"))
        names.update(p.name for p in (ROOT / "tests").rglob("*") if p.is_dir())
    if part == "notebooks":
        for path in base.glob("*.ipynb"):
            names.update(re.findall(r"(\w+)\.py", path.read_text()))
    return names


@functools.cache
def _installed() -> dict[str, list[str]]:
    """Import name -> installed distributions, read once (it walks every installed package)."""
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    mapping = _installed()
    dists = {d.lower().replace("_", "-") for d in mapping.get(module, ())}
    if not dists and module in NOT_INSTALLED_HERE:
        dists = {NOT_INSTALLED_HERE[module]}
    return dists


@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_import_is_declared(part):
    problems = _undeclared(part, PARTS[part])
    assert not problems, "\n".join(problems)


def test_dev_lab_installs_what_the_tutorials_import():
    """``./dev lab`` installs the ``lab`` extra only: every import of the notebooks is in it."""
    problems = _undeclared("notebooks", ("runtime", "lab"))
    assert not problems, "\n".join(problems)
    assert "jupyterlab" in _declared(("lab",))


def _undeclared(part: str, lists: tuple[str, ...]) -> list[str]:
    """What ``part`` imports that no distribution of ``lists`` provides."""
    allowed = _declared(lists)
    local = _local_names(part)
    problems = []
    for path, text in _sources(part):
        for module in sorted(_top_level_imports(text)):
            if module in sys.stdlib_module_names or module in local or module == "__future__":
                continue
            dists = _distributions(module)
            if not dists:
                problems.append(
                    f"{path.relative_to(ROOT)}: imports {module!r}, which no installed or known distribution provides"
                )
            elif not dists & allowed:
                problems.append(
                    f"{path.relative_to(ROOT)}: imports {module!r} from {sorted(dists)}, "
                    f"not declared in pyproject.toml for {part} ({', '.join(lists)})"
                )
    return problems


def test_declared_lists_are_what_the_check_reads():
    """The check above is only as good as its reading of pyproject.toml: a known entry must be seen."""
    assert {"torch", "numpy", "safetensors", "cloudpickle"} <= _declared(("runtime",))
    assert {"accelerate", "pytest", "hypothesis"} <= _declared(("test",))
    assert "accelerate" not in _declared(("runtime",))


def test_every_package_module_imports_in_a_fresh_interpreter():
    """Import each module of the package, one fresh interpreter for all, from outside the checkout."""
    script = """
import importlib, pkgutil, sys, traceback
import notebook_launcher
failed = []
for info in pkgutil.walk_packages(notebook_launcher.__path__, "notebook_launcher."):
    try:
        importlib.import_module(info.name)
    except Exception:
        failed.append(info.name + ":\\n" + traceback.format_exc(limit=3))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd="/", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr

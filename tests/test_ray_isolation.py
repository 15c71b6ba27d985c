"""Ray is an optional dependency: only the Ray launcher (kernel side) and the ranks' actor code
(worker side) may import it, and only once a launch on a cluster starts. Importing the package
never imports Ray, whether Ray is installed or not."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "notebook_launcher"
RAY_LAUNCHER = PACKAGE / "launch" / "launchers" / "ray"
RANK_ACTOR = PACKAGE / "worker" / "remote_rank.py"


def _imports_ray(path: Path) -> list[tuple[int, bool]]:
    """Each import of ray in ``path``: its line and whether it runs at import time."""
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            if any(name.split(".")[0] == "ray" for name in names):
                found.append((child.lineno, inner))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def test_only_the_ray_launcher_and_the_rank_actor_import_ray():
    strays, eager = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, top in _imports_ray(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            if RAY_LAUNCHER not in path.parents and path != RANK_ACTOR:
                strays.append(where)
            elif top:
                eager.append(where)
    assert not strays, f"modules outside the Ray launcher import ray: {strays}"
    assert not eager, f"ray imported when the module is imported (import it in a function): {eager}"


def test_importing_the_package_does_not_import_ray():
    script = (
        "import sys, notebook_launcher; "
        "from notebook_launcher import RayCluster, plan_launch; "
        "plan_launch(num_processes=2, cluster=RayCluster()); "
        "sys.exit(1 if 'ray' in sys.modules else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr

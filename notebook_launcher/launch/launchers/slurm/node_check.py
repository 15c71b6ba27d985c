"""Whether every Slurm node of a launch can run it, asked as its tasks start.

Each task, once it joined the kernel and before it loads the function, says what its node has
(:class:`~notebook_launcher.protocol.node_environment.NodeEnvironment`: the modules loading the
function imports that it cannot find, its Python and the versions that must agree with this
kernel's) and waits for the kernel's go. A node that lacks something is named with what it lacks
and how to provide it there, instead of each rank failing as it unpickles the function.
"""

from __future__ import annotations

import os
import sys
import threading

from ....protocol.node_environment import NodeEnvironment, describe_node, from_json
from ..ray.node_check import (
    NodeProblem,
    compare,
    missing_modules,
    problem_lines,
    requirement,
    torch_differs,
)

TITLE = "The Slurm nodes cannot run this launch:"


class NodeCheck:
    """The answers of one attempt's tasks, as they come in (from the relay's thread).

    Args:
        modules: the top-level modules loading the function imports.
        ranks: how many tasks answer.
    """

    def __init__(self, modules: tuple[str, ...], ranks: int) -> None:
        self.modules = modules
        self.ranks = ranks
        self.here = describe_node()
        self._seen: dict[int, tuple[str, NodeEnvironment | None]] = {}
        self._lacks: dict[int, tuple[str, ...]] = {}
        self._changed = threading.Condition()

    def heard(self, rank: int, node: str, body: bytes) -> bool:
        """Record what rank ``rank`` on ``node`` said; True if its node can run the launch."""
        try:
            there: NodeEnvironment | None = from_json(body)
            lacks = compare(self.here, there)
        except ValueError as error:
            there, lacks = None, (f"its answer could not be read ({error})",)
        with self._changed:
            self._seen[rank] = (node, there)
            if lacks:
                self._lacks[rank] = lacks
            self._changed.notify_all()
        return not lacks

    def all_heard(self) -> bool:
        return len(self._seen) >= self.ranks

    def silent(self) -> list[int]:
        """The ranks that have not answered."""
        with self._changed:
            return [rank for rank in range(self.ranks) if rank not in self._seen]

    def wait(self, timeout: float) -> None:
        """Until another answer came, or ``timeout`` seconds."""
        with self._changed:
            self._changed.wait(timeout)

    def lacking(self) -> bool:
        """Whether some node lacks something, or (every task answered) torch differs."""
        with self._changed:
            return bool(self._lacks) or (self.all_heard() and self._torch_note() is not None)

    def _torch_note(self) -> str | None:
        return torch_differs(
            (f"node {node}", there) for node, there in self._seen.values() if there is not None
        )

    def report(self) -> str:
        """The error's text: each node with its ranks and what it lacks, then how to fix it."""
        with self._changed:
            by_node: dict[str, tuple[list[int], tuple[str, ...]]] = {}
            for rank in sorted(self._lacks):
                label = f"node {self._seen[rank][0]}"
                by_node.setdefault(label, ([], self._lacks[rank]))[0].append(rank)
            torch_note = self._torch_note()
        problems = [NodeProblem(node, tuple(r), lacks) for node, (r, lacks) in by_node.items()]
        lines = problem_lines(problems, torch_note, TITLE)
        own, installed = missing_modules(problems, self.modules)
        lines.append("To fix it:")
        if own:
            path = os.pathsep.join(dict.fromkeys(_folder(m) for m in own))
            lines.append(
                "  put your own modules on a filesystem every node sees, on the ranks' path: "
                f"SlurmCluster(setup='export PYTHONPATH={path}:$PYTHONPATH')"
            )
        if installed:
            wanted = ", ".join(requirement(m) for m in installed)
            lines.append(
                f"  install {wanted} in the nodes' Python, or have each rank load an environment "
                "that has them: SlurmCluster(setup='module load ...' or 'source .../bin/activate')"
                " or SlurmCluster(python=...)"
            )
        if not (own or installed):
            lines.append("  install the same versions as this kernel's in the nodes' Python")
        return "\n".join(lines)


def _folder(name: str) -> str:
    """The folder to put on the path for the module ``name`` to be found."""
    path = os.path.abspath(sys.modules[name].__file__)
    folder, file = os.path.split(path)
    return os.path.dirname(folder) if file == "__init__.py" else folder

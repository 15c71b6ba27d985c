"""Whether every rank's node can run the launch, asked as the ranks' actors start.

Each actor first answers :meth:`RankActor.check` (the modules loading the function imports,
found or not; its Python and the versions that must agree with this kernel's). A node that lacks
something is named with what it lacks and how to ship it, before the function is loaded there:
the user gets that instead of an unpickling traceback from every rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ....protocol.node_environment import AGREED, NodeEnvironment, version_of
from ..remote.gate import exhausted
from .joining import first_lines

PACKAGE = "notebook_launcher"
RAN_OUT = "its Ray actor could not answer: a resource ran out"


@dataclass(frozen=True)
class NodeProblem:
    """What one node lacks (``lacks``: one phrase per item), and its ranks."""

    node: str  # 'node 1 at 10.0.0.5, Ray node 4d465432'
    ranks: tuple[int, ...]
    lacks: tuple[str, ...]


def compare(here: NodeEnvironment, there: NodeEnvironment) -> tuple[str, ...]:
    """What ``there`` (a rank's node) lacks to run what ``here`` (this kernel) ships."""
    lacks = [
        f"module {name!r} is not found there ({why}; this kernel has {_where(name)})"
        for name, why in sorted(there.missing.items())
    ]
    if _minor(here.python) != _minor(there.python):
        lacks.append(f"Python {there.python} there, {here.python} here")
    for name in AGREED:
        if here.versions.get(name) != there.versions.get(name):
            lacks.append(
                f"{name} {there.versions.get(name) or 'missing'} there, "
                f"{here.versions.get(name)} here"
            )
    return tuple(lacks)


def actor_failed(error: BaseException) -> tuple[str, ...]:
    """What a node lacks, read from the error of an actor that could not even answer."""
    text = str(error)
    if f"No module named '{PACKAGE}" in text:
        return (f"{PACKAGE} is not installed there (No module named '{PACKAGE}')",)
    ran_out = exhausted(error)
    if ran_out is not None:
        return (f"{RAN_OUT} (it {ran_out}): {first_lines(error)}",)
    return (f"its Ray actor could not start: {first_lines(error)}",)


def torch_differs(found: Iterable[tuple[str, NodeEnvironment]]) -> str | None:
    """A sentence if the ranks' nodes have different torch versions (their collectives and
    pickled tensors would not agree), else None."""
    versions: dict[str, list[str]] = {}
    for node, environment in found:
        versions.setdefault(environment.versions.get("torch") or "missing", []).append(node)
    if len(versions) < 2:
        return None
    return "the nodes have different torch versions: " + "; ".join(
        f"{version} on {', '.join(sorted(set(nodes)))}"
        for version, nodes in sorted(versions.items())
    )


def report(problems: list[NodeProblem], torch_note: str | None, modules: tuple[str, ...]) -> str:
    """The error's text: each node with its ranks and what it lacks, then how to ship it."""
    lines = problem_lines(problems, torch_note)
    lacking = " ".join(" ".join(p.lacks) for p in problems)
    own, installed = missing_modules(problems, modules)
    own = [_shipped_path(m) for m in own]
    installed = [requirement(m) for m in installed]
    lines.append("To fix it:")
    if PACKAGE in lacking:
        lines.append(
            f"  install {requirement(PACKAGE)} on every node, or ship this kernel's copy with "
            f"the launch: RayCluster(runtime_env={{'py_modules': [{_shipped_path(PACKAGE)!r}]}})"
        )
    if own:
        lines.append(
            f"  ship your own modules with the launch: RayCluster(runtime_env={{'py_modules': "
            f"{own!r}}})"
        )
    if installed:
        lines.append(
            f"  install {', '.join(installed)} on every node, or have Ray install them for the "
            f"launch: RayCluster(runtime_env={{'pip': {installed!r}}})"
        )
    if RAN_OUT in lacking:
        lines.append(
            "  nothing is missing on the nodes: raise the limit that ran out (open files: "
            "`ulimit -n` before starting Jupyter, or resource.setrlimit(RLIMIT_NOFILE, ...) in "
            "the kernel), or close what holds them, then launch again"
        )
    elif torch_note or not (own or installed or PACKAGE in lacking):
        lines.append("  install the same versions as this kernel's on every node")
    return "\n".join(lines)


def problem_lines(
    problems: list[NodeProblem],
    torch_note: str | None,
    title: str = "The cluster's nodes cannot run this launch:",
) -> list[str]:
    """The opening of the error's text: each node with its ranks and what it lacks."""
    lines = [title]
    for problem in problems:
        ranks = ", ".join(map(str, problem.ranks))
        plural = "s" if len(problem.ranks) > 1 else ""
        lines.append(f"  {problem.node} (rank{plural} {ranks}): " + "; ".join(problem.lacks))
    if torch_note:
        lines.append(f"  {torch_note}")
    return lines


def missing_modules(
    problems: list[NodeProblem], modules: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """The modules of ``modules`` some node lacks: the user's own ones, and installed ones."""
    lacking = " ".join(" ".join(p.lacks) for p in problems)
    missing = [m for m in modules if f"module {m!r}" in lacking]
    return [m for m in missing if _own(m)], [m for m in missing if not _own(m)]


def requirement(name: str) -> str:
    """'name==version' as this kernel has it (the bare name if it has no version)."""
    version = version_of(name)
    return f"{name}=={version}" if version else name


def _where(name: str) -> str:
    version = version_of(name)
    if version is not None:
        return f"{name} {version}"
    return (
        f"it at {_shipped_path(name)}" if getattr(sys.modules.get(name), "__file__", None) else "it"
    )


def _own(name: str) -> bool:
    """Whether ``name`` is a module of the user's (loaded from outside site-packages)."""
    path = getattr(sys.modules.get(name), "__file__", None) or ""
    return bool(path) and "site-packages" not in path and "dist-packages" not in path


def _shipped_path(name: str) -> str:
    """What ``py_modules`` takes for the module ``name``: its package's folder, or its file."""
    path = os.path.abspath(sys.modules[name].__file__)
    folder, file = os.path.split(path)
    return folder if file == "__init__.py" else path


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def problems_by_node(
    answers: dict[int, Any], placement: Any, here: NodeEnvironment
) -> tuple[list[NodeProblem], str | None]:
    """``answers`` (rank -> its :class:`NodeEnvironment`, or the error its actor raised) as one
    :class:`NodeProblem` per node that lacks something, and a note if torch differs."""
    by_node: dict[str, tuple[list[int], tuple[str, ...]]] = {}
    seen: list[tuple[str, NodeEnvironment]] = []
    for rank in sorted(answers):
        answer = answers[rank]
        node = placement.node_label(rank)
        if isinstance(answer, NodeEnvironment):
            lacks = compare(here, answer)
            seen.append((node, answer))
        else:
            lacks = actor_failed(answer)
        if lacks:
            ranks, known = by_node.setdefault(node, ([], lacks))
            ranks.append(rank)
    problems = [NodeProblem(node, tuple(r), lacks) for node, (r, lacks) in by_node.items()]
    return problems, torch_differs(seen)

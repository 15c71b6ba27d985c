"""A package only this process (the kernel) can import: what a cluster node lacks, made real on a
machine whose nodes share the kernel's files."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path


def kernel_only_package(folder: Path, name: str, body: str) -> object:
    """A package ``name`` in ``folder``, imported by this process only (``folder`` is on its
    ``sys.path`` for the import alone, and in no environment variable the ranks inherit)."""
    package = folder / name
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(body))
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))

"""Version comparisons that treat local build tags (``2.13.0+cpu``) the way pip does."""

from __future__ import annotations

import importlib.metadata
import operator
from collections.abc import Callable

from packaging.version import InvalidVersion, Version

from .validation import check_choice, invalid

STR_OPERATION_TO_FUNC: dict[str, Callable[[object, object], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<=": operator.le,
    "<": operator.lt,
}


def _parse(name: str, text: object) -> Version:
    if isinstance(text, Version):
        return text
    if not isinstance(text, str):
        raise invalid(name, text, "expected a version string such as '2.3.0'", TypeError)
    try:
        return Version(text)
    except InvalidVersion:
        raise invalid(name, text, "expected a version string such as '2.3.0'")


def compare_versions(
    library_or_version: str | Version, operation: str, requirement_version: str
) -> bool:
    """Compare an installed library's version (or a version) with ``requirement_version``.

    Args:
        library_or_version: a distribution name such as ``"torch"``, or a ``Version``.
        operation: one of ``">"``, ``">="``, ``"=="``, ``"!="``, ``"<="``, ``"<"``.
        requirement_version: the version to compare against.

    Returns:
        ``library_version <operation> requirement_version``. When the requirement has no local
        part, the local part of the installed version is ignored, so ``2.13.0+cpu == 2.13.0``.

    Note:
        Accelerate compares the full versions, so ``is_torch_version("==", "2.13.0")`` is False
        there on a ``+cpu`` or ``+cu121`` build; here it follows PEP 440 (as pip does) and is True.

    Raises:
        ValueError: an unknown operation or an unparsable version.
        importlib.metadata.PackageNotFoundError: the library is not installed.
    """
    compare = STR_OPERATION_TO_FUNC[
        check_choice("operation", operation, STR_OPERATION_TO_FUNC.keys())
    ]
    if isinstance(library_or_version, str) and not library_or_version[:1].isdigit():
        current = Version(importlib.metadata.version(library_or_version))
    else:
        current = _parse("library_or_version", library_or_version)
    wanted = _parse("requirement_version", requirement_version)
    if wanted.local is None:
        current = Version(current.public)
    return bool(compare(current, wanted))


def torch_version() -> Version:
    """The running torch's version."""
    import torch

    return Version(torch.__version__)


def is_torch_version(operation: str, version: str) -> bool:
    """Compare the running torch's version with ``version`` (e.g. ``is_torch_version(">=", "2.3")``).

    See :func:`compare_versions` for ``operation`` and for how ``+cpu``-style tags are handled.
    """
    return compare_versions(torch_version(), operation, version)

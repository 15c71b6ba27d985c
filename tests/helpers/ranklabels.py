"""Reading the rank labels of shown lines: ``[rank3]``, ``[rank0-7]``, ``[ranks 0,2,4-7]``."""

from __future__ import annotations

import re

LABEL = re.compile(r"\[ranks? ?([\d,\-]+)\] ")
RED, PLAIN = "\x1b[31m", "\x1b[0m"  # how a stderr line that reads as a problem is drawn


def label_ranks(line: str) -> set[int]:
    """The ranks a shown line is labelled with (none for an unlabelled line)."""
    match = LABEL.match(uncoloured(line))
    if match is None:
        return set()
    ranks: set[int] = set()
    for part in match[1].split(","):
        low, _, high = part.partition("-")
        ranks.update(range(int(low), int(high or low) + 1))
    return ranks


def text_of(line: str) -> str:
    """A shown line without its label."""
    line = uncoloured(line)
    match = LABEL.match(line)
    return line[match.end() :] if match else line


def printed_by(lines: list[str], rank: int, text: str) -> bool:
    """Whether ``text`` is shown as printed by ``rank`` (alone or with other ranks)."""
    return any(text_of(line) == text and rank in label_ranks(line) for line in lines)


def uncoloured(line: str) -> str:
    """``line`` without the red the launcher draws problems in."""
    return line.replace(RED, "").replace(PLAIN, "")

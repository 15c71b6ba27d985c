"""A small YAML subset, written and read without any dependency.

Enough for configuration files: nested block mappings, block sequences of scalars, the empty
flow collections ``{}`` and ``[]``, and scalars (null, booleans, ints, floats, plain, single- and
double-quoted strings). What :func:`dumps` writes is standard YAML (PyYAML reads it back
unchanged); :func:`loads` reads that subset and raises ValueError, naming the line, for the rest.
"""

from __future__ import annotations

import math
import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
_RESERVED = {"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n", ".nan", ".inf"}
_INT = re.compile(r"^[-+]?[0-9]+$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "0": "\0", "a": "\a", "b": "\b", "t": "\t",
            "n": "\n", "v": "\v", "f": "\f", "r": "\r", "e": "\x1b", " ": " ",
            "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029"}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _quote(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable() and char != "\ufeff":
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "e" in text and "." not in text:  # YAML 1.1 readers want a dot in the mantissa
            text = text.replace("e", ".0e", 1)
        return text
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower() not in _RESERVED
        return value if plain else _quote(value)
    raise TypeError(f"cannot write a {type(value).__name__} ({value!r}) as a YAML scalar")


def dumps(data: dict[str, Any]) -> str:
    """``data`` (a dict with str keys) as YAML text."""
    if not isinstance(data, dict):
        raise TypeError(f"data={data!r} is not valid: expected a dict")
    return "".join(_dump_mapping(data, 0)) or "{}\n"


def _dump_mapping(data: dict[str, Any], indent: int) -> list[str]:
    lines = []
    pad = " " * indent
    for key, value in data.items():
        if not isinstance(key, str):
            raise TypeError(f"cannot write the key {key!r}: keys must be str")
        head = f"{pad}{_scalar(key)}:"
        if isinstance(value, dict) and value:
            lines += [head + "\n", *_dump_mapping(value, indent + 2)]
        elif isinstance(value, (list, tuple)) and value:
            lines.append(head + "\n")
            for item in value:
                if isinstance(item, (dict, list, tuple)):
                    raise TypeError(f"cannot write {key!r}: only lists of scalars are supported")
                lines.append(f"{pad}- {_scalar(item)}\n")
        elif isinstance(value, dict):
            lines.append(head + " {}\n")
        elif isinstance(value, (list, tuple)):
            lines.append(head + " []\n")
        else:
            lines.append(f"{head} {_scalar(value)}\n")
    return lines


def _unquote_double(text: str, where: str) -> str:
    out, i = [], 1
    while i < len(text) - 1:
        char = text[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        code = text[i + 1] if i + 1 < len(text) - 1 else ""
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in _HEX_ESCAPES:
            width = _HEX_ESCAPES[code]
            digits = text[i + 2 : i + 2 + width]
            if len(digits) != width or not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise ValueError(f"{where}: bad escape \\{code}{digits}")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        else:
            raise ValueError(f"{where}: unknown escape \\{code}")
    return "".join(out)


_SPECIAL = {"{}": {}, "[]": [], "": None, "~": None, "null": None, "true": True,
            "false": False, ".nan": math.nan, ".inf": math.inf, "-.inf": -math.inf}  # fmt: skip


def _parse_scalar(text: str, where: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return _unquote_double(text, where)
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text.startswith("#"):
        text = ""
    elif " #" in text:
        text = text.split(" #", 1)[0].rstrip()
    lowered = text.lower()
    if lowered in _SPECIAL:
        value = _SPECIAL[lowered]
        return type(value)() if isinstance(value, (dict, list)) else value
    if text[0] in "\"'[{&*!|>%@`":
        raise ValueError(f"{where}: {text!r} is outside the YAML subset this reader supports")
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def loads(text: str) -> dict[str, Any]:
    """Parse YAML text written by :func:`dumps` (or in the same subset) into a dict."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"line {number}: tabs cannot indent YAML")
        lines.append((number, len(raw) - len(raw.lstrip(" ")), stripped))
    if len(lines) == 1 and lines[0][2] == "{}":
        return {}
    data, end = _parse_block(lines, 0, 0)
    if end != len(lines):
        number = lines[end][0]
        raise ValueError(f"line {number}: unexpected indentation")
    if not isinstance(data, dict):
        raise ValueError("the document is not a mapping")
    return data


def _parse_block(lines: list[tuple[int, int, str]], start: int, indent: int) -> tuple[Any, int]:
    if lines[start][2].startswith("- ") or lines[start][2] == "-":
        return _parse_sequence(lines, start, indent)
    mapping: dict[str, Any] = {}
    i = start
    while i < len(lines) and lines[i][1] == indent:
        number, _, content = lines[i]
        where = f"line {number}"
        key_text, sep, rest = _split_key(content)
        if not sep:
            raise ValueError(f"{where}: expected 'key: value', got {content!r}")
        key = _parse_scalar(key_text, where)
        if not isinstance(key, str):
            key = key_text.strip()
        i += 1
        if rest.strip():
            mapping[key] = _parse_scalar(rest, where)
        elif i < len(lines) and (
            lines[i][1] > indent or (lines[i][1] == indent and lines[i][2].startswith("-"))
        ):
            mapping[key], i = _parse_block(lines, i, lines[i][1])
        else:
            mapping[key] = None
    return mapping, i


def _parse_sequence(lines, start: int, indent: int) -> tuple[list[Any], int]:
    items, i = [], start
    while i < len(lines) and lines[i][1] == indent and lines[i][2].startswith("-"):
        number, _, content = lines[i]
        item = content[1:]
        if ": " in item and item.strip()[0] not in "\"'":
            raise ValueError(f"line {number}: sequences of mappings are not supported")
        items.append(_parse_scalar(item, f"line {number}"))
        i += 1
    return items, i


def _split_key(content: str) -> tuple[str, str, str]:
    """Split ``key: value`` at the colon that ends the key (a quoted key may hold colons)."""
    end = 0
    if content[0] in "\"'":
        quote, i = content[0], 1
        while i < len(content):
            if quote == '"' and content[i] == "\\":
                i += 2
                continue
            if content[i] == quote:
                if quote == "'" and content[i + 1 : i + 2] == "'":  # '' inside '...'
                    i += 2
                    continue
                break
            i += 1
        end = i + 1
    match = re.compile(r":(\s|$)").search(content, end)
    if match is None or (end and match.start() != end):
        return content, "", ""
    return content[: match.start()], ":", content[match.end() :]

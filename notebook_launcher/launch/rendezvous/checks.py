"""Checking the multi-node rendezvous settings: the endpoint, ``rdzv_conf`` and the wait."""

from __future__ import annotations

import math
from collections.abc import Mapping

from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from ...utils.validation import invalid

C10D_DEFAULT_PORT = 29400  # torch's port for a c10d endpoint given without one
_PORT_RANGE = "; the port must be 1 to 65535"

# rdzv_conf keys and what each must hold. For "c10d" they are torch's dynamic-rendezvous settings
# (torch.distributed.elastic.rendezvous.dynamic_rendezvous.create_handler and the c10d backend);
# for "static" they are the two keys torch's static rendezvous reads.
_SECONDS = "a number of seconds > 0"
C10D_KEYS = {
    "join_timeout": _SECONDS,
    "last_call_timeout": _SECONDS,
    "close_timeout": _SECONDS,
    "heartbeat_timeout": _SECONDS,
    "read_timeout": _SECONDS,
    "keep_alive_interval": _SECONDS,
    "keep_alive_max_attempt": "an int >= 1",
    "is_host": "True or False",
    "store_type": "'tcp'",
}
STATIC_KEYS = {"rank": "this node's node_rank", "timeout": _SECONDS}


def parse_endpoint(value: object, master_addr: str, use_port: int) -> tuple[str, int]:
    """``rdzv_endpoint`` as ``(host, port)``; ``""`` means ``master_addr:use_port``.

    Read by torch's own parser (``host``, ``host:port``, ``[ipv6]:port``; a missing port is
    torch's c10d default, 29400), so the endpoint means here what it means to torch.
    """
    allowed = (
        "expected 'host:port' (e.g. '10.0.0.1:29400'), '[ipv6]:port', or '' for "
        "master_addr:use_port"
    )
    if not isinstance(value, str):
        raise invalid("rdzv_endpoint", value, allowed, TypeError)
    if not value.strip():
        return master_addr, use_port
    try:
        host, port = parse_rendezvous_endpoint(value, default_port=C10D_DEFAULT_PORT)
    except ValueError as exc:  # torch's message says which part it could not read
        detail = _PORT_RANGE if "port number" in str(exc) else ""
        raise invalid("rdzv_endpoint", value, allowed + detail) from None
    if not 0 < port <= 65535:
        raise invalid("rdzv_endpoint", value, allowed + _PORT_RANGE)
    return host, port


def format_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _seconds(key: str, value: object) -> float:
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise invalid(f"rdzv_conf[{key!r}]", value, f"expected {_SECONDS}")
    if not math.isfinite(number) or number <= 0:
        raise invalid(f"rdzv_conf[{key!r}]", value, f"expected {_SECONDS}")
    return float(number)


def _check_value(key: str, value: object, backend: str, node_rank: int) -> object:
    name = f"rdzv_conf[{key!r}]"
    if key == "rank" and backend == "static":
        if isinstance(value, bool) or value not in (node_rank, str(node_rank)):
            raise invalid(
                name, value, f"with rdzv_backend='static' it must equal node_rank={node_rank}"
            )
        return node_rank
    if key == "is_host":
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        if not isinstance(value, bool):
            raise invalid(name, value, "expected True or False")
        return value
    if key == "store_type":
        if not isinstance(value, str) or value.strip().lower() != "tcp":
            raise invalid(name, value, "only 'tcp' is supported: the kernel hosts the store")
        return "tcp"
    if key == "keep_alive_max_attempt":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise invalid(name, value, "expected an int >= 1")
        return value
    return _seconds(key, value)


def check_rdzv_conf(value: object, backend: str, node_rank: int) -> tuple[tuple[str, object], ...]:
    """``rdzv_conf`` as sorted ``(key, value)`` pairs, every key and value checked.

    Raises:
        TypeError: ``rdzv_conf`` is not a dict (or None).
        ValueError: an unknown key for the backend, or a value the key cannot take.
    """
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise invalid("rdzv_conf", value, "expected a dict or None", TypeError)
    known = C10D_KEYS if backend == "c10d" else STATIC_KEYS
    checked = {}
    for key, item in value.items():
        if key not in known:
            allowed = ", ".join(f"{k!r} ({v})" for k, v in known.items())
            raise invalid(
                "rdzv_conf",
                dict(value),
                f"key {key!r} is not a setting of rdzv_backend={backend!r}; its settings "
                f"are {allowed}",
            )
        checked[key] = _check_value(key, item, backend, node_rank)
    return tuple(sorted(checked.items()))


def node_wait(conf: tuple[tuple[str, object], ...], backend: str, rdzv_timeout: float) -> float:
    """How long the nodes wait for each other: torch's own key in ``rdzv_conf`` if given."""
    key = "join_timeout" if backend == "c10d" else "timeout"
    return float(dict(conf).get(key, rdzv_timeout))

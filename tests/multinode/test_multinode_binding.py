"""A single-node launch's rendezvous listens on 127.0.0.1 only, whatever master_addr says."""

from __future__ import annotations

import pytest
from jobs import where_the_store_listens
from noderun import QUIET

from notebook_launcher import notebook_launcher as launch


@pytest.mark.parametrize("master_addr", ["127.0.0.1", "0.0.0.0", "localhost"])
def test_single_node_store_listens_on_loopback_only(master_addr):
    result = launch(where_the_store_listens, num_processes=2, master_addr=master_addr, **QUIET)

    (addresses,) = {tuple(value) for value in result}
    (address,) = addresses  # one listening socket on that port: no IPv6 or wildcard twin
    assert address.startswith("127.0.0.1:")

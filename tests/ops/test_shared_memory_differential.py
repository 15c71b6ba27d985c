"""The shared-memory transport against gloo: the same random collectives, the same bits.

One launch per transport (shared memory, then ``NOTEBOOK_LAUNCHER_SHARED_MEMORY=0``), with 2 and
with 3 ranks, runs a fixed-seed workload of ``reduce`` (sum and mean), ``gather``, ``broadcast``,
``gather_object`` and ``broadcast_object_list`` calls on tensors and nested dicts of every dtype
gloo reduces, random shapes (empty ones included) and random values (signed zeros, subnormals,
huge values, infinities and NaN included); see ``collective_workload.py``. The exchange's slots
are made a few hundred bytes, so that most tensors travel in several chunks, and the workload
starts with sums whose sizes sit at the edges of gloo's ring regions.

What is asserted, for every tensor of every call:

* shared memory and gloo give the same dtype, shape and bits (any NaN equal to any NaN; 0.0 and
  -0.0 differ). This holds for floating-point sums and means too, with any number of ranks: the
  exchange adds the ranks' values one at a time, rounding after each addition in the tensor's
  dtype, in the order gloo's ring all-reduce does (for each region of the buffer, a different
  rank first; see ``shared_memory.ring_region``). With 2 ranks the order cannot matter.
* every rank gets the same bits as rank 0;
* gathers and broadcasts (of tensors and of objects), integer and bool sums and means, and
  empty tensors equal the exact result;
* floating-point sums of finite values are within ``(world - 1) * u * sum(|x|)`` of the exact
  sum (u = 2**-11 float16, 2**-8 bfloat16, 2**-24 float32, 2**-53 float64, per component for
  complex; plus a few subnormals), means within that divided by the world size plus the
  division's rounding. This bound holds for any order of the additions; it is the accuracy to
  expect from either transport.
"""

from __future__ import annotations

import pytest
from collective_workload import compare, run

from notebook_launcher import notebook_launcher
from notebook_launcher.backends import shared_memory

pytestmark = pytest.mark.skipif(
    not shared_memory.supported(), reason="the exchange needs x86-64 Linux with /dev/shm"
)

SEED = 20
CALLS = 300


def launch_both(monkeypatch, args, world):
    """The workload's results through shared memory, then through gloo."""
    shared = notebook_launcher(run, args=args, num_processes=world, output="none", ui="none")
    monkeypatch.setenv(shared_memory.ENV_SWITCH, "0")
    gloo = notebook_launcher(run, args=args, num_processes=world, output="none", ui="none")
    monkeypatch.delenv(shared_memory.ENV_SWITCH)
    assert gloo[0]["slot_bytes"] is None
    return list(shared), list(gloo)


@pytest.mark.parametrize(("world", "slot_bytes"), [(2, 256), (3, 1024)], ids=["2", "3"])
def test_random_collectives_give_gloos_bits_and_the_exact_results(monkeypatch, world, slot_bytes):
    seed, large = SEED + world, 0.005
    shared, gloo = launch_both(monkeypatch, (seed, CALLS, slot_bytes, large), world)
    assert shared[0]["slot_bytes"] == slot_bytes  # most tensors went in several chunks
    report = compare(seed, CALLS, world, shared, gloo, large)
    assert report.differences == []
    assert report.calls == CALLS and report.exact > 400 and report.bounded > 60


def test_sums_at_the_edges_of_gloos_ring_regions_give_gloos_bits(monkeypatch):
    # 3 ranks (with 2 the order of the one addition cannot matter), the default slots.
    shared, gloo = launch_both(monkeypatch, (SEED, 0, 0, 0.0, True), 3)
    report = compare(SEED, 0, 3, shared, gloo, 0.0, with_edges=True, check_expected=False)
    assert report.differences == [] and report.calls == 4

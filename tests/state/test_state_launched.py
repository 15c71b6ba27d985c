"""PartialState inside launched workers, where the function set up torch.distributed itself."""

from __future__ import annotations

from notebook_launcher import PartialState, notebook_launcher


def _group_first_then_state():
    import torch.distributed as dist

    dist.init_process_group("gloo")  # plain torch code inside the launched function
    state = PartialState()
    return state.num_processes, state.process_index, state.backend, state.use_distributed


def test_process_group_created_by_the_function_is_adopted():
    result = notebook_launcher(_group_first_then_state, num_processes=2)
    assert list(result) == [(2, 0, "gloo", True), (2, 1, "gloo", True)]

"""Unwrapping models, measuring modules, offloading and saving state dicts."""

from __future__ import annotations

import json
import os
from types import MethodType

import numpy
import pytest
import torch
from torch import nn

from notebook_launcher import PartialState, notebook_launcher, ops


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))

    def forward(self, x):
        return self.norm(self.linear(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.blocks = nn.Sequential(Block(8), Block(8))
        self.head = nn.Linear(8, 2, bias=False)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


# -- extract_model_from_parallel -------------------------------------------------------------------


def test_data_parallel_and_nested_wrappers_are_removed():
    net = Net()
    assert ops.extract_model_from_parallel(net) is net
    assert ops.extract_model_from_parallel(nn.DataParallel(nn.DataParallel(net))) is net


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_models_keep_or_lose_their_compile_wrapper():
    net = Net()
    compiled = torch.compile(net)  # nothing is compiled until it is called
    assert ops.extract_model_from_parallel(compiled) is compiled
    assert ops.extract_model_from_parallel(compiled, keep_torch_compile=False) is net
    around_parallel = torch.compile(nn.DataParallel(net))
    rewrapped = ops.extract_model_from_parallel(around_parallel)
    assert type(rewrapped) is type(around_parallel) and rewrapped._orig_mod is net
    assert isinstance(around_parallel._orig_mod, nn.DataParallel)  # the caller's is untouched
    assert ops.extract_model_from_parallel(around_parallel, keep_torch_compile=False) is net


def test_fp32_wrapper_is_kept_or_removed():
    net = Net()
    net._original_forward = net.forward  # what mixed precision's wrapper leaves behind

    def wrapped(self, *args, **kwargs):
        return self._original_forward(*args, **kwargs).float()

    net.forward = MethodType(wrapped, net)
    kept = ops.extract_model_from_parallel(nn.DataParallel(net))
    assert kept is net and net.forward.__func__ is wrapped
    ops.extract_model_from_parallel(net, keep_fp32_wrapper=False)
    assert "forward" not in net.__dict__ and "_original_forward" not in net.__dict__
    assert net.forward.__func__ is Net.forward


def test_recursive_unwraps_submodules_in_place():
    net = Net()
    net.head = nn.DataParallel(net.head)
    net.blocks[1] = nn.DataParallel(net.blocks[1])
    inner_head = net.head.module
    assert ops.extract_model_from_parallel(net, recursive=True) is net
    assert net.head is inner_head and isinstance(net.blocks[1], Block)


def test_extract_refuses_bad_arguments():
    with pytest.raises(TypeError, match="model='net' is not valid"):
        ops.extract_model_from_parallel("net")
    with pytest.raises(TypeError, match="keep_fp32_wrapper=0 is not valid"):
        ops.extract_model_from_parallel(Net(), keep_fp32_wrapper=0)


# -- sizes -------------------------------------------------------------------------------------------


def test_compute_module_sizes_counts_parameters_and_buffers_per_prefix():
    net = Net()
    sizes = ops.compute_module_sizes(net)
    block = (8 * 8 + 8 + 8 + 8) * 4 + 3 * 8  # linear + norm in float32, int64 buffer
    assert sizes["blocks.0"] == sizes["blocks.1"] == block
    assert sizes["embed"] == 80 * 4 and sizes["head"] == 16 * 4
    assert sizes[""] == 2 * block + 80 * 4 + 16 * 4
    assert sizes["blocks.0.linear.weight"] == 64 * 4
    half = ops.compute_module_sizes(net, dtype="torch.float16")
    assert half["blocks.0.steps"] == 3 * 8 and half["blocks.0.linear.weight"] == 64 * 2
    special = ops.compute_module_sizes(net, torch.float16, {"head.weight": "float64"})
    assert special["head"] == 16 * 8
    assert ops.compute_module_sizes(net, buffers_only=True)[""] == 2 * 3 * 8


def test_sizes_and_layers_match_accelerate():
    import accelerate.utils as their_utils

    net = Net()
    for kwargs in ({}, {"dtype": torch.bfloat16}, {"buffers_only": True}):
        assert ops.compute_module_sizes(net, **kwargs) == their_utils.compute_module_sizes(
            net, **kwargs
        )
    sizes = ops.compute_module_sizes(net)
    for no_split in ([], ["Block"], ["Sequential"]):
        modules = list(net.named_children())
        ours = ops.get_max_layer_size(modules, sizes, no_split)
        assert ours == their_utils.get_max_layer_size(modules, sizes, no_split)


def test_get_max_layer_size_finds_every_layer_of_the_largest_size():
    net = Net()
    sizes = ops.compute_module_sizes(net)
    modules = list(net.named_children())
    block = sizes["blocks.0"]
    assert ops.get_max_layer_size(modules, sizes, ["Block"]) == (block, ["blocks.0", "blocks.1"])
    assert ops.get_max_layer_size(modules, sizes, []) == (80 * 4, ["embed"])
    assert ops.get_max_layer_size([], sizes, []) == (0, [])
    with pytest.raises(KeyError, match="module_sizes has no size for 'head'"):
        ops.get_max_layer_size([("head", net.head)], {}, [])
    with pytest.raises(TypeError, match="modules=.* is not valid"):
        ops.get_max_layer_size([net], sizes, [])
    with pytest.raises(TypeError, match="no_split_module_classes=None is not valid"):
        ops.get_max_layer_size(modules, sizes, None)
    with pytest.raises(TypeError, match="dtype='half-ish' is not valid"):
        ops.compute_module_sizes(net, dtype="half-ish")


def test_get_max_layer_size_answers_as_accelerate_does():
    from accelerate.utils.modeling import get_max_layer_size as theirs

    net = Net()
    sizes = ops.compute_module_sizes(net)
    children = list(net.named_children())
    # infer_auto_device_map lists a module's own parameters and buffers beside its children
    block = net.blocks[0]
    mixed = [(f"blocks.0.{name}", child) for name, child in block.named_children()]
    mixed += [("blocks.0.steps", block.steps), ("embed.weight", net.embed.weight)]
    cases = [
        (children, ["Block"]),
        (children, []),
        (children, "Block"),  # a string: class names are tested with `in`, as substrings
        (children, ("LayerNorm", "Linear")),
        ([list(pair) for pair in children], {"Block"}),  # pairs as lists
        (mixed, []),
        (mixed, ["Block"]),
        ([("blocks.0", net.blocks[0]), ("embed", net.embed.weight)], []),
        ([], []),
    ]
    for modules, no_split in cases:
        assert ops.get_max_layer_size(modules, sizes, no_split) == theirs(
            list(modules), sizes, no_split
        ), (modules, no_split)


# -- offload_state_dict ------------------------------------------------------------------------------


def _state_dict():
    return {
        "w": torch.arange(6, dtype=torch.float32).view(2, 3),
        "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "step": torch.tensor(7),
        "mask": torch.tensor([True, False]),
        "strided": torch.arange(6.0).view(2, 3).t(),
    }


def _read(folder, name, entry):
    dtype = "int16" if entry["dtype"] == "bfloat16" else entry["dtype"]
    shape = entry["shape"] or [1]
    array = torch.from_numpy(numpy.fromfile(os.path.join(folder, f"{name}.dat"), dtype=dtype))
    array = array.view(shape) if entry["shape"] else array.view(())
    return array.view(torch.bfloat16) if entry["dtype"] == "bfloat16" else array


def test_offload_state_dict_writes_raw_arrays_and_a_merged_index(tmp_path):
    state = _state_dict()
    before = {k: v.clone() for k, v in state.items()}
    ops.offload_state_dict(tmp_path / "off", state)
    ops.offload_state_dict(str(tmp_path / "off"), {"later": torch.ones(2, dtype=torch.float64)})
    index = json.loads((tmp_path / "off" / "index.json").read_text())
    assert index["bf"] == {"dtype": "bfloat16", "shape": [2]}
    assert index["step"] == {"dtype": "int64", "shape": []}
    assert index["later"] == {"dtype": "float64", "shape": [2]}  # merged, earlier names kept
    assert set(index) == {*state, "later"}
    for name, tensor in state.items():
        assert torch.equal(_read(tmp_path / "off", name, index[name]), tensor)
        assert torch.equal(tensor, before[name])  # the caller's tensors are untouched


def test_offloaded_weights_load_with_accelerate(tmp_path):
    import accelerate.utils as their_utils

    state = _state_dict()
    ops.offload_state_dict(tmp_path, state)
    loader = their_utils.OffloadedWeightsLoader(save_folder=str(tmp_path))
    for name, tensor in state.items():
        assert torch.equal(loader[name], tensor)


def test_offload_refuses_bad_input(tmp_path):
    with pytest.raises(TypeError, match="save_dir=3 is not valid"):
        ops.offload_state_dict(3, {})
    with pytest.raises(TypeError, match="state_dict={'a': 1} is not valid"):
        ops.offload_state_dict(tmp_path, {"a": 1})
    with pytest.raises(TypeError, match="state_dict\\['q'\\]"):
        ops.offload_state_dict(tmp_path, {"q": torch.zeros(1, dtype=torch.float8_e4m3fn)})


# -- save ---------------------------------------------------------------------------------------------


def test_save_with_torch_and_with_safetensors_never_mutates_the_state_dict(tmp_path):
    from safetensors.torch import load_file

    state = Net().state_dict()
    state["tied"] = state["embed.weight"]  # shared memory: safetensors refuses such tensors
    state["part"] = state["embed.weight"][2:4]
    state["strided"] = torch.arange(6.0).view(2, 3).t()
    snapshot = {k: (v.data_ptr(), v.clone()) for k, v in state.items()}
    ops.save(state, tmp_path / "model.safetensors", safe_serialization=True)
    ops.save(state, tmp_path / "model.pt")
    with open(tmp_path / "file.pt", "wb") as f:
        ops.save({"epoch": 3}, f)
    assert list(state) == list(snapshot)
    for name, (pointer, values) in snapshot.items():
        assert state[name].data_ptr() == pointer and torch.equal(state[name], values)
    loaded = load_file(tmp_path / "model.safetensors")
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)
    assert torch.equal(torch.load(tmp_path / "model.pt")["strided"], state["strided"])
    assert torch.load(tmp_path / "file.pt") == {"epoch": 3}


def test_save_refuses_bad_input(tmp_path):
    with pytest.raises(TypeError, match="f=<_io.BufferedWriter"):
        with open(tmp_path / "x", "wb") as f:
            ops.save({"a": torch.ones(1)}, f, safe_serialization=True)
    with pytest.raises(TypeError, match="state_dict=\\[1\\] is not valid"):
        ops.save([1], tmp_path / "y", safe_serialization=True)
    with pytest.raises(TypeError, match="f=3 is not valid"):
        ops.save({}, 3)
    with pytest.raises(TypeError, match="save_on_each_node='no' is not valid"):
        ops.save({}, tmp_path / "z", save_on_each_node="no")


def in_a_job(folder):
    state = PartialState()
    rank = state.process_index
    model = Net()
    ddp = nn.parallel.DistributedDataParallel(model)
    unwrapped = ops.extract_model_from_parallel(ddp) is model
    for each_node in (False, True):
        path = os.path.join(folder, f"rank{rank}-each{int(each_node)}.safetensors")
        ops.save(model.state_dict(), path, save_on_each_node=each_node, safe_serialization=True)
    ops.save({"rank": rank}, os.path.join(folder, f"rank{rank}.pt"))
    ops.wait_for_everyone()
    return unwrapped, sorted(os.listdir(folder))


def test_in_a_job_ddp_is_unwrapped_and_one_process_per_node_saves(tmp_path):
    results = notebook_launcher(in_a_job, args=(str(tmp_path),), num_processes=2, output="none")
    for unwrapped, files in results:
        assert unwrapped
        # One node: the main process is also the only local main process.
        assert files == ["rank0-each0.safetensors", "rank0-each1.safetensors", "rank0.pt"]

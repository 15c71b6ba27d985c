"""save_model, the save/load_state pre-hooks, unscale_gradients and the small helpers (1 process)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from notebook_launcher.accelerator import Accelerator
from notebook_launcher.accelerator.files import parse_shard_size
from notebook_launcher.utils.kwargs import GradScalerKwargs


class Tied(torch.nn.Module):
    """Tied input and output embeddings, a bf16 parameter and a buffer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.scale = torch.nn.Parameter(torch.randn(6, dtype=torch.bfloat16))
        self.register_buffer("steps", torch.arange(5))


def _assert_same(loaded, expected):
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert torch.equal(loaded[name], tensor), name


def _read_sharded(directory, index_name, read):
    with open(os.path.join(directory, index_name), encoding="utf-8") as f:
        index = json.load(f)
    merged = {}
    for name in sorted(set(index["weight_map"].values())):
        shard = read(os.path.join(directory, name))
        assert all(index["weight_map"][key] == name for key in shard)
        merged.update(shard)
    return index, merged


def test_save_model_one_file_shards_and_bin_reload_bit_exactly(tmp_path):
    accelerator = Accelerator()
    model = accelerator.prepare(Tied())
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    sizes = {k: v.numel() * v.element_size() for k, v in expected.items()}

    accelerator.save_model(model, tmp_path / "one")
    assert os.listdir(tmp_path / "one") == ["model.safetensors"]
    _assert_same(load_file(tmp_path / "one" / "model.safetensors"), expected)
    fresh = Tied()
    torch.nn.init.zeros_(fresh.embed.weight)
    fresh.load_state_dict(load_file(tmp_path / "one" / "model.safetensors"))  # strict
    assert torch.equal(fresh.head.weight, expected["head.weight"])

    directory = str(tmp_path / "sharded")
    accelerator.save_model(
        model, directory, max_shard_size=170
    )  # scale 12 + steps 40, embed 160, head 160
    names = sorted(os.listdir(directory))
    assert names == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    index, merged = _read_sharded(directory, "model.safetensors.index.json", load_file)
    _assert_same(merged, expected)
    assert index["metadata"] == {"total_size": sum(sizes.values())}
    assert sorted(index["weight_map"]) == sorted(expected)

    # A later unsharded save into the same folder leaves no stale shard or index behind.
    accelerator.save_model(model, directory)
    assert os.listdir(directory) == ["model.safetensors"]

    binary = str(tmp_path / "bin")
    accelerator.save_model(model, binary, max_shard_size="0.2KB", safe_serialization=False)
    assert "pytorch_model.bin.index.json" in os.listdir(binary)
    assert "pytorch_model-00001-of-00003.bin" in os.listdir(binary)
    _, merged = _read_sharded(
        binary,
        "pytorch_model.bin.index.json",
        lambda path: torch.load(path, weights_only=True),
    )
    _assert_same(merged, expected)
    accelerator.save_model(model, binary, safe_serialization=False)
    assert os.listdir(binary) == ["pytorch_model.bin"]
    _assert_same(torch.load(os.path.join(binary, "pytorch_model.bin")), expected)
    # The model and its tied weights are untouched by saving.
    assert model.head.weight is model.embed.weight


def test_save_model_refuses_bad_input(tmp_path):
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 2)
    afile = tmp_path / "weights.txt"
    afile.write_text("x")
    cases = [
        ({"model": "net"}, TypeError, "model='str'"),
        ({"save_directory": 3}, TypeError, "save_directory=3"),
        ({"max_shard_size": 0}, ValueError, "max_shard_size=0"),
        ({"max_shard_size": "10XB"}, ValueError, "max_shard_size='10XB'"),
        ({"max_shard_size": 1.5}, TypeError, "max_shard_size=1.5"),
        ({"safe_serialization": "yes"}, TypeError, "safe_serialization='yes'"),
        ({"save_directory": afile}, NotADirectoryError, "it is a file"),
    ]
    for kwargs, error, words in cases:
        arguments = {"model": model, "save_directory": tmp_path / "out", **kwargs}
        with pytest.raises(error, match=words):
            accelerator.save_model(**arguments)
    with torch.device("meta"):
        ghost = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="'weight'.*meta device"):
        accelerator.save_model(ghost, tmp_path / "ghost")
    assert not (tmp_path / "out").exists() and not (tmp_path / "ghost").exists()


@pytest.mark.parametrize(
    ("size", "expected"),
    [(7, 7), ("10GB", 10**10), ("500MB", 5 * 10**8), (" 1.5 kb ", 1500), ("2GiB", 2**31)],
)
def test_parse_shard_size(size, expected):
    assert parse_shard_size(size) == expected


@pytest.mark.parametrize("size", [-1, True, None, "GB", "10", "1e3MB", "0.0001KB"])
def test_parse_shard_size_refuses(size):
    with pytest.raises((TypeError, ValueError), match="max_shard_size="):
        parse_shard_size(size)


def _training_setup():
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return accelerator, model, optimizer


def test_save_and_load_state_pre_hooks(tmp_path):
    accelerator, model, _ = _training_setup()
    original = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []

    def record(models, weights, output_dir):
        calls.append(("record", models, [dict(w) for w in weights], output_dir))
        assert os.path.isdir(output_dir)

    def double(models, weights, output_dir):
        calls.append(("double",))
        weights[0]["weight"] = weights[0]["weight"] * 2

    first = accelerator.register_save_state_pre_hook(record)
    second = accelerator.register_save_state_pre_hook(double)
    directory = str(tmp_path / "ckpt")
    accelerator.save_state(directory)
    assert [c[0] for c in calls] == ["record", "double"]
    _, models, weights, output_dir = calls[0]
    assert models == [model] and output_dir == directory
    _assert_same(weights[0], original)
    saved = load_file(os.path.join(directory, "model.safetensors"))
    assert torch.equal(saved["weight"], original["weight"] * 2)
    assert torch.equal(model.weight, original["weight"])  # the model itself is not changed

    loads = []

    def skip_model(models, input_dir):
        loads.append((list(models), input_dir))
        models.clear()  # this hook "loads" the model itself

    handle = accelerator.register_load_state_pre_hook(skip_model)
    accelerator.load_state(directory)
    assert loads == [([model], directory)]
    assert torch.equal(model.weight, original["weight"])  # the file was not read into it
    handle.remove()
    accelerator.load_state(directory)
    assert len(loads) == 1 and torch.equal(model.weight, original["weight"] * 2)

    first.remove()
    second.remove()
    calls.clear()
    accelerator.save_state(directory)
    assert calls == []
    assert torch.equal(
        load_file(os.path.join(directory, "model.safetensors"))["weight"], model.weight
    )


def test_a_save_hook_that_removes_weights_pairs_with_a_load_hook(tmp_path):
    accelerator, model, _ = _training_setup()
    accelerator.register_save_state_pre_hook(lambda models, weights, path: weights.clear())
    directory = str(tmp_path / "ckpt")
    accelerator.save_state(directory)
    assert not any(name.startswith("model") for name in os.listdir(directory))
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin"):
        accelerator.load_state(directory)
    accelerator.register_load_state_pre_hook(lambda models, path: models.clear())
    accelerator.load_state(directory)  # nothing to read: fine
    model.weight.grad = torch.ones_like(model.weight)
    accelerator.unscale_gradients()  # no fp16 scaler: nothing to do
    assert (
        torch.equal(model.weight.grad, torch.ones_like(model.weight)) and not accelerator.native_amp
    )
    with pytest.raises(TypeError, match="hook=3"):
        accelerator.register_save_state_pre_hook(3)
    with pytest.raises(TypeError, match="hook='f'"):
        accelerator.register_load_state_pre_hook("f")
    with pytest.raises(TypeError, match="output_dir=5"):
        accelerator.save_state(5)
    with pytest.raises(FileNotFoundError, match="input_dir="):
        accelerator.load_state(str(tmp_path / "missing"))


def test_unscale_gradients_divides_by_the_fp16_scale_once():
    handler = GradScalerKwargs(init_scale=1024.0)
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[handler])
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.backward(model(torch.ones(1, 2)).sum())
    scaled = model.weight.grad.clone()
    accelerator.unscale_gradients(optimizer=optimizer)
    torch.testing.assert_close(model.weight.grad, scaled / 1024)
    accelerator.unscale_gradients()  # already unscaled: nothing more
    accelerator.clip_grad_norm_(model.parameters(), 100.0)
    torch.testing.assert_close(model.weight.grad, scaled / 1024)
    optimizer.step()
    with pytest.raises(TypeError, match="optimizer='adam'"):
        accelerator.unscale_gradients("adam")
    with pytest.raises(TypeError, match="optimizer="):
        accelerator.unscale_gradients([optimizer, model])


def test_one_process_no_ops_triggers_and_settings():
    accelerator = Accelerator(mixed_precision="bf16")
    model = torch.nn.Linear(2, 2)
    with accelerator.join_uneven_inputs([model], even_batches=False):
        pass  # no Join in one process: the model need not be Joinable
    with accelerator.trigger_sync_in_backward(model):
        pass
    with pytest.raises(TypeError, match="joinables="):
        with accelerator.join_uneven_inputs(model):
            pass
    with pytest.raises(TypeError, match="even_batches='no'"):
        with accelerator.join_uneven_inputs([model], even_batches="no"):
            pass
    with pytest.raises(TypeError, match="model='int'"):
        with accelerator.trigger_sync_in_backward(3):
            pass
    assert accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert accelerator.check_trigger() is True and accelerator.check_trigger() is False
    assert accelerator.verify_device_map(model) is False
    model.hf_device_map = {"": "cpu", "1": "disk"}
    assert accelerator.verify_device_map(torch.nn.Sequential(model)) is True
    with pytest.raises(TypeError, match="model="):
        accelerator.verify_device_map({"a": 1})
    assert accelerator.native_amp is True
    assert accelerator.use_stateful_dataloader is False and accelerator.should_save_model
    assert accelerator.deepspeed_plugin is None and accelerator.parallelism_config is None
    assert accelerator.torch_device_mesh is None and accelerator.is_fsdp2 is False
    assert accelerator.is_composable_parallelism_enabled is False

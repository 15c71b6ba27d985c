"""GradientState: shared settings, sync flag and the data loaders being iterated."""

from __future__ import annotations

import gc

import pytest

from notebook_launcher.state import GradientState
from notebook_launcher.utils.kwargs import GradientAccumulationPlugin


class Loader:
    """What GradientState reads from a data loader."""

    def __init__(self, end=False, remainder=0):
        self.end_of_dataloader = end
        self.remainder = remainder


def test_defaults_without_a_plugin():
    state = GradientState()
    assert state.initialized
    assert state.sync_gradients is True
    assert (state.num_steps, state.adjust_scheduler, state.sync_with_dataloader) == (1, False, True)
    assert state.plugin_kwargs == {}
    assert state.active_dataloader is None and not state.in_dataloader
    assert state.dataloader_references == [None]
    assert state.end_of_dataloader is False and state.remainder == -1
    assert "Sync Gradients: True" in repr(state)


def test_plugin_settings_and_replacement():
    state = GradientState(GradientAccumulationPlugin(num_steps=4, sync_with_dataloader=False))
    assert state.plugin_kwargs == {"num_steps": 4, "sync_with_dataloader": False}
    assert (state.num_steps, state.sync_with_dataloader) == (4, False)
    assert GradientState().num_steps == 4  # shared
    GradientState(GradientAccumulationPlugin(num_steps=2, adjust_scheduler=False))
    assert state.plugin_kwargs == {"num_steps": 2, "adjust_scheduler": False}


def test_dataloaders_register_and_leave():
    state = GradientState()
    outer, inner = Loader(), Loader(end=True, remainder=3)
    state._add_dataloader(outer)
    assert state.in_dataloader and state.active_dataloader is outer
    state._add_dataloader(inner)
    assert state.active_dataloader is inner
    assert state.end_of_dataloader is True and state.remainder == 3
    state._remove_dataloader(inner)
    assert state.active_dataloader is outer and state.end_of_dataloader is False
    state._remove_dataloader(outer)
    assert not state.in_dataloader


def test_dataloaders_are_held_weakly():
    state = GradientState()
    state._add_dataloader(Loader())
    gc.collect()
    assert state.dataloader_references == [None, None]
    assert not state.in_dataloader


def test_sync_flag_and_argument_checks():
    state = GradientState()
    state._set_sync_gradients(False)
    assert GradientState().sync_gradients is False
    with pytest.raises(TypeError, match="sync_gradients=1"):
        state._set_sync_gradients(1)
    with pytest.raises(
        TypeError, match="gradient_accumulation_plugin=.*GradientAccumulationPlugin"
    ):
        GradientState({"num_steps": 2})
    with pytest.raises(TypeError, match="dataloader=None"):
        state._add_dataloader(None)
    state.is_xla_gradients_synced = True
    assert state.is_xla_gradients_synced


def test_plugin_validation():
    with pytest.raises(ValueError, match="num_steps=0"):
        GradientAccumulationPlugin(num_steps=0)
    with pytest.raises(TypeError, match="sync_each_batch='no'"):
        GradientAccumulationPlugin(num_steps=1, sync_each_batch="no")


def test_reset():
    GradientState()._set_sync_gradients(False)
    GradientState._reset_state()
    assert GradientState().sync_gradients is True

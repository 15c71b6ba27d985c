"""The Accelerator and its parts: each part has one job, and the Accelerator's methods are theirs.

``core`` is the Accelerator (its settings and state); ``preparation`` prepares models,
optimizers, schedulers and loaders; ``gradients`` is the gradient step (backward, accumulation,
scaling, clipping); ``processes`` reaches the other processes (collectives, joins, triggers);
``checkpoints`` saves and loads training states and models (``files``: their layout on disk);
``trackers`` records a run (experiment trackers, the profiler). ``optimizer``, ``scheduler`` and
``precision`` are the wrappers the parts put around the user's objects.
"""

from __future__ import annotations

from .configurations import DataLoaderConfiguration, ProjectConfiguration
from .core import Accelerator
from .optimizer import AcceleratedOptimizer
from .scheduler import AcceleratedScheduler
from .trackers import GeneralTracker

__all__ = [
    "AcceleratedOptimizer",
    "AcceleratedScheduler",
    "Accelerator",
    "DataLoaderConfiguration",
    "GeneralTracker",
    "ProjectConfiguration",
]

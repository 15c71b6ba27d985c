"""Sessions: a worker group that stays alive across cells, its calls and what a failed call raises."""

from .core import Session

__all__ = ["Session"]

"""``python -m notebook_launcher.run module:function args...``: a notebook's training function as
torchrun's script. The command lives in :mod:`notebook_launcher.worker.torchrun`."""

from __future__ import annotations

import sys

from .worker.torchrun import load_function, main, parse_argument

__all__ = ["load_function", "main", "parse_argument"]

if __name__ == "__main__":
    sys.exit(main())

"""Names of notebook cells as IPython shows them in tracebacks."""

from __future__ import annotations

import sys


def code_name(path: str) -> str:
    """A notebook cell's code file as IPython names it ("Cell In[3]"), else the path itself."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    number = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(path)
    return f"Cell In[{number}]" if number is not None else path

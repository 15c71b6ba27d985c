"""Names of notebook cells as IPython shows them in tracebacks."""

from __future__ import annotations

import sys

# Names of cells this process did not run itself (file -> "Cell In[7]"): a rank learns them with
# the code it is sent (a session's cells, a function shipped by value), which its own copy of
# IPython, if it has one, does not know.
NAMES: dict[str, str] = {}


def code_name(path: str) -> str:
    """A notebook cell's code file as IPython names it ("Cell In[3]"), else the path itself."""
    known = NAMES.get(path)
    if known is not None:
        return known
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    number = getattr(getattr(shell, "compile", None), "_filename_map", {}).get(path)
    return f"Cell In[{number}]" if number is not None else path

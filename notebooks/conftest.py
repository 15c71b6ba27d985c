"""nbval compares what a launch leaves in its cell by its text, not its HTML.

The HTML of a launch's final panel says how long the run took and where a rank that was stopped
had got to; its one-line text says neither, and it is what nbval compares. The file beside this
one tells nbval to read every such panel's HTML as the same placeholder (unless the command line
names a file of its own with --nbval-sanitize-with).
"""

from pathlib import Path


def pytest_configure(config):
    if getattr(config.option, "nbval_sanitize_with", "unset") is None:
        config.option.nbval_sanitize_with = str(Path(__file__).with_name("nbval-sanitize.cfg"))

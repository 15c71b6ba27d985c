"""What several test folders share: worker stand-ins, process-tree checks, a real kernel driven
through jupyter_client, JupyterLab in Chromium, and the loopback Ray cluster. Found through
pytest's ``pythonpath`` (pyproject.toml)."""

# Sourced by the scripts here: dev_python prints the interpreter to use on a development machine:
# $PYTHON when set, else the project's .venv (run from the repository root), else python3.
dev_python() {
    if [ -n "${PYTHON:-}" ]; then
        echo "$PYTHON"
    elif [ -x .venv/bin/python ]; then
        echo .venv/bin/python
    else
        echo python3
    fi
}

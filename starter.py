"""The waitstate CLI, run from a checkout: `python starter.py ...` is `.venv/bin/waitstate ...`
(waitstate/cli/main.py has the commands)."""

import sys

try:
    from waitstate.cli.main import main
except ModuleNotFoundError as missing:  # a Python without the project: say so in one line
    sys.exit(
        f"error: {sys.executable} has no {missing.name!r}: waitstate is installed in .venv "
        "(`make install`); run the CLI as .venv/bin/waitstate"
    )

if __name__ == "__main__":
    main()

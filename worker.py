"""The waitstate worker, run from a checkout: `python worker.py ...` is `.venv/bin/waitstate-worker
...` (waitstate/worker.py wires the apps into the workflows and activities)."""

from waitstate.worker import main

if __name__ == "__main__":
    main()

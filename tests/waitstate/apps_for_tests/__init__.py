"""Small apps for tests/waitstate/test_apps.py and test_worker_start.py, each exporting an `App`
named `app` and declared only through waitstate's public API. Some are wrong on purpose; each
module's docstring says how."""

"""The README's commands, pasted as written into a new shell after `make demo`: each shell block
in a `bash` of its own, from the checkout, with the machine's environment but none of this
test's, a home directory of its own, and where the services listen (its own ports and state directory, as a
user's second copy would have). The file the README shows is written where it says. `make test`
itself is the one command not run: it is what runs this test."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs import README, ROOT, files_shown, page
from tests.rigs import Services
from tests.tiers import SUBPROCESS, TEMPORAL, needs

NOT_RUN = {"make test": "it runs this test"}
# What a new shell does not have: a virtualenv, a variable of ours or of the SDKs ours read, and
# what pytest set in this process. The machine's own (certificates, locale, proxies) it keeps.
NOT_IN_A_NEW_SHELL = (
    "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_", "WAITSTATE_", "TEMPORAL_", "GATEWAY_",
    "DEMO_", "APPROVALS_", "OPENAI_", "ANTHROPIC_", "OTEL_", "AWS_",
)  # fmt: skip
BLOCK_TIMEOUT = 300


def blocks() -> list[str]:
    """The README's shell blocks, in order."""
    return re.findall(r"```sh\n(.*?)```", page(README), re.DOTALL)


def commands(block: str) -> list[str]:
    """A block's commands, one a line, their comments dropped."""
    lines = (line.split("  #", 1)[0].strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class Shell:
    """New shells in the checkout, with `home` as the user's home directory and the services
    listening where `services` says."""

    def __init__(self, home: Path, services: Services) -> None:
        self.home = home
        path = os.pathsep.join(
            part
            for part in os.environ["PATH"].split(os.pathsep)
            if not Path(part, "activate").exists()  # no virtualenv's bin/
        )
        ours = ("TEMPORAL_", "WAITSTATE_STATE_DIR", "GATEWAY_PORT", "DEMO_", "WAITSTATE_WORKER_")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_IN_A_NEW_SHELL)}
        self.env.update({k: v for k, v in services.env.items() if k.startswith(ours)})
        self.env.update(PATH=path, HOME=str(home))

    def run(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-e", "-c", script], cwd=ROOT, env=self.env,
            capture_output=True, text=True, timeout=BLOCK_TIMEOUT,
        )  # fmt: skip


@pytest.fixture(scope="module")
@needs(TEMPORAL, SUBPROCESS)
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    services = Services(tmp_path_factory.mktemp("state"))
    shell = Shell(tmp_path_factory.mktemp("home"), services)
    try:
        yield shell
    finally:
        down = shell.run("make down")
        assert down.returncode == 0, down.stderr


def test_every_shell_block_of_the_readme_runs_as_written_in_a_new_shell(shell: Shell) -> None:
    done: list[str] = []
    for block in blocks():
        script = "\n".join(c for c in commands(block) if c not in NOT_RUN)
        ran = shell.run(script)
        assert ran.returncode == 0, f"{script!r} failed:\n{ran.stdout}\n{ran.stderr}"
        done.append(ran.stdout)
        if "mkdir -p ~/desks-app/desks" in script:
            # "and this as ~/desks-app/desks/app.py": the file the README shows next.
            for path, text in files_shown(page(README)).items():
                (shell.home / "desks-app" / path).write_text(text)

    demo, conversation, _, own_agent = done
    # The export waited for its webhook; the refund for its approval, given after 5 s.
    assert "tool  start_export" in demo and "tool  issue_refund" in demo
    assert demo.count("completed after") == 2
    assert "approved by" in demo
    # `make up` found the demo's worker and restarted it for the app asked for.
    assert (
        "worker runs with other settings (PYTHONPATH, WAITSTATE_APPS): restarting it" in own_agent
    )
    assert "Berlin" in own_agent
    assert conversation.count("thread maths") == 2
    assert "m1 replied: What is 17 * 23?" in conversation
    assert "m2 replied: And times 2?" in conversation


def test_the_readme_runs_every_shell_block_this_test_knows() -> None:
    # Above: the two commands, a conversation, the own agent's package, serving it. A new block
    # is run too; this says to check what it prints.
    assert len(blocks()) == 4


def test_every_make_target_the_readme_names_exists() -> None:
    named = set(re.findall(r"`make ([a-z-]+)", page(README)))
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))

    assert named and named - targets == set()


def test_a_cli_started_outside_its_environment_says_so_in_one_line(shell: Shell) -> None:
    ran = shell.run("python3 starter.py list")

    assert ran.returncode == 1
    assert ran.stderr.count("\n") == 1 and ".venv/bin/waitstate" in ran.stderr
    assert "Traceback" not in ran.stderr

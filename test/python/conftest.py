"""The Python SDK suite's stack: test/e2e/cmd/stack (the fake model with its control API, the
codeinterp server with real bubblewrap sandboxes, a real Envoy 1.40 running envoy/envoy.yaml),
built and started once per session. If it cannot be built or started the tests fail, they are
never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import openai
import pytest

from fake_model import FakeModel

ROOT = Path(__file__).resolve().parents[2]  # the module root (go.mod)
BUILD_TIMEOUT = 600  # seconds: a cold Go build cache on a busy machine
READY_TIMEOUT = 120  # seconds: Envoy's start and the sandbox warm pool
STOP_TIMEOUT = 60  # seconds: the server's grace (10s) and deleting the sandboxes
# seconds: the stack's ptc.pause_timeout, short so that test_ptc sees a pause abandoned, long
# enough for the suite's resumes, which follow their pause at once.
PTC_PAUSE_TIMEOUT = 4


@dataclass
class Stack:
    envoy_url: str
    control_url: str
    model_url: str
    extproc_addr: str
    api_addr: str


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as e:
        return f"(cannot read {path}: {e})"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The running stack. Its stdin is a pipe: closing it stops everything, and the stack exits
    non-zero if anything did not stop cleanly or a process of it is left, which fails the
    session."""
    tmp = tmp_path_factory.mktemp("stack")
    # In the module's bin/ (git-ignored, removed by make clean): go build skips the link when
    # the binary there is up to date.
    binary = ROOT / "bin" / "e2e-stack"
    go = os.environ.get("GO", "go")
    build = subprocess.run([go, "build", "-o", str(binary), "./test/e2e/cmd/stack"], cwd=ROOT,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if build.returncode != 0:
        pytest.fail(f"build test/e2e/cmd/stack: exit {build.returncode}\n{build.stdout}{build.stderr}", pytrace=False)

    log = tmp / "stack.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen([str(binary), f"-ptc-pause-timeout={PTC_PAUSE_TIMEOUT}s"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr)
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT)
    if not line or not line[0]:
        timed_out = not line  # else stdout ended: the stack exited
        proc.kill()
        proc.wait()
        why = f"no ready line in {READY_TIMEOUT}s" if timed_out else f"exit {proc.returncode}"
        pytest.fail(f"the stack did not start ({why}):\n{_tail(log)}", pytrace=False)
    ready = json.loads(line[0])
    try:
        yield Stack(**ready)
    finally:
        proc.stdin.close()
        try:
            rc = proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"the stack did not stop within {STOP_TIMEOUT}s of its stdin closing:\n{_tail(log)}",
                        pytrace=False)
        proc.stdout.close()
        if rc != 0:
            pytest.fail(f"the stack stopped with exit {rc}:\n{_tail(log)}", pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    setattr(item, "rep_" + rep.when, rep)
    return rep


@pytest.fixture
def model(stack: Stack, request: pytest.FixtureRequest) -> Iterator[FakeModel]:
    """The fake model, reset for the test; a test that passed must have used every answer it
    scripted."""
    m = FakeModel(stack.control_url)
    m.reset()
    yield m
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.passed:
        assert m.pending() == 0, f"{request.node.name}: every scripted answer was used"
    m.reset()


@pytest.fixture
def make_client(stack: Stack):
    """make_client(api_key, base="/v1", **kwargs) returns an openai.OpenAI client of the stack's
    Envoy with no retries (unless kwargs say otherwise); the clients are closed after the test."""
    clients: list[openai.OpenAI] = []

    def make(api_key: str = "sk-python", base: str = "/v1", **kwargs) -> openai.OpenAI:
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 60)
        c = openai.OpenAI(base_url=stack.envoy_url + base, api_key=api_key, **kwargs)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(make_client) -> openai.OpenAI:
    return make_client()

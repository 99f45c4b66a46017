"""The Vercel AI SDK (`ai` + `@ai-sdk/openai`, pinned in test/js/package.json) through the real
Envoy: a second turn after a code run, with the SDK's defaults (store: true), names the first
turn's code call by `item_reference` to the `ci_…` id codeinterp minted. codeinterp resolves it
into what the model saw, and the code of the second turn runs in the first turn's container."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import fake_model as fm
from helpers import output_of

JS = Path(__file__).resolve().parents[1] / "js"


@pytest.mark.parametrize("mode", ["plain", "stream"])
def test_vercel_second_turn_after_a_code_run(mode: str, model: fm.FakeModel, stack) -> None:
    node = shutil.which("node")
    assert node, "node is installed (make deps)"
    assert (JS / "node_modules" / "ai").is_dir(), "test/js's packages are installed (make deps)"
    answers = [fm.responses(fm.run_code("call_1", "x = 41\nprint(x)")),
               fm.responses(fm.message("x is 41.")),
               fm.responses(fm.run_code("call_2", "print(x + 1)")),
               fm.responses(fm.message("x + 1 is 42."))]
    # Streamed: the client's requests (each turn's first round) are answered with the model's
    # event stream, the follow-ups codeinterp sends with JSON, as test_responses does.
    model.script(fm.RESPONSES, *[fm.responses_stream(a) if mode == "stream" and i % 2 == 0 else fm.ok(a)
                                 for i, a in enumerate(answers)])
    run = subprocess.run([node, str(JS / "vercel.mjs"), stack.envoy_url + "/v1", "sk-vercel-" + mode, mode],
                         cwd=JS, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"the Vercel AI SDK failed:\n{run.stderr}"
    out = json.loads(run.stdout)
    assert out["first"]["text"] == "x is 41." and out["second"]["text"] == "x + 1 is 42.", out
    first_calls = out["first"]["toolCalls"]
    assert [c["toolName"] for c in first_calls] == ["code_interpreter"], f"the SDK sees a hosted code call: {out}"
    assert first_calls[0]["toolCallId"].startswith("ci_") and first_calls[0]["providerExecuted"], out

    reqs = model.requests(fm.RESPONSES)
    assert len(reqs) == 4, [r.body for r in reqs]
    sent = reqs[2].json()["input"]
    refs = [i for i in sent if i.get("type") == "item_reference"]
    assert not any(r["id"].startswith("ci_") for r in refs), f"no reference to codeinterp's ids reaches the model: {sent}"
    assert output_of(reqs[2], first_calls[0]["toolCallId"]) == "41\n", "the reference became the call and its output"
    assert output_of(reqs[3], "call_2") == "42\n", "the second turn's code ran in the first turn's container"

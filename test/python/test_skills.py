"""Skills (issue 30) through Envoy and codeinterp, as the openai Python SDK sees them: a skill uploaded
with client.skills.create and an inline zip, both on the shell tool's container_auto, read and run by
shell commands, plain, with stream=True and with client.responses.stream (whose final response must
equal the plain answer); hostile zips refused in OpenAI's error shape."""

from __future__ import annotations

import base64
import io
import zipfile

import openai
import pytest

import fake_model as fm
from test_responses import VARIANTS
from test_shell import run_shell, shell_items, shell_normalized

WORD_SKILL = "---\nname: py-word\ndescription: Knows the secret word.\n---\nThe secret word is kestrel.\n"


def skill_zip(files: dict[str, str], modes: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED  # a ZipInfo is stored, not deflated, by default
            info.external_attr = ((modes or {}).get(name, 0o644) | 0o100000) << 16
            zf.writestr(info, data)
    return buf.getvalue()


def test_skills_on_container_auto(model: fm.FakeModel, client, subtests) -> None:
    uploaded = client.skills.create(files=("py-word.zip", skill_zip(
        {"py-word/SKILL.md": WORD_SKILL, "py-word/scripts/say.sh": "#!/bin/sh\necho said kestrel\n"},
        {"py-word/scripts/say.sh": 0o755}), "application/zip"))
    try:
        assert uploaded.id.startswith("skill_"), f"a skill id: {uploaded.id}"
        assert uploaded.name == "py-word" and uploaded.description == "Knows the secret word.", "from SKILL.md's front matter"
        inline = base64.b64encode(skill_zip({"hue/SKILL.md": "---\nname: hue\ndescription: Knows the hue.\n---\nThe hue is ochre.\n"})).decode()
        shell = {"type": "shell", "environment": {"type": "container_auto", "skills": [
            {"type": "skill_reference", "skill_id": uploaded.id},
            {"type": "inline", "name": "hue", "description": "Knows the hue.",
             "source": {"type": "base64", "media_type": "application/zip", "data": inline}},
        ]}}
        got = {}
        for variant, send in VARIANTS.items():
            with subtests.test(variant=variant):
                model.reset()
                model.script(fm.RESPONSES,
                             fm.ok(fm.responses(run_shell("call_sk", "cat /home/oai/skills/*/SKILL.md",
                                                          "cd /home/oai/skills/py-word-* && ./scripts/say.sh"), usage=(10, 5))),
                             fm.ok(fm.responses(fm.message("the word is kestrel, the hue ochre"), usage=(20, 7))))
                resp = send(client, {"model": fm.MODEL, "input": "use the skills", "tools": [shell]})
                reqs = model.requests(fm.RESPONSES)
                assert len(reqs) == 2, "requests the model got"
                desc = next(t["description"] for t in reqs[0].json()["tools"] if t["name"] == "shell")
                assert "- py-word: Knows the secret word. (path: /home/oai/skills/py-word-" in desc, f"the uploaded skill announced: {desc}"
                assert "- hue: Knows the hue. (path: /home/oai/skills/hue-" in desc, f"the inline skill announced: {desc}"
                assert [o.type for o in resp.output] == ["shell_call", "shell_call_output", "message"], "output items"
                _, out = shell_items(resp, 0)
                assert "The secret word is kestrel." in out.output[0].stdout, "the uploaded skill's SKILL.md read"
                assert "The hue is ochre." in out.output[0].stdout, "the inline skill's SKILL.md read"
                assert out.output[1].stdout == "said kestrel\n", "the skill's script, executable in its zip, runs"
                assert model.pending() == 0, f"{variant}: every scripted answer was used"
                got[variant] = shell_normalized(resp)
        assert set(got) == set(VARIANTS), "a variant failed (its subtest says why)"
        assert got["create-stream"] == got["plain"], "create(stream=True) vs plain"
        assert got["stream-helper"] == got["plain"], "responses.stream's final response vs plain"
    finally:
        client.skills.delete(uploaded.id)


def test_skills_on_container_reference(model: fm.FakeModel, client) -> None:
    """A container created with a skill (client.containers.create), named by the shell tool's
    container_reference environment: the skill is mounted, read-only, and announced."""
    uploaded = client.skills.create(files=("py-word.zip", skill_zip({"py-word/SKILL.md": WORD_SKILL}), "application/zip"))
    ct = client.containers.create(name="py-skilled", skills=[{"type": "skill_reference", "skill_id": uploaded.id}])
    try:
        model.script(fm.RESPONSES,
                     fm.ok(fm.responses(run_shell("call_ref", "cat /home/oai/skills/py-word-*/SKILL.md",
                                                  "rm -f /home/oai/skills/py-word-*/SKILL.md || echo refused"), usage=(10, 5))),
                     fm.ok(fm.responses(fm.message("kestrel"), usage=(20, 7))))
        resp = client.responses.create(model=fm.MODEL, input="use the container's skill", tools=[
            {"type": "shell", "environment": {"type": "container_reference", "container_id": ct.id}}])
        call, out = shell_items(resp, 0)
        assert call.environment.container_id == ct.id, "the container named"
        assert "The secret word is kestrel." in out.output[0].stdout, "the container's skill read"
        assert "refused" in out.output[1].stdout and "Read-only file system" in out.output[1].stderr, "the skill is read-only"
        desc = next(t["description"] for t in model.requests(fm.RESPONSES)[0].json()["tools"] if t["name"] == "shell")
        assert "- py-word: Knows the secret word. (path: /home/oai/skills/py-word-" in desc, f"the container's skill announced: {desc}"
    finally:
        client.containers.delete(ct.id)
        client.skills.delete(uploaded.id)


@pytest.mark.parametrize("name,files,status,words", [
    ("traversal", {"h/SKILL.md": WORD_SKILL, "h/../../etc/x": "x"}, 400, "climbs out"),
    ("absolute", {"h/SKILL.md": WORD_SKILL, "/etc/x": "x"}, 400, "absolute"),
    ("bomb", {"h/SKILL.md": WORD_SKILL, "h/zeros": "\x00" * (8 << 20)}, 400, "zip bombs"),
    ("no SKILL.md", {"h/README.md": WORD_SKILL}, 400, "no SKILL.md"),
])
def test_hostile_skill_zips(client, name: str, files: dict[str, str], status: int, words: str) -> None:
    with pytest.raises(openai.APIStatusError) as e:
        client.skills.create(files=(name + ".zip", skill_zip(files), "application/zip"))
    assert e.value.status_code == status, f"{name}: status"
    body = e.value.body
    assert isinstance(body, dict) and body.get("type") == "invalid_request_error", f"{name}: OpenAI's error shape: {body}"
    assert words in body.get("message", ""), f"{name}: the message says why: {body}"
    assert not [s for s in client.skills.list() if s.name == "h"], f"{name}: nothing is left of it"

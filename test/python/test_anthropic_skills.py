"""client.beta.skills of the anthropic SDK on /v1/skills (issue 29, Skills): Anthropic's shapes when the
call carries anthropic-version, as the SDK always sends it; a skill made from the files of its folder,
with a display_name of its own, given a version (ids epoch-like, as natively), named by a Messages
request's container.skills whose code reads its SKILL.md at /skills/<name>/, then deleted."""

from __future__ import annotations

import time

import anthropic
import pytest

import fake_model as fm
from conftest import Stack
from test_messages import MESSAGES, MODEL, TOOL, answer


def skill_md(desc: str) -> bytes:
    return f"---\nname: py-heron\ndescription: {desc}\n---\nThe bird is a heron.\n".encode()


def epoch_like(version_id: str) -> bool:
    """Whether version_id is shaped as Anthropic's: microseconds since the Unix epoch, within the hour."""
    return version_id.isdigit() and abs(int(version_id) / 1e6 - time.time()) < 3600


def test_skills_api_in_anthropic_shapes(stack: Stack, model: fm.FakeModel) -> None:
    with anthropic.Anthropic(base_url=stack.envoy_url, api_key="sk-ant-skills", max_retries=0, timeout=60) as c:
        made = c.beta.skills.create(files=[("py-heron/SKILL.md", skill_md("Knows the bird."), "text/markdown")],
                                    display_name="Heron Finder")
        try:
            assert (made.type, made.display_name, made.source.type) == ("skill", "Heron Finder", "custom"), f"the skill: {made}"
            first = made.latest_version_id
            assert epoch_like(first), f"the version id: {first}"
            assert not made.model_extra, f"no field the SDK does not know: {made.model_extra}"
            assert made.id in [s.id for s in c.beta.skills.list(limit=100).data], "listed"
            assert c.beta.skills.retrieve(made.id).display_name == "Heron Finder", "retrieved, its display_name kept"

            v2 = c.beta.skills.versions.create(made.id, files=[("py-heron/SKILL.md", skill_md("Knows the new bird."), "text/markdown")])
            assert (v2.type, v2.skill_id, v2.name, v2.description) == \
                ("skill_version", made.id, "py-heron", "Knows the new bird."), f"the version: {v2}"
            assert epoch_like(v2.id) and int(v2.id) > int(first), f"a later version id: {v2.id} after {first}"
            assert not v2.model_extra, f"no field the SDK does not know: {v2.model_extra}"
            assert [v.id for v in c.beta.skills.versions.list(made.id).data] == [v2.id, first], "the versions, newest first"
            assert c.beta.skills.versions.retrieve(first, skill_id=made.id).description == "Knows the bird."
            assert c.beta.skills.versions.retrieve("latest", skill_id=made.id).id == v2.id, "latest"

            model.script(MESSAGES,
                         fm.ok(answer({"type": "tool_use", "id": "toolu_psk1", "name": "code_execution",
                                       "input": {"code": "print(open('/skills/py-heron/SKILL.md').read(), end='')"}}, usage=(10, 5))),
                         fm.ok(answer({"type": "text", "text": "A heron."}, usage=(20, 3))))
            msg = c.messages.create(model=MODEL, max_tokens=256, tools=[TOOL],
                                    container={"skills": [{"type": "custom", "skill_id": made.id}]},
                                    messages=[{"role": "user", "content": "Which bird?"}])
            result = msg.content[1]
            assert result.type == "code_execution_tool_result", f"the result block: {msg.content}"
            assert result.content.stdout == skill_md("Knows the new bird.").decode(), f"the latest SKILL.md: {result.content}"
            assert [(s.skill_id, s.version) for s in msg.container.skills] == [(made.id, v2.id)], f"the echo: {msg.container}"

            with pytest.raises(anthropic.BadRequestError) as e:
                c.beta.skills.create(files=[("py-heron/SKILL.md", skill_md("x"), "text/markdown")], display_name="x" * 256)
            assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error", e.value.body

            deleted_version = c.beta.skills.versions.delete(first, skill_id=made.id)
            assert (deleted_version.id, deleted_version.type) == (first, "skill_version_deleted"), f"{deleted_version}"
        finally:
            deleted = c.beta.skills.delete(made.id)
        assert (deleted.id, deleted.type) == (made.id, "skill_deleted"), f"deleted: {deleted}"
        with pytest.raises(anthropic.NotFoundError) as e:
            c.beta.skills.retrieve(made.id)
        assert e.value.body["error"]["type"] == "not_found_error", f"a deleted skill: {e.value.body}"

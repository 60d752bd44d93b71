"""extract_json: the first JSON object/array of a reply, fenced or bare, optionally validated."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from phi_core import extract_json
from phi_core.errors import SchemaMismatchError
from phi_core.loop import LoopResult
from phi_core.types import AssistantMessage, TextContent, ToolCall


class Answer(BaseModel):
    city: str
    population: int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! ```json\n{"a": 1}\n``` Anything else?', {"a": 1}),
        ("```\n[1, 2, 3]\n```", [1, 2, 3]),
        ('The result is {"a": {"b": [1, 2]}} and {"c": 3}.', {"a": {"b": [1, 2]}}),
        ('Broken {"a": 1,} then fine {"b": 2}', {"b": 2}),
        ('Use {braces} like {"ok": true}', {"ok": True}),
        ('```json\n{"é": "ü"}\n```', {"é": "ü"}),
    ],
)
def test_the_first_valid_object_or_array_wins(text: str, expected: object) -> None:
    assert extract_json(text) == expected


def test_messages_and_loop_results_work_and_a_respond_json_call_is_preferred() -> None:
    message = AssistantMessage(
        content=[
            TextContent(text='ignored {"x": 0}'),
            ToolCall(id="1", name="respond_json", arguments={"x": 1}),
        ]
    )
    assert extract_json(message) == {"x": 1}
    split = AssistantMessage(
        content=[TextContent(text='{"city": "Oslo", '), TextContent(text='"population": 709000}')]
    )
    result = LoopResult(loop_id="l", messages=[split])
    assert extract_json(result, Answer) == Answer(city="Oslo", population=709000)


def test_a_schema_mismatch_says_what_is_wrong() -> None:
    with pytest.raises(
        SchemaMismatchError, match=r"population: Input should be a valid integer"
    ) as info:
        extract_json('{"city": "Oslo", "population": "many"}', Answer)
    assert info.value.reason == "schema mismatch"
    with pytest.raises(SchemaMismatchError, match="'a' is a required property"):
        extract_json('{"b": 1}', {"type": "object", "required": ["a"]})


def test_no_json_is_a_clear_error_with_the_start_of_the_text() -> None:
    with pytest.raises(
        SchemaMismatchError, match=r"not valid JSON.*'I cannot answer that.'"
    ) as info:
        extract_json("I cannot answer that.")
    assert info.value.reason == "not valid JSON"
    assert extract_json("42", int) == 42  # with a schema a bare scalar counts


def test_hostile_text_is_bounded() -> None:
    with pytest.raises(SchemaMismatchError):
        extract_json("[" * 50_000 + "{" * 50_000)

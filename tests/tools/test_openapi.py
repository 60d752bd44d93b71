"""OpenAPI tools against a local HTTP server and a petstore-like spec (tests/tools/data)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from phi_core import BasicAgent
from phi_core.cancel import CancelToken
from phi_core.errors import OpenApiError, UserError
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.testing import Reply, ScriptedProvider, call
from phi_core.tools import (
    OpenApiAuth,
    OpenApiConfig,
    OpenApiToolAdapter,
    OperationFilter,
    ToolContext,
    ToolResult,
)
from phi_core.types import TextContent

from .petstore_server import DATA, Petstore, petstore

SPEC = DATA / "petstore.yaml"
SPEC31 = DATA / "petstore31.json"


@pytest.fixture
def store() -> Iterator[Petstore]:
    with petstore() as running:
        yield running


def ctx() -> ToolContext:
    return ToolContext(tool_call_id="c", tool_name="t", loop_id="l", cancel=CancelToken())


def text(result: ToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def tools(
    store: Petstore | None = None, filter: OperationFilter | None = None, **config: Any
) -> dict[str, OpenApiToolAdapter]:
    if store is not None:
        config.setdefault("base_url", store.url)
    adapters = OpenApiToolAdapter.from_file(SPEC, OpenApiConfig(**config), filter)
    return {t.name: t for t in adapters}


# --------------------------------------------------------------------------- the tools


def test_each_operation_becomes_a_tool_with_one_parameters_object() -> None:
    found = tools()
    # No operationId: named after method and path. The multipart upload is left out.
    assert set(found) == {
        "listPets", "createPet", "showPetById", "deletePet", "get_store_inventory",
        "whoAmI", "slowThing", "bigThing",
    }  # fmt: skip
    listing = found["listPets"].parameters
    assert set(listing["properties"]) == {"limit", "tag", "X-Request-Id"}
    assert listing["properties"]["limit"]["maximum"] == 100  # from the $ref'd parameter
    assert listing["additionalProperties"] is False and "required" not in listing
    create = found["createPet"].parameters
    body = create["properties"]["body"]
    assert create["required"] == ["body"]
    assert body["required"] == ["name"]  # the $ref'd schema, inlined
    assert body["properties"]["tag"]["type"] == ["string", "null"]  # 3.0 nullable
    assert body["properties"]["name"]["examples"] == ["Rex"]
    assert "deprecated" in body["properties"]  # a property, not the keyword
    show = found["showPetById"]
    assert show.parameters["required"] == ["petId"]  # path-level parameter, always required
    assert show.description.startswith("Info for a specific pet. GET /pets/{petId}")


def test_an_openapi_31_spec_with_a_recursive_schema_loads() -> None:
    found = {t.name: t for t in OpenApiToolAdapter.from_file(SPEC31)}
    assert found["getPet"].base_url == "http://petstore.invalid/v2"  # server variable default
    params = found["getPet"].parameters["properties"]
    assert set(params) == {"path_petId", "query_petId"}  # one name in two places
    category = found["createCategory"].parameters["properties"]["body"]
    assert category["properties"]["name"] == {"type": "string"}
    parent = category["properties"]["parent"]  # the cycle is cut where it repeats
    assert parent["type"] == "object" and parent["description"].startswith("(recursive")


def test_the_spec_can_be_text_or_fetched_from_a_url(store: Petstore) -> None:
    text_tools = OpenApiToolAdapter.from_str(SPEC.read_text(), OpenApiConfig(base_url=store.url))
    assert len(text_tools) == 8


async def test_a_spec_from_a_url_resolves_a_relative_server_url(store: Petstore) -> None:
    root = store.url.removesuffix("/v1")
    found = {t.name: t for t in await OpenApiToolAdapter.from_url(f"{root}/openapi.yaml")}
    assert found["listPets"].base_url == store.url
    result = await found["showPetById"].execute({"petId": "1"}, ctx())
    assert not result.is_error and '"name": "Rex"' in text(result)


# --------------------------------------------------------------------------- calls


async def test_path_query_and_header_parameters_are_sent(store: Petstore) -> None:
    found = tools(store)
    result = await found["listPets"].execute(
        {"limit": 5, "tag": ["dog", "cat"], "X-Request-Id": "r-1"}, ctx()
    )
    assert not result.is_error
    assert text(result).startswith(f"GET {store.url}/pets?limit=5&tag=dog&tag=cat -> 200")
    assert store.last.query == {"limit": ["5"], "tag": ["dog", "cat"]}
    assert store.last.headers["x-request-id"] == "r-1"
    await found["showPetById"].execute({"petId": "a b/c"}, ctx())
    assert store.last.path == "/v1/pets/a%20b%2Fc"  # one path segment, encoded


async def test_a_json_body_is_sent(store: Petstore) -> None:
    result = await tools(store)["createPet"].execute({"body": {"name": "Tom", "tag": None}}, ctx())
    assert result.details["status"] == 201
    assert store.last.body == {"name": "Tom", "tag": None}
    assert store.last.headers["content-type"] == "application/json"


async def test_a_non_2xx_answer_is_an_error_result_with_the_body(store: Petstore) -> None:
    result = await tools(store)["showPetById"].execute({"petId": "9"}, ctx())
    assert result.is_error
    assert "HTTP 404 Not Found" in text(result)
    assert "no pet with id 9" in text(result)


async def test_invalid_arguments_are_refused_before_any_request(store: Petstore) -> None:
    result = await tools(store)["listPets"].execute({"limit": 0, "colour": "red"}, ctx())
    assert result.is_error
    assert "limit: 0 is less than the minimum of 1" in text(result)
    assert "colour" in text(result)
    assert store.requests == []


async def test_long_answers_are_cut_at_max_response_bytes(store: Petstore) -> None:
    result = await tools(store, max_response_bytes=1000)["bigThing"].execute({}, ctx())
    assert "[truncated: the response is longer than 1000 bytes]" in text(result)
    assert len(text(result)) < 1300


async def test_a_slow_answer_times_out_as_an_error_result(store: Petstore) -> None:
    result = await tools(store, timeout=0.2)["slowThing"].execute({}, ctx())
    assert result.is_error and "timed out after 0.2s" in text(result)


async def test_an_unreachable_api_is_an_error_result() -> None:
    result = await tools(base_url="http://127.0.0.1:9")["listPets"].execute({}, ctx())
    assert result.is_error and "ConnectError" in text(result)


# --------------------------------------------------------------------------- auth


# Shaped like no known key format, so only the registered secret keeps it out of results.
SECRET = "pw-openapi-7f3a9c2e1b"


@pytest.mark.parametrize(
    ("auth", "check"),
    [
        (OpenApiAuth.bearer(SECRET), lambda r: r.headers["authorization"] == f"Bearer {SECRET}"),
        (
            OpenApiAuth.api_key("X-Pets-Token", SECRET),
            lambda r: r.headers["x-pets-token"] == SECRET,
        ),
        (
            OpenApiAuth.api_key("pets_token", SECRET, location="query"),
            lambda r: r.query["pets_token"] == [SECRET],
        ),
        (
            OpenApiAuth.basic("ann", SECRET),
            lambda r: r.headers["authorization"].startswith("Basic "),
        ),
    ],
    ids=["bearer", "api-key-header", "api-key-query", "basic"],
)
async def test_each_auth_kind_reaches_the_server_and_never_the_model(
    store: Petstore, auth: OpenApiAuth, check: Any
) -> None:
    found = tools(store, auth=auth)
    result = await found["whoAmI"].execute({}, ctx())
    assert check(store.last)
    assert SECRET not in text(result) and SECRET not in json.dumps(result.details)
    if auth.kind != "basic":  # the API echoed the credential; the model sees it scrubbed
        assert "[REDACTED]" in text(result)
    assert SECRET not in repr(auth) and SECRET not in repr(OpenApiConfig(auth=auth))
    failed = await tools(auth=auth, base_url="http://127.0.0.1:9")["whoAmI"].execute({}, ctx())
    assert failed.is_error and SECRET not in text(failed)


async def test_a_redirect_to_another_host_is_not_followed_with_the_credentials(
    store: Petstore,
) -> None:
    with petstore() as other:
        store.redirect_to = other.url + "/whoami"
        found = tools(store, auth=OpenApiAuth.api_key("X-Pets-Token", SECRET))
        away = await found["showPetById"].execute({"petId": "away"}, ctx())
        assert away.is_error and "another host" in text(away), text(away)
        assert other.requests == []  # the other server never saw the request (nor the key)
    moved = await found["showPetById"].execute({"petId": "moved"}, ctx())
    assert not moved.is_error and '"Rex"' in text(moved)  # the same origin: followed
    assert store.last.path == "/v1/pets/1" and store.last.headers["x-pets-token"] == SECRET


@pytest.mark.parametrize("value", ["..", ".", "../whoami", "a/../../whoami", "%2e%2e"])
async def test_a_path_parameter_stays_one_segment_of_the_operations_path(
    store: Petstore, value: str
) -> None:
    result = await tools(store)["showPetById"].execute({"petId": value}, ctx())
    assert store.last.path.startswith("/v1/pets/") and store.last.path.count("/") == 3
    assert "no pet with id" in text(result), text(result)


# --------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        (OperationFilter.by_tag("admin"), {"deletePet"}),
        (OperationFilter.by_operation_id("listPets", "whoAmI"), {"listPets", "whoAmI"}),
        (OperationFilter(methods=frozenset({"POST", "DELETE"})), {"createPet", "deletePet"}),
        (
            OperationFilter.by_path_prefix("/pets"),
            {"listPets", "createPet", "showPetById", "deletePet"},
        ),
        (
            OperationFilter(paths=frozenset({"/*"})),  # one segment: not /pets/{petId}
            {"listPets", "createPet", "whoAmI", "slowThing", "bigThing"},
        ),
        (
            OperationFilter(
                tags=frozenset({"pets"}), exclude_operation_ids=frozenset({"createPet"})
            ),
            {"listPets", "showPetById", "deletePet"},
        ),
        (
            OperationFilter(
                exclude_tags=frozenset({"pets", "misc"}), exclude_methods=frozenset({"delete"})
            ),
            {"get_store_inventory", "whoAmI"},
        ),
        (
            OperationFilter(exclude_paths=frozenset({"/pets"})),
            {"get_store_inventory", "whoAmI", "slowThing", "bigThing"},
        ),
    ],
    ids=[
        "tag",
        "operation-id",
        "method",
        "path-prefix",
        "path-glob",
        "exclude-id",
        "exclude-tag-method",
        "exclude-path",
    ],
)
def test_operation_filters_choose_the_tools(chosen: OperationFilter, expected: set[str]) -> None:
    assert set(tools(filter=chosen)) == expected


def test_filters_that_name_nothing_say_so() -> None:
    with pytest.raises(OpenApiError, match=r"no operation with id 'listPet'.*listPets"):
        tools(filter=OperationFilter.by_operation_id("listPet"))
    with pytest.raises(OpenApiError, match=r"No operation .* matches the filter"):
        tools(filter=OperationFilter.by_tag("nobody"))
    with pytest.raises(OpenApiError, match="multipart/form-data body"):
        tools(filter=OperationFilter.by_operation_id("uploadPhoto"))
    with pytest.raises(UserError, match="Unknown HTTP method 'FETCH'"):
        OperationFilter(methods=frozenset({"FETCH"}))


async def test_prefix_and_base_url_override(store: Petstore) -> None:
    found = tools(store, name_prefix="pets", filter=OperationFilter.by_tag("pets"))
    assert set(found) >= {"pets__listPets", "pets__createPet"}
    result = await found["pets__listPets"].execute({}, ctx())
    assert text(result).startswith(f"GET {store.url}/pets -> 200")  # not petstore.invalid


# --------------------------------------------------------------------------- bad specs


def test_bad_specs_get_clear_errors(tmp_path: Any) -> None:
    with pytest.raises(OpenApiError, match=r"swagger 2\.0.*Convert"):
        OpenApiToolAdapter.from_str('{"swagger": "2.0", "paths": {}}')
    with pytest.raises(OpenApiError, match="not valid JSON or YAML"):
        OpenApiToolAdapter.from_str("openapi: [3.0")
    no_server = SPEC.read_text().replace("  - url: http://petstore.invalid/v1\n", "")
    with pytest.raises(OpenApiError, match=r"no absolute server URL.*base_url="):
        OpenApiToolAdapter.from_str(no_server)
    dangling = SPEC.read_text().replace("#/components/schemas/NewPet", "#/components/schemas/Nope")
    with pytest.raises(OpenApiError, match=r"\$ref '#/components/schemas/Nope'"):
        OpenApiToolAdapter.from_str(dangling)
    with pytest.raises(OpenApiError, match="Cannot read the OpenAPI spec"):
        OpenApiToolAdapter.from_file(tmp_path / "missing.yaml")


def test_a_ref_to_a_file_beside_the_spec_is_followed(tmp_path: Any) -> None:
    (tmp_path / "pet.yaml").write_text("type: object\nproperties:\n  name: {type: string}\n")
    (tmp_path / "api.yaml").write_text(
        "openapi: 3.0.0\ninfo: {title: t, version: '1'}\nservers: [{url: 'http://x.invalid'}]\n"
        "paths:\n  /p:\n    post:\n      operationId: make\n      requestBody:\n"
        "        content:\n          application/json:\n            schema: {$ref: 'pet.yaml'}\n"
        "      responses: {'200': {description: ok}}\n"
    )
    (tool,) = OpenApiToolAdapter.from_file(tmp_path / "api.yaml")
    assert tool.parameters["properties"]["body"]["properties"] == {"name": {"type": "string"}}


# --------------------------------------------------------------------------- on an agent


async def test_an_agent_with_an_openapi_file_calls_the_api(store: Petstore) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("showPetById", {"petId": "1"})]), Reply("It is Rex.")]
    )
    agent = BasicAgent(provider=provider).with_openapi_file(
        str(SPEC), OpenApiConfig(base_url=store.url), OperationFilter.by_tag("pets")
    )
    result = await agent.prompt("Which pet is number 1?")
    assert result.text == "It is Rex."
    assert store.last.path == "/v1/pets/1"
    assert [t.name for t in provider.requests[0].tools] == [
        "listPets", "createPet", "showPetById", "deletePet",
    ]  # fmt: skip


async def test_openapi_tools_work_inside_agent_loop(store: Petstore) -> None:
    provider = ScriptedProvider(
        [Reply(tool_calls=[call("createPet", {"body": {"name": "Tom"}})]), Reply("Created.")]
    )
    context = AgentContext(tools=list(tools(store).values()))
    result = await agent_loop("add Tom", context, AgentLoopConfig(provider=provider))
    assert result.reason == "completed"
    assert store.last.body == {"name": "Tom"}

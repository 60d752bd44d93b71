"""SDK clients live one per event loop and are closed inside that loop when it shuts down."""

from __future__ import annotations

import asyncio
import gc
import warnings

from phi_core.providers._common import PerLoop
from phi_core.providers._openai import http_client
from phi_core.providers.base import ModelConfig, StreamDone, StreamRequest
from phi_core.providers.openai_chat import OpenAIChatProvider
from phi_core.types import UserMessage

from .fakes import FakeServer, Stream
from .fakes.openai_wire import text_reply


class _Client:
    def __init__(self) -> None:
        self.closed_in: asyncio.AbstractEventLoop | None = None


def test_a_client_is_closed_inside_its_own_loop_when_asyncio_run_ends() -> None:
    made: list[_Client] = []

    def factory() -> _Client:
        made.append(_Client())
        return made[-1]

    async def close(client: _Client) -> None:
        await asyncio.sleep(0)  # really awaited inside the loop
        client.closed_in = asyncio.get_running_loop()

    clients = PerLoop(factory, close=close)
    loops: list[asyncio.AbstractEventLoop] = []

    async def use() -> None:
        loops.append(asyncio.get_running_loop())
        assert clients.get() is clients.get()  # one client per loop, shared by every call
        assert made[-1].closed_in is None  # not closed while the loop runs

    asyncio.run(use())
    asyncio.run(use())
    assert len(made) == 2  # a new loop got a new client
    assert [c.closed_in for c in made] == loops  # each closed in the loop that made it


def test_the_openai_chat_provider_leaves_no_open_client_session_after_the_run() -> None:
    async def main() -> tuple[str, OpenAIChatProvider]:
        async with FakeServer(default=lambda _r: Stream(text_reply("hi"))) as server:
            model = ModelConfig(provider="openai-compat", id="m", base_url=f"{server.url}/v1")
            provider = OpenAIChatProvider(model)
            request = StreamRequest(model, [UserMessage.text("hello")])
            async for item in provider.stream(request):
                if isinstance(item, StreamDone):
                    return item.message.text, provider
        raise AssertionError("no StreamDone")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        text, provider = asyncio.run(main())
        client = provider._clients._client
        assert client is not None and client.is_closed()
        del client, provider
        gc.collect()
    assert text == "hi"
    assert not [w for w in caught if "Unclosed" in str(w.message)]


async def test_the_http_client_uses_the_sdks_aiohttp_transport_with_room_for_many_calls() -> None:
    client = http_client(prefer_aiohttp=True)
    try:
        transport = client._transport  # type: ignore[attr-defined]
        assert "aiohttp" in type(transport).__module__  # aiohttp is installed in the dev env
        # Neither the connection pool nor the time-outs may fail healthy calls under load.
        assert transport.limits.max_connections >= 1024
        assert client.timeout.connect is not None and client.timeout.connect >= 60
    finally:
        await client.aclose()

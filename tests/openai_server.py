"""A real OpenAI-compatible chat-completions server for tests and benchmarks (stdlib only).

    with serve(latency=0.2) as server:          # or the `openai_server` pytest fixture
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test")
        server.fault("rate_limit", when=lambda r: r.step == 3 and r.reasks == 0, times=1, retry_after="0.3")

It listens on 127.0.0.1 (a free port), serves `POST /v1/chat/completions` with the real response
shape, and answers like a sensible teacher: it reads the "Now: day D, <slot> (step k of 28).
Meters: ..." line of the rendered prompt and replies with a valid protocol answer made by
`rhythm_env.protocol.format_answer` (SLEEP at night, NAP when vitality is low, otherwise a fixed
rule per slot). Usage tokens are about len(text) // 4.

Faults are scripted, deterministic and keyed either by the request's arrival index or by a
predicate on the parsed request (`RequestInfo`: its step, whether it is a re-ask, the `seed`
parameter the teacher sends, its headers...). Kinds:

    rate_limit      HTTP 429 with a Retry-After header (seconds, e.g. "0.05")
    server_error    HTTP 500
    slow            sleeps `delay` seconds (longer than the client timeout), then answers normally
    non_json        a 200 answer whose text is not JSON ("I think we should rest")
    fenced          a 200 answer wrapping the valid JSON in a ```json fence
    unknown_action  a 200 answer with valid JSON but the action "DANCE"

    length_empty    a 200 answer with empty content and finish_reason "length" (all of the budget
                    spent on reasoning), whatever the budget

Endpoint behaviours (constructor arguments), each as the real services answer:

    params="chat"             accepts max_tokens, max_completion_tokens, any temperature (vLLM, gpt-4o)
    params="reasoning"        GPT-5.x / o-series: HTTP 400 to `max_tokens` (code unsupported_parameter)
                              and to a temperature other than 1 (code unsupported_value), both with the
                              real error bodies; `reasoning_effort` must be one of `reasoning_efforts`
    params="max_tokens_only"  an older server: HTTP 400 "Unrecognized request argument supplied:
                              max_completion_tokens" (param and code null, as older Azure API versions)
    reasoning_tokens=N        the model thinks N tokens before answering: usage reports them in
                              completion_tokens_details.reasoning_tokens, and a budget below N + the
                              answer gives finish_reason "length" with empty content
    structured="supported"    honours response_format json_schema (strict): the answer is generated to
                              the schema (constrained decoding); a malformed schema is a 400
    structured="refused"      HTTP 400 to any response_format (param "response_format")
    structured="ignored"      accepts response_format and answers free text anyway
    free_text_invalid_rate=p  a noisy model: a deterministic fraction p of free-text answers (keyed by
                              the request's seed and re-ask count) is prose, an unknown action or cut-off
                              JSON; answers generated to a schema are always valid
    prefix_cache=True         automatic prefix caching as OpenAI's: prompts are counted with
                              `count_tokens` (a deterministic GPT-like regex tokenizer), a prompt's
                              longest prefix already seen, in 128-token blocks and at least 1,024 tokens,
                              is reported as usage.prompt_tokens_details.cached_tokens
    usage_details=False       usage without prompt_tokens_details / completion_tokens_details (older servers)

Every request is recorded (headers included) in `server.requests`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rhythm_env.protocol import format_answer
from rhythm_env.sim.spec import ACTIONS, BELIEF_DIMS

FAULT_KINDS = ("rate_limit", "server_error", "slow", "non_json", "fenced", "unknown_action", "length_empty")
PARAM_MODES = ("chat", "reasoning", "max_tokens_only")
STRUCTURED_MODES = ("supported", "refused", "ignored")
CACHE_MIN_TOKENS, CACHE_BLOCK_TOKENS = 1024, 128
# A GPT-like pre-tokenizer used as the tokenizer: words with their leading space, numbers in chunks of
# up to 3 digits, runs of whitespace, and every other character alone. About 4.3 characters per token
# on the rendered prompts (o200k_base gives about 4); deterministic, no vocabulary file needed.
_TOKEN = re.compile(r" ?[A-Za-z]+| ?\d{1,3}|\s+|[^\sA-Za-z\d]")
MAX_TOKENS_MESSAGE = ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                      "Use 'max_completion_tokens' instead.")
TEMPERATURE_MESSAGE = ("Unsupported value: 'temperature' does not support {value} with this model. "
                       "Only the default (1) value is supported.")
NON_JSON_TEXT = "I think we should rest"
_NOW = re.compile(r"Now: day (\d+), (\w+) \(step (\d+) of (\d+)\)\.(?: Meters: ([^\n]*?)\.?$)?", re.MULTILINE)
_METER = re.compile(r"(\w+) (-?\d+(?:\.\d+)?)")
# OpenAI-style routes, and Azure OpenAI's /openai/deployments/<deployment>/chat/completions?api-version=...
_ROUTE = re.compile(r"(?:/v1)?/chat/completions|/openai/deployments/[^/]+/chat/completions")
_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


@dataclass
class RequestInfo:
    """One request as the server saw it."""

    index: int  # arrival order, from 0
    time: float  # time.monotonic() when its body was read
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict | None
    messages: list[dict]
    day: int | None = None
    slot: str | None = None
    step: int | None = None  # 0-based decision step (the prompt's "step k of 28" is k = step + 1)
    meters: dict[str, float] = field(default_factory=dict)
    reasks: int = 0  # assistant messages in the conversation: 0 for a first ask
    response_status: int | None = None
    fault: str | None = None  # the fault kind served, if any

    @property
    def request_seed(self) -> int | None:
        """The `seed` parameter of the request (the teacher sends episode_seed * 100 + step)."""
        seed = (self.body or {}).get("seed")
        return seed if isinstance(seed, int) else None

    @property
    def episode_seed(self) -> int | None:
        seed = self.request_seed
        return None if seed is None else seed // 100

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


@dataclass
class FaultRule:
    kind: str
    at: frozenset[int] | None  # request indices
    when: Callable[[RequestInfo], bool] | None
    times: int | None  # how many times it may fire; None = always
    retry_after: str = "0.05"
    delay: float = 2.0
    fired: int = 0

    def matches(self, info: RequestInfo) -> bool:
        if self.times is not None and self.fired >= self.times:
            return False
        if self.at is not None and info.index not in self.at:
            return False
        if self.when is not None and not self.when(info):
            return False
        return True


def teacher_answer(info: RequestInfo) -> tuple[str, str]:
    """A sensible answer for the decision the prompt describes: (action, reasoning)."""
    slot = info.slot or "morning"
    vitality = info.meters.get("vitality", 0.5)
    cognition = info.meters.get("cognition", 0.5)
    connection = info.meters.get("connection", 0.5)
    if slot == "night":
        return "SLEEP", "It is night: sleep restores vitality and cognition."
    if vitality < 0.25:
        return "NAP", f"Vitality is low ({vitality:.2f}); a nap pulls it away from a crash."
    if slot == "morning":
        if cognition >= 0.4:
            return "DEEP_WORK", "Morning with a clear head: make progress with focused work."
        return "EXERCISE", "Cognition is low this morning; exercise should lift it."
    if slot == "afternoon":
        return "SHALLOW_WORK", "Afternoon: routine tasks keep progress going without draining energy."
    if connection < 0.5:
        return "FAMILY_TIME", "Evening and connection is low: gentle time with family."
    return "MEDITATE", "Evening: a calm slot to restore serenity."


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(tokenize(text))


def prompt_tokens(messages: list[dict], response_format: dict | None = None) -> list[str]:
    """The prompt as the model sees it, tokenized: the response format's schema first (it is part of
    the cached prefix on the real service), then each message as <|start|>role<|message|>content<|end|>,
    then the assistant's turn header."""
    tokens: list[str] = []
    if response_format is not None:
        tokens += ["<|schema|>", *tokenize(json.dumps(response_format, sort_keys=True)), "<|end|>"]
    for m in messages:
        if isinstance(m, dict):
            tokens += ["<|start|>", str(m.get("role")), "<|message|>", *tokenize(str(m.get("content", ""))), "<|end|>"]
    return tokens + ["<|start|>", "assistant"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real API servers do
    server_version = "FakeOpenAI/1.0"
    timeout = 60  # an idle keep-alive connection is closed after this long
    disable_nagle_algorithm = True  # no 40 ms Nagle + delayed-ACK stall between headers and body

    def log_message(self, format, *args):  # silence the per-request log lines
        pass

    def handle(self):
        with contextlib.suppress(*_DISCONNECTS):
            super().handle()

    def _send(self, status: int, payload, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except _DISCONNECTS:  # the client gave up (e.g. its timeout) while we were slow
            self.close_connection = True

    def _error(self, status: int, message: str, kind: str, headers=None, param=None, code=None) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "param": param, "code": code}}, headers)

    def do_GET(self):
        self.server.owner._serve(self, "GET")

    def do_POST(self):
        self.server.owner._serve(self, "POST")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):  # a client hanging up is not an error
        import sys

        if isinstance(sys.exc_info()[1], _DISCONNECTS):
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    """The server; start()/stop() or use it as a context manager."""

    def __init__(self, *, latency: float = 0.0, expected_api_key: str | None = None, model: str | None = None,
                 params: str = "chat", reasoning_tokens: int = 0,
                 reasoning_efforts: Iterable[str] = ("minimal", "low", "medium", "high"),
                 structured: str = "supported", free_text_invalid_rate: float = 0.0, prefix_cache: bool = False,
                 usage_details: bool = True):
        if params not in PARAM_MODES:
            raise ValueError(f"unknown params mode {params!r}; allowed: {', '.join(PARAM_MODES)}")
        if structured not in STRUCTURED_MODES:
            raise ValueError(f"unknown structured mode {structured!r}; allowed: {', '.join(STRUCTURED_MODES)}")
        self.latency = latency  # seconds added to every request
        self.expected_api_key = expected_api_key  # if set, other keys get HTTP 401
        self.model = model  # if set, the model name echoed back; else the request's
        self.params = params
        self.reasoning_tokens = reasoning_tokens
        self.reasoning_efforts = tuple(reasoning_efforts)
        self.structured = structured
        self.free_text_invalid_rate = free_text_invalid_rate
        self.prefix_cache = prefix_cache
        self.usage_details = usage_details
        self._cache: set[str] = set()  # chain hashes of every 128-token prefix block seen
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._requests: list[RequestInfo] = []
        self._closing = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()  # wakes slow responses
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- configuration -----------------------------------------------------------------------
    def set_latency(self, seconds: float) -> None:
        self.latency = float(seconds)

    def fault(self, kind: str, *, at: int | Iterable[int] | None = None, when: Callable[[RequestInfo], bool] | None = None,
              times: int | None = None, retry_after: str | float = "0.05", delay: float = 2.0) -> FaultRule:
        """Script a fault for the requests matching `at` (arrival indices) and `when` (a predicate);
        with neither it matches every request. It fires at most `times` times (None: always). Rules
        are tried in the order they were added; the first that matches is served."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        indices = None if at is None else frozenset([at] if isinstance(at, int) else at)
        rule = FaultRule(kind, indices, when, times, str(retry_after), float(delay))
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear_faults(self) -> None:
        with self._lock:
            self._rules.clear()

    def reset(self) -> None:
        """Forget faults and recorded requests."""
        with self._lock:
            self._rules.clear()
            self._requests.clear()
            self._cache.clear()

    # -- inspection --------------------------------------------------------------------------
    @property
    def requests(self) -> list[RequestInfo]:
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._requests)

    def requests_for(self, *, step: int | None = None, episode_seed: int | None = None) -> list[RequestInfo]:
        return [r for r in self.requests
                if (step is None or r.step == step) and (episode_seed is None or r.episode_seed == episode_seed)]

    # -- serving -----------------------------------------------------------------------------
    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)

    def _serve(self, handler: _Handler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        info = self._parse(handler, method, body)
        with self._lock:
            info.index = len(self._requests)
            self._requests.append(info)
            rule = next((r for r in self._rules if r.matches(info)), None)
            if rule is not None:
                rule.fired += 1
                info.fault = rule.kind
        self._sleep(self.latency)

        def reply(status, payload, headers=None, param=None, code=None):
            info.response_status = status
            if status == 200:
                handler._send(status, payload, headers)
            else:
                handler._error(status, payload, {429: "rate_limit_exceeded", 401: "invalid_request_error",
                                                 400: "invalid_request_error", 404: "not_found"}.get(status, "server_error"),
                               headers, param, code)

        route = handler.path.split("?", 1)[0].rstrip("/")
        if method != "POST" or not _ROUTE.fullmatch(route):
            return reply(404, f"no route {method} {handler.path}")
        if self.expected_api_key is not None and info.authorization != f"Bearer {self.expected_api_key}":
            given = (info.authorization or "").removeprefix("Bearer ")
            # as the real service: the key masked but for its first 8 and last 4 characters
            return reply(401, f"Incorrect API key provided: {given[:8]}{'*' * max(0, len(given) - 12)}{given[-4:]}. "
                              "You can find your API key at https://platform.openai.com/account/api-keys.")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return reply(400, "the request body must be a JSON object with 'messages'")
        rejected = self._validate(body)
        if rejected is not None:
            message, param, code = rejected
            return reply(400, message, param=param, code=code)
        kind = rule.kind if rule else None
        if kind == "rate_limit":
            return reply(429, "Rate limit reached; please retry after the Retry-After delay.",
                         {"Retry-After": rule.retry_after})
        if kind == "server_error":
            return reply(500, "The server had an error while processing your request.")
        if kind == "slow":
            self._sleep(rule.delay)
            if self._closing.is_set():
                handler.close_connection = True
                return None
        reply(200, self._completion(info, kind))

    def _validate(self, body: dict) -> tuple[str, str | None, str | None] | None:
        """(message, param, code) of the HTTP 400 this endpoint gives the request, or None."""
        if self.params == "reasoning":
            if "max_tokens" in body:
                return MAX_TOKENS_MESSAGE, "max_tokens", "unsupported_parameter"
            if "temperature" in body and body["temperature"] != 1:
                return TEMPERATURE_MESSAGE.format(value=body["temperature"]), "temperature", "unsupported_value"
            effort = body.get("reasoning_effort")
            if effort is not None and effort not in self.reasoning_efforts:
                return (f"Unsupported value: 'reasoning_effort' does not support {effort!r} with this model. Supported "
                        f"values are: {', '.join(repr(e) for e in self.reasoning_efforts)}.", "reasoning_effort",
                        "unsupported_value")
        elif self.params == "max_tokens_only":
            for name in ("max_completion_tokens", "reasoning_effort"):
                if name in body:
                    return f"Unrecognized request argument supplied: {name}", None, None
        fmt = body.get("response_format")
        if fmt is not None and fmt.get("type") != "text":
            if self.structured == "refused":
                return ("response_format value as json_schema is enabled only for api versions 2024-08-01-preview "
                        "and later", "response_format", None)
            if self.structured == "supported" and fmt.get("type") == "json_schema":
                spec = fmt.get("json_schema") or {}
                schema = spec.get("schema")
                if not isinstance(schema, dict) or not spec.get("name"):
                    return ("Missing required parameter: 'response_format.json_schema.name' or 'schema'.",
                            "response_format.json_schema", "missing_required_parameter")
                if spec.get("strict") and schema.get("additionalProperties") is not False:
                    return ("Invalid schema for response_format: In context=(), 'additionalProperties' is required "
                            "to be supplied and to be false.", "response_format", "invalid_json_schema")
        return None

    def _schema_of(self, info: RequestInfo) -> dict | None:
        """The JSON schema the answer must follow, when this endpoint enforces one for the request."""
        fmt = (info.body or {}).get("response_format")
        if self.structured != "supported" or not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
            return None
        return fmt["json_schema"]["schema"]

    def _noisy(self, info: RequestInfo) -> str | None:
        """The malformed free-text answer of a noisy model for this request, or None (deterministic)."""
        if self.free_text_invalid_rate <= 0:
            return None
        key = f"{info.request_seed}|{info.reasks}".encode()
        draw = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64
        if draw >= self.free_text_invalid_rate:
            return None
        kind = int(draw / self.free_text_invalid_rate * 3)
        belief = {"social": 0.5, "morning": 0.5, "work": 0.5}
        return [NON_JSON_TEXT + ": a quiet evening would help.",
                json.dumps({"reasoning": "Something new.", "belief": belief, "action": "GO_FOR_A_WALK"}),
                '{"reasoning": "Morning with a clear head, so focused work", "belief": {"social": 0.5, "mor'][kind]

    def _cached_tokens(self, tokens: list[str]) -> int:
        """The longest prefix of `tokens` already seen (whole 128-token blocks, >= 1,024 tokens); then
        remember this prompt's prefixes."""
        digest = hashlib.sha256()
        keys = []
        for end in range(CACHE_BLOCK_TOKENS, len(tokens) + 1, CACHE_BLOCK_TOKENS):
            digest.update("\x1f".join(tokens[end - CACHE_BLOCK_TOKENS:end]).encode() + b"\x1e")
            keys.append((end, digest.hexdigest()))
        with self._lock:
            hit = max((end for end, key in keys if key in self._cache), default=0)
            self._cache.update(key for _, key in keys)
        return hit if hit >= CACHE_MIN_TOKENS else 0

    def _parse(self, handler: _Handler, method: str, body) -> RequestInfo:
        messages = body.get("messages") if isinstance(body, dict) else None
        messages = messages if isinstance(messages, list) else []
        info = RequestInfo(index=-1, time=time.monotonic(), method=method, path=handler.path,
                           headers={k.lower(): v for k, v in handler.headers.items()}, body=body, messages=messages)
        info.reasks = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        # The last user message holding the "Now:" line (a re-ask's last message is the complaint).
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                match = _NOW.search(str(message.get("content", "")))
                if match:
                    info.day, info.slot, info.step = int(match.group(1)), match.group(2), int(match.group(3)) - 1
                    info.meters = {k: float(v) for k, v in _METER.findall(match.group(5) or "")}
                    break
        return info

    def _completion(self, info: RequestInfo, kind: str | None) -> dict:
        action, reasoning = teacher_answer(info)
        belief = {"social": 0.5, "morning": 0.5, "work": 0.5}
        schema = self._schema_of(info)
        noisy = None if schema is not None else self._noisy(info)
        if kind == "non_json":
            text = NON_JSON_TEXT
        elif kind == "unknown_action":
            text = json.dumps({"reasoning": "Let us try something new.", "belief": belief, "action": "DANCE"})
        elif kind == "fenced":
            text = f"Here is my answer:\n```json\n{format_answer(action, belief, reasoning)}\n```"
        elif noisy is not None:
            text = noisy
        elif schema is not None:  # constrained decoding: keys in the schema's order, values within it
            props = schema["properties"]
            assert props["action"]["enum"] == list(ACTIONS) and list(props["belief"]["properties"]) == list(BELIEF_DIMS)
            text = json.dumps({"reasoning": reasoning, "belief": belief, "action": action}, separators=(",", ":"))
        else:
            text = format_answer(action, belief, reasoning)
        body = info.body or {}
        if self.prefix_cache:
            tokens = prompt_tokens(info.messages, body.get("response_format"))
            n_prompt, cached = len(tokens), self._cached_tokens(tokens)
            answer_tokens = count_tokens(text)
        else:
            prompt_chars = sum(len(str(m.get("content", ""))) for m in info.messages if isinstance(m, dict))
            n_prompt, cached, answer_tokens = max(1, prompt_chars // 4), 0, max(1, len(text) // 4)
        budget = body.get("max_completion_tokens", body.get("max_tokens"))
        reasoning_used = self.reasoning_tokens
        finish = "stop"
        if kind == "length_empty" or (isinstance(budget, int) and budget < reasoning_used + answer_tokens):
            text, finish = "", "length"
            reasoning_used = budget if isinstance(budget, int) else reasoning_used
            answer_tokens = 0
        usage = {"prompt_tokens": n_prompt, "completion_tokens": reasoning_used + answer_tokens,
                 "total_tokens": n_prompt + reasoning_used + answer_tokens}
        if self.usage_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_used, "audio_tokens": 0,
                                                  "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        return {
            "id": f"chatcmpl-fake{info.index:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model or body.get("model") or "fake-model",
            "system_fingerprint": "fp_fake",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish,
            }],
            "usage": usage,
        }


@contextlib.contextmanager
def serve(**kwargs) -> Iterator[FakeOpenAIServer]:
    """Run a FakeOpenAIServer for the duration of a with-block."""
    server = FakeOpenAIServer(**kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


try:
    import pytest
except ImportError:  # the benchmark may run without pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def openai_server():
        """A fresh FakeOpenAIServer per test (no latency, no faults)."""
        with serve() as server:
            yield server

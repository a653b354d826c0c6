"""RhythmEnv as an OpenEnv environment (`openenv` 0.10): `rhythm serve-env` and the
OpenEnv package envs/rhythm_env (server/app.py) serve it, `RhythmEnvClient` plays it.

    with RhythmEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(condition="continuous", seed=1234)
        result = env.step(RhythmAction(action="SLEEP", social=0.5, morning=0.5, work=0.5))

Each WebSocket session (one client) plays its own `TextWeek`: `reset` starts a week under the seeds rules
of the server's purpose, `step` takes one slot with the stated belief. The observation's `text` is what the
agent reads (TextWeek's; the first observation's `task` is the task, which /metadata also gives); its reward
is 0.0 until the last slot, whose reward is the grader's score of the
week (a sparse reward, as OpenEnv's game environments give). A bad action or belief is refused by the
`RhythmAction` model, naming the field; a bad seed, a step before reset or after the week is answered with
TextWeek's message; either way the session keeps its week and the server keeps serving. HTTP's /reset,
/step and /state play one more week, which every HTTP caller shares (for curl and a quick look; OpenEnv's
own make a fresh environment per request, where a step never has a week): a client of its own plays over
the WebSocket (/ws), as RhythmEnvClient does.
"""

from __future__ import annotations

import asyncio
import math
from functools import partial
from typing import Annotated, Any, Literal
from uuid import uuid4

from fastapi import Body, HTTPException, WebSocketDisconnect
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.serialization import deserialize_action, serialize_observation
from openenv.core.env_server.types import (
    Action,
    EnvironmentMetadata,
    Observation,
    ResetRequest,
    ResetResponse,
    State,
    StepRequest,
    StepResponse,
)
from pydantic import Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from ..protocol.prompts import TASK_DESCRIPTION
from ..sim.seed_rules import check_purpose
from ..sim.spec import ACTIONS, ENV_VERSION, METERS
from .week import BELIEF_HELP, DEFAULT_GRADER, TextWeek, check_grader, check_reset_arguments

RESET_ARGUMENTS = ("seed", "episode_id", "condition")
# The task as an OpenEnv client plays it: the first observation's `task` and /metadata's readme_content.
OPENENV_TASK = TASK_DESCRIPTION + f"""

Each slot, send one RhythmAction: `action`, one of {", ".join(ACTIONS)}, and your current belief as \
`social`, `morning` and `work`, each a number in [0, 1]. The observation's `text` gives the action's \
anomaly per meter and the state now. The reward is 0.0 until the 28th slot, whose reward is the grade \
of the week (0..1)."""
NO_WEEK = ("no week started: reset first (a WebSocket session, /ws, as RhythmEnvClient opens, plays its own "
           "week; HTTP's /reset and /step play one week that all HTTP callers share)")

# Strict: a bool or a numeric string is refused rather than read as a number, as TextWeek refuses them.
Belief = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]


class RhythmAction(Action):
    """One slot: the action taken and the belief stated about the hidden profile."""

    action: Literal[ACTIONS] = Field(description="one of the ten actions (any case)")
    social: Belief = Field(description=BELIEF_HELP["social"])
    morning: Belief = Field(description=BELIEF_HELP["morning"])
    work: Belief = Field(description=BELIEF_HELP["work"])

    @field_validator("action", mode="before")
    @classmethod
    def _upper_case(cls, value: Any) -> Any:
        # Normalised, never raised here: the Literal check then names the allowed set in a plain error.
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("social", "morning", "work", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        # JSON carries a NaN back as null, so the message itself names it (a PydanticCustomError: the server
        # serialises its context, which a ValueError's would break). HTTP's JSON reads Infinity and 1e400 as
        # inf, which the bound check would call merely "greater than 1".
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("non_finite_belief", f"must be a number in [0, 1], got {_non_finite(value)}")
        return value


class RhythmObservation(Observation):
    """What the agent reads after reset or a step; `reward` is the week's score on its last slot, else 0.0."""

    text: str = Field(default="", description="the observation as the agent reads it")
    task: str = Field(default="", description="the task, on the first observation of a week (reset); else empty")
    step: int = Field(default=0, description="slots played, 0..28")
    condition: str | None = None
    seed: int | None = None
    meters: dict[str, float] = Field(default_factory=dict, description="the meters now, by name")


class RhythmState(State):
    """The session's week: `step_count` slots played of the week of `condition` and `seed`."""

    condition: str | None = None
    seed: int | None = None
    purpose: str = "training"
    grader: str = DEFAULT_GRADER


class RhythmRequestError(ValueError):
    """A request the week refuses (a seed, a step before reset or after the week); the app answers 400."""


class RhythmEnvironment(Environment[RhythmAction, RhythmObservation, RhythmState]):
    """One TextWeek per session; the server makes one per WebSocket session."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, purpose: str = "training", grader: str = DEFAULT_GRADER):
        super().__init__()
        self._week = TextWeek(purpose=purpose, grader=grader)
        self._episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, condition: str = "continuous",
              **kwargs: Any) -> RhythmObservation:
        try:
            check_reset_arguments(kwargs, RESET_ARGUMENTS)
            text = self._week.start(condition, seed)
        except ValueError as exc:
            raise RhythmRequestError(str(exc)) from exc
        self._episode_id = episode_id or str(uuid4())
        return self._observation(text, reward=0.0, task=OPENENV_TASK)

    def step(self, action: RhythmAction, timeout_s: float | None = None, **kwargs: Any) -> RhythmObservation:
        if not isinstance(action, RhythmAction):
            raise TypeError(f"expected a RhythmAction, got {type(action).__name__}")
        if not self._week.started:
            raise RhythmRequestError(NO_WEEK)
        try:
            text = self._week.act(action.action, action.social, action.morning, action.work)
        except ValueError as exc:
            raise RhythmRequestError(str(exc)) from exc
        return self._observation(text, reward=self._week.grade() if self._week.done else 0.0)

    def _observation(self, text: str, reward: float, task: str = "") -> RhythmObservation:
        meters = self._week.history[-1].meters
        return RhythmObservation(text=text, task=task, step=self._week.step, done=self._week.done, reward=reward,
                                 condition=self._week.condition, seed=self._week.seed,
                                 meters={m: float(v) for m, v in zip(METERS, meters)})

    @property
    def state(self) -> RhythmState:
        week = self._week
        return RhythmState(episode_id=self._episode_id, step_count=week.step, condition=week.condition,
                           seed=week.seed, purpose=week.purpose, grader=week.grader)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="RhythmEnv", version=ENV_VERSION, readme_content=OPENENV_TASK,
                                   description="A week of 28 slots: act and state a belief about a hidden person "
                                               "profile; the grader scores the week on its last step.")


def create_rhythm_app(*, purpose: str = "training", grader: str = DEFAULT_GRADER, max_sessions: int = 16):
    """The FastAPI app serving RhythmEnv (OpenEnv's create_app): up to `max_sessions` weeks at once, each
    under the seeds rules of `purpose`, scored by `grader`."""
    check_purpose(purpose)
    check_grader(grader)
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_sessions must be an integer >= 1, got {max_sessions!r}")
    app = create_app(partial(RhythmEnvironment, purpose=purpose, grader=grader), RhythmAction, RhythmObservation,
                     env_name="rhythm_env", max_concurrent_envs=max_sessions, state_cls=RhythmState)
    _serve_one_http_week(app, RhythmEnvironment(purpose=purpose, grader=grader))
    app.add_exception_handler(RhythmRequestError, _bad_request)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(WebSocketDisconnect, _client_gone)
    return app


HTTP_WEEK_ROUTES = ("/reset", "/step", "/state")


def _serve_one_http_week(app, environment: RhythmEnvironment) -> None:
    """Answer HTTP's /reset, /step and /state from `environment`, one week that HTTP callers share, in place
    of OpenEnv's, which make a fresh environment per request (a step there never has a week)."""
    app.router.routes[:] = [route for route in app.router.routes
                            if not (isinstance(route, APIRoute) and route.path in HTTP_WEEK_ROUTES)]
    one_at_a_time = asyncio.Lock()

    @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"],
              summary="Start the HTTP week (shared by HTTP callers; a WebSocket session has its own)")
    async def reset(request: Annotated[ResetRequest, Body(default_factory=ResetRequest)]) -> ResetResponse:
        async with one_at_a_time:
            observation = environment.reset(**request.model_dump(exclude_unset=True))
        return ResetResponse(**serialize_observation(observation))

    @app.post("/step", response_model=StepResponse, tags=["Environment Control"],
              summary="Play one slot of the HTTP week")
    async def step(request: StepRequest) -> StepResponse:
        try:
            action = deserialize_action(request.action, RhythmAction)
        except ValidationError as exc:
            raise HTTPException(status_code=422, detail=exc.errors()) from None
        async with one_at_a_time:
            observation = environment.step(action)
        return StepResponse(**serialize_observation(observation))

    @app.get("/state", response_model=RhythmState, tags=["State Management"], summary="The HTTP week's state")
    async def state() -> RhythmState:
        return environment.state


async def _bad_request(_request, exc: RhythmRequestError):
    return JSONResponse(status_code=400, content={"detail": str(exc)})


def _non_finite(value: float) -> str:
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def _finite_json(value: Any) -> Any:
    """`value` with every non-finite float written as a string: JSON has no NaN or Infinity, and an answer
    that echoes one (a validation error's `input`) would otherwise fail to serialise, a 500."""
    if isinstance(value, float) and not math.isfinite(value):
        return _non_finite(value)
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _error_lines(errors: list) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'request'}: {e.get('msg')}" for e in errors)


async def _http_error(_request, exc: HTTPException):
    # OpenEnv's /step answers a refused action with HTTPException(422, errors()): the same answer, serialisable.
    content = {"detail": _finite_json(jsonable_encoder(exc.detail, custom_encoder={float: lambda f: f}))}
    if exc.status_code == 422 and isinstance(exc.detail, list):
        content["message"] = _error_lines(exc.detail)
    return JSONResponse(status_code=exc.status_code, content=content, headers=getattr(exc, "headers", None))


async def _invalid_request(_request, exc: RequestValidationError):
    errors = _finite_json(jsonable_encoder(exc.errors(), custom_encoder={float: lambda f: f}))
    return JSONResponse(status_code=422, content={"detail": errors, "message": _error_lines(errors)})


async def _client_gone(_websocket, _exc) -> None:
    # OpenEnv closes each session's socket after its client has closed it, which raises this; nothing to
    # answer, and uvicorn would otherwise log a traceback for every session that ends.
    return None


def serve(app, sock, on_ready=None) -> None:
    """Serve `app` on the bound socket `sock` until Ctrl-C or SIGTERM, which shut it down gracefully;
    `on_ready()` is called once it accepts requests."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.started and on_ready is not None:
                on_ready()

    server = Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the signal it stopped on once it has shut down
        pass


class RhythmServerError(RuntimeError):
    """The server refused a request; the message names the fields a validation error is about."""


def _error_text(data: dict) -> str:
    parts = [str(data.get("message", "unknown error"))]
    for error in data.get("errors") or []:
        where = ".".join(str(p) for p in error.get("loc", ())) or "request"
        got = "" if error.get("input") is None else f" (got {error.get('input')!r})"
        parts.append(f"{where}: {error.get('msg')}{got}")
    return "; ".join(parts) + f" [{data.get('code', 'UNKNOWN')}]"


class RhythmEnvClient(EnvClient[RhythmAction, RhythmObservation, RhythmState]):
    """A WebSocket session of `rhythm serve-env` (async; `.sync()` for the blocking wrapper)."""

    def _step_payload(self, action: RhythmAction) -> dict:
        return action.model_dump()

    def _parse_result(self, payload: dict) -> StepResult[RhythmObservation]:
        observation = RhythmObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=payload.get("done", False))
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict) -> RhythmState:
        return RhythmState(**payload)

    async def _send_and_receive(self, message: dict) -> dict:
        # EnvClient's own drops a validation error's details: these say which field was wrong. A server at
        # capacity answers the session's first message with its error and closes: the answer is read even
        # when the close came first, so the client past --max-sessions learns why.
        from websockets.exceptions import ConnectionClosed

        try:
            await self._send(message)
        except ConnectionClosed:
            pass
        try:
            response = await self._receive()
        except ConnectionClosed as exc:
            raise RhythmServerError(f"the server closed the session ({exc}); a server at its --max-sessions "
                                    "limit refuses new sessions") from exc
        if response.get("type") == "error":
            raise RhythmServerError(f"server error: {_error_text(response.get('data', {}))}")
        return response


__all__ = ["RhythmAction", "RhythmEnvClient", "RhythmEnvironment", "RhythmObservation",
           "RhythmRequestError", "RhythmServerError", "RhythmState", "create_rhythm_app", "serve"]

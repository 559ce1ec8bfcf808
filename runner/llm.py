"""The one module that talks to language models, through litellm.

- litellm is imported lazily, once per process, and only here (`import litellm` costs 5-10 s; the CLI's
  start-up path and the TUI never pay for it). LITELLM_LOCAL_MODEL_COST_MAP is set before the import so
  litellm reads its bundled price table instead of fetching one over the network.
- Every attempt is a row of `llm_calls` (purpose, model, prompt, response, tokens, cost, duration, error,
  attempt), written in its own short transaction so a failure elsewhere never loses the log.
- Answers are structured: the schema is described in the system message and, by default, sent as
  `response_format` so servers that can (OpenAI, llama-server's grammars) constrain decoding to it. Every
  answer is validated against the pydantic model; an invalid or cut-off answer is sent back with the
  error (a couple of times), then the call fails as a whole: never half-used. What is sent back, and
  what is stored, is bounded: a runaway answer is cut to its start and end (EXCERPT_CHARS,
  STORED_CHARS) with its full length said.
- Rate limits, timeouts and connection errors are retried with exponential backoff, all within one
  deadline (`llm.timeout`) over the whole call: connecting, the headers and the body of every
  attempt and the waits between them (runner/deadline.py; a server that drips its answer a byte a
  second cannot hold a call past it). An answer without a choice is a failed attempt, not a crash.
- A dollar budget (`llm.budget_usd`, summed over `llm_calls.cost_usd`) stops further calls.
- API keys are read by litellm from the environment; they are never stored, and error texts are scrubbed
  of any environment secret before they are logged.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

import sqlite_utils
from pydantic import BaseModel, ValidationError

from kb.config import LLMSettings
from kb.db import log_event, now, transaction
from kb.errors import UserError
from kb.store import llm_calls as store
from runner.deadline import DeadlinePassed, within

T = TypeVar("T", bound=BaseModel)

Message = dict[str, str]
MockItem = str | BaseException

MAX_BACKOFF_S = 60.0
EXCERPT_CHARS = 1500
"""An invalid answer goes back to the model as its first and last this many characters: enough to
see what went wrong, and a runaway 5 MB answer does not make every retry's prompt 5 MB bigger."""
STORED_CHARS = 100_000
"""An answer is stored in llm_calls as its first and last this many characters (with its length)."""
MAX_ERROR_CHARS = 2000
# Errors worth waiting for; anything else (bad key, unknown model, bad request) fails at once.
_RETRYABLE = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "ServiceUnavailableError",
    "InternalServerError",
    "BadGatewayError",
    "EmptyAnswer",
)


class EmptyAnswer(Exception):
    """The server answered without a choice: a failed attempt (retried like a server error)."""


_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)

_litellm: ModuleType | None = None


def litellm_module() -> ModuleType:
    """Import litellm once, quietly, with the bundled cost map (no network fetch at import)."""
    global _litellm
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True  # no "Provider List: ..." banners on stderr
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


class LLMError(UserError):
    """A model call failed for good (after retries); the attempts are in llm_calls."""


class BudgetExceeded(LLMError):
    """The LLM dollar budget is spent; no further calls are made."""


class ContextExceeded(LLMError):
    """The prompt did not fit the model's context window; `limit` is the window the server named
    (None when it did not say). The caller may ask again with a shorter prompt."""

    def __init__(self, message: str, limit: int | None) -> None:
        super().__init__(message)
        self.limit = limit


CHARS_PER_TOKEN = 3.0
"""A conservative characters-per-token figure for prompts of code (prose is nearer 4)."""
_CONTEXT_SIZE = re.compile(
    r"(?:context (?:size|length|window)|maximum context length)\D{0,40}?(\d{3,7}) tokens", re.IGNORECASE
)


def context_limit(error: str) -> int | None:
    """The context window a "context exceeded" error names: llama-server's "available context size
    (16384 tokens)", OpenAI's "maximum context length is 8192 tokens", ...; None if it names none."""
    found = _CONTEXT_SIZE.search(error)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class LLMConfig:
    model: str
    api_base: str | None = None
    budget_usd: float = 5.0
    timeout: float = 120.0
    max_retries: int = 3
    temperature: float = 0.2
    max_tokens: int | None = None
    structured_output: Literal["json_schema", "prompt"] = "json_schema"
    context_tokens: int | None = None

    @classmethod
    def from_settings(
        cls, settings: LLMSettings, *, model: str | None = None, api_base: str | None = None
    ) -> LLMConfig:
        """Config values, overridden by --model / --api-base. A missing model is a one-line error."""
        chosen = (model or settings.model).strip()
        if not chosen:
            raise UserError(
                "llm.model: no model configured (set llm.model in autoresearch.toml or pass --model)"
            )
        # The same fields as the settings section: only model and api_base are overridden here.
        return cls(
            **settings.model_dump(exclude={"model", "api_base"}),
            model=chosen,
            api_base=(api_base or settings.api_base or None),
        )


@dataclass(frozen=True)
class StructuredResult(Generic[T]):
    value: T
    call_id: int
    """The llm_calls row of the accepted answer (hypotheses and patches cite it)."""
    raw: str
    """The model's accepted answer text."""
    messages: list[Message]
    """The conversation that led to it, ending with the model's answer (for follow-up turns)."""


def spent_usd(db: sqlite_utils.Database) -> float:
    return store.spent_usd(db)


def _secrets() -> list[str]:
    return [v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 8]


def scrub(text: str) -> str:
    """Remove any environment secret from a text that is about to be stored or printed."""
    for secret in _secrets():
        text = text.replace(secret, "***")
    return text


def _public_base(api_base: str | None) -> str | None:
    """The api_base without user:password@, if any."""
    if not api_base:
        return None
    parts = urlsplit(api_base)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return api_base


def extract_json(text: str) -> str:
    """The JSON object in an answer: models like to wrap it in ``` fences or a sentence."""
    stripped = text.strip()
    fence = re.search(r"```(?:json)?\s*\n(.*?)\n\s*```", stripped, re.DOTALL)
    if fence:
        stripped = fence.group(1).strip()
    if not stripped.startswith("{"):
        start, end = stripped.find("{"), stripped.rfind("}")
        if start != -1 and end > start:
            stripped = stripped[start : end + 1]
    return stripped


def excerpt(text: str, keep: int) -> str:
    """`text`, or its first and last `keep` characters around a note of what was left out."""
    if len(text) <= 2 * keep:
        return text
    left_out = len(text) - 2 * keep
    return f"{text[:keep]}\n[... {left_out:,} characters left out of {len(text):,} ...]\n{text[-keep:]}"


def _explain(exc: ValidationError | ValueError) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:6]:
            where = ".".join(str(p) for p in err["loc"]) or "(answer)"
            parts.append(f"{where}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)


def schema_instruction(schema: type[BaseModel]) -> str:
    return (
        "Answer with exactly one JSON object and nothing else (no prose, no code fences). "
        "It must validate against this JSON Schema:\n" + json.dumps(schema.model_json_schema(), indent=1)
    )


def with_schema(messages: Sequence[Message], schema: type[BaseModel]) -> list[Message]:
    """The caller's messages with the schema instruction added to the (first) system message."""
    out = [dict(m) for m in messages]
    instruction = schema_instruction(schema)
    for message in out:
        if message["role"] == "system":
            message["content"] = f"{message['content']}\n\n{instruction}"
            return out
    return [{"role": "system", "content": instruction}, *out]


def response_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI-style `response_format` that makes a server constrain decoding to `schema`."""
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False},
    }


def _usage(response: Any) -> tuple[int | None, int | None]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None, None
    return getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)


@dataclass
class LLMClient:
    """Structured calls to one model, logged to one workspace database."""

    db: sqlite_utils.Database
    config: LLMConfig
    run_id: int | None = None
    backoff_s: float = 2.0
    validation_retries: int = 2
    """Times an invalid answer is sent back with its validation error before the call fails."""
    mock_responses: list[MockItem] | None = None
    """Tests: litellm's `mock_response`, one item per model call in order (the last one repeats)."""
    sleep: Callable[[float], None] = time.sleep
    _mock_index: int = field(default=0, init=False)
    _step: str | None = field(default=None, init=False)
    """The step key of the call in progress (complete_structured's `step`), stored on its rows."""
    _learned_context: int | None = field(default=None, init=False)
    """The context window a server named when a prompt did not fit (used for later prompts)."""

    def context_tokens(self) -> int | None:
        """The model's context window: llm.context_tokens, else what the server said, else
        litellm's figure for a known model; None when nothing says."""
        if self.config.context_tokens is not None:
            return self.config.context_tokens
        if self._learned_context is not None:
            return self._learned_context
        if self.config.api_base:
            return None  # a local server serves whatever it was started with, whatever its name
        try:
            info = litellm_module().get_model_info(self.config.model)
        except Exception:  # an unmapped model
            return None
        tokens = info.get("max_input_tokens") or info.get("max_tokens")
        return int(tokens) if isinstance(tokens, int) and tokens > 0 else None

    def prompt_chars(self) -> int | None:
        """How many characters a prompt may hold to fit the context window with room for the
        answer (and a retry's follow-up turns); None: no known limit."""
        tokens = self.context_tokens()
        if tokens is None:
            return None
        answer = self.config.max_tokens or min(4096, tokens // 4)
        return max(4000, int((tokens - answer) * CHARS_PER_TOKEN * 0.75))

    def _replay(
        self,
        step: str,
        conversation: list[Message],
        schema: type[T],
        validate: Callable[[T], None] | None,
    ) -> StructuredResult[T] | None:
        stored = store.answer_for_step(self.db, step)
        if stored is None:
            return None
        try:
            value = schema.model_validate_json(extract_json(stored["response"]))
            if validate is not None:
                validate(value)
        except (ValidationError, ValueError):
            return None  # stored cut short (STORED_CHARS) or by another schema: ask again
        with transaction(self.db):
            log_event(
                self.db,
                "llm.replayed",
                f"{step}: the answer of llm call {stored['id']} used again",
                run_id=self.run_id,
            )
        text = stored["response"]
        return StructuredResult(
            value=value,
            call_id=int(stored["id"]),
            raw=text,
            messages=[*conversation, {"role": "assistant", "content": text}],
        )

    def _next_mock(self) -> MockItem | None:
        if not self.mock_responses:
            return None
        item = self.mock_responses[min(self._mock_index, len(self.mock_responses) - 1)]
        self._mock_index += 1
        return item

    def _log(self, row: dict[str, Any]) -> int:
        with transaction(self.db):
            return store.create(self.db, row)

    def _check_budget(self, purpose: str, prompt: str, hypothesis_id: int | None) -> None:
        spent = spent_usd(self.db)
        if spent >= self.config.budget_usd:
            message = (
                f"llm budget reached: ${spent:.4f} spent of llm.budget_usd ${self.config.budget_usd:.2f}; "
                "no further model calls (raise llm.budget_usd in autoresearch.toml to continue)"
            )
            with transaction(self.db):
                store.create(self.db, self._row(purpose, prompt, hypothesis_id, 0, error=message))
                log_event(self.db, "llm.budget", message, level="warning", run_id=self.run_id)
            raise BudgetExceeded(message)

    def _row(
        self, purpose: str, prompt: str, hypothesis_id: int | None, attempt: int, **values: Any
    ) -> dict[str, Any]:
        return {
            "purpose": purpose,
            "model": self.config.model,
            "api_base": _public_base(self.config.api_base),
            "prompt": prompt,
            "attempt": attempt,
            "run_id": self.run_id,
            "hypothesis_id": hypothesis_id,
            "step": self._step,
            "created_at": now(),
            **values,
        }

    def _completion(self, messages: list[Message], schema: type[BaseModel] | None, left: float) -> Any:
        litellm = litellm_module()
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "timeout": left,
            "temperature": self.config.temperature,
            # Retries are ours (each one logged); stop litellm and the openai client retrying silently.
            "num_retries": 0,
            "max_retries": 0,
            # A provider without response_format (or temperature) gets the call without it.
            "drop_params": True,
        }
        if self.config.max_tokens is not None:
            kwargs["max_tokens"] = self.config.max_tokens
        if schema is not None and self.config.structured_output == "json_schema":
            kwargs["response_format"] = response_format(schema)
        if self.config.api_base:
            kwargs["api_base"] = self.config.api_base
            if self.config.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                kwargs["api_key"] = "no-key"  # a local OpenAI-compatible server needs none; the client does
        mock = self._next_mock()
        if mock is not None:
            kwargs["mock_response"] = mock
        return within(left, lambda: litellm.completion(**kwargs))

    def _cost(self, response: Any) -> float | None:
        """Dollar cost from litellm's price table; None when the model has no known price."""
        litellm = litellm_module()
        try:
            return float(litellm.completion_cost(completion_response=response))
        except Exception:  # unmapped models (local servers) raise; their cost is unknown
            hidden = getattr(response, "_hidden_params", {}) or {}
            cost = hidden.get("response_cost")
            return float(cost) if cost is not None else None

    def _transport(
        self,
        purpose: str,
        messages: list[Message],
        hypothesis_id: int | None,
        attempt: int,
        schema: type[BaseModel] | None = None,
    ) -> tuple[int, str, int, bool]:
        """One answer from the model, retrying transient errors.

        Returns (call id, text, next attempt, whether the answer was cut off at the token limit)."""
        prompt = json.dumps(messages, ensure_ascii=False)
        failures = 0
        deadline = time.monotonic() + self.config.timeout
        while True:
            self._check_budget(purpose, prompt, hypothesis_id)
            started = time.monotonic()
            try:
                response = self._completion(messages, schema, deadline - started)
                if not getattr(response, "choices", None):
                    raise EmptyAnswer("the answer holds no choice (choices: [])")
            except (Exception, DeadlinePassed) as exc:
                duration = int((time.monotonic() - started) * 1000)
                kind = type(exc).__name__
                detail = scrub(" ".join(str(exc).split()))[:2000]
                if isinstance(exc, DeadlinePassed):
                    kind, detail = "Timeout", f"no answer within llm.timeout ({self.config.timeout:g} s)"
                error = f"{kind}: {detail}"
                call_id = self._log(
                    self._row(purpose, prompt, hypothesis_id, attempt, error=error, duration_ms=duration)
                )
                attempt += 1
                if kind == "ContextWindowExceededError":
                    limit = context_limit(detail)
                    if limit is not None:
                        self._learned_context = limit
                    raise ContextExceeded(
                        f"{purpose}: the prompt ({len(prompt):,} characters) does not fit the context "
                        f"window of {self.config.model}"
                        + (f" ({limit} tokens)" if limit else "")
                        + f" (llm call {call_id})",
                        limit,
                    ) from None
                retryable = kind in _RETRYABLE
                wait = min(MAX_BACKOFF_S, self.backoff_s * 2**failures)
                in_time = time.monotonic() + wait < deadline
                if retryable and failures < self.config.max_retries and in_time:
                    failures += 1
                    self.sleep(wait)
                    continue
                spent = "" if in_time or failures >= self.config.max_retries else ", llm.timeout spent"
                why = f"after {failures + 1} attempts{spent}" if retryable else "(not retryable)"
                raise LLMError(
                    f"{purpose}: model {self.config.model} failed {why}: {error[:300]} (llm call {call_id})"
                ) from None
            duration = int((time.monotonic() - started) * 1000)
            choice = response.choices[0]
            text = choice.message.content or ""
            tokens_in, tokens_out = _usage(response)
            call_id = self._log(
                self._row(
                    purpose,
                    prompt,
                    hypothesis_id,
                    attempt,
                    response=excerpt(text, STORED_CHARS),
                    input_tokens=tokens_in,
                    output_tokens=tokens_out,
                    cost_usd=self._cost(response),
                    duration_ms=duration,
                )
            )
            return call_id, text, attempt + 1, getattr(choice, "finish_reason", None) == "length"

    def complete_structured(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: type[T],
        *,
        hypothesis_id: int | None = None,
        validate: Callable[[T], None] | None = None,
        decode_schema: type[BaseModel] | None = None,
        step: str | None = None,
    ) -> StructuredResult[T]:
        """Ask for an answer matching `schema`; invalid answers are sent back with the error.

        `decode_schema` is a tighter schema (e.g. no more items than asked for) sent as
        `response_format` in place of `schema`; validation stays with `schema`, so a model that
        decodes freely and gives a little more is not sent back for it.

        `validate` may raise ValueError for checks the schema cannot express (e.g. a diff that must
        name files); that counts as invalid too. Raises LLMError (BudgetExceeded) when no valid
        answer comes; every attempt is in llm_calls either way.

        `step` names a step of a resumable process (the autopilot's research phase): when a valid
        answer to the same step is stored already (a run killed after the call, then resumed), it
        is used again and no model call is made or paid for twice.
        """
        conversation = with_schema(messages, schema)
        if step is not None:
            replayed = self._replay(step, conversation, schema, validate)
            if replayed is not None:
                return replayed
        self._step = step
        attempt = 1
        last_error = ""
        for _ in range(self.validation_retries + 1):
            call_id, text, attempt, cut_off = self._transport(
                purpose, conversation, hypothesis_id, attempt, decode_schema or schema
            )
            try:
                value = schema.model_validate_json(extract_json(text))
                if validate is not None:
                    validate(value)
            except (ValidationError, ValueError) as exc:
                last_error = _explain(exc)[:MAX_ERROR_CHARS]
                if cut_off:
                    limit = self.config.max_tokens or "the server's"
                    last_error = f"cut off at the token limit ({limit}) before it was complete: {last_error}"
                size = f" ({len(text):,} characters)" if len(text) > 2 * EXCERPT_CHARS else ""
                with transaction(self.db):
                    store.set_error(self.db, call_id, f"invalid answer{size}: {last_error}"[:MAX_ERROR_CHARS])
                shown = (
                    f" (it was {len(text):,} characters long; only its start and end are shown above)"
                    if size
                    else ""
                )
                conversation = [
                    *conversation,
                    {"role": "assistant", "content": excerpt(text, EXCERPT_CHARS)},
                    {
                        "role": "user",
                        "content": f"That answer is invalid: {last_error}{shown}. Reply again with only "
                        f"the corrected JSON object{', kept shorter' if cut_off or size else ''}.",
                    },
                ]
                continue
            return StructuredResult(
                value=value,
                call_id=call_id,
                raw=text,
                messages=[*conversation, {"role": "assistant", "content": text}],
            )
        message = (
            f"{purpose}: model {self.config.model} gave no valid answer in "
            f"{self.validation_retries + 1} tries: {last_error[:300]}"
        )
        with transaction(self.db):
            log_event(self.db, "llm.invalid", message, level="error", run_id=self.run_id)
        raise LLMError(message)


def client_for(
    db: sqlite_utils.Database,
    settings: LLMSettings,
    *,
    model: str | None = None,
    api_base: str | None = None,
    run_id: int | None = None,
) -> LLMClient:
    return LLMClient(db, LLMConfig.from_settings(settings, model=model, api_base=api_base), run_id=run_id)

"""runner.llm through litellm: mock_response for the unit tests, a real HTTP server for timeouts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from kb.db import connect, insert, now, one, rows
from kb.errors import UserError
from runner.llm import (
    BudgetExceeded,
    LLMClient,
    LLMConfig,
    LLMError,
    extract_json,
    litellm_module,
    spent_usd,
)
from tests.runner.research_support import ScriptedLLM

SECRET = "sk-test-0123456789abcdef"


class Answer(BaseModel):
    title: str = Field(min_length=3)
    effect: float


VALID = '{"title": "fuse rms norm", "effect": 0.03}'
MESSAGES = [{"role": "system", "content": "You propose."}, {"role": "user", "content": "Go."}]


@pytest.fixture
def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = connect(tmp_path / "t.db")
    yield database
    database.conn.close()


def client(db, mocks, **config) -> LLMClient:  # type: ignore[no-untyped-def]
    sleeps: list[float] = []
    c = LLMClient(
        db,
        LLMConfig(model=config.pop("model", "gpt-4o-mini"), **config),
        mock_responses=mocks,
        sleep=sleeps.append,
        backoff_s=0.5,
    )
    c.sleeps = sleeps  # type: ignore[attr-defined]
    return c


def calls(db) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    return rows(db, "SELECT * FROM llm_calls ORDER BY id")


def test_a_valid_answer_is_parsed_and_logged(db) -> None:  # type: ignore[no-untyped-def]
    result = client(db, [VALID]).complete_structured("research", MESSAGES, Answer, hypothesis_id=None)
    assert result.value == Answer(title="fuse rms norm", effect=0.03)
    [row] = calls(db)
    assert result.call_id == row["id"]
    assert row["purpose"] == "research" and row["model"] == "gpt-4o-mini" and row["attempt"] == 1
    assert row["response"] == VALID and row["error"] is None
    assert row["input_tokens"] == 10 and row["output_tokens"] == 20  # litellm's mock usage
    assert row["cost_usd"] > 0  # priced from litellm's bundled table
    assert row["duration_ms"] >= 0
    prompt = json.loads(row["prompt"])
    assert prompt[0]["role"] == "system" and "JSON Schema" in prompt[0]["content"]
    assert '"effect"' in prompt[0]["content"]
    assert result.messages[-1] == {"role": "assistant", "content": VALID}


def test_fenced_json_is_accepted() -> None:
    assert extract_json('Sure!\n```json\n{"a": 1}\n```\nDone.') == '{"a": 1}'
    assert extract_json('Here it is: {"a": {"b": 2}} hope it helps') == '{"a": {"b": 2}}'


def test_malformed_json_is_sent_back_then_accepted(db) -> None:  # type: ignore[no-untyped-def]
    c = client(db, ['{"title": "fuse", "effect": ', VALID])
    result = c.complete_structured("research", MESSAGES, Answer)
    assert result.value.effect == 0.03
    first, second = calls(db)
    assert first["error"].startswith("invalid answer: ") and first["attempt"] == 1
    assert second["error"] is None and second["attempt"] == 2 and result.call_id == second["id"]
    retry_prompt = json.loads(second["prompt"])
    assert retry_prompt[-2] == {"role": "assistant", "content": '{"title": "fuse", "effect": '}
    assert "That answer is invalid" in retry_prompt[-1]["content"]


def test_an_answer_that_never_validates_fails_whole(db) -> None:  # type: ignore[no-untyped-def]
    c = client(db, ['{"title": "x", "effect": "big"}'])
    with pytest.raises(
        LLMError, match=r"research: model gpt-4o-mini gave no valid answer in 3 tries: .*title"
    ):
        c.complete_structured("research", MESSAGES, Answer)
    logged = calls(db)
    assert [r["attempt"] for r in logged] == [1, 2, 3]
    assert all("invalid answer" in r["error"] and "effect" in r["error"] for r in logged)
    assert one(db, "SELECT level FROM events WHERE kind = 'llm.invalid'") == {"level": "error"}


def test_an_extra_check_counts_as_invalid(db) -> None:  # type: ignore[no-untyped-def]
    def no_negative(answer: Answer) -> None:
        if answer.effect < 0:
            raise ValueError("effect: must not be negative")

    c = client(db, ['{"title": "slower", "effect": -0.1}', VALID])
    assert c.complete_structured("research", MESSAGES, Answer, validate=no_negative).value.effect == 0.03
    assert "must not be negative" in calls(db)[0]["error"]


def test_rate_limits_are_retried_with_backoff(db) -> None:  # type: ignore[no-untyped-def]
    c = client(db, ["litellm.RateLimitError", "litellm.RateLimitError", VALID], max_retries=3)
    assert c.complete_structured("queries", MESSAGES, Answer).value.title == "fuse rms norm"
    assert c.sleeps == [0.5, 1.0]  # type: ignore[attr-defined]
    logged = calls(db)
    assert [r["error"].split(":")[0] if r["error"] else None for r in logged] == [
        "RateLimitError",
        "RateLimitError",
        None,
    ]
    assert [r["attempt"] for r in logged] == [1, 2, 3]


def test_retries_run_out(db) -> None:  # type: ignore[no-untyped-def]
    c = client(db, ["litellm.RateLimitError"], max_retries=2)
    with pytest.raises(LLMError, match="failed after 3 attempts: RateLimitError"):
        c.complete_structured("queries", MESSAGES, Answer)
    assert len(calls(db)) == 3


def test_errors_that_retrying_cannot_fix_fail_at_once_and_keys_are_scrubbed(
    db,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    litellm = litellm_module()
    bad_key = litellm.AuthenticationError(
        message=f"Incorrect API key provided: {SECRET}", llm_provider="openai", model="gpt-4o-mini"
    )
    c = client(db, [bad_key], api_base="https://user:hunter2secret@llm.example.invalid/v1")
    with pytest.raises(LLMError, match="not retryable") as info:
        c.complete_structured("patch", MESSAGES, Answer)
    assert SECRET not in str(info.value)
    [row] = calls(db)
    assert row["error"].startswith("AuthenticationError") and "***" in row["error"]
    assert SECRET not in json.dumps(row) and "hunter2secret" not in json.dumps(row)
    assert row["api_base"] == "https://llm.example.invalid/v1"
    assert c.sleeps == []  # type: ignore[attr-defined]


def test_the_budget_stops_further_calls(db) -> None:  # type: ignore[no-untyped-def]
    c = client(db, [VALID], budget_usd=0.00001)  # one gpt-4o-mini mock call costs $0.0000135
    c.complete_structured("research", MESSAGES, Answer)
    assert spent_usd(db) > 0.00001
    with pytest.raises(
        BudgetExceeded, match=r"llm budget reached: \$0\.0000 spent of llm.budget_usd \$0\.00"
    ):
        c.complete_structured("research", MESSAGES, Answer)
    logged = calls(db)
    assert (
        len(logged) == 2 and logged[1]["error"].startswith("llm budget reached") and logged[1]["attempt"] == 0
    )
    assert logged[1]["response"] is None
    assert one(db, "SELECT level FROM events WHERE kind = 'llm.budget'") == {"level": "warning"}


def test_a_spent_budget_makes_no_model_call(db) -> None:  # type: ignore[no-untyped-def]
    insert(
        db,
        "llm_calls",
        {"purpose": "research", "model": "x", "prompt": "[]", "cost_usd": 5.0, "created_at": now()},
    )
    c = client(db, [VALID], budget_usd=5.0)
    with pytest.raises(BudgetExceeded):
        c.complete_structured("research", MESSAGES, Answer)
    assert c._mock_index == 0  # litellm was never called


def test_no_model_is_a_one_line_error() -> None:
    from kb.config import LLMSettings

    with pytest.raises(UserError, match="llm.model: no model configured"):
        LLMConfig.from_settings(LLMSettings())
    config = LLMConfig.from_settings(LLMSettings(model="gpt-4o", api_base="http://a"), model="openai/x")
    assert config.model == "openai/x" and config.api_base == "http://a"


def test_a_timeout_through_a_real_http_server(db, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A server error is retried within llm.timeout; the retry is answered."""
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with ScriptedLLM([{"status": 503, "content": "busy"}, VALID]) as server:
        c = LLMClient(
            db,
            LLMConfig(model=server.litellm_model, api_base=server.base_url, timeout=20, max_retries=1),
            backoff_s=0.01,
        )
        result = c.complete_structured("research", MESSAGES, Answer)
    assert result.value.title == "fuse rms norm"
    first, second = calls(db)
    assert first["error"].startswith("ServiceUnavailableError")
    assert second["error"] is None and second["cost_usd"] is None  # a local model has no price
    assert second["input_tokens"] == 100 and second["api_base"] == server.base_url
    # The key reached the server as litellm sends it, and is nowhere in the database.
    assert server.requests[-1]["_authorization"] == "Bearer dummy-key-for-tests"
    assert "dummy-key-for-tests" not in json.dumps(calls(db))


@pytest.mark.parametrize("retries", [0, 3])
def test_a_server_dripping_its_answer_is_cut_at_the_deadline(  # type: ignore[no-untyped-def]
    db, monkeypatch: pytest.MonkeyPatch, retries: int
) -> None:
    """llm.timeout is one deadline over the whole call (connect, headers, body, retries): a server
    that sends its answer one byte a second cannot hold a 3-second call longer (issue 29: it held
    an 8-second one for 131.6 s, and past 300 s with retries)."""
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with ScriptedLLM([{"drip": 1.0, "content": VALID}]) as server:
        config = LLMConfig(
            model=server.litellm_model, api_base=server.base_url, timeout=3, max_retries=retries
        )
        c = LLMClient(db, config, backoff_s=0.2)
        started = time.monotonic()
        with pytest.raises(LLMError, match=r"Timeout: no answer within llm.timeout \(3 s\)"):
            c.complete_structured("research", MESSAGES, Answer)
        took = time.monotonic() - started
    assert 2.9 < took < 4.5, took
    logged = calls(db)
    assert logged and all(row["error"].startswith("Timeout") for row in logged)
    assert sum(row["duration_ms"] for row in logged) < 4500


def test_the_deadline_holds_in_a_thread_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signals reach the main thread only: a call made in another thread is still cut at its deadline."""
    import threading

    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    outcome: list[BaseException | float] = []
    with ScriptedLLM([{"drip": 1.0, "content": VALID}]) as server:
        config = LLMConfig(model=server.litellm_model, api_base=server.base_url, timeout=2, max_retries=0)

        def call() -> None:
            started = time.monotonic()
            try:
                LLMClient(connect(tmp_path / "t.db"), config).complete_structured(
                    "research", MESSAGES, Answer
                )
            except LLMError as exc:
                outcome.extend([exc, time.monotonic() - started])

        worker = threading.Thread(target=call)
        worker.start()
        worker.join(20)
    assert len(outcome) == 2 and "no answer within llm.timeout (2 s)" in str(outcome[0])
    assert isinstance(outcome[1], float) and outcome[1] < 3.5


def test_an_answer_without_a_choice_is_one_line(db, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    empty = {
        "payload": {"id": "x", "object": "chat.completion", "created": 1, "model": "scripted", "choices": []}
    }
    with ScriptedLLM([empty]) as server:
        config = LLMConfig(model=server.litellm_model, api_base=server.base_url, max_retries=1)
        with pytest.raises(LLMError, match="after 2 attempts: EmptyAnswer: the answer holds no choice"):
            LLMClient(db, config, backoff_s=0.01).complete_structured("research", MESSAGES, Answer)
    assert [row["error"][:11] for row in calls(db)] == ["EmptyAnswer", "EmptyAnswer"]


def test_the_schema_constrains_decoding_and_cut_off_answers_fail_whole(  # type: ignore[no-untyped-def]
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs none
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    cut = {"content": '{"title": "fuse rms', "finish_reason": "length"}
    with ScriptedLLM([cut]) as server:
        c = LLMClient(db, LLMConfig(model=server.litellm_model, api_base=server.base_url, max_tokens=12))
        cut_off = r"gave no valid answer in 3 tries: cut off at the token limit \(12\)"
        with pytest.raises(LLMError, match=cut_off):
            c.complete_structured("research", MESSAGES, Answer)
    first = server.requests[0]
    assert first["response_format"]["type"] == "json_schema"
    assert first["response_format"]["json_schema"]["name"] == "Answer"
    assert first["response_format"]["json_schema"]["schema"] == Answer.model_json_schema()
    assert first["max_tokens"] == 12 and first["_authorization"] == "Bearer no-key"
    # Each retry was told why, and asked for a shorter answer.
    assert "cut off at the token limit (12)" in server.requests[1]["messages"][-1]["content"]
    assert "kept shorter" in server.requests[1]["messages"][-1]["content"]
    logged = calls(db)
    assert len(logged) == 3 and all("cut off at the token limit (12)" in c["error"] for c in logged)


def test_a_complete_answer_at_the_limit_is_kept_and_prompt_mode_sends_no_schema(  # type: ignore[no-untyped-def]
    db, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-tests")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with ScriptedLLM([{"content": VALID, "finish_reason": "length"}]) as server:
        config = LLMConfig(model=server.litellm_model, api_base=server.base_url, structured_output="prompt")
        result = LLMClient(db, config).complete_structured("research", MESSAGES, Answer)
    assert result.value.title == "fuse rms norm"
    assert "response_format" not in server.requests[0] and "max_tokens" not in server.requests[0]
    assert "JSON Schema" in server.requests[0]["messages"][0]["content"]


def test_a_huge_invalid_answer_is_sent_back_and_stored_as_a_bounded_excerpt(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from runner.llm import EXCERPT_CHARS, STORED_CHARS

    # 4.8 MB that never closes its string: invalid every time, as a runaway model's answer is.
    huge = '{"title": "' + "x" * 4_800_000 + "END"
    c = client(db, [huge])
    with pytest.raises(LLMError, match="gave no valid answer in 3 tries"):
        c.complete_structured("research", MESSAGES, Answer)
    logged = calls(db)
    assert len(logged) == 3
    first_prompt = len(logged[0]["prompt"])
    for row in logged:
        # Each retry adds an excerpt, not the answer: the prompt grows by a few KB, not 4.8 MB.
        assert len(row["prompt"]) < first_prompt + 3 * (2 * EXCERPT_CHARS + 2000)
        assert len(row["response"]) < 2 * STORED_CHARS + 200
        assert row["response"].startswith('{"title": "xxx') and row["response"].endswith("xxxEND")
        assert f"characters left out of {len(huge):,}" in row["response"]
        assert row["error"].startswith(f"invalid answer ({len(huge):,} characters): ")
    sent_back = json.loads(logged[2]["prompt"])
    assert [m["role"] for m in sent_back[-4:]] == ["assistant", "user", "assistant", "user"]
    answer = sent_back[-2]["content"]
    assert (
        answer.startswith('{"title": "xxx')
        and answer.endswith("xxxEND")
        and len(answer) < 2 * EXCERPT_CHARS + 100
    )
    assert f"it was {len(huge):,} characters long" in sent_back[-1]["content"]
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = sum(p.stat().st_size for p in tmp_path.glob("t.db*"))
    assert size < 2_000_000, size  # was 49 MB: every retry carried the whole answer twice


def test_a_short_invalid_answer_is_sent_back_whole(db) -> None:  # type: ignore[no-untyped-def]
    bad = '{"title": "ab", "effect": 0.1}'
    c = client(db, [bad, VALID])
    assert c.complete_structured("research", MESSAGES, Answer).value.effect == 0.03
    retry = json.loads(calls(db)[1]["prompt"])
    assert retry[-2] == {"role": "assistant", "content": bad}
    assert "characters long" not in retry[-1]["content"]

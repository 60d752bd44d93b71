"""The run log store: what is written comes back, filters find the right runs, ids resolve by
prefix, secrets never reach the file, and logging can be switched off."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from phi_core.errors import RunNotFoundError, UserError
from phi_core.runlog import (
    MAX_COUNT,
    BranchRecord,
    RouteEventRecord,
    RunLog,
    RunQuery,
    RunRecord,
    check_count,
    end_of_day,
    find_continuation,
    logging_enabled,
    new_run_id,
    parse_count,
    parse_when,
    set_logging_enabled,
    utc_iso,
)
from phi_core.types import AssistantMessage, TextContent, UserMessage


def race_record(prompt: str, *, created_at: str | None = None, **fields: object) -> RunRecord:
    history = [
        UserMessage.text(prompt).model_dump(mode="json"),
        AssistantMessage(content=[TextContent(text="B says hi")]).model_dump(mode="json"),
    ]
    values: dict[str, object] = {
        "kind": "race",
        "prompt": prompt,
        "strategy": "judge",
        "status": "ok",
        "winner": "b",
        "winner_model": "openai:gpt-4o",
        "text": "B says hi",
        "conversation_id": "conv-1",
        "verdict": {
            "strategy": "judge",
            "rationale": "b is clearer",
            "details": {"flip_rate": 0.25},
        },
        "branches": [
            BranchRecord(
                index=0,
                label="a",
                model="anthropic:claude-haiku-4-5",
                status="ok",
                text="A says hello",
            ),
            BranchRecord(
                index=1,
                label="b",
                model="openai:gpt-4o",
                status="ok",
                text="B says hi",
                winner=True,
                score=0.9,
                spec={"name": "b", "model": "openai:gpt-4o"},
            ),
        ],
        "messages": history,
    }
    values.update(fields)
    if created_at is not None:
        values["created_at"] = created_at
    return RunRecord.model_validate(values)


@pytest.fixture
def log(tmp_path: Path) -> RunLog:
    with RunLog(tmp_path / "logs.db") as opened:
        yield opened


def test_a_written_run_comes_back_whole(log: RunLog) -> None:
    record = race_record("What is entanglement?")
    record.route_events = [
        RouteEventRecord(
            run_id=record.id,
            seq=0,
            type="route_decision",
            namespace="ns",
            action="race",
            timestamp=1,
            payload={"reason": "unsure"},
        ),
    ]
    log.write(record)
    back = log.get_run(record.id)
    assert back == record
    assert back.winning_branch is not None and back.winning_branch.label == "b"
    assert [m.role for m in back.history()] == ["user", "assistant"]
    # Listings leave the history out; everything else is there.
    listed = log.list_runs()[0]
    assert listed.messages is None and listed.branches == record.branches


def test_write_many_stores_every_record_in_one_transaction_or_none(log: RunLog) -> None:
    records = [race_record(f"question {i}") for i in range(3)]
    stored = log.write_many(records)
    assert [r.id for r in stored] == [r.id for r in records]
    assert {r.id for r in log.list_runs()} == {r.id for r in records}
    # A batch with a record already stored fails whole: nothing of it is kept.
    fresh = race_record("question 3")
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        log.write_many([fresh, records[0]])
    assert fresh.id not in {r.id for r in log.list_runs()}


def test_runs_list_newest_first_and_filter_by_every_field(log: RunLog) -> None:
    old = race_record("old question", created_at="2025-01-01T00:00:00.000Z")
    mid = race_record("pairwise one", strategy="pairwise", created_at="2025-06-01T12:00:00.000Z")
    new = race_record(
        "newest",
        kind="run",
        strategy=None,
        conversation_id="conv-2",
        branches=[
            BranchRecord(
                index=0, label="local:smollm2", model="local:smollm2", status="error", error="boom"
            )
        ],
        status="error",
    )
    for record in (old, mid, new):
        log.write(record)

    def ids(**query: object) -> list[str]:
        return [r.id for r in log.list_runs(RunQuery(**query))]  # type: ignore[arg-type]

    assert ids() == [new.id, mid.id, old.id]
    assert ids(limit=1) == [new.id]
    assert ids(model="openai:gpt-4o") == [mid.id, old.id]
    assert ids(model="gpt-4o") == [mid.id, old.id]  # a bare name matches `provider:name`
    assert ids(model="a") == [mid.id, old.id]  # a branch label
    assert ids(model="gpt") == []  # not a substring match
    assert ids(strategy="pairwise") == [mid.id]
    assert ids(kind="run") == [new.id]
    assert ids(status="error") == [new.id]
    assert ids(conversation_id="conv-2") == [new.id]
    assert ids(since="2025-03-01T00:00:00.000Z", until="2025-12-31T00:00:00.000Z") == [mid.id]
    assert ids(text="PAIRWISE") == [mid.id]
    assert ids(text="hello old") == [old.id]  # every word, from the prompt and an answer
    assert ids(text='say "quoted') == []  # FTS syntax in user text is not an error


def test_text_search_without_fts_falls_back_to_like(log: RunLog) -> None:
    log.write(race_record("100% sure_thing"))
    log.write(race_record("something else"))
    log._fts = False
    assert [r.prompt for r in log.list_runs(RunQuery(text="100%"))] == ["100% sure_thing"]
    assert [r.prompt for r in log.list_runs(RunQuery(text="somethin_"))] == []  # `_` is literal
    assert len(log.list_runs(RunQuery(text="hello"))) == 2  # branch answers are searched


def test_a_run_is_found_by_a_unique_prefix_and_a_wrong_one_says_what_to_do(log: RunLog) -> None:
    first = race_record("one", id="01ABCDEF0000000000000000AA")
    second = race_record("two", id="01ABCDEF0000000000000000BB")
    log.write(first)
    log.write(second)
    assert log.get_run("01abcdef0000000000000000b").prompt == "two"  # case does not matter
    with pytest.raises(RunNotFoundError, match="matches several runs") as several:
        log.get_run("01ABCDEF")
    assert first.id in str(several.value)
    with pytest.raises(RunNotFoundError, match="`phi logs` lists the runs"):
        log.get_run("nope")
    assert isinstance(several.value, UserError)


def test_conversation_runs_come_in_order_and_the_last_conversation_is_known(
    log: RunLog,
) -> None:
    assert log.last_conversation_id() is None and log.last_run() is None
    a = race_record("turn 1", created_at="2025-01-01T00:00:00.000Z")
    b = race_record("turn 2", created_at="2025-01-01T00:01:00.000Z")
    c = race_record("other", conversation_id="conv-9", created_at="2025-01-01T00:02:00.000Z")
    for record in (b, a, c):
        log.write(record)
    assert [r.prompt for r in log.conversation("conv-1")] == ["turn 1", "turn 2"]
    assert log.last_conversation_id() == "conv-9"
    last = log.last_run()
    assert last is not None and last.messages is not None
    # a selection answers nothing to continue from: -c continues the last race or run
    selection = race_record(
        "phi select", conversation_id="conv-s", created_at="2025-01-02T00:00:00.000Z"
    )
    log.write(
        RunRecord.model_validate({**selection.model_dump(), "kind": "select", "messages": None})
    )
    assert log.last_conversation_id() == "conv-9"
    with pytest.raises(RunNotFoundError, match="is a model selection"):
        find_continuation(log, "conv-s")


def test_logging_is_on_by_default_and_off_by_env_or_by_phi_logs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert logging_enabled()
    monkeypatch.setenv("PHI_NO_LOG", "1")
    assert not logging_enabled()
    monkeypatch.setenv("PHI_NO_LOG", "0")
    assert logging_enabled()
    set_logging_enabled(False)
    assert not logging_enabled()
    set_logging_enabled(True)
    assert logging_enabled()


def test_times_are_read_as_dates_datetimes_or_ages() -> None:
    now = time.mktime((2026, 1, 10, 12, 0, 0, 0, 0, -1)) - time.timezone
    assert parse_when("2026-01-02") == "2026-01-02T00:00:00.000Z"
    assert parse_when("2026-01-02T15:30") == "2026-01-02T15:30:00.000Z"
    assert parse_when("2026-01-02T15:30+02:00") == "2026-01-02T13:30:00.000Z"
    assert parse_when("2h", now=now) == utc_iso(now - 7200)
    assert parse_when("7d", now=now) == utc_iso(now - 7 * 86400)
    with pytest.raises(UserError, match="an age"):
        parse_when("yesterday")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("99999999d", "The age '99999999d' reaches back before the year 1"),
        ("9999999999w", "The age '9999999999w' reaches back before the year 1"),
        ("99999999999999999999999999s", "reaches back before the year 1"),
        ("1" + "0" * 5000 + "h", "(5002 characters) reaches back before the year 1"),
        ("-5d", "cannot be negative, got '-5d'; write '5d'"),
        ("5y", "Cannot read '5y' as a time"),
        ("\u00b2d", "Cannot read"),  # a superscript two is a digit to str.isdigit, not to int
        ("9999-12-31T23:59:59-05:00", "outside the years 1 to 9999"),
        ("0001-01-01T00:00+05:00", "outside the years 1 to 9999"),
    ],
)
def test_a_time_outside_the_calendar_is_a_user_error_saying_so(text: str, message: str) -> None:
    for read in (parse_when, end_of_day):
        with pytest.raises(UserError) as caught:
            read(text)
        assert message in str(caught.value)


def test_times_at_the_edges_of_the_calendar_are_read_with_four_digit_years() -> None:
    now = 1_800_000_000.0
    assert parse_when("0001-01-01") == "0001-01-01T00:00:00.000Z"
    assert parse_when("0999-06-01") == "0999-06-01T00:00:00.000Z"  # sorts before 2026
    assert end_of_day("9999-12-31") == "9999-12-31T23:59:59.999Z"
    assert end_of_day("2026-01-02") == "2026-01-02T23:59:59.999Z"
    assert parse_when("0d", now=now) == utc_iso(now)
    reach = int(now) + 62_135_596_800  # seconds from 0001-01-01 to `now`
    assert parse_when(f"{reach}s", now=now) == "0001-01-01T00:00:00.000Z"  # as far as it goes
    with pytest.raises(UserError, match="before the year 1"):
        parse_when(f"{reach + 1}s", now=now)
    with pytest.raises(UserError, match="Cannot read '2026-13-45' as a time"):
        end_of_day("2026-13-45")


def test_counts_beyond_sqlites_integers_are_a_user_error_naming_the_value(
    tmp_path: Path,
) -> None:
    too_big = MAX_COUNT + 1
    with pytest.raises(UserError, match=f"limit must be at most {MAX_COUNT} .*got {too_big}"):
        RunQuery(limit=too_big)
    with pytest.raises(UserError, match="offset must be >= 0, got -1"):
        RunQuery(offset=-1)
    with pytest.raises(UserError, match="-n/--count must be at most"):
        check_count(10**20, "-n/--count")
    with pytest.raises(UserError, match="offset must be a whole number, got '1e3'"):
        parse_count("1e3", "offset")
    with pytest.raises(
        UserError, match="limit must be between 1 and 200, got 99999999999999999999"
    ):
        parse_count("99999999999999999999", "limit", low=1, high=200)
    with pytest.raises(UserError, match=r"offset must be at most .*\(5000 characters\)"):
        parse_count("9" * 5000, "offset")
    assert parse_count(str(MAX_COUNT), "offset") == MAX_COUNT
    with RunLog(tmp_path / "logs.db") as log:
        log.write(race_record("only"))
        assert log.list_runs(RunQuery(limit=MAX_COUNT, offset=MAX_COUNT)) == []
        assert len(log.list_runs(RunQuery(limit=MAX_COUNT))) == 1
        with pytest.raises(UserError, match="limit must be at most"):
            log.route_events(limit=too_big)


def test_run_ids_sort_by_creation_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from phi_core.runlog import _records

    made = []
    for moment in (1_700_000_000.001, 1_700_000_000.002, 1_800_000_000.0):
        monkeypatch.setattr(_records.time, "time", lambda moment=moment: moment)
        made.append(new_run_id())
    assert all(len(i) == 26 for i in made)
    assert made == sorted(made) and len(set(made)) == 3


def test_runs_logged_in_the_same_millisecond_list_newest_written_first(tmp_path: Path) -> None:
    """Ids of one millisecond are random after their time part, so the order among runs with the
    same ``created_at`` is the order they were written, not the ids' order."""
    with RunLog(tmp_path / "logs.db") as log:
        written = [
            log.write(
                RunRecord(
                    kind="run", prompt=f"q{i}", status="ok", created_at="2026-01-01T00:00:00.000Z"
                )
            )
            for i in range(12)
        ]
        assert [r.id for r in log.list_runs(RunQuery(limit=None))] == [
            r.id for r in reversed(written)
        ]
        assert log.last_run().id == written[-1].id  # type: ignore[union-attr]

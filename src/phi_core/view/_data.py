"""What the web view shows, as JSON-ready dicts: runs (searched and paginated), one run whole,
the router state per namespace with its decisions over time, and selection results with their
Pareto front. Everything is read-only: the run log is opened with SQLite's ``mode=ro`` and the
router state through a read-only store, so viewing never creates, migrates or writes a file.

No web framework here: :mod:`._app` maps these calls to HTTP routes, and the tests call both.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import RunNotFoundError, StateStoreError, UserError, ViewNotFoundError
from ..routing._redis import safe_url
from ..routing.state import is_redis, route_state_summary, state_location
from ..routing.stores import open_state_store
from ..runlog import (
    MAX_COUNT,
    RunLog,
    RunQuery,
    RunRecord,
    check_text,
    default_log_path,
    end_of_day,
    parse_count,
    parse_when,
)
from ._svg import Series, scatter_svg

__all__ = ["MAX_PAGE", "ViewData", "run_query"]

MAX_PAGE = 200
"""The most runs one page of ``/api/runs`` holds."""
_KINDS = ("run", "race", "bandit", "select")


class ViewData:
    """The web view's reading side over one run log and one router state.

    Args:
        log_path: the run log (default ``$PHI_HOME/logs.db``). It may not exist yet: the view
            then shows no runs and says how to log some, and opens it once it appears.
        state: the router state (a file or ``redis://…``; default as ``phi route show``).
        state_key: the key prefix of a router state in Redis (``ROUTER_STATE_KEY``; ``None``:
            the default, ``phi:router:v1``); files have none.

    A Redis URL's password is never shown: the pages and their JSON give the location as
    ``redis://:***@host``.
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str] | None = None,
        state: str | None = None,
        state_key: str | None = None,
    ) -> None:
        self.log_path = Path(log_path) if log_path is not None else default_log_path()
        self.state = state
        self.state_key = state_key
        self._log: RunLog | None = None
        self._opening = threading.Lock()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> RunLog | None:
        """The run log opened read-only, or ``None`` while it does not exist."""
        with self._opening:
            if self._log is None and self.log_path.is_file():
                self._log = RunLog(self.log_path, read_only=True)
            return self._log

    def _no_log_note(self) -> str:
        return (
            f"No runs logged yet: {str(self.log_path)!r} does not exist. `phi race`, `phi run` "
            "and `phi select` log every run unless --no-log or PHI_NO_LOG turn it off."
        )

    # ------------------------------------------------------------------ runs

    def runs(self, params: dict[str, str]) -> dict[str, Any]:
        """One page of runs, newest first. ``params`` are the query string: ``q`` (words),
        ``model``, ``strategy``, ``kind``, ``status``, ``since``, ``until`` (dates, times or
        ages as ``phi logs`` takes them), ``limit`` (1-200) and ``offset``.

        Raises:
            UserError: a parameter that cannot be read (the message says which and why).
        """
        query = run_query(params)
        log = self.log()
        if log is None:
            return {"runs": [], "total": 0, "offset": query.offset, "limit": query.limit,
                    "note": self._no_log_note()}  # fmt: skip
        return {
            "runs": [_run_summary(r) for r in log.list_runs(query)],
            "total": log.count_runs(query),
            "offset": query.offset,
            "limit": query.limit,
            "note": None,
        }

    def facets(self) -> dict[str, Any]:
        """The values the search form offers (models, strategies, kinds, statuses, time span)."""
        log = self.log()
        if log is None:
            return {"models": [], "strategies": [], "kinds": [], "statuses": [],
                    "first": None, "last": None, "note": self._no_log_note()}  # fmt: skip
        return {**asdict(log.facets()), "note": None}

    def run(self, run_id: str) -> dict[str, Any]:
        """One run whole (its history included), by id or unique id prefix.

        Raises:
            ViewNotFoundError: no such run, or no run log yet.
            UserError: a prefix several runs share, or a run log that is damaged.
        """
        return self._record(run_id).model_dump(mode="json")

    def _record(self, run_id: str) -> RunRecord:
        log = self.log()
        if log is None:
            raise ViewNotFoundError(self._no_log_note())
        try:
            return log.get_run(run_id)
        except RunNotFoundError as exc:  # (a damaged log is another UserError: a 400)
            if "several runs" in str(exc):
                raise
            raise ViewNotFoundError(str(exc)) from None

    # ------------------------------------------------------------------ router state

    def _location(self) -> str:
        """Where the router state is, as the pages show it (a Redis URL without its password)."""
        return safe_url(state_location(self.state))

    def _state_summary(self) -> tuple[str, dict[str, Any]]:
        try:
            store = open_state_store(
                state_location(self.state), read_only=True, prefix=self.state_key
            )
            summary = route_state_summary(store)
        except StateStoreError as exc:  # unreachable Redis, a state of the wrong shape
            raise UserError(str(exc)) from None
        return self._location(), summary

    def routes(self) -> dict[str, Any]:
        """Every namespace of the router state with its arms (count, mean reward, its spread
        and 95 % interval); ``note`` says why there is none."""
        try:
            location, summary = self._state_summary()
        except UserError as exc:
            return {"location": self._location(), "namespaces": [], "note": str(exc)}
        return {
            "location": location,
            "namespaces": [{"namespace": ns, "arms": _arms(arms)} for ns, arms in summary.items()],
            "note": None if summary else "The router state holds no statistics yet.",
        }

    def route(self, namespace: str) -> dict[str, Any]:
        """One namespace: its arms and the router's decisions and updates over time (from the
        run log), with a chart of the rewards each arm earned.

        Raises:
            ViewNotFoundError: the state has no such namespace (the message lists the ones it
                has), or there is no router state yet.
        """
        location = self._location()
        if not is_redis(location) and not Path(location).is_file():
            raise ViewNotFoundError(
                f"No namespace {namespace!r}: there is no router state at {location!r} yet; "
                "a race with --strategy bandit creates it."
            )
        location, summary = self._state_summary()
        if namespace not in summary:
            known = ", ".join(repr(n) for n in summary) or "none yet"
            raise ViewNotFoundError(
                f"The router state {location!r} has no namespace {namespace!r}; its namespaces "
                f"are: {known}."
            )
        log = self.log()
        events = log.route_events(namespace) if log is not None else []
        decisions = [
            {"run_id": e.run_id, "seq": e.seq, "type": e.type, "action": e.action,
             "timestamp": e.timestamp, "contenders": e.payload.get("contenders", []),
             "reason": e.payload.get("reason", ""), "ranking": e.payload.get("ranking", []),
             "rewards": e.payload.get("rewards", [])}
            for e in events
        ]  # fmt: skip
        return {
            "location": location,
            "namespace": namespace,
            "arms": _arms(summary[namespace]),
            "decisions": decisions,
        }

    def route_chart(self, namespace: str) -> str:
        """SVG: each reward the router learned in ``namespace``, per arm, in update order."""
        detail = self.route(namespace)
        points: dict[str, list[tuple[float, float, str]]] = {}
        step = 0
        for event in detail["decisions"]:
            if event["type"] != "route_update":
                continue
            step += 1
            for reward in event["rewards"]:
                arm = str(reward.get("arm", "?"))
                value = reward.get("reward")
                if isinstance(value, int | float):
                    label = f"{arm}: reward {value:.3f} (run {event['run_id']})"
                    points.setdefault(arm, []).append((float(step), float(value), label))
        series = [Series(arm, pts, joined=True) for arm, pts in points.items()]
        return scatter_svg(
            [("update", "reward", series)],
            title=f"Rewards over time — {namespace}",
            empty="No router updates logged for this namespace yet.",
        )

    # ------------------------------------------------------------------ selections

    def selections(self, params: dict[str, str]) -> dict[str, Any]:
        """One page of logged selection runs, newest first (the parameters of :meth:`runs`,
        the kind aside)."""
        return self.runs({**params, "kind": "select"})

    def selection(self, run_id: str) -> dict[str, Any]:
        """A logged selection: its combinations (accuracy, cost per datapoint, latency,
        evaluations, Pareto and best flags) and the run's figures.

        Raises:
            ViewNotFoundError: no such run, or the run is not a selection.
        """
        record = self._selection(run_id)
        verdict = record.verdict or {}
        return {
            "id": record.id,
            "created_at": record.created_at,
            "prompt": record.prompt,
            "algorithm": record.strategy,
            "status": record.status,
            "best": record.winner,
            "evaluations": verdict.get("evaluations"),
            "grid_evaluations": verdict.get("grid_evaluations"),
            "accuracy": verdict.get("accuracy"),
            "ci": verdict.get("ci"),
            "cost_usd": record.cost_usd,
            "duration_s": record.duration_s,
            "warnings": record.warnings,
            "combinations": _combinations(record),
        }

    def _selection(self, run_id: str) -> RunRecord:
        record = self._record(run_id)
        if record.kind != "select":
            raise ViewNotFoundError(
                f"Run {record.id} is a {record.kind}, not a selection; /api/runs/{record.id} shows it."
            )
        return record

    def pareto_chart(self, run_id: str) -> str:
        """SVG: accuracy against cost per datapoint and against mean latency; the Pareto front
        joined, the best marked."""
        record = self._selection(run_id)
        combos = [c for c in _combinations(record) if c["accuracy"] is not None]
        panels = []
        for axis, label in (("cost_per_datapoint", "cost per datapoint (USD)"),
                            ("latency_s", "latency p50 (s)")):  # fmt: skip

            def point(c: dict[str, Any], axis: str = axis) -> tuple[float, float, str]:
                return (float(c[axis] or 0.0), float(c["accuracy"]),
                        f"{c['name']}: accuracy {c['accuracy']:.3f}")  # fmt: skip

            front = sorted(point(c) for c in combos if c["pareto"])
            panels.append((label, "accuracy", [
                Series("evaluated", [point(c) for c in combos if not c["pareto"]], kind="muted"),
                Series("Pareto front", front, joined=True),
                Series("best", [point(c) for c in combos if c["best"]], kind="best"),
            ]))  # fmt: skip
        return scatter_svg(
            panels,
            title=f"{record.strategy or 'selection'}: Pareto front of {len(combos)} combinations",
            empty="No combination was evaluated.",
        )


def run_query(params: dict[str, str]) -> RunQuery:
    """The :class:`RunQuery` a query string asks for.

    Raises:
        UserError: a bad ``limit``/``offset``/``kind`` (not a whole number, or outside 1 to
            :data:`MAX_PAGE` and 0 to SQLite's largest integer), a time that cannot be read
            or lies outside the years 1 to 9999, or a value holding a NUL character (or not
            valid Unicode), which the run log refuses to search for (:func:`check_text`).
    """
    known = {"q", "model", "strategy", "kind", "status", "since", "until", "limit", "offset"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise UserError(f"Unknown search parameter {unknown[0]!r}; use {', '.join(sorted(known))}.")
    values = {
        k: check_text(v, f"The search parameter {k!r}").strip()
        for k, v in params.items()
        if v.strip()
    }
    limit = _int(values, "limit", 50, 1, MAX_PAGE)
    offset = _int(values, "offset", 0, 0, MAX_COUNT)
    kind = values.get("kind")
    if kind is not None and kind not in _KINDS:
        raise UserError(f"Unknown kind {kind!r}; use one of {', '.join(_KINDS)}.")
    return RunQuery(
        limit=limit,
        offset=offset,
        model=values.get("model"),
        strategy=values.get("strategy"),
        kind=kind,
        status=values.get("status"),
        since=parse_when(values["since"]) if "since" in values else None,
        until=end_of_day(values["until"]) if "until" in values else None,
        text=values.get("q"),
    )


def _int(values: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = values.get(name)
    return default if raw is None else parse_count(raw, name, low=low, high=high)


def _run_summary(record: RunRecord) -> dict[str, Any]:
    """A listing row: the run without its history and branch texts."""
    return {
        "id": record.id, "kind": record.kind, "created_at": record.created_at,
        "prompt": record.prompt, "strategy": record.strategy, "status": record.status,
        "winner": record.winner, "winner_model": record.winner_model,
        "models": record.models, "branches": len(record.branches),
        "cost_usd": record.cost_usd, "duration_s": record.duration_s,
        "input_tokens": record.input_tokens, "output_tokens": record.output_tokens,
        "conversation_id": record.conversation_id,
    }  # fmt: skip


def _arms(arms: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"arm": arm, **info} for arm, info in arms.items()]


def _combinations(record: RunRecord) -> list[dict[str, Any]]:
    front = set((record.verdict or {}).get("pareto") or [])
    rows = []
    for branch in record.branches:
        spec = branch.spec or {}
        evaluations = int(spec.get("evaluations") or 0)
        rows.append({
            "name": branch.label,
            "models": spec.get("models") or {},
            "accuracy": branch.score,
            "evaluations": evaluations,
            "failures": int(spec.get("failures") or 0),
            "cost_usd": branch.cost_usd,
            "cost_per_datapoint": branch.cost_usd / evaluations if evaluations else None,
            "latency_s": branch.latency_s,
            "pareto": branch.label in front,
            "best": branch.winner,
        })  # fmt: skip
    return rows

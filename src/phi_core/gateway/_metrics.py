"""The gateway's Prometheus metrics in the text exposition format (version 0.0.4).

A small registry of counters and histograms with labels, kept per process (each worker exposes
its own, as Prometheus expects of multi-process servers scraped per target); no dependency.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

__all__ = ["LATENCY_BUCKETS", "GatewayMetrics", "Metrics"]

LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = (*labels, *extra)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class Metrics:
    """Counters and histograms by name and labels; :meth:`render` is the exposition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}
        self._counters: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, tuple[tuple[float, ...], dict[Labels, list[float]]]] = {}

    def counter(self, name: str, help_text: str) -> None:
        self._help[name] = ("counter", help_text)
        self._counters.setdefault(name, {})

    def histogram(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        self._help[name] = ("histogram", help_text)
        self._histograms.setdefault(name, (tuple(sorted(buckets)), {}))

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._counters[name]
            series[key] = series.get(key, 0.0) + value

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        buckets, series = self._histograms[name]
        with self._lock:
            # per bucket count (non-cumulative), then +Inf, sum
            row = series.setdefault(key, [0.0] * (len(buckets) + 2))
            row[bisect.bisect_left(buckets, value)] += 1
            row[-1] += value

    def value(self, name: str, **labels: str) -> float:
        """A counter's value (tests and health checks read it)."""
        return self._counters[name].get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, (kind, help_text) in self._help.items():
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                if kind == "counter":
                    for labels, value in sorted(self._counters[name].items()):
                        lines.append(f"{name}{_labels(labels)} {_number(value)}")
                    continue
                buckets, series = self._histograms[name]
                for labels, row in sorted(series.items()):
                    total = 0.0
                    for bound, count in zip((*buckets, float("inf")), row[:-1], strict=True):
                        total += count
                        le = (("le", _number(bound)),)
                        lines.append(f"{name}_bucket{_labels(labels, le)} {_number(total)}")
                    lines.append(f"{name}_sum{_labels(labels)} {_number(row[-1])}")
                    lines.append(f"{name}_count{_labels(labels)} {_number(total)}")
        return "\n".join(lines) + "\n"


class GatewayMetrics(Metrics):
    """The gateway's series (names end in ``_total`` for counters, as Prometheus expects)."""

    def __init__(self) -> None:
        super().__init__()
        self.counter("phi_gateway_requests_total", "Requests by route, model kind and status.")
        self.histogram(
            "phi_gateway_request_duration_seconds",
            "Request latency until the response (or stream) ended.",
            LATENCY_BUCKETS,
        )
        self.counter("phi_gateway_tokens_total", "Tokens by model and direction.")
        self.counter("phi_gateway_cost_usd_total", "Dollars spent by model.")
        self.counter(
            "phi_gateway_router_decisions_total", "Router decisions by profile and action."
        )
        self.counter(
            "phi_gateway_races_skipped_total", "Races skipped because the router was sure."
        )
        self.counter("phi_gateway_feedback_total", "Feedback updates applied, by profile.")
        self.counter("phi_gateway_disconnects_total", "Requests whose client went away.")

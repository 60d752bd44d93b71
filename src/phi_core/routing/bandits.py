"""Contextual bandit routers over additive sufficient statistics.

Every router here is a per-arm ridge regression of reward on features. An arm's state is the pair
of **additive** sufficient statistics ``XX = Σ w·x xᵀ`` and ``Xr = Σ w·r·x`` plus counts, so the
statistics of two workers merge by addition and a store can apply updates atomically
(:mod:`phi_core.routing.stores`). The ridge prior ``λI`` is added at decision time, never stored,
so it cannot be shrunk by decay or lost by a merge: ``A = λI + XX``, ``θ = A⁻¹ Xr``.

``A⁻¹`` is maintained by Sherman–Morrison rank-1 updates and recomputed exactly from ``A`` every
``refresh_every`` updates (and after loads, merges and discounting), which bounds numerical drift.

- :class:`LinUCBRouter` ranks by ``θᵀx + α·sqrt(xᵀA⁻¹x)``.
- :class:`LinearThompsonRouter` ranks by ``θ̃ᵀx`` with ``θ̃ ~ N(θ, v²A⁻¹)``.
- :class:`EpsilonGreedyRouter` ranks by ``θᵀx`` and shuffles with probability ``ε``.

Ties keep the caller's arm order (a cold start ranks arms in the order given). Every ranked arm
also carries the standard deviation of its reward on the query, scaled by the noise its rewards
showed (:attr:`RankedArm.sd`); :meth:`Ranking.clearly_ahead` ("race only when unsure") accepts
either the router's bounds or those 95 % prediction intervals as separating the favourite.

Statistics enter a router only if updates could have made them (:func:`stats_problem`: finite,
no negative count, a positive semi-definite ``XX``), whichever way they come: an update, a warm
start, a merge, a load.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import UserError

__all__ = [
    "ArmStats",
    "EpsilonGreedyRouter",
    "LinUCBRouter",
    "LinearRouter",
    "LinearThompsonRouter",
    "LoggedOutcome",
    "RankedArm",
    "Ranking",
    "stats_problem",
]

Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]
MAX_MAGNITUDE = 1e6
"""The largest reward (in absolute value) and weight an update takes: rewards are bounded
(:mod:`.reward`), and far larger ones overflow the statistics' squares to infinity."""
MAX_STATISTIC = 1e300
"""The largest number (in absolute value) statistics may hold: updates within
:data:`MAX_MAGNITUDE` never reach it, and not far beyond it the sums and products of deciding
(``(A + Aᵀ)/2``, ``A⁻¹Xr``) overflow to infinity."""
NOISE_PRIOR_SD = 1.0
NOISE_PRIOR_N = 2.0
"""The prior of an arm's reward noise (see :attr:`RankedArm.sd`): a standard deviation of 1 (the
unit scale the ridge prior assumes, as wide as the α-bounds at α = 1) worth 2 observations."""


def _check_observation(reward: Any, weight: Any) -> None:
    """A reward and weight an update may take (finite, within :data:`MAX_MAGNITUDE`, weight > 0);
    else :class:`UserError`."""
    for name, value in (("reward", reward), ("weight", weight)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UserError(f"{name} must be a number, got {value!r}.")
    if not math.isfinite(reward) or abs(reward) > MAX_MAGNITUDE:
        raise UserError(
            f"reward must be a finite number within ±{MAX_MAGNITUDE:g}, got {reward!r}."
        )
    if not math.isfinite(weight) or not 0 < weight <= MAX_MAGNITUDE:
        raise UserError(f"weight must be > 0 and at most {MAX_MAGNITUDE:g}, got {weight!r}.")


def _positive_semidefinite(xx: Matrix) -> bool:
    """Whether ``xx`` is symmetric positive semi-definite, up to rounding (the sum of ``w·x xᵀ``
    with ``w > 0`` always is; a JSON round trip or Redis's 14-digit numbers round it)."""
    scale = float(np.abs(xx).max()) if xx.size else 0.0
    if scale == 0.0:
        return True
    tolerance = 1e-9 * scale
    if float(np.abs(xx - xx.T).max()) > tolerance or float(np.diag(xx).min()) < -tolerance:
        return False
    try:
        np.linalg.cholesky((xx + xx.T) / 2 + tolerance * np.eye(xx.shape[0]))
    except np.linalg.LinAlgError:
        return False
    return True


def stats_problem(stats: ArmStats) -> str | None:
    """What in ``stats`` no updates could have made (``None``: nothing).

    Updates only ever add ``w·x xᵀ``, ``w·r·x``, ``w``, ``w·r`` and ``w·r²`` with ``w > 0`` (and a
    discount scales them all by one factor), so the count and the sum of squared rewards are
    never negative, ``XX`` is symmetric positive semi-definite — which keeps ``A = λI + XX``
    invertible — and every number is finite and within :data:`MAX_STATISTIC`. A store treats
    statistics failing this like a file of the wrong shape."""
    xx = np.asarray(stats.xx, dtype=np.float64)
    xr = np.asarray(stats.xr, dtype=np.float64)
    if xr.ndim != 1 or xx.shape != (xr.shape[0], xr.shape[0]):
        return f"an xx of shape {xx.shape} for an xr of shape {xr.shape}"
    scalars = np.array(
        [stats.n, stats.reward_sum, stats.reward_sq, stats.updated_at], dtype=np.float64
    )
    if not (np.isfinite(xx).all() and np.isfinite(xr).all() and np.isfinite(scalars).all()):
        return "NaN or infinity"
    largest = max(
        float(np.abs(xx).max(initial=0.0)),
        float(np.abs(xr).max(initial=0.0)),
        float(np.abs(scalars[:3]).max()),
    )
    if largest > MAX_STATISTIC:
        return f"the number {largest:g}, beyond {MAX_STATISTIC:g}"
    if stats.n < 0:
        return f"a negative count n ({stats.n:g})"
    if stats.reward_sq < 0:
        return f"a negative sum of squared rewards ({stats.reward_sq:g})"
    if not _positive_semidefinite(xx):
        return "an xx that is not symmetric positive semi-definite (every sum of w·x xᵀ is)"
    return None


def _t_quantile(dof: float) -> float:
    """The 97.5 % quantile of Student's t with ``dof`` degrees of freedom (Cornish–Fisher from
    the normal's 1.96; within 3 % for ``dof`` >= 3, slightly under it below)."""
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


@dataclass
class ArmStats:
    """Additive sufficient statistics of one arm (``XX``, ``Xr``, counts, reward moments)."""

    xx: Matrix
    xr: Vector
    n: float = 0.0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    updated_at: float = 0.0

    @classmethod
    def zeros(cls, dim: int) -> ArmStats:
        return cls(xx=np.zeros((dim, dim)), xr=np.zeros(dim))

    @classmethod
    def of(cls, x: Vector, reward: float, weight: float = 1.0) -> ArmStats:
        """The delta contributed by one observation."""
        return cls(
            xx=weight * np.outer(x, x),
            xr=weight * reward * x,
            n=weight,
            reward_sum=weight * reward,
            reward_sq=weight * reward * reward,
            updated_at=time.time(),
        )

    @property
    def dim(self) -> int:
        return int(self.xr.shape[0])

    def __add__(self, other: ArmStats) -> ArmStats:
        return ArmStats(
            xx=self.xx + other.xx,
            xr=self.xr + other.xr,
            n=self.n + other.n,
            reward_sum=self.reward_sum + other.reward_sum,
            reward_sq=self.reward_sq + other.reward_sq,
            updated_at=max(self.updated_at, other.updated_at),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "xx": self.xx.tolist(),
            "xr": self.xr.tolist(),
            "n": self.n,
            "reward_sum": self.reward_sum,
            "reward_sq": self.reward_sq,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArmStats:
        return cls(
            xx=np.asarray(data["xx"], dtype=np.float64),
            xr=np.asarray(data["xr"], dtype=np.float64),
            n=float(data.get("n", 0.0)),
            reward_sum=float(data.get("reward_sum", 0.0)),
            reward_sq=float(data.get("reward_sq", 0.0)),
            updated_at=float(data.get("updated_at", 0.0)),
        )


@dataclass(frozen=True)
class LoggedOutcome:
    """One logged observation for warm starts: features, arm, reward (and a weight)."""

    features: Vector
    arm: str
    reward: float
    weight: float = 1.0


@dataclass(frozen=True)
class RankedArm:
    """One arm in a ranking, with the numbers behind its place."""

    arm: str
    score: float
    mean: float
    width: float
    n: float
    sd: float | None = None
    """The standard deviation of the arm's reward *on this query*, in reward units:
    ``σ̂·sqrt(1 + xᵀA⁻¹x)`` (the noise around the arm's fit, plus the uncertainty of the fit at
    ``x``), where ``σ̂`` is the noise its rewards showed — the normal–inverse-gamma posterior of
    Bayesian ridge regression, with the prior :data:`NOISE_PRIOR_SD` worth
    :data:`NOISE_PRIOR_N` observations. ``None``: not computed."""

    @property
    def lower(self) -> float:
        return self.mean - self.width

    @property
    def upper(self) -> float:
        return self.mean + self.width

    @property
    def interval(self) -> float | None:
        """Half-width of the 95 % prediction interval of the arm's reward on this query
        (``None`` without :attr:`sd`): ``t·sd``, ``t`` the 97.5 % quantile of Student's t with
        ``NOISE_PRIOR_N + n`` degrees of freedom (≈ 2 once the arm is well observed)."""
        if self.sd is None:
            return None
        return _t_quantile(NOISE_PRIOR_N + max(self.n, 0.0)) * self.sd


@dataclass(frozen=True)
class Ranking:
    """Arms best first, plus a one-line explanation per arm."""

    arms: list[RankedArm]
    policy: str

    @property
    def order(self) -> list[str]:
        return [a.arm for a in self.arms]

    @property
    def top(self) -> RankedArm:
        return self.arms[0]

    def clearly_ahead(self, contenders: int | None = None) -> bool:
        """True when the top arm's lower bound exceeds the upper bound of every other arm —
        or, with ``contenders``, of the other arms among the first ``contenders`` (those a race
        would preview: an arm it would not preview gains nothing from racing, whatever its
        bounds).

        Each comparison may use either kind of bound: the router's own (``mean ± width``, the
        exploration bonus, which takes the reward noise to be of standard deviation 1 whatever
        the rewards showed), or the 95 % prediction intervals of the two arms' rewards on this
        query (``mean ± interval``, scaled by the noise the arms' rewards showed). Bounded
        rewards barely vary around a good fit, so on varied queries the router's bounds stay
        wide long after the arms are known well (a width shrinks only along the directions of
        the feature space an arm has seen), while the prediction intervals close. Those hold
        each arm's own noise, not only the uncertainty of its mean: arms whose rewards are
        genuinely close (within the noise they showed) keep overlapping intervals however much
        is learned, and keep being raced; and a favourite whose rewards drop is no longer ahead
        once a few of them widen its noise."""
        arms = self.arms if contenders is None else self.arms[: max(contenders, 1)]
        if len(arms) < 2:
            return True
        top = arms[0]
        return all(_ahead(top, other) for other in arms[1:])

    def explain(self) -> list[str]:
        return [
            f"{i + 1}. {a.arm}: score {a.score:.3f} = mean {a.mean:.3f} ± {a.width:.3f} "
            f"(n={a.n:g}, {self.policy}"
            + (f", 95% ±{interval:.3f}" if (interval := a.interval) is not None else "")
            + ")"
            for i, a in enumerate(self.arms)
        ]


def _ahead(top: RankedArm, other: RankedArm) -> bool:
    """Whether ``top``'s lower bound exceeds ``other``'s upper bound, by the router's bounds or
    by the 95 % prediction intervals (see :meth:`Ranking.clearly_ahead`)."""
    if top.lower > other.upper:
        return True
    mine, theirs = top.interval, other.interval
    return mine is not None and theirs is not None and top.mean - mine > other.mean + theirs


@dataclass
class _Arm:
    stats: ArmStats
    a_inv: Matrix
    theta: Vector
    since_refresh: int = 0
    version: int = 0
    retired: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _noise_sd(arm: _Arm) -> float:
    """The posterior estimate of the standard deviation of ``arm``'s reward noise.

    Bayesian ridge regression with a normal–inverse-gamma prior (θ | σ² ~ N(0, σ²/λ·I), σ² with
    the prior :data:`NOISE_PRIOR_SD` worth :data:`NOISE_PRIOR_N` observations) has the posterior
    ``σ̂² = (NOISE_PRIOR_N·NOISE_PRIOR_SD² + Σw·r² − θᵀXr) / (NOISE_PRIOR_N + n)``; ``Σw·r² −
    θᵀXr`` is the weighted residual sum of squares of the fit plus its ridge penalty ``λ|θ|²``.
    """
    stats = arm.stats
    spread = max(0.0, stats.reward_sq - float(arm.theta @ stats.xr))
    n = max(0.0, stats.n)
    return math.sqrt((NOISE_PRIOR_N * NOISE_PRIOR_SD**2 + spread) / (NOISE_PRIOR_N + n))


class LinearRouter:
    """Shared machinery: per-arm ridge statistics, Sherman–Morrison, warm start, arm pool.

    Args:
        dim: feature dimension.
        ridge: λ of the ridge prior ``λI`` (≈1 for unit-scale features and rewards).
        refresh_every: recompute ``A⁻¹`` exactly from ``A`` after this many rank-1 updates.
        discount: optional forgetting factor γ in (0, 1]; each update of an arm first scales its
            statistics by γ (the prior ``λI`` is kept whole). Discounted statistics are not
            additive, so a discounting router must not share a store with other workers.
        seed: seed of the router's own random generator (Thompson, ε-greedy).
    """

    policy = "ridge"

    def __init__(
        self,
        dim: int,
        *,
        ridge: float = 1.0,
        refresh_every: int = 64,
        discount: float | None = None,
        seed: int | None = None,
    ) -> None:
        if dim < 1:
            raise UserError(f"dim must be >= 1, got {dim!r}.")
        if not (_real(ridge) and math.isfinite(ridge) and ridge > 0):
            raise UserError(f"ridge must be > 0 and finite (try 1.0), got {ridge!r}.")
        if refresh_every < 1:
            raise UserError(f"refresh_every must be >= 1, got {refresh_every!r}.")
        if discount is not None and not 0 < discount <= 1:
            raise UserError(f"discount must be in (0, 1], got {discount!r}.")
        self.dim = dim
        self.ridge = float(ridge)
        self.refresh_every = refresh_every
        self.discount = discount
        self.rng = np.random.default_rng(seed)
        self._arms: dict[str, _Arm] = {}
        # Stacked A⁻¹ and θ of the last ranked arm list, so ranking is one batched product.
        self._clock = 0
        self._stack_key: tuple[str, ...] = ()
        self._stack_versions: list[int] = []
        self._stack_a: Matrix = np.zeros((0, dim, dim))
        self._stack_theta: Matrix = np.zeros((0, dim))

    # ------------------------------------------------------------------ arm pool

    @property
    def arms(self) -> list[str]:
        """Active arms, in insertion order."""
        return [name for name, arm in self._arms.items() if not arm.retired]

    def add_arm(self, name: str, stats: ArmStats | None = None) -> None:
        """Add an arm (optionally with prior statistics); re-adding a retired arm restores it."""
        existing = self._arms.get(name)
        if existing is not None:
            existing.retired = False
            if stats is not None:
                self.merge(name, stats)
            return
        stats = stats if stats is not None else ArmStats.zeros(self.dim)
        self._check_stats(name, stats)
        self._arms[name] = self._fresh(stats)

    def retire_arm(self, name: str) -> None:
        """Stop ranking an arm; its statistics are kept so it can be re-added later."""
        if name not in self._arms:
            raise UserError(f"Unknown arm {name!r}; known arms: {', '.join(self._arms) or 'none'}.")
        self._arms[name].retired = True

    def stats(self, name: str) -> ArmStats:
        return self._arm(name).stats

    def state(self) -> dict[str, ArmStats]:
        return {name: arm.stats for name, arm in self._arms.items()}

    def load_state(self, state: dict[str, ArmStats]) -> None:
        """Make the router's statistics exactly ``state`` (e.g. after reading a shared store):
        an arm ``state`` holds takes its statistics, an arm it does not hold goes back to the
        prior (no observations; it stays in the pool, retired or not, as it was).

        Raises:
            UserError: statistics of another dimension, or that no updates could have made
                (see :func:`stats_problem`); nothing is changed then.
        """
        for name, stats in state.items():
            self._check_stats(name, stats)  # before anything changes
        for name, arm in list(self._arms.items()):
            if name not in state and (arm.stats.n or arm.stats.xx.any() or arm.stats.xr.any()):
                self._arms[name] = self._fresh(ArmStats.zeros(self.dim), retired=arm.retired)
        for name, stats in state.items():
            retired = self._arms[name].retired if name in self._arms else False
            self._arms[name] = self._fresh(stats, retired=retired)

    def merge(self, name: str, delta: ArmStats) -> None:
        """Add statistics gathered elsewhere (another worker, a log) to one arm.

        Raises:
            UserError: ``delta``, or the sum, is not statistics updates could have made (see
                :func:`stats_problem`); the arm is left as it was.
        """
        self._check_stats(name, delta)
        arm = self._arm(name, create=True)
        total = arm.stats + delta
        self._check_stats(name, total)
        self._arms[name] = self._fresh(total, retired=arm.retired)

    # ------------------------------------------------------------------ learning

    def update(self, features: Vector, arm: str, reward: float, weight: float = 1.0) -> ArmStats:
        """Learn from one observed reward of ``arm``; returns the additive delta applied."""
        x = self._vector(features)
        _check_observation(reward, weight)
        state = self._arm(arm, create=True)
        delta = ArmStats.of(x, float(reward), weight)
        if self.discount is not None and self.discount < 1:
            g = self.discount
            decayed = ArmStats(
                xx=g * state.stats.xx,
                xr=g * state.stats.xr,
                n=g * state.stats.n,
                reward_sum=g * state.stats.reward_sum,
                reward_sq=g * state.stats.reward_sq,
                updated_at=state.stats.updated_at,
            )
            self._arms[arm] = self._fresh(decayed + delta, retired=state.retired)
            return delta
        state.stats = state.stats + delta
        # Sherman–Morrison for A + w·x xᵀ.
        v = state.a_inv @ x
        denom = 1.0 + weight * float(x @ v)
        state.a_inv = state.a_inv - weight * np.outer(v, v) / denom
        state.since_refresh += 1
        if state.since_refresh >= self.refresh_every:
            self._refresh(state)
        else:
            state.theta = state.a_inv @ state.stats.xr
            state.version = self._tick()
        return delta

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def warm_start(self, outcomes: Iterable[LoggedOutcome]) -> int:
        """Accumulate logged outcomes in one batch (exact inverse afterwards); returns the count.

        Every outcome is checked as :meth:`update` checks one (finite features, a finite reward
        within ±:data:`MAX_MAGNITUDE`, a weight in (0, MAX_MAGNITUDE]) before any is learned.
        """
        deltas: dict[str, ArmStats] = {}
        count = 0
        for outcome in outcomes:
            x = self._vector(outcome.features)
            _check_observation(outcome.reward, outcome.weight)
            delta = ArmStats.of(x, float(outcome.reward), float(outcome.weight))
            deltas[outcome.arm] = deltas[outcome.arm] + delta if outcome.arm in deltas else delta
            count += 1
        for name, delta in deltas.items():
            self.merge(name, delta)
        return count

    def warm_start_matrix(
        self, features: Matrix, rewards: dict[str, Vector], weight: float = 1.0
    ) -> None:
        """Vectorised warm start: every arm observed on every row of ``features`` (a log).

        Checked as :meth:`update` checks one observation (finite features; rewards finite and
        within ±:data:`MAX_MAGNITUDE`, one per row; a weight in (0, MAX_MAGNITUDE]), every arm
        before any is learned.
        """
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise UserError(f"features must have shape (n, {self.dim}), got {x.shape}.")
        if not np.isfinite(x).all():
            raise UserError("features contain NaN or infinity.")
        _check_observation(0.0, weight)
        checked: dict[str, Vector] = {}
        for name, given in rewards.items():
            r = np.asarray(given, dtype=np.float64)
            if r.shape != (x.shape[0],):
                raise UserError(
                    f"rewards of arm {name!r} must have shape ({x.shape[0]},), one per row of "
                    f"features, got {r.shape}."
                )
            if not (np.isfinite(r).all() and np.abs(r).max(initial=0.0) <= MAX_MAGNITUDE):
                raise UserError(
                    f"rewards of arm {name!r} must be finite numbers within "
                    f"±{MAX_MAGNITUDE:g}; some are not."
                )
            checked[name] = r
        xx = weight * (x.T @ x)
        for name, r in checked.items():
            delta = ArmStats(
                xx=xx.copy(),
                xr=weight * (x.T @ r),
                n=weight * len(r),
                reward_sum=weight * float(r.sum()),
                reward_sq=weight * float((r * r).sum()),
                updated_at=time.time(),
            )
            self.merge(name, delta)

    # ------------------------------------------------------------------ deciding

    def estimate(self, features: Vector, arm: str) -> tuple[float, float]:
        """Posterior mean ``θᵀx`` and standard width ``sqrt(xᵀA⁻¹x)`` of one arm."""
        x = self._vector(features)
        state = self._arm(arm, create=True)
        mean = float(state.theta @ x)
        width = math.sqrt(max(0.0, float(x @ state.a_inv @ x)))
        return mean, width

    def rank(self, features: Vector, arms: Sequence[str] | None = None) -> Ranking:
        """Rank ``arms`` (default: every active arm) best first; unknown arms are added."""
        names = list(arms) if arms is not None else self.arms
        if not names:
            raise UserError("rank() needs at least one arm; add arms with add_arm() first.")
        if len(set(names)) != len(names):
            raise UserError(f"Duplicate arms in {names!r}.")
        x = self._vector(features)
        states = [self._arm(name, create=True) for name in names]
        key = tuple(names)
        if key != self._stack_key:
            self._stack_key = key
            self._stack_a = np.stack([s.a_inv for s in states])
            self._stack_theta = np.stack([s.theta for s in states])
            self._stack_versions = [s.version for s in states]
        else:
            for i, state in enumerate(states):
                if state.version != self._stack_versions[i]:
                    self._stack_a[i] = state.a_inv
                    self._stack_theta[i] = state.theta
                    self._stack_versions[i] = state.version
        means = self._stack_theta @ x
        widths = np.sqrt(np.maximum(0.0, (self._stack_a @ x) @ x))
        scores, shown = self._scores(means, widths)
        ranked: list[tuple[float, int, RankedArm]] = []
        for position, (name, state) in enumerate(zip(names, states, strict=True)):
            if state.retired:
                continue
            score = float(scores[position])
            item = RankedArm(
                name,
                score,
                float(means[position]),
                float(shown[position]),
                state.stats.n,
                sd=_noise_sd(state) * math.sqrt(1.0 + float(widths[position]) ** 2),
            )
            ranked.append((score, position, item))
        if not ranked:
            raise UserError(f"Every arm in {names!r} is retired.")
        ranked.sort(key=lambda item: (-item[0], item[1]))
        result = [item[2] for item in ranked]
        return Ranking(self._reorder(result), self.policy)

    def _scores(self, means: Vector, widths: Vector) -> tuple[Vector, Vector]:
        """Scores and the widths shown in rankings, for all ranked arms at once."""
        return means, widths

    def _reorder(self, ranked: list[RankedArm]) -> list[RankedArm]:
        return ranked

    # ------------------------------------------------------------------ helpers

    def _vector(self, features: Vector) -> Vector:
        x = np.asarray(features, dtype=np.float64).reshape(-1)
        self._check_dim(x)
        if not np.all(np.isfinite(x)):
            raise UserError("features contain NaN or infinity.")
        return x

    def _check_stats(self, name: str, stats: ArmStats) -> None:
        """:class:`UserError` unless ``stats`` fit this router and updates could have made them."""
        dim = np.asarray(stats.xr).reshape(-1).shape[0]
        if dim != self.dim:
            raise UserError(
                f"The statistics of arm {name!r} are {dim}-dimensional, but this router's "
                f"features have {self.dim} dimensions: they were learned with another feature "
                "extractor (or edited), and were not used. Route with the extractor they were "
                "learned with, or clear that namespace (`phi route reset --namespace …`)."
            )
        problem = stats_problem(stats)
        if problem is not None:
            raise UserError(
                f"The statistics of arm {name!r} hold {problem}, which no updates make; they "
                "were not used."
            )

    def _check_dim(self, x: Vector) -> None:
        if x.shape[0] != self.dim:
            raise UserError(
                f"Feature vector has dimension {x.shape[0]}, the router expects {self.dim}. "
                "Use the same feature extractor the router state was built with."
            )

    def _arm(self, name: str, *, create: bool = False) -> _Arm:
        arm = self._arms.get(name)
        if arm is None:
            if not create:
                raise UserError(f"Unknown arm {name!r}; known: {', '.join(self._arms) or 'none'}.")
            arm = self._fresh(ArmStats.zeros(self.dim))
            self._arms[name] = arm
        return arm

    def _fresh(self, stats: ArmStats, *, retired: bool = False) -> _Arm:
        arm = _Arm(stats=stats, a_inv=np.eye(self.dim), theta=np.zeros(self.dim), retired=retired)
        self._refresh(arm)
        return arm

    def _refresh(self, arm: _Arm) -> None:
        a = self.ridge * np.eye(self.dim) + arm.stats.xx
        a = (a + a.T) / 2
        inverse = np.asarray(np.linalg.inv(a), dtype=np.float64)
        arm.a_inv = (inverse + inverse.T) / 2
        arm.theta = arm.a_inv @ arm.stats.xr
        arm.since_refresh = 0
        arm.version = self._tick()
        arm.extra.pop("chol", None)

    def a_matrix(self, name: str) -> Matrix:
        """``A = λI + XX`` of one arm (for checks and exports)."""
        return self.ridge * np.eye(self.dim) + self._arm(name).stats.xx

    def a_inverse(self, name: str) -> Matrix:
        """The maintained ``A⁻¹`` of one arm (Sherman–Morrison between exact refreshes)."""
        return self._arm(name).a_inv.copy()


class LinUCBRouter(LinearRouter):
    """LinUCB: score = ``θᵀx + α·sqrt(xᵀA⁻¹x)``; ``width`` in rankings is ``α·sqrt(…)``."""

    policy = "linucb"

    def __init__(self, dim: int, *, alpha: float = 1.0, **kwargs: Any) -> None:
        if not (_real(alpha) and math.isfinite(alpha) and alpha >= 0):
            raise UserError(f"alpha must be >= 0 and finite (try 1.0), got {alpha!r}.")
        super().__init__(dim, **kwargs)
        self.alpha = float(alpha)

    def _scores(self, means: Vector, widths: Vector) -> tuple[Vector, Vector]:
        return means + self.alpha * widths, self.alpha * widths


class LinearThompsonRouter(LinearRouter):
    """Linear Thompson sampling: score = ``θ̃ᵀx`` with ``θ̃ ~ N(θ, v²·A⁻¹)``."""

    policy = "thompson"

    def __init__(self, dim: int, *, v: float = 0.5, **kwargs: Any) -> None:
        if not (_real(v) and math.isfinite(v) and v >= 0):
            raise UserError(f"v (posterior scale) must be >= 0 and finite, got {v!r}.")
        super().__init__(dim, **kwargs)
        self.v = float(v)

    def posterior(self, name: str) -> tuple[Vector, Matrix]:
        """Mean ``θ`` and covariance ``v²A⁻¹`` of one arm's weight posterior."""
        arm = self._arm(name)
        return arm.theta.copy(), (self.v**2) * arm.a_inv

    def _scores(self, means: Vector, widths: Vector) -> tuple[Vector, Vector]:
        # θ̃ᵀx is Gaussian with mean θᵀx and sd v·sqrt(xᵀA⁻¹x): sample it directly (exact, O(d²)).
        sampled = means + self.v * widths * self.rng.standard_normal(means.shape[0])
        return sampled, self.v * widths


class EpsilonGreedyRouter(LinearRouter):
    """Greedy on ``θᵀx``; with probability ``epsilon`` the ranking is shuffled."""

    policy = "epsilon-greedy"

    def __init__(self, dim: int, *, epsilon: float = 0.05, **kwargs: Any) -> None:
        if not 0 <= epsilon <= 1:
            raise UserError(f"epsilon must be in [0, 1], got {epsilon!r}.")
        super().__init__(dim, **kwargs)
        self.epsilon = float(epsilon)

    def _reorder(self, ranked: list[RankedArm]) -> list[RankedArm]:
        if self.epsilon and self.rng.random() < self.epsilon:
            order = self.rng.permutation(len(ranked))
            return [ranked[int(i)] for i in order]
        return ranked

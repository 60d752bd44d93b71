"""Routing and racing on real RouterBench outcomes, replayed (no network, no model calls).

What it measures (see issue 7 and ``benchmarks/data/routerbench/README.md``):

* **Replay.** Every prompt of the split is answered by each model's *recorded* response; quality
  is the recorded correctness (0/1), cost the recorded dollars; latency is **simulated** from the
  response length with the per-model throughputs in ``THROUGHPUT`` (it enters no reward here:
  the sweep uses quality and cost only, latency is reported for information).
* **Protocol.** 20 shuffles of the mixed prompts; each shuffle is cut into 5 folds. For each fold
  the routers are warm-started from the *logged* outcomes of the other 4 folds (every arm
  observed, as in an offline log) and then run **online** over the held-out fold in shuffled
  order, learning only from the arms they actually ran (bandit feedback). Every prompt is thus
  evaluated once per shuffle, by a router that never saw its outcomes beforehand.
* **Cost sweep.** Reward = correctness + λ·1000·C with the product's bounded cost term
  C = $1 / ($1 + cost) ≈ 1 − cost/$1 (``RewardPolicy`` with ``quality_weight=1``,
  ``latency_weight=0``, ``cost_weight=λ·1000``, ``cost_scale_usd=1``): up to a constant and a
  curvature below 5 % at the dearest call, correctness − λ·(cost / $0.001); sweeping λ traces
  each router's cost–accuracy curve.
* **Metrics.** accuracy and total dollars over the whole split (mean over shuffles); AIQ as in
  RouterBench (area under the non-decreasing convex hull of the router's points, extended flat
  to the highest single-model cost, divided by the single-model cost range; no quality is
  credited below the router's cheapest point); oracle gap closed = (AIQ − AIQ_zero) /
  (AIQ_oracle − AIQ_zero); the first cost on the hull at which GPT-4's accuracy is reached.
  A router's headline accuracy/cost is its best operating point costing at most 25 % of
  GPT-4's dollars (the moonshot budget); its full curve is in ``results.json``.
* **Racing.** Multiple-choice prompts (ARC, Winogrande) are recognised from the prompt text
  (lettered options); their recorded answers are single letters. ``vote_k`` races k cheap arms
  and answers with the agreement class that was most often right for that agreement pattern in
  the log; ``cascade_k`` races k cheap arms, answers when they agree and escalates to the most
  accurate arm when they do not; both pick their arms with a tabular router over the query's
  intent group (accuracy − λ·cost, from the log, updated online from the arms they raced). The
  cascade verifies before it escalates: a cheap answer without a letter is replaced by the next
  cheap arm's.
* **Code answers** (MBPP) cannot be compared as text. The recorded answers are executed once
  with ``phi_core.parallel.code_agreement`` (each model's Python function run, in an isolated
  subprocess, on the literal example inputs the answers use; cached under ``--cache-dir``,
  default ``benchmarks/.cache``, ~25 s for 299 prompts; ``--no-exec`` skips it). ``vote_k``
  takes the largest behaviour class of its k arms; the cascades ask their ranked cheap arms in
  turn and keep the first answer that has runnable Python (a verifier, not an oracle: whether
  the function is *right* is unknown).
* ``router_cascade`` asks cheap arms one
  at a time and decides after each answer whether to stop, ask the next or escalate, by a policy
  fitted on the warm-start log (dynamic programming over the answer-agreement pattern, per
  intent group); it does not refit on the evaluated stream. ``pattern_cascade`` is the same
  stop/ask/escalate dynamic programme with three changes: on two-option prompts the nodes are the
  letters themselves (Winogrande answers are strongly letter-biased per model), at a stop the
  answer is the asked arm that was most often right at that node, and the order of the cheap arms
  is the permutation (of the 4 most accurate cheap arms, depth 3) whose fitted policy is worth most
  on the warm-start log; code prompts go to the arms with the best logged accuracy − λ·cost,
  verified as above. "Cheap" = logged mean cost at most 15 % of the dearest arm's.

Run: ``.venv/bin/python benchmarks/routing_replay.py --out benchmarks/results/routing``
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import csv
import hashlib
import itertools
import json
import math
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import phi_core.parallel._behaviour as _behaviour_module
from phi_core.loop import AgentContext, AgentLoopConfig, agent_loop
from phi_core.outcome import Outcome
from phi_core.parallel import BehaviourReport, code_agreement_sync
from phi_core.providers.base import ModelConfig
from phi_core.routing import (
    EpsilonGreedyRouter,
    HashedFeatures,
    LinearRouter,
    LinearThompsonRouter,
    LinUCBRouter,
    Recorded,
    ReplayProvider,
    RewardPolicy,
    prompt_key,
)
from phi_core.routing.features import intent_signals

HERE = Path(__file__).resolve().parent
CACHE_DIR = HERE / ".cache"
_BEHAVIOUR_SOURCE = Path(_behaviour_module.__file__)
_WORKER_SOURCE = _BEHAVIOUR_SOURCE.with_name("_exec_worker.py")
GPT4 = "gpt-4-1106-preview"
COST_UNIT = 0.001
# The bounded reward's cost term is s / (s + cost): nearly linear (1 - cost/s) for costs well
# below s. With s = $1 (every recorded call costs < $0.05) the sweep's reward is
# quality + λ·(s/unit)·C ≈ const + quality − λ·cost/unit, the cost sweep of the study.
REWARD_SCALE_USD = 1.0
N_SHUFFLES = 20
N_FOLDS = 5
BUDGET_SHARE = 0.25
# Simulated decoding: (time to first token s, output tokens per second). Stated, not measured.
THROUGHPUT = {
    "WizardLM/WizardLM-13B-V1.2": (0.4, 60.0),
    "claude-instant-v1": (0.5, 90.0),
    "claude-v1": (0.9, 40.0),
    "claude-v2": (1.0, 35.0),
    "gpt-3.5-turbo-1106": (0.4, 80.0),
    "gpt-4-1106-preview": (0.8, 30.0),
    "meta/code-llama-instruct-34b-chat": (0.5, 45.0),
    "meta/llama-2-70b-chat": (0.6, 35.0),
    "mistralai/mistral-7b-chat": (0.3, 110.0),
    "mistralai/mixtral-8x7b-chat": (0.4, 75.0),
    "zero-one-ai/Yi-34B-Chat": (0.5, 45.0),
}
LAMBDAS = [0.0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0]
LAMBDAS += [5.0, 20.0]
CASCADE_LAMBDAS = [0.0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.07, 0.1, 0.3]
# The issue's hand-measured racing figures (share of GPT-4's cost, accuracy), plotted as targets.
HAND_MEASURED = [
    (0.20, 0.797, "hand: 3-model vote"),
    (0.26, 0.847, "hand: 2-model cascade"),
    (0.38, 0.853, "hand: 2-model cascade"),
]
_LETTER = re.compile(r"\b([A-E])\b")
_LETTER_PAREN = re.compile(r"([A-E])\)")


# ---------------------------------------------------------------------------- data


@dataclass
class Data:
    models: list[str]
    prompts: list[str]
    tasks: list[str]
    correct: np.ndarray  # (n, m) 0/1
    cost: np.ndarray  # (n, m) dollars
    latency: np.ndarray  # (n, m) simulated seconds
    letters: list[list[str | None]]  # parsed single-letter answers (None when not a letter)
    responses: list[list[str]]  # the recorded answer texts
    features: np.ndarray  # (n, d)
    intent: np.ndarray  # (n,) 0 = two options, 1 = many options, 2 = other
    # Code prompts: (m, m) behavioural agreement of the models' answers (diagonal = the answer
    # has runnable Python), from phi_core.parallel.code_agreement; empty with --no-exec.
    code_agree: dict[int, np.ndarray]


def _answer_letter(text: str) -> str | None:
    head = text.strip()[:20]
    found = _LETTER.search(head) or _LETTER_PAREN.search(text)
    return found.group(1) if found else None


def _literal_first(raw: str) -> str:
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
    if isinstance(value, list) and value:
        return str(value[0])
    return str(value)


def exec_agreement(
    files: list[Path],
    responses: list[list[str]],
    code_rows: list[int],
    workers: int,
    cache_dir: Path | None = None,
) -> dict[int, np.ndarray]:
    """Behavioural agreement of every pair of models' code answers, per code prompt.

    Runs each prompt's answers through :func:`phi_core.parallel.code_agreement_sync` (one
    isolated subprocess per prompt). Cached under ``cache_dir`` (default ``benchmarks/.cache``)
    by the hash of the data files and of the worker's source, since it takes ~25 s for 299
    prompts on 2 cores."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    digest.update(_WORKER_SOURCE.read_bytes())
    digest.update(_BEHAVIOUR_SOURCE.read_bytes())
    cache = (cache_dir or CACHE_DIR) / f"exec_agreement-{digest.hexdigest()[:16]}.json"
    if cache.exists():
        saved = json.loads(cache.read_text())
        return {int(i): np.array(a, dtype=bool) for i, a in saved.items()}

    def one(i: int) -> np.ndarray:
        report = code_agreement_sync(responses[i])
        return np.array(report.agree, dtype=bool)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        matrices = dict(zip(code_rows, pool.map(one, code_rows), strict=True))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({str(i): a.tolist() for i, a in matrices.items()}))
    return matrices


def load(
    data_dir: Path,
    dim: int,
    *,
    run_code: bool = True,
    workers: int = 2,
    cache_dir: Path | None = None,
) -> Data:
    csv.field_size_limit(1 << 30)
    files = sorted(data_dir.glob("*.csv"))
    if not files:
        raise SystemExit(f"No CSV files in {data_dir}; pass --data DIR with RouterBench CSVs.")
    rows: list[dict[str, str]] = []
    for path in files:
        with path.open(newline="", encoding="utf-8") as fh:
            rows.extend(csv.DictReader(fh))
    skip = {"sample_id", "prompt", "eval_name", "oracle_model_to_route_to"}
    models = [c for c in rows[0] if "|" not in c and c not in skip]
    if GPT4 not in models:
        raise SystemExit(f"{GPT4} missing from the data; the GPT-4 comparisons need it.")
    extractor = HashedFeatures(dim)
    prompts, tasks, letters, correct, cost, latency, feats, intent = [], [], [], [], [], [], [], []
    all_responses: list[list[str]] = []
    for r in rows:
        prompt = _literal_first(r["prompt"])
        prompts.append(prompt)
        tasks.append(r["eval_name"])
        correct.append([float(r[m]) for m in models])
        cost.append([float(r[f"{m}|total_cost"]) for m in models])
        responses = [_literal_first(r.get(f"{m}|model_response", "")) for m in models]
        all_responses.append(responses)
        sig = intent_signals(prompt)
        group = 0 if sig["choices_2"] else 1 if sig["choices_many"] else 2
        intent.append(group)
        # Only multiple-choice prompts (read from the prompt, not the task label) have letter
        # answers; a capital letter inside generated code is not a vote.
        letters.append([_answer_letter(t) if group < 2 else None for t in responses])
        lat = []
        for m, text in zip(models, responses, strict=True):
            ttft, tps = THROUGHPUT.get(m, (0.5, 50.0))
            lat.append(ttft + max(1, len(text) // 4) / tps)
        latency.append(lat)
        feats.append(extractor(prompt))
    return Data(
        models,
        prompts,
        tasks,
        np.array(correct),
        np.array(cost),
        np.array(latency),
        letters,
        all_responses,
        np.array(feats),
        np.array(intent),
        exec_agreement(
            files, all_responses, [i for i, g in enumerate(intent) if g == 2], workers, cache_dir
        )
        if run_code
        else {},
    )


# ---------------------------------------------------------------------------- curves, AIQ


def ndch(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-decreasing upper convex hull of (cost, quality) points."""
    pts = sorted(set(points))
    mono: list[tuple[float, float]] = []
    for c, q in pts:
        if mono and q <= mono[-1][1]:
            continue
        mono.append((c, q))
    hull: list[tuple[float, float]] = []
    for p in mono:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def hull_value(hull: list[tuple[float, float]], c: float) -> float:
    if c < hull[0][0]:
        return 0.0
    for (x1, y1), (x2, y2) in itertools.pairwise(hull):
        if x1 <= c <= x2:
            return y1 + (y2 - y1) * (c - x1) / (x2 - x1) if x2 > x1 else max(y1, y2)
    return hull[-1][1]


def aiq(points: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    hull = ndch(points)
    grid = np.linspace(lo, hi, 4001)
    values = np.array([hull_value(hull, float(c)) for c in grid])
    return float(np.trapezoid(values, grid) / (hi - lo))


def cost_to_reach(points: Sequence[tuple[float, float]], target: float) -> float | None:
    hull = ndch(points)
    if hull[-1][1] < target - 1e-12:
        return None
    if hull[0][1] >= target:
        return hull[0][0]
    for (x1, y1), (x2, y2) in itertools.pairwise(hull):
        if y1 < target <= y2:
            return x1 + (x2 - x1) * (target - y1) / (y2 - y1)
    return None


def best_within(points: Sequence[tuple[float, float]], budget: float) -> tuple[float, float]:
    inside = [p for p in points if p[0] <= budget + 1e-12]
    if not inside:
        return min(points)
    return max(inside, key=lambda p: (p[1], -p[0]))


# ---------------------------------------------------------------------------- policies


def reward_policy(lam: float) -> RewardPolicy:
    return RewardPolicy(
        quality_weight=1.0,
        latency_weight=0.0,
        cost_weight=lam * REWARD_SCALE_USD / COST_UNIT,
        cost_scale_usd=REWARD_SCALE_USD,
    )


def rewards_matrix(d: Data, idx: np.ndarray, lam: float) -> np.ndarray:
    pol = reward_policy(lam)
    out: np.ndarray = pol.quality_weight * d.correct[idx] + pol.cost_weight * pol.cost_term(
        d.cost[idx]
    )
    return out


# Hyper-parameters, chosen by the cross-validated protocol on the training split (see README).
HYPER = {"alpha": 1.0, "v": 0.15, "epsilon": 0.05, "ridge": 100.0}


def make_router(kind: str, dim: int, seed: int) -> LinearRouter:
    if kind == "linucb":
        return LinUCBRouter(dim, alpha=HYPER["alpha"], ridge=HYPER["ridge"], seed=seed)
    if kind == "thompson":
        return LinearThompsonRouter(dim, v=HYPER["v"], ridge=HYPER["ridge"], seed=seed)
    if kind == "epsilon_greedy":
        return EpsilonGreedyRouter(dim, epsilon=HYPER["epsilon"], ridge=HYPER["ridge"], seed=seed)
    raise ValueError(kind)


def warm_router(kind: str, d: Data, warm: np.ndarray, lam: float, seed: int) -> LinearRouter:
    router = make_router(kind, d.features.shape[1], seed)
    r = rewards_matrix(d, warm, lam)
    router.warm_start_matrix(d.features[warm], {m: r[:, j] for j, m in enumerate(d.models)})
    return router


def run_bandit(
    kind: str, d: Data, warm: np.ndarray, stream: np.ndarray, lam: float, seed: int
) -> tuple[float, float]:
    router = warm_router(kind, d, warm, lam, seed)
    pol = reward_policy(lam)
    col = {m: j for j, m in enumerate(d.models)}
    acc = cost = 0.0
    for i in stream:
        x = d.features[i]
        arm = router.rank(x, d.models).top.arm
        j = col[arm]
        acc += d.correct[i, j]
        cost += d.cost[i, j]
        # Bandit feedback: only the arm that ran is observed.
        ran = Outcome(config_id=arm, latency_s=float(d.latency[i, j]), cost_usd=float(d.cost[i, j]))
        r = pol.reward(ran, float(d.correct[i, j]))
        router.update(x, arm, r.reward)
    return acc, cost


def knn_scores(
    d: Data, train: np.ndarray, test: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    sims = d.features[test] @ d.features[train].T
    nn = np.argpartition(-sims, kth=min(k, len(train) - 1), axis=1)[:, :k]
    neigh = train[nn]  # (t, k)
    return d.correct[neigh].mean(axis=1), d.cost[neigh].mean(axis=1)


def choose_k(d: Data, warm: np.ndarray, rng: np.random.Generator) -> int:
    folds = np.array_split(rng.permutation(warm), 3)
    best, best_k = -1.0, 10
    for k in (5, 10, 20, 40, 80):
        acc = 0.0
        for f in range(3):
            test = folds[f]
            train = np.concatenate([folds[g] for g in range(3) if g != f])
            q, _ = knn_scores(d, train, test, k)
            acc += float(d.correct[test, q.argmax(axis=1)].sum())
        if acc > best:
            best, best_k = acc, k
    return best_k


def run_knn(
    d: Data, warm: np.ndarray, stream: np.ndarray, lams: list[float], k: int
) -> list[tuple[float, float]]:
    q, c = knn_scores(d, warm, stream, k)
    out = []
    for lam in lams:
        pick = (q - lam * c / COST_UNIT).argmax(axis=1)
        out.append((float(d.correct[stream, pick].sum()), float(d.cost[stream, pick].sum())))
    return out


def plurality(d: Data, i: int, arms: list[int]) -> tuple[float, bool]:
    """Correctness of the plurality letter among ``arms`` and whether all arms agreed."""
    votes: dict[str, int] = defaultdict(int)
    for j in arms:
        letter = d.letters[i][j]
        if letter:
            votes[letter] += 1
    if not votes:
        return float(d.correct[i, arms[0]]), len(arms) == 1
    top = max(votes, key=lambda v: (votes[v], -[d.letters[i][j] for j in arms].index(v)))
    agreed = votes[top] == len(arms)
    return float(next(d.correct[i, j] for j in arms if d.letters[i][j] == top)), agreed


CODE_FALLBACKS = 3  # arms asked at most on a code prompt before keeping the first answer
FORMAT_FALLBACKS = 2  # extra cheap arms asked to replace answers without a letter


def verified_letters(d: Data, i: int, ranked: list[int], k: int) -> tuple[list[int], list[int]]:
    """(voters, arms asked) of a race of ``k`` cheap arms on a multiple-choice prompt, where an
    answer without a letter fails its format check and the next cheap arm in ``ranked`` is asked
    in its place (at most ``FORMAT_FALLBACKS`` extra arms)."""
    asked = list(ranked[:k])
    voters = [j for j in asked if d.letters[i][j] is not None]
    spare = ranked[k : k + FORMAT_FALLBACKS]
    for j in spare:
        if len(voters) >= k:
            break
        asked.append(j)
        if d.letters[i][j] is not None:
            voters.append(j)
    return voters, asked


def verified_code_answer(d: Data, i: int, arms: list[int]) -> tuple[float, list[int]]:
    """(correctness, arms asked) of a verified cascade on a code prompt: ask ``arms`` in order
    and stop at the first answer with runnable Python (its function loads; checked by executing
    it, see ``phi_core.parallel.code_agreement``); if none has, keep the first answer. Without
    execution results (``--no-exec``) the first arm answers."""
    agree = d.code_agree.get(i)
    for n, j in enumerate(arms):
        if agree is None or agree[j, j]:
            return float(d.correct[i, j]), arms[: n + 1]
    return float(d.correct[i, arms[0]]), arms


def behaviour_vote(d: Data, i: int, arms: list[int]) -> float:
    """Correctness of the largest behaviour class among ``arms``' code answers (ties: the
    earlier arm; no runnable answer: the first arm's)."""
    agree = d.code_agree.get(i)
    if agree is None:
        return float(d.correct[i, arms[0]])
    report = BehaviourReport(list(np.diag(agree)), agree.tolist(), compared_inputs=[])
    classes = report.classes(arms)
    sizes = Counter(c for c in classes if c is not None)
    if not sizes:
        return float(d.correct[i, arms[0]])
    top = max(sizes.values())
    winner = next(
        j for j, c in zip(arms, classes, strict=True) if c is not None and sizes[c] == top
    )
    return float(d.correct[i, winner])


def cheap_arms(d: Data, idx: np.ndarray) -> list[int]:
    """Arms whose logged mean cost is at most 15 % of the dearest arm's."""
    mean_c = d.cost[idx].mean(axis=0)
    return [j for j in range(len(d.models)) if mean_c[j] <= 0.15 * mean_c.max()]


def learned_vote(
    table: dict[tuple[int, tuple[int, ...]], np.ndarray],
    group: int,
    d: Data,
    i: int,
    arms: list[int],
) -> tuple[float, bool, bool]:
    """(correctness of the chosen answer, all arms agreed, answers comparable).

    The answer is the agreement class (arms giving the same letter) with the best logged accuracy
    for this intent group and agreement pattern; without a logged pattern, the plurality.
    """
    pattern = _pattern(d, i, arms)
    letters = [d.letters[i][j] for j in arms]
    if all(letter is None for letter in letters):
        return float(d.correct[i, arms[0]]), True, False
    agreed = len(set(letters)) == 1
    stats = table.get((group, pattern))
    if stats is None:
        correct, agreed_p = plurality(d, i, arms)
        return correct, agreed_p, True
    best_class = int(np.argmax(stats[0] / np.maximum(stats[1], 1)))
    chosen = next(k for k, c in enumerate(pattern) if c == best_class)
    return float(d.correct[i, arms[chosen]]), agreed, True


def fit_vote_table(
    d: Data, idx: np.ndarray, arms_of: dict[int, list[int]]
) -> dict[tuple[int, tuple[int, ...]], np.ndarray]:
    """Per (intent group, agreement pattern): how often each agreement class was right."""
    table: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
    for i in idx:
        g = int(d.intent[i])
        arms = arms_of[g]
        pattern = _pattern(d, int(i), arms)
        stats = table.setdefault((g, pattern), np.zeros((2, len(arms))))
        for k, c in enumerate(pattern):
            if c >= 0 and c not in pattern[:k]:
                stats[0, c] += d.correct[i, arms[k]]
                stats[1, c] += 1
    return table


def run_racing(
    policy: str, d: Data, warm: np.ndarray, stream: np.ndarray, k: int, lam: float, seed: int
) -> tuple[float, float]:
    """vote_k / cascade_k. A tabular router over the query's intent group (accuracy − λ·cost of
    each cheap arm, from the log, updated online from the arms raced) picks the k arms; the vote
    takes the agreement class with the best logged accuracy for its pattern; the cascade answers
    when the raced arms agree and escalates to the group's most accurate arm otherwise. The
    cascade verifies before it escalates: an answer without a letter is replaced by the next
    cheap arm's (:func:`verified_letters`). Code prompts have no letters: the vote takes the
    largest behaviour class of the k arms' code (:func:`behaviour_vote`), the cascade asks the
    ranked arms in turn and keeps the first answer with runnable Python
    (:func:`verified_code_answer`)."""
    cheap = cheap_arms(d, warm)
    hits = np.zeros((3, len(d.models)))
    trials = np.zeros((3, len(d.models)))
    spend = np.zeros((3, len(d.models)))
    for g in (0, 1, 2):
        idx = warm[d.intent[warm] == g]
        hits[g], trials[g], spend[g] = d.correct[idx].sum(0), len(idx), d.cost[idx].sum(0)

    def ranking(g: int) -> tuple[list[int], int]:
        """Cheap arms by accuracy − λ·cost for group ``g``, and the group's strongest arm."""
        acc = hits[g] / np.maximum(trials[g], 1)
        value = acc - lam * (spend[g] / np.maximum(trials[g], 1)) / COST_UNIT
        strongest = int(np.argmax(acc))
        return sorted((j for j in cheap if j != strongest), key=lambda j: -value[j]), strongest

    def observe(g: int, i: int, arms: list[int]) -> None:  # bandit feedback: arms that ran
        for j in arms:
            hits[g, j] += d.correct[i, j]
            trials[g, j] += 1
            spend[g, j] += d.cost[i, j]

    arms_of = {g: ranking(g)[0][:k] for g in (0, 1, 2)}
    table = fit_vote_table(d, warm, arms_of)
    acc_total = cost = 0.0
    for i in stream:
        g = int(d.intent[i])
        ranked, strongest = ranking(g)
        arms = ranked[:k]
        if g == 2:
            if policy == "vote":
                right, asked = behaviour_vote(d, int(i), arms), arms
            else:
                right, asked = verified_code_answer(d, int(i), ranked[:CODE_FALLBACKS])
        elif policy == "vote":
            if arms != arms_of[g]:  # the online counts changed the choice: refit the table
                arms_of[g] = arms
                table = fit_vote_table(d, warm, arms_of)
            right, _, _ = learned_vote(table, g, d, int(i), arms)
            asked = arms
        else:
            voters, asked = verified_letters(d, int(i), ranked, k)
            if len(voters) == k and len({d.letters[i][j] for j in voters}) == 1:
                right = float(d.correct[i, voters[0]])
            else:  # disagreement, or too few well-formed answers: escalate
                right = float(d.correct[i, strongest])
                asked = [*asked, strongest]
        acc_total += right
        cost += float(d.cost[i, asked].sum())
        observe(g, int(i), asked)
    return acc_total, cost


# -- router_cascade: a stop/ask/escalate policy over answer-agreement patterns


def _pattern(d: Data, i: int, arms: list[int]) -> tuple[int, ...]:
    seen: dict[str, int] = {}
    out = []
    for j in arms:
        letter = d.letters[i][j]
        if letter is None:
            out.append(-1)
            continue
        out.append(seen.setdefault(letter, len(seen)))
    return tuple(out)


MIN_NODE = 30  # a node with fewer logged prompts is a leaf: too few to fit a further split


def fit_cascade(
    d: Data, idx: np.ndarray, order: list[int], strong: int, lam: float
) -> dict[tuple[int, ...], tuple[str, int]]:
    """Optimal stop/ask/escalate policy on the log: node = agreement pattern of answers so far.

    ``("stop", c)`` answers with agreement class ``c`` (the class with the best logged accuracy
    at that node), ``("ask", -1)`` asks the next arm, ``("escalate", -1)`` calls ``strong``.
    """
    policy: dict[tuple[int, ...], tuple[str, int]] = {}

    def class_value(members: np.ndarray, depth: int) -> tuple[float, int]:
        arms = order[:depth]
        best, best_c = -math.inf, 0
        for c in range(depth):
            total = 0.0
            for i in members:
                pattern = _pattern(d, int(i), arms)
                k = next((k for k, v in enumerate(pattern) if v == c), None)
                # A class absent from this prompt falls back to the first arm's answer.
                total += d.correct[i, arms[k if k is not None else 0]]
            if total / len(members) > best:
                best, best_c = total / len(members), c
        return best, best_c

    def solve(members: np.ndarray, depth: int, node: tuple[int, ...]) -> float:
        stop, stop_class = class_value(members, depth) if depth else (-math.inf, -1)
        escalate = float(
            np.mean(d.correct[members, strong] - lam * d.cost[members, strong] / COST_UNIT)
        )
        best, action = (
            (stop, ("stop", stop_class)) if stop >= escalate else (escalate, ("escalate", -1))
        )
        if depth < len(order) and len(members) >= MIN_NODE:
            j = order[depth]
            groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
            for i in members:
                groups[_pattern(d, int(i), order[: depth + 1])].append(int(i))
            value = -lam * float(np.mean(d.cost[members, j])) / COST_UNIT
            for key, group in groups.items():
                value += len(group) / len(members) * solve(np.array(group), depth + 1, key)
            if value > best:
                best, action = value, ("ask", -1)
        policy[node] = action
        return best

    if len(idx):
        solve(idx, 0, ())
    return policy


def cascade_order(d: Data, idx: np.ndarray, strong: int, lam: float) -> list[int]:
    """Cheap arms (≤ 15 % of the strong arm's mean cost) by logged accuracy − λ·cost; top 3."""
    mean_q = d.correct[idx].mean(axis=0)
    mean_c = d.cost[idx].mean(axis=0)
    cheap = [j for j in range(len(d.models)) if mean_c[j] <= 0.15 * mean_c[strong] and j != strong]
    cheap.sort(key=lambda j: -(mean_q[j] - lam * 0.1 * mean_c[j] / COST_UNIT))
    return cheap[:3]


def run_router_cascade(
    d: Data, warm: np.ndarray, stream: np.ndarray, lam: float
) -> tuple[float, float]:
    """Fitted on the warm-start log per intent group; on the stream it only acts (no refit)."""
    acc = cost = 0.0
    plans: dict[int, tuple[list[int], int, dict[tuple[int, ...], tuple[str, int]]]] = {}
    for g in (0, 1, 2):
        idx = warm[d.intent[warm] == g]
        strong = int(d.correct[idx].mean(axis=0).argmax()) if len(idx) else 0
        order = cascade_order(d, idx, strong, lam)
        plans[g] = (order, strong, fit_cascade(d, idx, order, strong, lam))
    for i in stream:
        order, strong, plan = plans[int(d.intent[i])]
        if d.intent[i] == 2 and plan.get((), ("escalate", -1))[0] != "escalate":
            # Code answers have no letters to compare: the verified cascade over the same order.
            right, asked = verified_code_answer(d, int(i), order[:CODE_FALLBACKS])
            acc += right
            cost += float(d.cost[i, asked].sum())
            continue
        node: tuple[int, ...] = ()
        depth = 0
        while True:
            action, chosen = plan.get(node, ("escalate", -1))
            if action == "stop":
                k = next((k for k, v in enumerate(node) if v == chosen), 0)
                acc += float(d.correct[i, order[k]])
                break
            if action == "escalate" or depth >= len(order):
                acc += float(d.correct[i, strong])
                cost += float(d.cost[i, strong])
                break
            cost += float(d.cost[i, order[depth]])
            depth += 1
            node = _pattern(d, int(i), order[:depth])
    return acc, cost


# -- pattern_cascade: the same stop/ask/escalate idea, with letter-aware patterns and a chosen order

PATTERN_LAMBDAS = [0.015, 0.02, 0.024, 0.026, 0.028, 0.03, 0.032, 0.035, 0.04, 0.05, 0.1]
PATTERN_CANDIDATES = 4  # the order is searched among permutations of this many cheap arms
PATTERN_DEPTH = 3
_NO_LETTER = 5


def _pattern_codes(d: Data, idx: np.ndarray, order: list[int], raw: bool) -> np.ndarray:
    """Per prompt, the code of each arm's answer in ``order``.

    ``raw``: the letter itself (two-option prompts, where models are strongly biased towards one
    letter, so "A" from a model that nearly always says "A" means less than its "B"); otherwise the
    agreement class of :func:`_pattern` (letters of many-option prompts are exchangeable).
    """
    out = np.zeros((len(idx), len(order)), dtype=np.int64)
    for r, i in enumerate(idx):
        if raw:
            out[r] = [
                _NO_LETTER if (x := d.letters[i][j]) is None else "ABCDE".index(x) for j in order
            ]
        else:
            out[r] = _pattern(d, int(i), order)
    return out


PatternPlan = dict[tuple[int, ...], tuple[str, int]]


def fit_pattern_cascade(
    d: Data, idx: np.ndarray, order: list[int], strong: int, lam: float, codes: np.ndarray
) -> tuple[PatternPlan, float]:
    """Optimal policy on the log over answer-code nodes, and its value (per prompt).

    ``("stop", k)`` answers with the k-th asked arm's answer (the best one at that node on the
    log), ``("ask", -1)`` asks the next arm, ``("escalate", -1)`` calls ``strong``.
    """
    right = d.correct[idx][:, order]
    ask_cost = lam * d.cost[idx][:, order] / COST_UNIT
    escalate = d.correct[idx, strong] - lam * d.cost[idx, strong] / COST_UNIT
    plan: PatternPlan = {}

    def solve(members: np.ndarray, depth: int, node: tuple[int, ...]) -> float:
        best, action = float(escalate[members].mean()), ("escalate", -1)
        for k in range(depth):
            value = float(right[members, k].mean())
            if value > best:
                best, action = value, ("stop", k)
        if depth < len(order) and len(members) >= MIN_NODE:
            value = -float(ask_cost[members, depth].mean())
            branch = codes[members, depth]
            for key in np.unique(branch):
                sub = members[branch == key]
                value += len(sub) / len(members) * solve(sub, depth + 1, (*node, int(key)))
            if value > best:
                best, action = value, ("ask", -1)
        plan[node] = action
        return best

    value = solve(np.arange(len(idx)), 0, ()) if len(idx) else 0.0
    return plan, value


def run_pattern_cascade(
    d: Data, warm: np.ndarray, stream: np.ndarray, lam: float
) -> tuple[float, float]:
    """Per intent group, fitted on the warm-start log only (no refit on the evaluated stream):
    the order of cheap arms is the permutation of the ``PATTERN_CANDIDATES`` most accurate cheap
    arms whose fitted policy is worth most on the log; two-option prompts branch on the letters
    themselves. Prompts without comparable answers (code) go to the single arm with the best
    logged accuracy − λ·cost (cheap arms and the group's strongest arm)."""
    cheap = cheap_arms(d, warm)
    acc = cost = 0.0
    for g in (0, 1, 2):
        idx = warm[d.intent[warm] == g]
        todo = stream[d.intent[stream] == g]
        if not len(idx) or not len(todo):
            continue
        q = d.correct[idx].mean(axis=0)
        c = d.cost[idx].mean(axis=0)
        strong = int(q.argmax())
        if g == 2:
            ranked = sorted(set([*cheap, strong]), key=lambda j: -(q[j] - lam * c[j] / COST_UNIT))
            for i in todo:
                right, asked = verified_code_answer(d, int(i), ranked[:CODE_FALLBACKS])
                acc += right
                cost += float(d.cost[i, asked].sum())
            continue
        raw = g == 0
        cands = sorted((j for j in cheap if j != strong), key=lambda j: -q[j])
        cands = cands[:PATTERN_CANDIDATES]
        best: tuple[float, list[int], PatternPlan] | None = None
        for perm in itertools.permutations(cands, min(PATTERN_DEPTH, len(cands))):
            order = list(perm)
            plan, value = fit_pattern_cascade(
                d, idx, order, strong, lam, _pattern_codes(d, idx, order, raw)
            )
            if best is None or value > best[0]:
                best = (value, order, plan)
        assert best is not None
        _, order, plan = best
        codes = _pattern_codes(d, todo, order, raw)
        for r, i in enumerate(todo):
            node: tuple[int, ...] = ()
            depth = 0
            while True:
                action, k = plan.get(node, ("escalate", -1))
                if action == "stop":
                    acc += float(d.correct[i, order[k]])
                    break
                if action == "escalate" or depth >= len(order):
                    acc += float(d.correct[i, strong])
                    cost += float(d.cost[i, strong])
                    break
                cost += float(d.cost[i, order[depth]])
                node = (*node, int(codes[r, depth]))
                depth += 1
    return acc, cost


# ---------------------------------------------------------------------------- replay check


async def replay_check(d: Data, n_check: int = 200) -> dict[str, Any]:
    """Answer ``n_check`` prompts through the real agent loop and :class:`ReplayProvider`.

    A LinUCB router (warm-started on the other prompts) picks the arm; the answer comes back
    through ``agent_loop`` from the replay provider and must equal the recorded text.
    """
    table = {
        (m, prompt_key(p)): Recorded(d.responses[i][j], cost_usd=float(d.cost[i, j]))
        for i, p in enumerate(d.prompts)
        for j, m in enumerate(d.models)
    }
    provider = ReplayProvider(table)
    rng = np.random.default_rng(7)
    perm = rng.permutation(len(d.prompts))
    n_check = min(n_check, len(d.prompts) // 2)  # a small --data split keeps half to warm up
    check, warm = perm[:n_check], perm[n_check:]
    router = warm_router("linucb", d, warm, 0.1, seed=7)
    correct = cost = 0.0
    mismatches = 0
    for i in check:
        arm = router.rank(d.features[i], d.models).top.arm
        j = d.models.index(arm)
        config = AgentLoopConfig(
            model=ModelConfig(provider="replay", id=arm, api="replay"), provider=provider
        )
        result = await agent_loop(d.prompts[i], AgentContext(), config)
        if result.text != d.responses[i][j]:
            mismatches += 1
        correct += d.correct[i, j]
        cost += d.cost[i, j]
        router.update(d.features[i], arm, float(d.correct[i, j]) - 0.1 * d.cost[i, j] / COST_UNIT)
    return {
        "prompts": n_check,
        "answered_through_agent_loop": provider.calls,
        "text_mismatches": mismatches,
        "accuracy": round(float(correct) / n_check, 4),
        "cost_usd": round(float(cost), 4),
    }


# ---------------------------------------------------------------------------- driver

ALL_POLICIES = (
    "linucb",
    "thompson",
    "epsilon_greedy",
    "knn",
    "vote_k",
    "cascade_k",
    "router_cascade",
    "pattern_cascade",
)


def one_shuffle(args: tuple[Data, int, set[str]]) -> dict[str, list[tuple[float, float]]]:
    d, s, only = args
    rng = np.random.default_rng(1000 + s)
    n = len(d.prompts)
    perm = rng.permutation(n)
    folds = np.array_split(perm, N_FOLDS)
    totals: dict[str, list[list[float]]] = {}

    def add(name: str, point_index: int, a: float, c: float, n_points: int) -> None:
        rows = totals.setdefault(name, [[0.0, 0.0] for _ in range(n_points)])
        rows[point_index][0] += a
        rows[point_index][1] += c

    for f in range(N_FOLDS):
        stream = folds[f]
        warm = np.concatenate([folds[g] for g in range(N_FOLDS) if g != f])
        for kind in ("linucb", "thompson", "epsilon_greedy"):
            if kind not in only:
                continue
            for p, lam in enumerate(LAMBDAS):
                a, c = run_bandit(kind, d, warm, stream, lam, seed=s * 31 + f)
                add(kind, p, a, c, len(LAMBDAS))
        if "knn" in only:
            k = choose_k(d, warm, rng)
            for p, (a, c) in enumerate(run_knn(d, warm, stream, LAMBDAS, k)):
                add("knn", p, a, c, len(LAMBDAS))
        if "vote_k" in only:
            racing = [("vote", kk, lam) for kk in (3, 5) for lam in (0.0, 0.2, 1.0, 3.0)]
            for p, (pol, kk, lam) in enumerate(racing):
                a, c = run_racing(pol, d, warm, stream, kk, lam, seed=s * 31 + f)
                add("vote_k", p, a, c, len(racing))
        if "cascade_k" in only:
            casc = [("cascade", kk, lam) for kk in (2, 3) for lam in (0.0, 0.2, 1.0, 3.0)]
            for p, (pol, kk, lam) in enumerate(casc):
                a, c = run_racing(pol, d, warm, stream, kk, lam, seed=s * 31 + f)
                add("cascade_k", p, a, c, len(casc))
        if "router_cascade" in only:
            for p, lam in enumerate(CASCADE_LAMBDAS):
                a, c = run_router_cascade(d, warm, stream, lam)
                add("router_cascade", p, a, c, len(CASCADE_LAMBDAS))
        if "pattern_cascade" in only:
            for p, lam in enumerate(PATTERN_LAMBDAS):
                a, c = run_pattern_cascade(d, warm, stream, lam)
                add("pattern_cascade", p, a, c, len(PATTERN_LAMBDAS))
    return {name: [(a / n, c) for a, c in rows] for name, rows in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=HERE / "data" / "routerbench")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "routing")
    parser.add_argument("--shuffles", type=int, default=N_SHUFFLES)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=CACHE_DIR,
        help="where the executed code answers are cached (default: %(default)s)",
    )
    parser.add_argument(
        "--no-exec",
        action="store_true",
        help="do not execute the recorded code answers (racing policies then keep the first "
        "arm's code answer unverified)",
    )
    parser.add_argument(
        "--replot", action="store_true", help="only redraw the PNG from DIR/results.json"
    )
    parser.add_argument(
        "--routers",
        default=",".join(ALL_POLICIES),
        help="comma-separated subset of the learned policies to run (default: all)",
    )
    for name, value in HYPER.items():
        parser.add_argument(f"--{name}", type=float, default=value)
    args = parser.parse_args(argv)
    for name in HYPER:
        HYPER[name] = getattr(args, name)
    if args.replot:
        saved = json.loads((args.out / "results.json").read_text())
        saved_curves = {
            name: [(p["cost_usd"], p["accuracy"]) for p in r["curve"]]
            for name, r in saved["routers"].items()
        }
        singles = {m: (c[0][1], c[0][0]) for m, c in saved_curves.items() if m in THROUGHPUT}
        _plot(saved_curves, singles, saved["gpt4"]["accuracy"], args.out / "cost_accuracy.png")
        return 0
    only = {r.strip() for r in args.routers.split(",") if r.strip()}
    unknown = only - set(ALL_POLICIES)
    if unknown:
        parser.error(f"unknown routers {sorted(unknown)}; choose from {', '.join(ALL_POLICIES)}")
    started = time.monotonic()
    d = load(
        args.data,
        args.dim,
        run_code=not args.no_exec,
        workers=args.workers,
        cache_dir=args.cache_dir,
    )
    n = len(d.prompts)
    d.models.index(GPT4)
    print(f"{n} prompts, {len(d.models)} models, {args.shuffles} shuffles × {N_FOLDS} folds")

    singles = {
        m: (float(d.correct[:, j].mean()), float(d.cost[:, j].sum()))
        for j, m in enumerate(d.models)
    }
    lo = min(c for _, c in singles.values())
    hi = max(c for _, c in singles.values())
    gpt4_acc, gpt4_cost = singles[GPT4]
    budget = BUDGET_SHARE * gpt4_cost

    curves: dict[str, list[tuple[float, float]]] = {}
    for m, (a, c) in singles.items():
        curves[m] = [(c, a)]
    curves["zero_hull"] = [(c, a) for a, c in singles.values()]
    curves["random"] = [
        (float(d.cost.sum(axis=1).mean() * n / len(d.models)), float(d.correct.mean()))
    ]
    oracle_pts = []
    for lam in [*LAMBDAS, 10.0, 20.0, 50.0]:
        pick = (d.correct - lam * d.cost / COST_UNIT).argmax(axis=1)
        oracle_pts.append(
            (float(d.cost[np.arange(n), pick].sum()), float(d.correct[np.arange(n), pick].mean()))
        )
    curves["oracle"] = oracle_pts

    jobs = [(d, s, only) for s in range(args.shuffles)]
    sums: dict[str, np.ndarray] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        for result in pool.map(one_shuffle, jobs):
            for name, pts in result.items():
                arr = np.array(pts)
                sums[name] = sums.get(name, 0) + arr
    for name, total in sums.items():
        mean = total / args.shuffles
        curves[name] = [(float(c), float(a)) for a, c in mean]

    aiq_zero = aiq(curves["zero_hull"], lo, hi)
    aiq_oracle = aiq(curves["oracle"], lo, hi)
    cheap_best = max(
        (m for m in d.models if singles[m][1] <= 0.1 * gpt4_cost), key=lambda m: singles[m][0]
    )
    cheap_cost = singles[cheap_best][1]
    routers: dict[str, dict[str, Any]] = {}
    for name, pts in curves.items():
        value = aiq(pts, lo, hi)
        if name == "zero_hull":
            hull = ndch(pts)
            op = (budget, hull_value(hull, budget))
        else:
            op = best_within(pts, budget) if len(pts) > 1 else pts[0]
        routers[name] = {
            "accuracy": round(op[1], 4),
            "cost_usd": round(op[0], 4),
            "aiq": round(value, 4),
            "oracle_gap_closed": round((value - aiq_zero) / (aiq_oracle - aiq_zero), 4),
            "cost_to_match_gpt4_usd": (
                None if (c := cost_to_reach(pts, gpt4_acc)) is None else round(c, 4)
            ),
            # None when the router never spends as little as the best cheap model.
            "accuracy_at_best_cheap_cost": (
                round(hull_value(ndch(pts), cheap_cost), 4)
                if min(c for c, _ in pts) <= cheap_cost + 1e-9
                else None
            ),
            "max_accuracy": round(max(a for _, a in pts), 4),
            "curve": [{"cost_usd": round(c, 4), "accuracy": round(a, 4)} for c, a in sorted(pts)],
        }
    results = {
        "n_prompts": n,
        "shuffles": args.shuffles,
        "folds": N_FOLDS,
        "gpt4": {"accuracy": round(gpt4_acc, 4), "cost_usd": round(gpt4_cost, 4)},
        "operating_point": f"best accuracy at cost <= {BUDGET_SHARE:.0%} of GPT-4 (${budget:.2f})",
        "best_cheap_single_model": {"name": cheap_best, "cost_usd": round(cheap_cost, 4)},
        "latency_note": "latency simulated from response length with THROUGHPUT; not in rewards",
        "routers": routers,
    }
    results["replay_check"] = asyncio.run(replay_check(d))
    print(f"replay check: {results['replay_check']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(curves, singles, gpt4_acc, args.out / "cost_accuracy.png")
    _print_table(routers, gpt4_acc, gpt4_cost, cheap_best)
    print(
        f"wrote {args.out / 'results.json'} and cost_accuracy.png in {time.monotonic() - started:.0f}s"
    )
    return 0


def _fmt(value: float | None, width: int) -> str:
    return f"{'-':>{width}s}" if value is None else f"{value:{width}.3f}"


def _print_table(
    routers: dict[str, dict[str, Any]], gpt4_acc: float, gpt4_cost: float, cheap: str
) -> None:
    print(f"GPT-4: accuracy {gpt4_acc:.3f} at ${gpt4_cost:.2f}; best cheap single model: {cheap}")
    header = f"{'router':36s} {'acc':>6s} {'cost$':>7s} {'%gpt4':>6s} {'AIQ':>6s} {'gap%':>6s} {'$match4':>8s} {'acc@cheap':>9s} {'maxacc':>6s}"
    print(header)
    for name, r in sorted(routers.items(), key=lambda kv: -kv[1]["aiq"]):
        match = r["cost_to_match_gpt4_usd"]
        print(
            f"{name:36s} {r['accuracy']:6.3f} {r['cost_usd']:7.3f} {r['cost_usd'] / gpt4_cost:6.1%} "
            f"{r['aiq']:6.3f} {r['oracle_gap_closed']:6.1%} {('-' if match is None else f'{match:.2f}'):>8s} "
            f"{_fmt(r['accuracy_at_best_cheap_cost'], 9)} {r['max_accuracy']:6.3f}"
        )


def _plot(
    curves: dict[str, list[tuple[float, float]]],
    singles: dict[str, tuple[float, float]],
    gpt4_acc: float,
    path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    for m, (a, c) in singles.items():
        ax.scatter([c], [a], color="grey", s=18)
        ax.annotate(m.split("/")[-1], (c, a), fontsize=6, color="grey")
    for name in (
        "zero_hull",
        "oracle",
        "knn",
        "linucb",
        "thompson",
        "epsilon_greedy",
        "vote_k",
        "cascade_k",
        "router_cascade",
        "pattern_cascade",
    ):
        if name not in curves:
            continue
        hull = ndch(curves[name])
        ax.plot([c for c, _ in hull], [a for _, a in hull], marker="o", ms=3, label=name)
    ax.axhline(gpt4_acc, color="black", lw=0.6, ls="--", label="GPT-4 accuracy")
    gpt4_cost = singles[GPT4][1]
    for share, acc, label in HAND_MEASURED:
        ax.scatter([share * gpt4_cost], [acc], marker="x", color="black", s=40)
        ax.annotate(
            label, (share * gpt4_cost, acc), fontsize=6, xytext=(4, -8), textcoords="offset points"
        )
    ax.set_xscale("log")
    ax.set_xlabel("total cost over the split (US$, log scale)")
    ax.set_ylabel("accuracy")
    ax.set_title("RouterBench (train split) replay: cost vs accuracy, NDCH of each router")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())

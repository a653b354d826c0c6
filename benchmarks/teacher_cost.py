"""What a real teacher run costs, measured against a local server that bills like the API.

    python benchmarks/teacher_cost.py [--format table] [--episodes 30] [--invalid-rate 0.1]

The server (tests/openai_server.py) behaves like a GPT-5.x endpoint: it rejects `max_tokens` and
non-default temperatures, honours strict JSON-schema structured outputs, and simulates automatic
prefix caching as OpenAI documents it: a prompt's longest prefix already seen, in whole 128-token
blocks and only from 1,024 tokens on, is billed as cached. Tokens are counted with the server's
`count_tokens`, a GPT-like regex pre-tokenizer (words with their leading space, numbers in chunks
of up to 3 digits, whitespace runs, other characters alone; on these prompts a little coarser than OpenAI's
o200k_base), over <|start|>role<|message|>content<|end|>
framing, with the response format's schema in front as the service puts it.

(a) Cache and cost: the teacher (`rhythm_core.teacher.run.run_teacher`, default settings for
    "gpt-5.4", i.e. max_completion_tokens, structured output) plays `--episodes` training seeds.
    Per episode: requests, prompt tokens total / cached / uncached, completion tokens, and the cost
    per 30 episodes at the prices given (default gpt-5.4-like list prices: $2.50/M input, $0.25/M
    cached input, $15/M output). The server's answers are the protocol JSON only; a real reasoning
    model also bills hidden reasoning tokens, which are unknown here, so the cost is shown for
    several reasoning budgets per request (`--reasoning`).
(b) Invalid answers: a noisy model whose free-text answers are malformed at `--invalid-rate`
    (prose, an unknown action, cut-off JSON), with structured outputs off and on.

`--format` is the teacher's prompt format (`TeacherSettings.prompt_format`: "table" or "chat").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from results_file import write_result  # noqa: E402

from rhythm_core.teacher.run import run_teacher  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402
from rhythm_core.teacher.trajectories import read_trajectories  # noqa: E402
from rhythm_env.protocol import PROMPT_FORMATS  # noqa: E402
from rhythm_env.sim.spec import STEPS_PER_EPISODE  # noqa: E402
from tests.openai_server import serve  # noqa: E402


def settings(server, prompt_format: str, **overrides) -> TeacherSettings:
    values = {"backend": "openai", "model": "gpt-5.4", "base_url": server.base_url, "api_key": "sk-bench",
              "concurrency": 8, "request_timeout_s": 30.0, "prompt_format": prompt_format}
    values.update(overrides)
    return TeacherSettings(**values)


def cost_and_cache(args, tmp: Path) -> dict:
    with serve(params="reasoning", prefix_cache=True) as server:
        out = tmp / "cost.jsonl"
        result = run_teacher(settings(server, args.format, price_input_per_m=args.price_input,
                                      price_cached_input_per_m=args.price_cached, price_output_per_m=args.price_output),
                             "continuous", range(1000, 1000 + args.episodes), out)
        rejected = sum(r.response_status == 400 for r in server.requests)
    records = read_trajectories(out).records
    n = len(records)

    def per_episode(key: str) -> float:
        return sum(r["usage"][key] for r in records) / n

    prompt, cached, completion = per_episode("prompt_tokens"), per_episode("cached_prompt_tokens"), per_episode("completion_tokens")
    requests = per_episode("requests")
    print(f"(a) format {args.format}, {n} episodes of {STEPS_PER_EPISODE} steps, structured output "
          f"{'on' if records[0]['protocol']['structured_output'] else 'off'}, {rejected} rejected requests")
    print(f"    per episode: {requests:.1f} requests; prompt tokens {prompt:,.0f} = cached {cached:,.0f} + uncached "
          f"{prompt - cached:,.0f} (cached fraction {cached / prompt:.1%}); completion tokens {completion:,.0f}")
    first_step = sum(r["steps"][0]["usage"]["prompt_tokens"] for r in records) / n
    last_step = sum(r["steps"][-1]["usage"]["prompt_tokens"] for r in records) / n
    print(f"    prompt of step 1 {first_step:,.0f} tokens, of step {STEPS_PER_EPISODE} {last_step:,.0f} tokens")
    price = f"${args.price_input}/M input, ${args.price_cached}/M cached input, ${args.price_output}/M output"
    print(f"    cost per 30 episodes at {price} (published: about $3):")
    costs = {}
    for reasoning in args.reasoning:
        per_request_out = reasoning * requests
        cost = 30 * ((prompt - cached) * args.price_input + cached * args.price_cached
                     + (completion + per_request_out) * args.price_output) / 1e6
        no_cache = 30 * (prompt * args.price_input + (completion + per_request_out) * args.price_output) / 1e6
        print(f"      {reasoning:>5} reasoning tokens per request: ${cost:.2f} (${no_cache:.2f} if nothing were cached)")
        costs[str(reasoning)] = {"usd_per_30_episodes": round(cost, 2), "usd_per_30_episodes_uncached": round(no_cache, 2)}
    print(f"    the run's own billed cost for {n} episodes (no reasoning tokens): ${result.cost_usd:.4f}")
    return {"format": args.format, "episodes": n, "requests_per_episode": round(requests, 2),
            "prompt_tokens_per_episode": round(prompt), "cached_fraction": round(cached / prompt, 3),
            "completion_tokens_per_episode": round(completion), "prices_per_m": {
                "input": args.price_input, "cached_input": args.price_cached, "output": args.price_output},
            "by_reasoning_tokens_per_request": costs, "billed_usd": round(result.cost_usd, 4)}


def invalid_rates(args, tmp: Path) -> dict:
    print(f"(b) invalid answers, a model whose free-text answers are malformed {args.invalid_rate:.0%} of the time, "
          f"{args.episodes} episodes:")
    figures = {"model_invalid_rate": args.invalid_rate}
    for mode in ("off", "on"):
        with serve(params="reasoning", free_text_invalid_rate=args.invalid_rate) as server:
            out = tmp / f"invalid_{mode}.jsonl"
            result = run_teacher(settings(server, args.format, structured_output=mode), "continuous",
                                 range(1000, 1000 + args.episodes), out)
            first = [r for r in server.requests if r.reasks == 0 and r.response_status == 200]
        records = read_trajectories(out).records
        first_invalid = sum(s["attempts"] > 1 or s["invalid"] for r in records for s in r["steps"])
        steps = len(records) * STEPS_PER_EPISODE
        print(f"    structured output {mode:>3}: first answers invalid {first_invalid / steps:.1%} "
              f"({first_invalid} of {steps}), steps that fell back after re-asks {result.invalid_rate:.2%}, "
              f"requests {result.requests} ({result.requests / len(first):.3f} per step)")
        figures[f"structured_output_{mode}"] = {"first_answers_invalid": round(first_invalid / steps, 4),
                                                "fell_back": round(result.invalid_rate, 4),
                                                "requests_per_step": round(result.requests / len(first), 3)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", choices=list(PROMPT_FORMATS), default="table")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--price-input", type=float, default=2.5)
    parser.add_argument("--price-cached", type=float, default=0.25)
    parser.add_argument("--price-output", type=float, default=15.0)
    parser.add_argument("--reasoning", type=lambda t: [int(x) for x in t.split(",")], default=[0, 128, 512])
    parser.add_argument("--invalid-rate", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = {"cost": cost_and_cache(args, Path(tmp)), "invalid_answers": invalid_rates(args, Path(tmp))}
    write_result(f"teacher_cost_{args.format}", figures,
                 question="What does a real teacher's run cost, and how often are its answers invalid?")


if __name__ == "__main__":
    main()

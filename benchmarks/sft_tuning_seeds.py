"""Train one SFT variant and score it on held-out continuous *training* seeds (a tuning set: never
evaluation seeds, never the teacher's seeds 1000-3999 nor GRPO's student seeds 9000-9015).

    python benchmarks/sft_tuning_seeds.py --dataset RUN/sft_dataset/<v> --out /tmp/t/s0 --sft '{"seed": 0}' [--threads 1]

Prints one JSON line: SFT seconds, eval loss, the heuristic's and the Bayesian teacher's scores on the
tuning seeds, and per snapshot (`"snapshot_steps": [...]` in --sft) and the final student: v3 score,
recovery of the teacher's margin, belief MAE and invalid-answer rate, and the belief MAE on the third
of the seeds whose true profile is farthest from 0.5 (`belief_mae_extreme`, the teacher's beside it):
the OOD condition's profiles are more extreme, and OOD seeds are evaluation seeds, so this is the
tuning set's stand-in for it. Variants are decided on these seeds; the evaluation windows only
report them. Two runs side by side at `--threads 1` share the
machine evenly, so their seconds compare with each other.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

TUNING_SEEDS = "9500-9699"


def score(model_dir: str, seeds: list[int], condition: str = "continuous") -> dict:
    """The student (greedy) on `seeds`: v3 score, belief MAE, invalid-answer rate."""
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.evaluation.baselines import summarize
    from rhythm_core.training.generation import SamplingConfig
    from rhythm_core.training.policy import LLMPolicyAgent

    agent = LLMPolicyAgent.from_checkpoint(model_dir, sampling=SamplingConfig(temperature=0.0))
    episodes = rollout(agent, condition, seeds)
    summary = summarize(episodes, "v3")
    return {"score": summary["final_score"], "belief_mae": summary["belief_mae"],
            "belief_mae_extreme": extreme_mae(episodes), "invalid": round(float(episodes.invalid.mean()), 4)}


def extreme_mae(episodes) -> float:
    """Final-belief MAE on the third of the episodes whose true profile is farthest from 0.5."""
    import numpy as np

    distance = np.abs(episodes.true_belief - 0.5).mean(axis=1)
    extreme = np.argsort(-distance, kind="stable")[: max(1, len(distance) // 3)]
    return round(float(episodes.belief_mae()[extreme].mean()), 4)


def references(seeds: list[int], condition: str = "continuous") -> dict:
    """The heuristic's and the Bayesian teacher's v3 scores (and the teacher's belief MAE) on `seeds`."""
    from rhythm_core.agents import get_agent
    from rhythm_core.agents.rollout import rollout
    from rhythm_core.evaluation.baselines import summarize

    played = {name: rollout(get_agent(name), condition, seeds) for name in ("heuristic", "bayes")}
    summaries = {name: summarize(episodes, "v3") for name, episodes in played.items()}
    return ({name: summary["final_score"] for name, summary in summaries.items()}
            | {"bayes_mae": summaries["bayes"]["belief_mae"], "bayes_mae_extreme": extreme_mae(played["bayes"])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="a saved sft_dataset")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sft", default="{}", help="SFTRunConfig overrides as JSON")
    parser.add_argument("--seeds", default=TUNING_SEEDS, help="continuous training seeds to score on")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()

    import torch

    from rhythm_core.env.conditions import check_training_seeds, parse_seeds
    from rhythm_core.evaluation.results import recovery
    from rhythm_core.training.sft import SFTRunConfig, run_sft

    if args.threads:
        torch.set_num_threads(args.threads)
    seeds = parse_seeds(args.seeds)
    check_training_seeds("continuous", seeds)  # a tuning set is never evaluation seeds
    config = SFTRunConfig(**{"report_to": "none", **json.loads(args.sft)})
    started = time.perf_counter()
    result = run_sft(config, args.dataset, args.out)
    sft_wall = time.perf_counter() - started
    refs = references(seeds)
    snapshot_root = Path(args.out, "snapshots")
    snapshots = sorted(snapshot_root.glob("step-*"), key=lambda p: int(p.name[5:])) if snapshot_root.exists() else []
    rows = []
    for model_dir in [*snapshots, Path(result["model_dir"])]:
        snapshot = json.loads((model_dir / "rhythm_checkpoint.json").read_text()).get("snapshot", {})
        row = score(str(model_dir), seeds)
        share = recovery(row["score"], refs["heuristic"], refs["bayes"])
        row["recovery"] = None if share is None else round(share, 3)
        row["step"] = snapshot.get("step", result["steps"])
        row["train_s"] = snapshot.get("train_s", result["train_s"])
        rows.append(row)
    out = {"tag": args.tag, "sft": json.loads(args.sft), "sft_wall_s": round(sft_wall, 1),
           "train_s": result["train_s"], "eval_loss": result["eval_loss"], "refs": refs, "rows": rows}
    print(json.dumps(out))
    Path(args.out, "tune.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

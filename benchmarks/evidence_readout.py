"""How well the "evidence" read-out (rhythm_core/teacher/evidence.py) infers the person when it is
fitted on N teacher weeks — the records a dataset is built from — next to the Bayesian teacher and
a constant, when the actions are the teacher's or another policy's. Prints figures; asserts nothing.

    python benchmarks/evidence_readout.py [--weeks 256,1000,4000] [--windows 0] [--policies teacher,heuristic,random]
        [--teacher bayes|search]

For each N it plays the teacher (Bayesian unless --teacher) on continuous training seeds 1000..1000+N-1, fits the
read-out on 90% of them exactly as `build_sft_dataset` does (target: the belief the teacher stated
last), prints the fit's MAE against the teacher's own beliefs on the held-out 10%, then the chain's
final-belief MAE against the true profile on the evaluation windows (0: the default evaluation
seeds): that is the ceiling a student following the chain exactly can reach; the heuristic's and random actions show how far it
holds when the student acts differently from its teacher.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rhythm_core.agents import get_agent, heuristic_actions  # noqa: E402
from rhythm_core.env import VectorRhythmEnv  # noqa: E402
from rhythm_core.env.conditions import parse_seeds  # noqa: E402
from rhythm_core.env.spec import ACTIONS, STEPS_PER_EPISODE  # noqa: E402
from rhythm_core.evaluation.rollouts import evaluation_window  # noqa: E402
from rhythm_core.teacher.evidence import fit_evidence_readout  # noqa: E402
from rhythm_core.teacher.offline import offline_records  # noqa: E402
from rhythm_core.teacher.settings import TeacherSettings  # noqa: E402


def play(condition: str, seeds, policy: str, teacher_name: str = "bayes"):
    """Each week's observations, the teacher's final belief (it watches whoever acts), the truth."""
    env = VectorRhythmEnv(condition)
    obs, _ = env.reset(seeds)
    teacher = get_agent(teacher_name)
    teacher.reset(env)
    rng = np.random.default_rng(0)
    histories, final = [[] for _ in seeds], None
    for _ in range(STEPS_PER_EPISODE):
        for n in range(len(seeds)):
            histories[n].append(obs.item(n))
        decision = teacher.act(obs)
        final = decision.beliefs
        if policy == "teacher":
            actions = decision.actions
        else:
            actions = (heuristic_actions(obs.meters, obs.slot) if policy == "heuristic"
                       else rng.integers(0, len(ACTIONS), len(seeds)))
            teacher.observe_actions(actions)
        obs, *_ = env.step(actions)
    return histories, final, env.true_belief


def teacher_weeks(seeds, teacher_name: str = "bayes") -> list[tuple[dict, list]]:
    """(record, observations) of the offline teacher's play, as a dataset sees them."""
    records = offline_records(TeacherSettings(backend=teacher_name), "continuous", np.asarray(seeds))
    histories, _, _ = play("continuous", np.asarray(seeds), "teacher", teacher_name)
    return list(zip(records, histories))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weeks", default="256,1000,4000", help="comma-separated numbers of teacher weeks to fit on")
    p.add_argument("--windows", default="0", help="evaluation windows (0: the default evaluation seeds)")
    p.add_argument("--policies", default="teacher,heuristic,random", help="who acts while the chain reads")
    p.add_argument("--teacher", default="bayes", choices=["bayes", "bayes_v3", "search"], help="the offline teacher")
    args = p.parse_args(argv)
    plays = {(w, c, policy): play(c, np.asarray(parse_seeds(spec)), policy, args.teacher)
             for w in (int(x) for x in args.windows.split(",")) for c, spec in evaluation_window(w).items()
             for policy in args.policies.split(",")}
    print("| fit weeks | fit s | held-out MAE vs teacher's belief (constant) | window | condition | actions | chain "
          "final belief MAE vs truth | teacher | constant 0.5 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (int(w) for w in args.weeks.split(",")):
        weeks = teacher_weeks(range(1000, 1000 + n), args.teacher)
        cut = int(0.9 * n)
        start = time.perf_counter()
        readout = fit_evidence_readout(weeks[:cut], weeks[cut:])
        fit_s = time.perf_counter() - start
        held = readout.fit["held_out"]["continuous"]
        for (window, condition, policy), (histories, teacher, truth) in plays.items():
            chain = np.array([readout.chain(h)[1][-1] for h in histories])
            print(f"| {n} | {fit_s:.2f} | {held['mae_vs_teacher']:.3f} ({held['constant_mae_vs_teacher']:.3f}) | "
                  f"{window} | {condition} | {policy} | {np.abs(chain - truth).mean():.3f} | {np.abs(teacher - truth).mean():.3f} "
                  f"| {np.abs(0.5 - truth).mean():.3f} |")


if __name__ == "__main__":
    main()

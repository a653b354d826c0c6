"""rhythm_core: the RhythmEnv distillation recipe as plain Python (no Dagster import anywhere).

It stands on the environment, the package `rhythm_env` (envs/rhythm_env, a dependency installed on its
own): the simulator (`rhythm_env.sim`), the prompts and answers between the env and a language model
(`rhythm_env.protocol`), the graders (`rhythm_env.graders`) and the text front ends (`rhythm_env.text`).

Packages follow the lineage, lowest layer first; a package imports only those above it in this list:

    agents/      random, heuristic, constant-belief, fallback, Bayesian and search teachers, oracle
    teacher/     teachers playing training seeds into resumable trajectory JSONL files
    data/        the re-grade report and the SFT dataset made from teacher trajectories
    training/    the offline tiny base model, SFT and GRPO with TRL, LLM policies
    evaluation/  baseline tables, evaluation rollouts and graded results
    compute/     remote training backends (Hugging Face Jobs)

At the top, only what spans stages: `store/` (atomic publishing, the JSONL writer, the record of a
published artifact's files, where a command or stage may write), `processes` (forked workers, and every
process a run starts stopping with it), `code_version` (asset versions from the code), `errors` (the
mistakes a user can make), `distill` (the whole recipe with presets) and `cli/` (the `rhythm` command).
Each stage is a function in its own folder (`teacher.stage`, `data.stages`, `training.publish`).

Importing it pins torch's CPU kernels to AVX2 (`kernels`), so artifacts are the same on x86-64
CPUs of one vendor; RHYTHM_CPU_KERNELS=native keeps the machine's own.
"""

from .kernels import pin_cpu_kernels

CPU_KERNELS = pin_cpu_kernels()

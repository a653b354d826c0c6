"""rhythm_core: the RhythmEnv distillation recipe as plain Python (no Dagster import anywhere).

Packages follow the lineage, lowest layer first; a package imports only those above it in this list:

    env/         the simulator: spec, conditions, profiles, dynamics, the envs, episodes, seeded rng
    graders/     versioned graders (v2, v3): a finished episode -> final_score with components
    text_env/    the week as text and its front ends: TRL's tool environment, the OpenEnv server and client
    agents/      random, heuristic, constant-belief, fallback, Bayesian and search teachers, oracle
    teacher/     teachers playing training seeds into resumable trajectory JSONL files
    data/        the re-grade report and the SFT dataset made from teacher trajectories
    training/    the offline tiny base model, SFT and GRPO with TRL, LLM policies
    evaluation/  baseline tables, evaluation rollouts and graded results
    compute/     remote training backends (Hugging Face Jobs)

env/, graders/, text_env/ and protocol/ (below) are the environment's layers: their source is in the
environment package's folder, envs/rhythm_env/rhythm_core/, the one copy, which that package installs
alone (the Space) and this project's package ships under these names.

At the top, only what spans stages: `protocol` (prompts and answers between the env and a language
model; imported by teacher/, data/, training/), `artifacts` (atomic publishing, the JSONL writer, the
record of a published artifact's files, `StageIncomplete`), `outputs` (where a command or stage may
write), `processes` (forked workers, and every process a run starts stopping with it), `code_version`
(asset versions from the code), `errors` (the mistakes a user can make), `distill` (the whole recipe
with presets) and `cli/` (the `rhythm` command). Each stage is a function in its own folder
(`teacher.stage`, `data.stages`, `training.publish`).

Importing it pins torch's CPU kernels to AVX2 (`kernels`), so artifacts are the same on every x86-64
CPU; RHYTHM_CPU_KERNELS=native keeps the machine's own.
"""

from .kernels import pin_cpu_kernels

CPU_KERNELS = pin_cpu_kernels()

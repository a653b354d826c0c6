"""RhythmEnv as text, for language-model trainers: the layer above `sim`, `protocol` and `graders`.

`week` plays one week as text (`TextWeek`: the protocol's observations in, actions with the agent's belief
out, the grader's score at the end) and holds what every text front end shares (the belief help text,
the reset-argument check); `tool_env` is TRL's environment (`RhythmToolEnv`, `WeekGroups`, the prompt
dataset); `openenv_server` is the OpenEnv environment, app and client (`rhythm serve-env`, and the
OpenEnv package envs/rhythm_env). The seeds rules they enforce are the simulator's own
(`sim.seed_rules`), which the Gymnasium env enforces too.

Imported by module: `from rhythm_env.text.tool_env import RhythmToolEnv` (the OpenEnv module loads OpenEnv
and FastAPI, which the others do not need).
"""

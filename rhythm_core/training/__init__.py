"""Training: the offline tiny base model (`tiny`), model loading (`models`), SFT and GRPO with TRL
(`sft`, `grpo` with its prompts in `grpo_prompts`), the one-process entry point shared by local and remote runs (`entry`), and the LLM
as an agent (`policy`, with batched `generation`, the `prompt_cache` and `prompt_tokens`; students played
side by side in forked workers: `side_by_side`), and the offline Qwen2 stand-ins (`qwen2_standin`;
`tool_standin` for GRPO with RhythmEnv's TRL environment). No Dagster.

May import the environment (`rhythm_env.sim`, `.graders`, `.protocol`, `.text`: the TRL environment),
`agents`, `data` (the format a dataset was built with), `tracking` (the bottom floor) and the top-level
`store`; never `evaluation` or `compute`.
"""

"""The GPU check (`rhythm gpu-check`, run before paying for GPU time): every stage of the recipe —
the teacher's weeks, SFT, GRPO with its gate, the students' play — on the machine at hand, each in a
child process under a time budget (`run`; the stages themselves: `stages`).

It sits above every stage it launches, so it may import every package (`teacher`, `data`,
`training`, `evaluation`, `distill`'s presets); only the CLI imports it. Nothing is imported here.
"""

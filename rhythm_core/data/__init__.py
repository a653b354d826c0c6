"""What is made from teacher trajectories before training: the re-grade report (`reeval_report`:
the teacher graded under any grader beside baselines replayed on the same seeds) and the SFT dataset
(`sft_dataset`: a Hugging Face `DatasetDict` of chat examples with a dataset card; built from
`examples` and `answers`, laid out by `schema`, read back by `summary`, described by `card`, pushed
by `hub`).

May import the environment (`rhythm_env.sim`, `.graders`, `.protocol`), `agents`, `teacher` and the
top-level `store`; never `training` or `evaluation`, which consume what it makes.
"""

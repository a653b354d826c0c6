"""Scoring agents on held-out seeds: `baselines` scores agents per condition (mean with a 95% CI,
components, belief MAE: the `rhythm baselines` table), `rollouts` plays students and references on
the evaluation seeds of every condition and stores the trajectories (nothing grader-dependent),
`results` grades stored rollouts into eval_results.json, plots and a markdown table.

The top of the lineage: may import every other package (`training` to load and play students,
`teacher.trajectories` for the file schema), never be imported by them.
"""

"""The quiet demo's terminal lines (rhythm_pipeline.demo): a stage line per start and end with what
the stage made, and one line per asset check."""

from rhythm_pipeline.demo import check_lines, stage_line, stage_summary


def test_a_stage_line_says_which_stage_how_long_and_what_it_made():
    summary = stage_summary("sft_checkpoint", {"steps": 840, "final_train_loss": 0.81234, "wall_s": 1.0})
    assert summary == "840 steps, final loss 0.812"
    assert stage_line(4, 8, "sft_checkpoint", "done", 412.4, summary) == (
        "[4/8] sft_checkpoint        done in 412 s: 840 steps, final loss 0.812")
    assert stage_line(1, 8, "teacher_trajectories", "running") == "[1/8] teacher_trajectories  running"


def test_missing_metadata_leaves_the_summary_short_not_broken():
    assert stage_summary("grpo_checkpoint", {"steps": 10}) == "10 steps"
    assert stage_summary("an_asset_the_demo_does_not_know", {"x": 1}) == ""


def test_a_failed_check_shows_its_severity_and_why():
    lines = check_lines([
        {"asset": "sft_dataset", "check": "sft_dataset_has_no_eval_seeds", "passed": True, "severity": "ERROR",
         "description": "no evaluation seed"},
        {"asset": "eval_results", "check": "students_beat_heuristic", "passed": False, "severity": "WARN",
         "description": "not above the heuristic: ood/student_sft"},
    ])
    assert lines == ["  sft_dataset.sft_dataset_has_no_eval_seeds: passed",
                     "  eval_results.students_beat_heuristic: FAILED (WARN): not above the heuristic: ood/student_sft"]


def test_training_progress_is_a_line_every_ten_seconds_at_the_recent_pace_and_each_students_play():
    import json

    from rhythm_pipeline.demo import Progress

    progress = Progress()
    said = [progress.line("sft_checkpoint", json.dumps(entry), t) for t, entry in [
        (0.0, {"step": 0, "total_steps": 840}), (2.0, {"step": 5, "loss": 3.1}), (6.0, {"step": 15, "loss": 2.9}),
        (12.5, {"step": 35, "loss": 2.5}), (14.0, {"step": 40, "loss": 2.4}), (23.0, {"step": 65, "loss": 2.0})]]
    assert said[:3] == [None, None, None]  # the first step entry starts the clock; nothing within 10 s
    assert said[3] == "step 35/840, about 5 min left"  # 30 steps in 10.5 s: 805 left take ~282 s
    assert said[4] is None and said[5] == "step 65/840, about 5 min left"  # 10 s after the last line
    # the whole-week phase: four times slower steps; within 30 s the estimate follows the new pace
    later = [progress.line("sft_checkpoint", json.dumps({"step": step, "loss": 1.0}), t)
             for t, step in [(40.0, 75), (60.0, 80), (75.0, 85), (100.0, 90)]]
    assert later[-1] == "step 90/840, about 50 min left"  # 10 steps in the last 40 s: 750 left take ~3,000 s
    assert progress.line("eval_rollouts", "student_sft on ood: 50 episodes in 12.1 s, invalid answers 0.0%, "
                                          "prompt tokens reused 94%", 30.0) == ("student_sft on ood: 50 episodes in "
                                                                                "12.1 s, invalid answers 0.0%")
    assert progress.line("eval_rollouts", "heuristic on ood: 50 episodes in 1.0 s", 31.0) is None
    assert progress.line("registered_student", "student_grpo 07c5: promoted (version 1)", 31.5) is None
    assert progress.line("sft_checkpoint", "training sft in /tmp/x (pid 12)", 32.0) is None


def test_the_demo_backfills_its_shard_its_window_and_everything_between():
    """`make demo` is one asset backfill: the teacher's default weeks as one shard, evaluation window 0, and
    every unpartitioned asset (its launch through the daemon: tests/test_ui.py)."""
    from rhythm_pipeline.definitions import defs
    from rhythm_pipeline.defs.partitions import TEACHER_SHARDS
    from rhythm_pipeline.demo import DEMO_SHARD, demo_partitions

    assets = [key.to_user_string() for key in defs.resolve_asset_graph().toposorted_asset_keys]
    partitioned = {spec.key.to_user_string(): "teacher_shards" if spec.partitions_def == TEACHER_SHARDS else "eval_windows"
                   for spec in defs.resolve_all_asset_specs() if spec.partitions_def is not None}
    chosen = demo_partitions(assets, partitioned)
    assert list(chosen) == assets and len(assets) == 8
    assert chosen["teacher_trajectories"] == [DEMO_SHARD] == ["1000-2999"]
    assert chosen["eval_rollouts"] == chosen["eval_results"] == ["0"]
    assert [a for a, keys in chosen.items() if keys is None] == ["reeval_report", "sft_dataset", "sft_checkpoint",
                                                                "grpo_checkpoint", "registered_student"]

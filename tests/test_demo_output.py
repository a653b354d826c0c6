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


def test_a_run_started_from_python_carries_the_code_location_the_ui_reexecutes_it_from(instance):
    """What `make demo` does: the run of the `rhythm` code location (workspace.yaml), with its code origin,
    its steps in this process (one pid)."""
    import os

    import dagster as dg

    from rhythm_pipeline.runs import execute_here

    run_id = execute_here("data_half", {"ops": {"teacher_trajectories": {"config": {"seeds": "1000-1003"}}}}, instance)
    run = instance.get_run_by_id(run_id)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert run.remote_job_origin.location_name == "rhythm" and run.remote_job_origin.job_name == "data_half"
    assert run.job_code_origin is not None and run.run_config["execution"] == {"config": {"in_process": True}}
    pids = {entry.dagster_event.pid for entry in instance.all_logs(run_id) if entry.dagster_event is not None} - {None}
    assert pids == {os.getpid()}

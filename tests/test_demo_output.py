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

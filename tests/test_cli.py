import json

import pytest

from rhythm_core.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_baselines_json_shape(capsys):
    code, out, _ = run(capsys, "baselines", "--condition", "ood", "--seeds", "10000-10019", "--grader", "v2", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"condition", "grader", "n_episodes", "agents"}
    assert (data["condition"], data["grader"], data["n_episodes"]) == ("ood", "v2", 20)
    assert list(data["agents"]) == ["random", "heuristic", "heuristic_const_belief", "bayes", "oracle"]
    for name, block in data["agents"].items():
        assert set(block) == {"final_score", "ci95", "belief_mae", "components"}
        lo, hi = block["ci95"]
        assert lo <= block["final_score"] <= hi
        assert set(block["components"]) == {"wellbeing", "progress", "crash_avoidance", "belief_accuracy"}
        assert (block["belief_mae"] is None) == (name in ("random", "heuristic"))


def test_baselines_table_and_agent_subset(capsys):
    code, out, _ = run(capsys, "baselines", "--seeds", "0-9", "--agents", "random,bayes")
    assert code == 0
    assert "grader=v3" in out and "bayes" in out and "belief_skill" in out and "oracle" not in out


def test_baselines_rejects_bad_input(capsys):
    code, _, err = run(capsys, "baselines", "--condition", "continuous", "--seeds", "9990-10010")
    assert code == 2 and "seed 10010 is outside the continuous range 0-9999" in err
    code, _, err = run(capsys, "baselines", "--seeds", "ten")
    assert code == 2 and "bad seed range 'ten'" in err
    with pytest.raises(SystemExit):
        main(["baselines", "--agents", "random,gpt"])
    assert "unknown agent(s) gpt" in capsys.readouterr().err

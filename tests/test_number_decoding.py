import pytest
import torch

from rhythm_core.training.generation import SamplingConfig, number_processors
from rhythm_core.training.number_decoding import (
    belief_sum,
    belief_sum_processor,
    number_median_processor,
    summed_belief_positions,
)
from rhythm_core.training.tiny import train_tokenizer

# Answers in the evidence protocol's shape: increments and beliefs, each number one token.
TEXTS = [f'{{"reasoning":"social {sign}0.{a:02d} work {sign}0.{b:02d}","belief":{{"social":0.{a:02d},"work":0.{b:02d}}}}}'
         for sign in "+-" for a in range(100) for b in (a, 99 - a)] * 3


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS)


def _scores(tokenizer, probabilities: dict[str, float]):
    """A (1, vocab) logits row with these token probabilities (the rest ~0)."""
    scores = torch.full((1, len(tokenizer)), -30.0)
    for text, p in probabilities.items():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, f"{text!r} is not one token: {ids}"
        scores[0, ids[0]] = float(torch.log(torch.tensor(p)))
    return scores


def _chosen(tokenizer, scores) -> str:
    return tokenizer.decode([int(number_median_processor(tokenizer)(None, scores).argmax())])


def test_a_greedy_number_is_the_median_of_the_numbers_the_model_spreads_its_mass_over(tokenizer):
    # greedy would write +0.00 (30%), but 69% of the mass says about +0.31
    increment = {" +0.00": 0.30, " +0.30": 0.23, " +0.31": 0.23, " +0.32": 0.23, " -0.05": 0.01}
    assert _chosen(tokenizer, _scores(tokenizer, increment)) == " +0.30"
    belief = {"0.5": 0.40, "0.81": 0.20, "0.82": 0.20, "0.83": 0.20}
    assert _chosen(tokenizer, _scores(tokenizer, belief)) == "0.81"
    # a confident number, and text, are written as greedy writes them
    assert _chosen(tokenizer, _scores(tokenizer, {" +0.12": 0.9, " +0.40": 0.1})) == " +0.12"
    assert _chosen(tokenizer, _scores(tokenizer, {"DEEP_WORK": 0.4, " +0.30": 0.3, " +0.31": 0.3})) == "DEEP_WORK"


def test_the_median_stays_within_the_greedy_tokens_kind(tokenizer):
    # belief tokens outweigh the increments together, but an increment is due: it stays an increment
    scores = _scores(tokenizer, {" +0.02": 0.2, " +0.03": 0.15, "0.61": 0.35, "0.62": 0.3})
    scores[0, tokenizer(" +0.02", add_special_tokens=False)["input_ids"][0]] += 5.0
    assert _chosen(tokenizer, scores) in (" +0.02", " +0.03")
    # an output layer wider than the tokenizer (padded): a padded id is no number and stays the choice
    wide = torch.cat([_scores(tokenizer, {" +0.30": 0.5, " +0.31": 0.5}), torch.full((1, 8), 5.0)], dim=1)
    assert int(number_median_processor(tokenizer)(None, wide).argmax()) >= len(tokenizer)


def test_median_decoding_only_applies_to_greedy_decoding_and_tokenizers_with_number_tokens(tokenizer):
    assert number_processors(SamplingConfig(), tokenizer) is not None
    assert number_processors(SamplingConfig(temperature=0.7), tokenizer) is None  # sampling is left alone
    assert number_median_processor(train_tokenizer(["no digits in this text at all"] * 5)) is None
    assert number_median_processor(tokenizer) is number_median_processor(tokenizer)  # built once per tokenizer


@pytest.mark.parametrize("cached", [False, True])
def test_generation_writes_numbers_through_the_median_with_and_without_the_prompt_cache(tokenizer, monkeypatch, cached):
    from rhythm_core.training import number_decoding
    from rhythm_core.training.generation import generate_answers
    from rhythm_core.training.prompt_cache import PromptCache
    from rhythm_core.training.tiny import build_tiny_model

    calls = []
    median = number_median_processor(tokenizer)

    def recorded(input_ids, scores):
        calls.append(scores.shape[0])
        return median(input_ids, scores)

    monkeypatch.setattr(number_decoding, "number_median_processor", lambda tok: recorded)
    conversations = [[{"role": "user", "content": f"Now day {d} morning"}] for d in (1, 2)]
    generate_answers(build_tiny_model(tokenizer), tokenizer, conversations, SamplingConfig(max_new_tokens=3),
                     prompt_cache=PromptCache() if cached else None)
    assert calls and set(calls) == {2}  # every generated step of both rows went through it


def _answer(increments, belief=None) -> str:
    text = '{"reasoning":"' + " ".join(f"{d} {v:+.2f}" for d, v in zip(("social", "morning", "work"), increments)) + '"'
    if belief is None:
        return text + ',"belief":{"social":'
    social, morning, work = belief
    return text + f',"belief":{{"social":{social},"morning":{morning},"work":{work}}},"action":"SLEEP"}}'


def test_a_belief_is_the_previous_stated_belief_plus_this_answers_increment():
    earlier = _answer((0.0, 0.0, 0.0), (0.9, 0.9, 0.9))
    previous = _answer((0.0, 0.0, 0.0), (0.46, 0.99, 0.05))
    context = earlier + "\nSLEEP anomaly vita +0.03\n" + previous + "\nNAP anomaly vita -0.10\n" + _answer((0.07, 0.02, -0.08))
    assert belief_sum(context) == ("social", 0.53)  # the last answer's belief, not an earlier one
    assert belief_sum(context + '0.53,"morning":') == ("morning", 1.0)  # clipped to [0, 1]
    assert belief_sum(context + '0.53,"morning":1.0,"work":') == ("work", 0.0)
    assert belief_sum(_answer((0.07, 0.02, -0.08))) is None  # the week's first answer: nothing to add to
    assert belief_sum(previous + _answer((0.07, 0.02, -0.08))[:-len(',"belief":{"social":')]) is None  # no belief due
    assert belief_sum(previous + '{"reasoning":"morning +0.02","belief":{"social":') is None  # no increment for it


def test_greedy_decoding_writes_the_sum_where_the_model_would_misadd():
    answers = [_answer((a / 100, -b / 100, 0.0), (f"0.{a:02d}", f"0.{b:02d}", "0.5")) for a in range(100) for b in (a, 99 - a)]
    tok = train_tokenizer(answers * 3)
    processor = belief_sum_processor(tok)
    context = _answer((0.0, 0.0, 0.0), ("0.4", "0.5", "0.5")) + "\nNAP anomaly\n" + _answer((0.12, 0.0, 0.0))
    ids = torch.tensor([tok(context, add_special_tokens=False)["input_ids"]])
    scores = _scores(tok, {"0.41": 0.7, "0.52": 0.2, "0.6": 0.1})  # the model would write 0.41, 0.4 + 0.12 is 0.52
    assert tok.decode([int(processor(ids, scores).argmax())]) == "0.52"
    text = _scores(tok, {"SLEEP": 0.9, "0.41": 0.1})  # where no number is due the model's choice stands
    assert tok.decode([int(processor(ids, text).argmax())]) == "SLEEP"
    first = torch.tensor([tok(_answer((0.12, 0.0, 0.0)), add_special_tokens=False)["input_ids"]])
    assert tok.decode([int(processor(first, _scores(tok, {"0.41": 0.9, "0.52": 0.1})).argmax())]) == "0.41"
    # a batch: each row its own sum, also where the previous answer lies beyond the short window read first
    far = _answer((0.0, 0.0, 0.0), ("0.4", "0.5", "0.5")) + "\nNAP anomaly" + " vita +0.03" * 25 + "\n" + _answer((0.12, 0.0, 0.0))
    far_ids = tok(far, add_special_tokens=False)["input_ids"]
    assert '"work":0.5}' not in tok.decode(far_ids[-128:]) and len(far_ids) <= 256
    near_ids = ([tok.pad_token_id or 0] * len(far_ids) + ids[0].tolist())[-len(far_ids):]
    batch = torch.cat([_scores(tok, {"0.41": 0.7, "0.52": 0.2}), _scores(tok, {"0.6": 0.9, "0.52": 0.1})])
    chosen = processor(torch.tensor([far_ids, near_ids]), batch).argmax(dim=1)
    assert [tok.decode([int(i)]) for i in chosen] == ["0.52", "0.52"]
    assert len(number_processors(SamplingConfig(), tok, sum_beliefs=True)) == 2
    assert len(number_processors(SamplingConfig(), tok)) == 1
    assert belief_sum_processor(train_tokenizer(["no digits in this text at all"] * 5)) is None


def test_sampling_draws_the_reasoning_but_only_the_sum_as_a_belief_and_the_decoders_numbers_are_found_again():
    answers = [_answer((a / 100, -b / 100, 0.0), (f"0.{a:02d}", f"0.{b:02d}", "0.5")) for a in range(100) for b in (a, 99 - a)]
    tok = train_tokenizer(answers * 3)
    processor = belief_sum_processor(tok, sampled=True)
    assert processor is not belief_sum_processor(tok)  # greedy's acts on the argmax, this one on the key
    context = _answer((0.0, 0.0, 0.0), ("0.4", "0.5", "0.5")) + "\nNAP anomaly\n" + _answer((0.12, 0.0, 0.0))
    ids = torch.tensor([tok(context, add_special_tokens=False)["input_ids"]])
    # the model prefers 0.41 and leaves 0.52 little mass; sampling can draw nothing but the sum
    scores = processor(ids, _scores(tok, {"0.41": 0.9, "SLEEP": 0.09, "0.52": 0.01}))
    drawn = torch.multinomial(torch.softmax(scores, dim=1).repeat(200, 1), 1).flatten()
    assert {tok.decode([int(i)]) for i in drawn} == {"0.52"}
    # in the reasoning (no belief key just written) the model's distribution is left as it is
    reasoning = torch.tensor([tok(context[: context.rindex(",")], add_special_tokens=False)["input_ids"]])
    free = _scores(tok, {" +0.12": 0.6, " +0.30": 0.4})
    assert torch.equal(processor(reasoning, free.clone()), free)
    first = torch.tensor([tok(_answer((0.12, 0.0, 0.0)), add_special_tokens=False)["input_ids"]])
    assert torch.equal(processor(first, free.clone()), free)  # the week's first belief: nothing to add to
    assert len(number_processors(SamplingConfig(temperature=1.0), tok, sum_beliefs=True)) == 1  # no median
    # the positions the decoder wrote are found again in the finished text: the sums, not a free belief
    week = context + '0.52,"morning":0.5,"work":0.5},"action":"SLEEP"}'
    week_ids = tok(week, add_special_tokens=False)["input_ids"]
    found = summed_belief_positions(tok, week_ids)
    assert [tok.decode([week_ids[p]]) for p in found] == ["0.52", "0.5", "0.5"]
    assert all(p >= len(tok(context[: context.index("NAP")], add_special_tokens=False)["input_ids"]) for p in found)
    wrong = tok(context + '0.41,"morning":0.5,"work":0.5}', add_special_tokens=False)["input_ids"]
    assert [tok.decode([wrong[p]]) for p in summed_belief_positions(tok, wrong)] == ["0.5", "0.5"]  # 0.41 is no sum

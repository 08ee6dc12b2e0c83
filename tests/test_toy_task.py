"""The toy addition task: tokenizer, problem generator, target traces, grader and metrics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from transformers import AutoTokenizer

from trainer.models.char_tokenizer import build_char_tokenizer
from trainer.rewards.grade import Grade
from trainer.tasks.base import Group
from trainer.tasks.toy_addition import (
    CHARS,
    ToyAdditionConfig,
    ToyAdditionTask,
    parse_completion,
    target_trace,
)

DEFAULT = ToyAdditionConfig()


def _traces(config: ToyAdditionConfig, seed: int, n: int):
    task = ToyAdditionTask(config)
    rng = np.random.default_rng(seed)
    for group in task.sample_groups(rng, n, 4):
        for i in range(4):
            yield task, group, i, target_trace(config, group, i, rng)


def test_tokenizer_round_trip_and_save_load(tmp_path):
    tok = build_char_tokenizer(CHARS)
    text = "4?7+68=7+8=15,3+6=10?4+0=05,>505;abcdefghijklmnop"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.convert_ids_to_tokens([tok.pad_token_id, tok.bos_token_id, tok.eos_token_id]) == ["<pad>", "<s>", "</s>"]
    assert len(tok) == len(CHARS) + 4
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(text)["input_ids"] == ids
    assert loaded.decode(ids + [loaded.eos_token_id], skip_special_tokens=True) == text
    assert (loaded.bos_token_id, loaded.eos_token_id, loaded.pad_token_id) == (1, 2, 0)
    batch = loaded(["1+2=", "123+45="], padding=True)["input_ids"]
    assert batch[0][:3] == [0, 0, 0] and batch[0][3] == 1  # left padding, then BOS


def test_tokenizer_rejects_repeated_characters():
    with pytest.raises(ValueError):
        build_char_tokenizer("aab")


def test_config_is_strict():
    with pytest.raises(ValidationError):
        ToyAdditionConfig(hide_probability=0.5)
    with pytest.raises(ValidationError):
        ToyAdditionConfig(min_digits=3, max_digits=2)
    with pytest.raises(ValidationError):
        ToyAdditionConfig(filler_block_len=27)


def test_generator_is_deterministic_and_ids_are_stable():
    task = ToyAdditionTask(DEFAULT)
    first = task.sample_groups(np.random.default_rng(7), 20, 8)
    assert first == task.sample_groups(np.random.default_rng(7), 20, 8)
    assert first != task.sample_groups(np.random.default_rng(8), 20, 8)
    for group in first:
        a, b = group.problem_id.split("+")
        assert group.answer == str(int(a) + int(b))
        assert 1 <= len(a) <= 4 and 1 <= len(b) <= 4 and (len(a) == 1 or a[0] != "0")
        assert len(group.prompts) == len(group.meta) == 8
        for prompt, meta in zip(group.prompts, group.meta):
            assert prompt.endswith("=")
            assert meta["hidden_digit"] == ("?" in prompt)
            if not meta["hidden_digit"]:
                assert prompt == f"{a}+{b}="


def test_hidden_digit_rate_and_digit_mix():
    task = ToyAdditionTask(DEFAULT)
    groups = task.sample_groups(np.random.default_rng(0), 500, 8)
    hidden = [m["hidden_digit"] for g in groups for m in g.meta]
    assert 0.36 < np.mean(hidden) < 0.44
    assert all(p.count("?") <= 1 for g in groups for p in g.prompts)
    lengths = Counter(len(g.problem_id.split("+")[0]) for g in groups)
    assert set(lengths) == {1, 2, 3, 4} and min(lengths.values()) > 90


def test_group_scope_hides_one_digit_for_the_whole_group():
    """hide_scope group: one draw per group, the same prompt and meta in all G samples, groups hidden at hide_prob;
    the default (sample) leaves the dump, so every build hash and job id, as it was."""
    config = ToyAdditionConfig(hide_scope="group")
    groups = ToyAdditionTask(config).sample_groups(np.random.default_rng(0), 500, 8)
    for group in groups:
        assert len(set(group.prompts)) == 1 and all(m == group.meta[0] for m in group.meta)
    hidden = [g.meta[0]["hidden_digit"] for g in groups]
    assert 0.35 < np.mean(hidden) < 0.45
    shown = [g for g in groups if g.meta[0]["hidden_digit"]][0]
    a, b = shown.problem_id.split("+")
    meta = shown.meta[0]
    operand = (a, b)[meta["hidden_operand"]]
    index = len(operand) - 1 - meta["hidden_place"]
    masked = operand[:index] + "?" + operand[index + 1 :]
    assert shown.prompts[0].split("+")[meta["hidden_operand"]].rstrip("=") == masked
    per_sample = ToyAdditionTask(DEFAULT).sample_groups(np.random.default_rng(0), 500, 8)
    assert sum(len(set(g.prompts)) > 1 for g in per_sample) > 200  # the default mixes hidden and clean prompts
    assert "hide_scope" not in DEFAULT.model_dump() and config.model_dump()["hide_scope"] == "group"
    with pytest.raises(ValidationError, match="'sample' or 'group'"):
        ToyAdditionConfig(hide_scope="prompt")


def test_every_clean_trace_grades_correct():
    seen = 0
    for task, group, i, trace in _traces(DEFAULT, seed=1, n=300):
        if not group.meta[i]["hidden_digit"]:
            grade = task.grade(group, i, trace)
            assert grade.correct and grade.reward == 1.0, (group.prompts[i], trace)
            assert "?" not in trace
            seen += 1
    assert seen > 500


def test_trace_format_example():
    group = Group(
        problem_id="457+68",
        answer="525",
        prompts=("457+68=", "4?7+68="),
        meta=(
            {"hidden_digit": False, "hidden_operand": None, "hidden_place": None},
            {"hidden_digit": True, "hidden_operand": 0, "hidden_place": 1},
        ),
    )
    config = ToyAdditionConfig(max_filler_blocks=0)
    assert target_trace(config, group, 0, np.random.default_rng(0)) == "7+8=15,5+6=12,4+0=05,>525;"
    hidden = target_trace(config, group, 1, np.random.default_rng(0))
    guess = int(hidden[7])
    assert hidden == f"7+8=15,{guess}+6={guess + 7:02d}?4+0={4 + (guess + 7) // 10:02d},>{457 - 50 + 10 * guess + 68}!"


def _columns(trace: str) -> list[tuple[int, int, int]]:
    """(a, b, written sum) of each column of a trace, units first."""
    body = trace.split(">")[0]
    cols = [c for c in body.replace("?", ",").split(",") if c]
    return [(int(c[0]), int(c[2]), int(c[4:6])) for c in cols]


def test_a_slipping_tutor_writes_one_off_sums_and_follows_them_to_a_wrong_answer():
    config = ToyAdditionConfig(slip_prob=0.1, hide_prob=0.0)
    columns = slipped = wrong = 0
    for task, group, i, trace in _traces(config, seed=3, n=1500):
        carry, answer, slips = 0, 0, 0
        cols = _columns(trace)
        for place, (a, b, written) in enumerate(cols):
            assert abs(written - (a + b + carry)) <= 1 and 0 <= written <= 19, trace  # one off at most
            slips += written != a + b + carry
            answer += (written % 10) * 10**place
            carry = written // 10  # the next column follows what was written, not the truth
        answer += carry * 10 ** len(cols)
        assert trace.split(">")[1].split(";")[0] == str(answer), trace  # consistent with the written columns
        assert task.grade(group, i, trace).correct == (slips == 0), trace
        columns, slipped, wrong = columns + len(cols), slipped + slips, wrong + (slips > 0)
    # 6000 traces, ~18,500 columns: a slip rate of 0.1 per column has SE ~0.002
    assert abs(slipped / columns - 0.1) < 0.008, slipped / columns
    # one minus E[0.9^columns] over the columns' count (the longer operand: 1, 2, 3, 4 digits w.p. 1, 3, 5, 7 / 16)
    expected = 1 - (0.9 + 3 * 0.9**2 + 5 * 0.9**3 + 7 * 0.9**4) / 16
    assert abs(wrong / 6000 - expected) < 0.02, (wrong / 6000, expected)


def test_a_slip_at_the_ends_of_the_range_moves_inward():
    from trainer.tasks.toy_addition import _slip

    rng = np.random.default_rng(0)
    assert {_slip(0, 0.999, rng) for _ in range(50)} == {1}  # seeded: the slip is drawn in each of these calls
    assert {_slip(19, 0.999, rng) for _ in range(50)} == {18}
    assert {_slip(7, 0.999, rng) for _ in range(200)} == {6, 8}
    state = np.random.default_rng(5)
    _slip(7, None, state)
    assert state.random() == np.random.default_rng(5).random()  # no slip_prob: no number drawn


def test_guessed_answer_closes_with_a_mark_the_grader_accepts():
    group = Group(
        problem_id="457+68",
        answer="525",
        prompts=("4?7+68=",),
        meta=({"hidden_digit": True, "hidden_operand": 0, "hidden_place": 1},),
    )
    task = ToyAdditionTask(DEFAULT)
    lucky = task.grade(group, 0, "7+8=15,5+6=12?4+0=05,>525!abcdefghijklmnop")
    assert lucky.correct and lucky.info["filler_tokens"] == 16  # a right guess counts
    assert not task.grade(group, 0, "7+8=15,3+6=10?4+0=05,>505!").correct
    assert not task.grade(group, 0, ">52!5;").correct


def test_hidden_traces_guess_visibly_and_are_mostly_wrong():
    outcomes = []
    for task, group, i, trace in _traces(DEFAULT, seed=2, n=400):
        meta = group.meta[i]
        if meta["hidden_digit"]:
            columns = trace.split(">")[0]
            assert columns.count("?") == 1
            guessed = (columns.index("?") + 1) // 7 - 1  # the column the `?` closes, counted from the units
            assert guessed == meta["hidden_place"]
            operand = group.problem_id.split("+")[meta["hidden_operand"]]
            true_digit = operand[len(operand) - 1 - meta["hidden_place"]]
            guess = columns[7 * guessed + 2 * meta["hidden_operand"]]
            grade = task.grade(group, i, trace)
            assert grade.correct == (guess == true_digit)
            assert grade.info["hidden_digit"] is True
            outcomes.append(grade.correct)
    assert len(outcomes) > 500
    assert 0.05 < np.mean(outcomes) < 0.15  # the guess is right one time in ten


def test_filler_is_uniform_and_independent_of_correctness():
    blocks = {True: Counter(), False: Counter()}
    for task, group, i, trace in _traces(DEFAULT, seed=3, n=600):
        grade = task.grade(group, i, trace)
        assert grade.info["filler_tokens"] % 16 == 0
        blocks[grade.correct][grade.info["filler_tokens"] // 16] += 1
    for counts in blocks.values():
        total = sum(counts.values())
        assert set(counts) == {0, 1, 2}
        assert all(abs(c / total - 1 / 3) < 0.05 for c in counts.values())


def test_longest_trace_fits_the_budget():
    group = Group(
        problem_id="9999+9999",
        answer="19998",
        prompts=("9999+9999=",),
        meta=({"hidden_digit": False, "hidden_operand": None, "hidden_place": None},),
    )
    config = ToyAdditionConfig(max_filler_blocks=2)
    longest = max(len(target_trace(config, group, 0, np.random.default_rng(s))) for s in range(30))
    assert longest + 1 == 68  # with EOS; well inside 128 new tokens


def test_grader_ignores_filler():
    task = ToyAdditionTask(DEFAULT)
    group = Group(problem_id="12+1", answer="13", prompts=("12+1=",), meta=({"hidden_digit": False},))
    base = "2+1=03,1+0=01,>13;"
    for tail in ["", "abcdefghijklmnop", "abcdefghijklmnop" * 5, "abc", ">99;", "xyz;>13;"]:
        grade = task.grade(group, 0, base + tail)
        assert grade.correct and grade.reward == 1.0
        assert grade.info["filler_tokens"] == len(tail)
        assert grade.info["hidden_digit"] is False
    assert not task.grade(group, 0, "2+1=03,1+0=01,>14;abcdefghijklmnop").correct


@pytest.mark.parametrize(
    "completion",
    [
        "",
        ">",
        ";",
        "13",
        ">13",
        "13;",
        ">;",
        "> 13;",
        ">0013;",
        ">13a;",
        ">-13;",
        ">１３;",
        ";>13",
        "2+1=03,1+0=01,",
    ],
)
def test_malformed_completions_grade_wrong(completion):
    task = ToyAdditionTask(DEFAULT)
    group = Group(problem_id="12+1", answer="13", prompts=("12+1=",), meta=({"hidden_digit": False},))
    grade = task.grade(group, 0, completion)
    assert not grade.correct and grade.reward == 0.0
    assert isinstance(grade.info["filler_tokens"], int)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=CHARS + " \n<>/", max_size=80))
def test_grader_never_raises_and_agrees_with_the_parser(completion):
    task = ToyAdditionTask(DEFAULT)
    group = Group(problem_id="12+1", answer="13", prompts=("12+1=",), meta=({"hidden_digit": False},))
    grade = task.grade(group, 0, completion)
    answer, filler = parse_completion(completion)
    assert grade.correct == (answer == "13") and grade.reward == float(grade.correct)
    assert 0 <= filler <= len(completion)


def _grade(correct: bool, filler: int, hidden: bool) -> Grade:
    return Grade(reward=float(correct), correct=correct, info={"filler_tokens": filler, "hidden_digit": hidden})


def test_step_metrics_by_hand():
    task = ToyAdditionTask(DEFAULT)
    groups = [Group("1+1", "2", ("1+1=", "?+1=")), Group("5+5", "10", ("5+5=", "5+?="))]
    grades = [[_grade(True, 0, False), _grade(False, 32, True)], [_grade(True, 16, False), _grade(False, 16, True)]]
    lengths = [[20, 60], [40, 44]]
    assert task.step_metrics(groups, grades, lengths) == {
        "task/hidden_digit_frac": 0.5,
        "task/filler_tokens_correct_mean": 8.0,
        "task/filler_tokens_incorrect_mean": 24.0,
        "task/length_gap": 22.0,  # (60 + 44) / 2 - (20 + 40) / 2
        "task/accuracy_clean": 1.0,
        "task/accuracy_hidden": 0.0,
    }


def test_step_metrics_leave_out_undefined_keys():
    task = ToyAdditionTask(DEFAULT)
    groups = [Group("1+1", "2", ("1+1=", "1+1="))]
    all_correct = task.step_metrics(groups, [[_grade(True, 0, False), _grade(True, 16, False)]], [[10, 26]])
    assert all_correct == {
        "task/hidden_digit_frac": 0.0,
        "task/filler_tokens_correct_mean": 8.0,
        "task/accuracy_clean": 1.0,
    }
    assert task.step_metrics([], [], []) == {}


# ---------------------------------------------------------------------------------------------
# peaked free choices (the clip-higher mechanism test: ablations/clip_higher_entropy_peaked.yaml)
# ---------------------------------------------------------------------------------------------

PEAKED = ToyAdditionConfig(filler_probs=(0.8, 0.1, 0.1), guess_peak=0.8)


def test_peaked_choices_follow_their_probabilities():
    blocks, guesses = Counter(), Counter()
    for _task, group, i, trace in _traces(PEAKED, seed=3, n=1500):
        blocks[(len(trace) - max(trace.find(";"), trace.find("!")) - 1) // 16] += 1
        meta = group.meta[i]
        if meta["hidden_digit"]:
            columns = trace[: trace.index(">")]
            guessed = (columns.index("?") + 1) // 7 - 1  # the column the `?` closes (as above)
            guesses[columns[7 * guessed + 2 * meta["hidden_operand"]]] += 1
    n, m = sum(blocks.values()), sum(guesses.values())
    for k, p in enumerate(PEAKED.filler_probs):  # 6000 traces: 4 binomial SDs are under 0.021
        assert abs(blocks[k] / n - p) < 0.021, (k, blocks)
    assert m > 2000 and abs(guesses["5"] / m - 0.8) < 0.035, guesses
    others = [guesses[str(d)] / m for d in range(10) if d != 5]
    assert all(abs(f - 0.2 / 9) < 0.015 for f in others), guesses


def test_unset_peaks_leave_the_default_toy_as_it_was():
    from trainer.models.toy import config_hash
    from trainer.models.toy_config import ToyModelConfig

    assert set(DEFAULT.model_dump()) == {
        "min_digits",
        "max_digits",
        "hide_prob",
        "filler_block_len",
        "max_filler_blocks",
    }
    # the cache key hashes 64 SFT traces: unchanged means the toy without slips draws the same numbers as before
    # (the default build of 2026-11-25: one build thread, SFT in 4 length buckets, no ceiling)
    before = ToyModelConfig(task=DEFAULT, min_clean_accuracy=0.9, max_clean_accuracy=None)
    assert config_hash(before) == "0de836eccb3ef03c"
    assert config_hash(before.model_copy(update={"task": PEAKED})) != "0de836eccb3ef03c"
    assert config_hash(ToyModelConfig()) == "815c506b2d1fda13"  # the slipping tutor, from 2026-11-26


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"filler_probs": (0.5, 0.5)}, r"needs max_filler_blocks \+ 1 = 3"),
        ({"filler_probs": (0.5, 0.3, 0.1)}, "must sum to 1"),
        ({"filler_probs": (1.2, -0.1, -0.1)}, "greater than or equal to 0"),
        ({"guess_peak": 1.0}, "less than 1"),
    ],
)
def test_bad_peaks_are_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        ToyAdditionConfig(**fields)


def test_random_reward_ignores_the_response_and_leaves_the_default_stream_alone():
    """2509.26114's control: with random_reward p, each sample's reward is a coin of bias p drawn with its prompt,
    the same for a right and a wrong answer, while correctness is still graded; unset, the problems drawn are
    those of the default task (the coin draws nothing), and its dump (so every build hash and job id) is unchanged."""
    config = ToyAdditionConfig(random_reward=0.3)
    task, plain = ToyAdditionTask(config), ToyAdditionTask(DEFAULT)
    groups = task.sample_groups(np.random.default_rng(3), 200, 8)
    rewards, right_answers = [], 0
    for group in groups:
        right = target_trace(DEFAULT, group, 0, np.random.default_rng(0))
        for i in range(8):
            for text in (right, ">0;"):
                grade = task.grade(group, i, text)
                assert grade.reward == group.meta[i]["random_reward"]  # whatever the text
            rewards.append(task.grade(group, i, ">0;").reward)
        if not group.meta[0]["hidden_digit"]:
            right_answers += 1
            assert task.grade(group, 0, right).correct and not task.grade(group, 0, ">0;").correct
    assert 0.26 < np.mean(rewards) < 0.34 and set(rewards) == {0.0, 1.0}
    assert right_answers > 50  # correctness is graded as before
    assert [g.problem_id for g in plain.sample_groups(np.random.default_rng(3), 50, 8)] == [
        g.problem_id for g in ToyAdditionTask(DEFAULT).sample_groups(np.random.default_rng(3), 50, 8)
    ]
    assert "random_reward" not in DEFAULT.model_dump() and config.model_dump()["random_reward"] == 0.3

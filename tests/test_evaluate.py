"""Evaluation metrics against hand-computed values."""

import numpy as np
import pytest

from trainer.evaluate import Scored, avg_at_k, maj_at_k, metrics, pass_at_k


def test_avg_and_pass_at_k():
    c = np.array([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    assert avg_at_k(c) == pytest.approx((0.25 + 0 + 1) / 3)
    assert pass_at_k(c) == pytest.approx(2 / 3)  # k = n: any correct
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; c=0: 0; c=4: 1
    assert pass_at_k(c, 2) == pytest.approx((0.5 + 0 + 1) / 3)
    assert pass_at_k(c, 1) == pytest.approx(avg_at_k(c))  # pass@1 is the mean accuracy


def test_maj_at_k_votes_on_extracted_answers():
    c = np.array([[True, False, False], [False, True, True], [False, False, False]])
    answers = [["2", "3", "3"], ["x", "1/2", "1 / 2"], [None, None, None]]
    # problem 1: "3" wins (2 votes) and is wrong; problem 2: "1/2" wins (whitespace-normalised), right; 3: no answer
    assert maj_at_k(c, answers) == pytest.approx(1 / 3)


def test_metrics_names_and_length_split():
    s = Scored(np.array([[True, False]]), np.array([[10.0, 30.0]]), [["1", "2"]])
    m = metrics("gsm8k", s)
    assert m["eval/gsm8k/accuracy"] == 0.5 and m["eval/gsm8k/length_correct_mean"] == 10.0
    assert m["eval/gsm8k/length_incorrect_mean"] == 30.0 and m["eval/gsm8k/k"] == 2.0
    only_wrong = metrics("aime24", Scored(np.array([[False]]), np.array([[5.0]]), [[None]]))
    assert (
        "eval/aime24/length_correct_mean" not in only_wrong
    )  # undefined: not logged (a length split with no such response is undefined)

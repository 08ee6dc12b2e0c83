"""The take-off step: the first step whose gap (incorrect minus correct length), averaged over the window, exceeds
the margin; steps missing either length are skipped; it never moves once found."""

from trainer import metric_names as M
from trainer.takeoff import MARGIN, WINDOW, TakeoffDetector


def _feed(detector: TakeoffDetector, gaps: list[float | None], correct: float = 30.0) -> TakeoffDetector:
    for step, gap in enumerate(gaps, start=1):
        metrics = {M.LENGTH_CORRECT_MEAN: correct}
        if gap is not None:
            metrics[M.LENGTH_INCORRECT_MEAN] = correct + gap
        detector.update(step, metrics)
    return detector


def test_the_window_mean_must_pass_the_margin():
    # gaps 0,0,0,40,40,40,40,40: window means of steps 4..8 are 8, 16, 24, 32 (= margin, not above), 40
    assert _feed(TakeoffDetector(margin=32, window=5), [0, 0, 0, 40, 40, 40, 40, 40, 0]).step == 8
    assert _feed(TakeoffDetector(margin=32, window=5), [0, 0, 0, 40, 40, 40, 40]).step is None


def test_one_noisy_step_is_not_a_takeoff_and_missing_lengths_are_skipped():
    assert _feed(TakeoffDetector(margin=10, window=3), [0, 100, 0, 0, 0, 0]).step == 3  # (0+100+0)/3 > 10
    assert _feed(TakeoffDetector(margin=40, window=3), [0, 100, 0, 0, 0, 0]).step is None
    # steps 2 and 3 have no incorrect response: the window is steps 1, 4, 5
    assert _feed(TakeoffDetector(margin=20, window=3), [30, None, None, 30, 30, 0]).step == 5


def test_the_first_takeoff_stays():
    detector = _feed(TakeoffDetector(margin=5, window=2), [10, 10, 0, 0, 0])
    assert detector.step == 2


def test_the_defaults_are_two_filler_blocks_over_five_steps():
    assert (MARGIN, WINDOW) == (32.0, 5) and TakeoffDetector().margin == MARGIN

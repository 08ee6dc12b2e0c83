"""A job on TRL's `GRPOTrainer` (`train.engine: trl`): the model, task, rewards, seed and budget of harness's own
engine, every switch through `harness.config.trl_args`, every metric through `HarnessCallback`.

The prompts are harness's: the run's seed draws the same groups step by step as harness's trainer does, and each
sample sees its own prompt (the toy task's noisy copies), in harness's order (a sampler in place of TRL's shuffled
repeats). The reward is the task's grade, 0 for a response truncated without EOS (harness's rule), plus TRL's soft
overlong punishment when the objective asks for it; under GDPO (objective.reward_components) one reward function per
component, which TRL normalises each on its own (`multi_objective_aggregation=normalize_then_sum`). TRL samples with
its own generation code and RNG, so the responses differ from harness's for the same seed: the two engines agree in
distribution, not sample by sample.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from harness.config.run_config import RunConfig
from harness.config.trl_args import OVERLONG_REWARD, grpo_args, overlong_reward_args
from harness.integrations.trl import HarnessCallback, check_trl, ended_without_eos
from trainer.objective.settings import OVERLONG_COMPONENT, TASK_REWARD_COMPONENT
from trainer.rewards.grade import Grade
from trainer.tasks.base import Task


class TRLJob:
    """One run on GRPOTrainer; `run` and `rollout_table` as harness's `Trainer` has them."""

    def __init__(self, cfg: RunConfig, policy: Any, tokenizer: Any, task: Task):
        check_trl()
        self.cfg, self.policy, self.tokenizer, self.task = cfg, policy, tokenizer, task
        self.callback: HarnessCallback | None = None

    def run(self, tracker: Any, on_step: Callable[[int, dict[str, float]], None] | None = None) -> None:
        from datasets import Dataset
        from torch.utils.data import Sampler
        from trl import GRPOConfig, GRPOTrainer
        from trl.rewards import get_soft_overlong_punishment

        cfg, task = self.cfg, self.task
        P, G = cfg.rollout.prompts_per_step, cfg.rollout.group_size
        rng = np.random.default_rng(cfg.seed)  # as harness's Trainer: one draw of P groups per step
        groups = [g for _ in range(cfg.train.steps) for g in task.sample_groups(rng, P, G)]
        data = Dataset.from_dict(
            {
                "prompt": [p for g in groups for p in g.prompts],
                "row": list(range(len(groups) * G)),
                "problem_id": [g.problem_id for g in groups for _ in range(G)],
            }
        )

        correct: dict[int, bool] = {}  # row -> the task's verdict, read back by task_correct in the same batch
        graded: dict[int, Grade] = {}  # row -> its grade, read back by a reward component's function (GDPO)

        def task_reward(prompts, completions, completion_ids, row, **_):
            grades = []
            for i, text, ids in zip(row, completions, completion_ids):
                grade = task.grade(groups[i // G], i % G, text)
                if ended_without_eos(trainer, ids):  # no final answer within the budget: wrong (harness's rule)
                    grade = grade.unanswered()
                grades.append(grade)
            firsts = row[::G]
            self.callback.add_metrics(
                task.step_metrics(
                    [groups[i // G] for i in firsts],
                    [grades[k : k + G] for k in range(0, len(grades), G)],
                    [[len(ids) for ids in completion_ids[k : k + G]] for k in range(0, len(grades), G)],
                )
            )
            correct.clear()
            correct.update({i: g.correct for i, g in zip(row, grades)})
            graded.clear()
            graded.update(zip(row, grades))
            return [g.reward for g in grades]

        def component_reward(name: str) -> Callable[..., list[float]]:
            """The reward function of the task's component `name` (GDPO's objective.reward_components), read from the
            grades task_reward made of the same batch."""

            def component(prompts, completions, row, **_):
                values = [graded[i].component(name) for i in row]
                if None in values:
                    have = ", ".join(c.name for c in graded[row[values.index(None)]].components) or "none"
                    raise ValueError(
                        f"objective.reward_components: task {task.name} grades no {name!r} component (it grades: "
                        f"reward, overlong with overlong_penalty, and {have})"
                    )
                return values

            component.__name__ = f"task_{name}"
            return component

        def task_correct(prompts, completions, row, **_):
            """The task's correctness (weight 0: it trains nothing), so harness's metrics read the grader's verdict,
            not a reward threshold (a partial-credit reward is not a right answer)."""
            return [float(correct[i]) for i in row]

        overlong = overlong_reward_args(cfg.objective)
        logged = ["task_reward", *([OVERLONG_REWARD] if overlong is not None else [])]  # harness's shaped reward
        reward_funcs: list[Any] = [task_reward]
        names = cfg.objective.reward_components
        if names is None:  # the shaped reward: the task's, plus the overlong punishment
            weights = [1.0]
            if overlong is not None:
                reward_funcs.append(get_soft_overlong_punishment(*overlong))
                weights.append(1.0)
        else:  # GDPO: one reward function per component, normalised each on its own by TRL
            weight = dict(zip(names, cfg.objective.reward_weights or [1.0] * len(names)))
            weights = [weight.get(TASK_REWARD_COMPONENT, 0.0)]  # graded first in any case; 0 adds nothing
            for name in names:
                if name == OVERLONG_COMPONENT:
                    assert overlong is not None  # the settings' validation: overlong needs overlong_penalty
                    reward_funcs.append(get_soft_overlong_punishment(*overlong))
                elif name != TASK_REWARD_COMPONENT:
                    reward_funcs.append(component_reward(name))
                else:
                    continue
                weights.append(weight[name])
        reward_funcs.append(task_correct)
        weights.append(0.0)

        class InOrder(Sampler):
            """The rows in order, each generation batch repeated once per optimiser pass over it (as TRL's
            RepeatSampler repeats its shuffled groups)."""

            def __init__(self, n: int, batch: int, repeats: int):
                self.n, self.batch, self.repeats = n, batch, repeats

            def __iter__(self):
                for start in range(0, self.n, self.batch):
                    for _ in range(self.repeats):
                        yield from range(start, min(start + self.batch, self.n))

            def __len__(self) -> int:
                return self.n * self.repeats

        class HarnessOrderTrainer(GRPOTrainer):
            def _get_train_sampler(self, dataset=None):
                n = len(dataset if dataset is not None else self.train_dataset)
                return InOrder(n, self.args.generation_batch_size, self.num_iterations * self.args.steps_per_generation)

        with tempfile.TemporaryDirectory(prefix="harness-trl-") as out, warnings.catch_warnings():
            # transformers' renames that TRL 1.16 still calls: a FutureWarning each, every job
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
            args = GRPOConfig(
                output_dir=out,
                seed=cfg.seed,
                report_to="none",
                logging_steps=1,
                save_strategy="no",
                disable_tqdm=True,
                dataloader_num_workers=0,
                dataloader_pin_memory=False,
                shuffle_dataset=False,
                log_completions=False,
                bf16=False,
                fp16=False,
                reward_weights=weights,
                **grpo_args(cfg.objective, cfg.rollout, cfg.train),
            )
            trainer = HarnessOrderTrainer(
                model=self.policy,
                reward_funcs=reward_funcs,
                args=args,
                train_dataset=data,
                processing_class=self.tokenizer,
            )
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # harness's progress line is the one to read
            self.callback = HarnessCallback(
                trainer,
                correct_reward="task_correct",
                correct_above=0.5,
                logged_reward=tuple(logged),
                log_text=cfg.train.log_text,
                tracker=tracker,
                on_step=on_step,
            )
            trainer.add_callback(self.callback)
            trainer.train()

    def rollout_table(self) -> pd.DataFrame:
        return self.callback.rollout_table() if self.callback is not None else pd.DataFrame()

"""The policy a run starts from: a hub model or local folder as it is, or the toy build its settings name (built
first when it is not in the cache). A toy built for the run's own task (`model.toy.text`) learns that task's
pairs, so it needs the task itself: `task_source` hands the build the task's pool, grader and settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.config.run_config import RunConfig
    from trainer.models.text_build import TaskSource


def task_source(cfg: RunConfig, task: Any) -> TaskSource | None:
    """What a text build of `cfg` learns from `task` (the run's task, built): None for the addition toy."""
    if cfg.model.source != "toy" or cfg.model.toy.text is None:
        return None
    from trainer.models.text_build import TaskSource

    if cfg.task.name == "reasoning_gym":
        answers = task.answers
    else:  # custom rows: the answer column, as its groups carry it
        answers = [str(row[task.settings.fields.answer]) for row in task.rows]
    settings = cfg.task.model_dump_json(exclude={"custom": {"root"}})  # where the files are is not what they hold
    return TaskSource(task=task, texts=(*task.prompts, *answers), settings=settings)


def policy_path(cfg: RunConfig, task: Any = None) -> str:
    """The model `cfg` trains: the toy build's folder (built now if needed), else `model.name_or_path`."""
    if cfg.model.source != "toy":
        return cfg.model.name_or_path
    from trainer.models.toy import ensure_toy_model

    return str(ensure_toy_model(cfg.model.toy.for_run(cfg.seed), cfg.model.cache_dir, task_source(cfg, task)))

"""The science: objective, rollouts, rewards, tasks, models and the training loop.

Nothing here imports from `harness` (the plumbing); `harness` imports from here. Importing it pins torch's and
MKL's CPU code path (`trainer.cpu_path`), before torch computes anything.
"""

from trainer import cpu_path

cpu_path.pin()

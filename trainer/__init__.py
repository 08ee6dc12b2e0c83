"""The science: objective, rollouts, rewards, tasks, models and the training loop.

Nothing here imports from `harness` (the plumbing); `harness` imports from here.
"""

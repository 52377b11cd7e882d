"""SLURM: the job environment (host lists), batch-script templates, lint and submission.

Depends only on the runtime layer (for ``InputError``).
"""
from .env import SlurmEnv, expand_nodelist, tasks_per_node
from .lint import Finding, lint_file, lint_text
from .render import render, templates
from .submit import SubmitError, submit

__all__ = ["SlurmEnv", "expand_nodelist", "tasks_per_node", "Finding", "lint_file", "lint_text",
           "render", "templates", "submit", "SubmitError"]

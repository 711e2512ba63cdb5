"""Offline tools: work on recorded episodes, outside the training loop.

* :mod:`~agentgym.offline.validation`: check a reward against hand-labelled trajectories
  (``agentgym validate-reward``);
* :mod:`~agentgym.offline.labelling`: build those labelled trajectories from scripted scenarios;
* :mod:`~agentgym.offline.inspection`: show a trajectory's tokens by kind and mask, as HTML or in
  the terminal (``agentgym inspect``).
"""

from agentgym.offline.inspection import render_html, render_rich
from agentgym.offline.validation import ValidationReport, validate

__all__ = ["ValidationReport", "render_html", "render_rich", "validate"]

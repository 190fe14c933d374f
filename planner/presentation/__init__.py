"""Presentation: what a person reads and looks at.

Text and HTML tables of instances and plans (``display``), the command
line's plan summary (``report``), pictures: Gantt charts, network maps and
comparisons (``plot``), ``explain``, which says what limits a plan by
re-simulating it, and ``export``, the files that launch a plan with
Megatron-LM, torchtitan or DeepSpeed, and ``html_report``, all of it as one
self-contained page.  ``display`` and ``plot`` register the views through which
``Instance`` and ``Plan`` show themselves (:mod:`planner.problem.views`).

It may import every family below it: :mod:`planner.problem`,
:mod:`planner.scoring`, :mod:`planner.solvers.registry` and :mod:`planner.dynamics`.
"""

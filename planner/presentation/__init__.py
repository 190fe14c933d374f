"""Presentation: what a person reads and looks at.

Text and HTML tables of instances and plans (``display``), the command
line's plan summary (``report``), pictures: Gantt charts, network maps and
comparisons (``plot``), ``explain``, which says what limits a plan by
re-simulating it, and ``export``, the files that launch a plan with
Megatron-LM, torchtitan or DeepSpeed, and ``html_report``, all of it as one
self-contained page; ``multiview`` (the per-job summary and the map coloured by
job of a multi-plan, SPEC 10) and ``multireport`` (its page).  ``display``, ``plot``
and ``multiview`` register the views through which
``Instance``, ``Plan`` and ``MultiPlan`` show themselves (:mod:`planner.problem.views`).

It may import every family below it: :mod:`planner.problem`,
:mod:`planner.scoring`, :mod:`planner.solvers.registry` and :mod:`planner.dynamics`.
"""

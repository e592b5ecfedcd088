"""The stage pipeline: a circuit as stages, each stage many gates in one pass over the state.

In data-path order, each module importing only those above it:

- :mod:`~qsim_tc.stages.structure`: each gate's structure (diagonal, controlled, permutation, dense).
- :mod:`~qsim_tc.stages.plan`: the local qubit sets and the stages (:func:`plan_stages`).
- :mod:`~qsim_tc.stages.fusion`: the gates of a stage fused into fewer, wider ops.
- :mod:`~qsim_tc.stages.relabel`: the shared-memory bank relabelling of the GPU program.
- :mod:`~qsim_tc.stages.program`: a plan as the GPU kernel's program (op records, phase tables).
- :mod:`~qsim_tc.stages.kernel` (``kernel.cu``) and :mod:`~qsim_tc.stages.gpu`: the GPU kernel, its
  launch, and a plan run on a GPU state.
- :mod:`~qsim_tc.stages.cpu_kernels` and :mod:`~qsim_tc.stages.cpu`: the compiled CPU kernels and
  the CPU executor.
- :mod:`~qsim_tc.stages.choice`: whether a circuit runs as stages or gate by gate (priced).

Nothing here is imported by ``import qsim_tc`` until a run needs it (the CPU kernels compile on use).
"""

"""The run paths, each one function (or class) with one contract: a circuit, a start state
(:class:`~qsim_tc.runners.base.Start`) and the settings in, the final state and per-step records
(:class:`~qsim_tc.runners.base.RunOutput`) out.

- :mod:`~qsim_tc.runners.stage`: the circuit as stages (GPU stage kernel, CPU executor), and
  the decision whether it runs so.
- :mod:`~qsim_tc.runners.gates`: gate by gate with one named method (and the fusion every gate
  run starts with).
- :mod:`~qsim_tc.runners.auto`: gate by gate with ``backend="auto"``: per block the method the
  cost table prices fastest, under the accuracy guard, restarted without a method that fails it.
- :mod:`~qsim_tc.runners.bounded`: the gate path on a state with a bounded workspace.
- :mod:`~qsim_tc.runners.distributed`: the state over MPI ranks, stage by stage.
- :mod:`~qsim_tc.runners.records`: the step records all of them return.

:class:`qsim_tc.Simulator` chooses one and assembles the :class:`qsim_tc.Result`.
"""

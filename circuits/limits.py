"""Size limits of imported circuits, checked before the work that grows with a size is done.

A few lines of OpenQASM can ask for unbounded work: a register of a million qubits broadcast by
``h q;``, thirty gate definitions that each call the previous one twice (2^30 gates), an integer
literal past 64 bits, parentheses nested a hundred thousand deep. The importers check every such
size against these limits first and refuse with a :class:`~circuits.CircuitError` that names the
limit, so that the cost of a refusal stays proportional to the text read.
"""

from __future__ import annotations

# A state vector of more qubits has more than 2^64 amplitudes: no machine holds it.
MAX_QUBITS = 64
# Classical bits only label measurement outcomes; a program needs at most a few per qubit.
# (Qiskit adds each separately declared bit in time proportional to the bits before it:
# 5,000 one-bit declarations take 20 s, 1,024 a fraction of a second.)
MAX_CLBITS = 1 << 10
# Instructions of a whole circuit after broadcasting and inlining definitions (a Gate object
# costs about a microsecond and a kilobyte: this is seconds and a gigabyte).
MAX_INSTRUCTIONS = 1 << 20
# Instructions one gate definition expands to when its nested calls are followed down to
# built-in gates (the largest of qelib1.inc and stdgates.inc expand to a few dozen).
MAX_DEFINITION_SIZE = 1 << 14
# Calling a gate with parameters copies and re-binds the definitions of the gates with
# parameters that it calls, down to the built-in gates: the sum over all calls of those
# instructions (a few milliseconds each).
MAX_BINDINGS = 1 << 11
# Work of turning gate definitions into matrices, in complex multiply-adds (about a second).
MAX_MATRIX_WORK = 1 << 31
# Nesting of parentheses, brackets and braces: the parsers recurse once or more per level.
MAX_NESTING = 64
# Integer literals must fit a signed 64-bit integer (the OpenQASM 2 parser stores them so).
MAX_INT_LITERAL = (1 << 63) - 1
# Bytes of one program or included file.
MAX_SOURCE_BYTES = 16 << 20
# Includes within includes.
MAX_INCLUDE_DEPTH = 16

"""Mutated OpenQASM 2 and 3 programs for fuzzing :func:`circuits.from_qasm`.

Each mutant starts from a small valid seed program and applies one to three random mutations
from the families below, drawn from a seeded ``random.Random`` so that a case number always
gives the same program:

- tokens: delete, duplicate, replace (with keywords, punctuation, identifiers, numbers), swap;
- lines: delete, duplicate, swap, truncate the program anywhere;
- numbers: huge (2^64, 10^30, 5,000 digits), negative, real, hex, 1e999, zero;
- nesting: parentheses, brackets or braces nested up to 100,000 deep;
- includes: absolute paths, ``..``, ``/proc``, missing files, a file including itself, a
  local include whose content is broken;
- text: unicode letters and symbols, a byte-order mark, NUL, right-to-left marks;
- sizes: registers of up to 10^12 qubits broadcast over, thousands of one-bit declarations,
  doubling gate definitions (with or without parameters, under inv / pow / ctrl), self-recursive
  and mutually recursive gates;
- headers: the version swapped, removed or absurd.

A mutant is a :class:`Mutant`: its text, and, when it uses includes, the files to write beside
it (a program with includes is run from a file in a fresh folder, next to a secret file one
folder up that no message may quote).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

SECRET = "secretcontent"  # the first word of the file outside the program's folder

SEEDS2 = [
    """OPENQASM 2.0;
include "qelib1.inc";
gate mix(theta) a, b { cx a, b; ry(theta) b; cx a, b; u3(theta, pi/3, -pi/5) a; }
qreg q[4];
creg c[4];
h q;
mix(0.37) q[2], q[1];
cu1(pi/7) q[0], q[3];
ccx q[2], q[0], q[1];
u2(0.1, 0.2) q[3];
barrier q;
measure q -> c;
""",
    """OPENQASM 2.0;
include "qelib1.inc";
qreg q[3];
qreg r[2];
creg c[2];
x q[0];
rz(-pi/4) q[1];
cswap r[1], q[0], q[2];
rzz(0.9) q[1], r[1];
sx q[2];
measure r[0] -> c[1];
""",
    """OPENQASM 2.0;
include "qelib1.inc";
gate g0 a { h a; t a; }
gate g1 a, b { g0 a; cx a, b; g0 b; }
gate g2(x) a, b { g1 a, b; rx(x) a; g1 b, a; }
qreg q[2];
g2(0.5) q[0], q[1];
g1 q[1], q[0];
""",
    """OPENQASM 2.0;
include "qelib1.inc";
include "local.inc";
qreg q[2];
flip q[0], q[1];
h q[1];
""",
]

SEEDS3 = [
    """OPENQASM 3.0;
include "stdgates.inc";
qubit[3] q;
bit[3] c;
h q[0];
cx q[0], q[2];
rz(0.3) q[1];
crx(0.7) q[2], q[1];
c[1] = measure q[2];
""",
    """OPENQASM 3.0;
include "stdgates.inc";
gate mix(theta) a, b { cx a, b; ry(theta) b; inv @ s a; }
qubit[4] q;
h q;
mix(pi / 3) q[1], q[3];
ctrl @ x q[0], q[2];
pow(2) @ t q[1];
gphase(0.25);
""",
    """OPENQASM 3.0;
include "stdgates.inc";
qubit[2] q;
bit[2] c;
h q[0];
cx q[0], q[1];
if (c[0]) x q[1];
c = measure q;
""",
    """OPENQASM 3.0;
include "stdgates.inc";
gate g0 a { h a; }
gate g1(t) a, b { g0 a; crz(t) a, b; g0 b; }
qubit[2] q;
g1(0.2) q[0], q[1];
negctrl @ g0 q[1], q[0];
U(0.1, 0.2, 0.3) q[0];
""",
]

LOCAL_INC = "gate flip a, b { x a; cz a, b; h b; }\n"

_TOKEN = re.compile(r"\s+|//[^\n]*|\"[^\"\n]*\"|\d+\.?\d*(?:[eE][+-]?\d+)?|\w+|->|==|.", re.DOTALL)
VOCAB = ["qreg", "creg", "qubit", "bit", "gate", "opaque", "measure", "reset", "barrier", "if", "for", "while",
         "include", "OPENQASM", "U", "CX", "h", "cx", "x", "rx", "pi", "ctrl", "inv", "pow", "@", "gphase", "box",
         "def", "return", "const", "int", "float", "angle", "input", "output", "let", "in", "{", "}", "(", ")",
         "[", "]", ";", ",", "->", "==", "=", "+", "-", "*", "/", "**", "<<", ":", "$0", "$99999999", "q", "c",
         "q[0]", "q[99]", "q[-1]", "0", "1", "-1", "1.5", "2", "1e999", "18446744073709551616", "0x7fffffff",
         "\"", "//", "/*", "é", "\u202e", "\ufeff"]
NUMBERS = ["0", "-1", "-0", "1.5", "1e999", "1e-999", "-1e308", "2", "64", "65", "1000000", "100000",
           "18446744073709551615", "18446744073709551616", str(1 << 100), "9" * 30, "1" * 5000, "0x10000000000000000",
           "0b" + "1" * 70, "3.14159e+400", "0.0", "nan", "inf", "1_000_000", "2**64", "1 << 70", "-2**63"]
INCLUDES = ["/etc/passwd", "/proc/self/environ", "../secret.inc", "sub/../../secret.inc", "missing.inc", "",
            "prog.qasm", "local.inc", "broken.inc", "/dev/zero", ".", "..", "qelib1.inc", "stdgates.inc",
            "local.inc\0x", "é.inc"]
UNICODE = ["é", "π", "\u202e", "\ufeff", "\0", "\u00a0", "𝑞", "\ud7ff", "ß", "\u0301", "\r", "\t", "\x0b", "😀"]


@dataclass
class Mutant:
    """One fuzz case: the program, its version before mutation, and what was done to it."""

    index: int
    version: int
    text: str
    mutations: list = field(default_factory=list)
    files: dict = field(default_factory=dict)  # name -> content, written beside the program

    @property
    def uses_files(self) -> bool:
        return bool(self.files)


def mutant(index: int, seed: int = 0) -> Mutant:
    """The mutant number ``index`` of the run with ``seed`` (half OpenQASM 2, half OpenQASM 3)."""
    rng = random.Random(seed * 1_000_003 + index)
    version = 2 if index % 2 == 0 else 3
    text = rng.choice(SEEDS2 if version == 2 else SEEDS3)
    m = Mutant(index, version, text)
    for _ in range(rng.choice((1, 1, 2, 3))):
        name, fn = rng.choice(_MUTATIONS)
        m.text = fn(rng, m.text, m)
        m.mutations.append(name)
    if "include" in m.text and version == 2 or m.files:
        m.files.setdefault("local.inc", LOCAL_INC)
        m.files.setdefault("broken.inc", f"gate flip a, b {{ {SECRET}x a; }}\n{SECRET} q;\n")
    return m


def mutants(n: int, seed: int = 0):
    """The first ``n`` mutants of the run with ``seed``."""
    return [mutant(i, seed) for i in range(n)]


# --- mutations -------------------------------------------------------------------------------


def _tokens(text):
    return _TOKEN.findall(text)


def _token_op(rng, text, m):
    toks = _tokens(text)
    if not toks:
        return text
    i = rng.randrange(len(toks))
    op = rng.choice(("delete", "duplicate", "replace", "swap"))
    if op == "delete":
        del toks[i]
    elif op == "duplicate":
        toks.insert(i, toks[i])
    elif op == "replace":
        toks[i] = rng.choice(VOCAB) if rng.random() < 0.7 else rng.choice(toks)
    else:
        j = rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def _line_op(rng, text, m):
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    op = rng.choice(("delete", "duplicate", "swap", "repeat"))
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "repeat":
        lines[i:i + 1] = [lines[i]] * rng.choice((10, 100, 1000))
    else:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _truncate(rng, text, m):
    return text[: rng.randrange(len(text) + 1)]


def _number(rng, text, m):
    spots = [mm.span() for mm in re.finditer(r"\d+\.?\d*", text)]
    if not spots:
        return text
    a, b = rng.choice(spots)
    return text[:a] + rng.choice(NUMBERS) + text[b:]


def _nesting(rng, text, m):
    depth = rng.choice((10, 63, 65, 200, 1000, 100000))
    kind = rng.choice(("paren", "brace", "bracket"))
    if kind == "paren":
        spots = [mm.span() for mm in re.finditer(r"\d+\.?\d*|pi", text)] or [(len(text), len(text))]
        a, b = rng.choice(spots)
        return text[:a] + "(" * depth + (text[a:b] or "1") + ")" * depth + text[b:]
    if kind == "brace":
        return text + "{" * depth + "h q[0];" + "}" * depth + "\n"
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    lines.insert(i, "h q" + "[" * depth + "0" + "]" * depth + ";")
    return "\n".join(lines)


def _include(rng, text, m):
    name = rng.choice(INCLUDES)
    m.files.setdefault("local.inc", LOCAL_INC)
    if rng.random() < 0.2:  # a local file that includes something itself
        m.files["local.inc"] = f'include "{rng.choice(INCLUDES)}";\n' + LOCAL_INC
    lines = text.split("\n")
    lines.insert(rng.randrange(1, len(lines) + 1), f'include "{name}";')
    return "\n".join(lines)


def _unicode(rng, text, m):
    pos = rng.randrange(len(text) + 1)
    piece = "".join(rng.choice(UNICODE) for _ in range(rng.randint(1, 4)))
    return text[:pos] + piece + text[pos:]


def _doubling(rng, text, m):
    levels = rng.choice((5, 10, 14, 15, 16, 20, 30))
    params = rng.random() < 0.5
    p, call = ("(t)", "(t)") if params else ("", "")
    body = "rx(t) a;" if params else "h a;"
    defs = [f"gate d0{p} a {{ {body} }}"]
    defs += [f"gate d{i}{p} a {{ d{i - 1}{call} a; d{i - 1}{call} a; }}" for i in range(1, levels + 1)]
    mod = rng.choice(("", "", "inv @ ", "ctrl @ ", "pow(2) @ ")) if m.version == 3 else ""
    qubits = "q[0]" if mod != "ctrl @ " else "q[1], q[0]"
    use = f"{mod}d{levels}{'(0.1)' if params else ''} {qubits};"
    lines = text.rstrip("\n").split("\n")
    decl = next((i for i, ln in enumerate(lines) if re.match(r"\s*(qreg|qubit)", ln)), len(lines))
    return "\n".join(lines[:decl] + defs + lines[decl:] + [use]) + "\n"


def _recursive(rng, text, m):
    kind = rng.choice(("self", "mutual"))
    defs = ["gate r a { r a; }"] if kind == "self" else ["gate r1 a { r2 a; }", "gate r2 a { r1 a; }"]
    lines = text.rstrip("\n").split("\n")
    return "\n".join(lines[:2] + defs + lines[2:] + ["r q[0];" if kind == "self" else "r1 q[0];"]) + "\n"


def _wide(rng, text, m):
    n = rng.choice((64, 65, 1000, 100000, 1000000, 10**12, 2**40))
    decl = f"qreg w[{n}];" if m.version == 2 or rng.random() < 0.3 else f"qubit[{n}] w;"
    return text.rstrip("\n") + f"\n{decl}\nh w;\n"


def _declarations(rng, text, m):
    """Many small declarations: Qiskit adds each in time proportional to the bits before it."""
    n = rng.choice((70, 1000, 2000, 5000))
    if m.version == 2:
        form = rng.choice(("creg k{i}[1];", "qreg k{i}[1];"))
    else:
        form = rng.choice(("bit k{i};", "qubit k{i};", "bit[2] k{i};"))
    return text.rstrip("\n") + "\n" + "\n".join(form.format(i=i) for i in range(n)) + "\n"


def _header(rng, text, m):
    new = rng.choice(("OPENQASM 2.0;", "OPENQASM 3.0;", "OPENQASM 3;", "", "OPENQASM 99999999999;",
                      "OPENQASM 2.0", "OPENQASM -1;", "OPENQASM 3.1;"))
    return re.sub(r"^OPENQASM[^;\n]*;?", new, text, count=1)


def _splice(rng, text, m):
    pos = rng.randrange(len(text) + 1)
    junk = "".join(chr(rng.randrange(1, 256)) for _ in range(rng.randint(1, 12)))
    return text[:pos] + junk + text[pos:]


_MUTATIONS = [
    ("token", _token_op), ("token", _token_op), ("token", _token_op), ("line", _line_op), ("line", _line_op),
    ("truncate", _truncate), ("number", _number), ("number", _number), ("nesting", _nesting),
    ("include", _include), ("unicode", _unicode), ("doubling", _doubling), ("recursive", _recursive),
    ("wide", _wide), ("declarations", _declarations), ("header", _header), ("splice", _splice),
]


# --- running a case ----------------------------------------------------------------------------


class CaseTimeout(KeyboardInterrupt):
    """Raised by a watchdog alarm; a KeyboardInterrupt so that no ``except Exception`` eats it."""


def prepare(folder) -> None:
    """Write the secret file that sits one folder above every program run from a file."""
    (folder / "secret.inc").write_text(f"{SECRET} q;\n")


def run_case(m: Mutant, folder) -> dict:
    """Import mutant ``m`` with :func:`circuits.from_qasm`; what happened, and how long it took.

    ``folder`` must have been through :func:`prepare`. Returns a dict with ``outcome`` ("ok",
    or the exception's type name), ``allowed`` (ok, CircuitError, FileNotFoundError or
    ImportError), ``leak`` (the message quotes the secret file), ``message`` and ``seconds``.
    """
    import time  # noqa: PLC0415

    from circuits import CircuitError, from_qasm  # noqa: PLC0415

    source = m.text
    if m.uses_files:
        case = folder / f"case{m.index}"
        case.mkdir(exist_ok=True)
        for name, content in m.files.items():
            (case / name).write_text(content)
        source = case / "prog.qasm"
        source.write_bytes(m.text.encode("utf-8", "surrogatepass"))
    t0 = time.perf_counter()
    message, outcome = "", "ok"
    try:
        from_qasm(source)
    except CaseTimeout:
        raise
    except BaseException as exc:  # noqa: BLE001 - every escape is what the fuzz looks for
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        outcome = type(exc).__name__
        message = str(exc)[:300]
        allowed = isinstance(exc, (CircuitError, FileNotFoundError, ImportError))
    else:
        allowed = True
    return {"index": m.index, "version": m.version, "mutations": m.mutations, "outcome": outcome,
            "allowed": allowed, "leak": SECRET in message, "message": message,
            "seconds": time.perf_counter() - t0}

"""Symbolic execution of a SIMT kernel's structured IR for one generic thread.

Takes: a specialized `ir.Kernel` (SIMT track). Gives: `execute(kernel) -> Trace`: every
global-memory access (array, kind, index polynomials, path condition, loc, whether inside
`vg.unsafe()`) of one symbolic thread, plus the `Space` of atoms they are written in.

The model (sound over-approximation of what a thread can do):
- Integer values are `Poly`s: sums of integer multiples of products of *atoms*. Atoms are
  thread ids (`tid0@`, `bid0@`: the `@` marks a per-thread atom, renamed `@1`/`@2` for the
  two threads of a race query), launch sizes and scalar parameters shared by all threads
  (`gdim0`, `bdim0`, `shape:out:0`, `param:n`), and per-thread unknowns. Every atom carries an
  interval; some carry a definition (if-then-else, floor div/mod, loop variable) that the
  solver adds as a constraint.
- Straight-line locals are substituted. Loads from memory, float->int casts and bit
  operations the model does not follow are fresh unknowns in their dtype's range. A
  narrow (<= 32-bit) integer result whose interval may leave its dtype's range is also an
  unknown (it may have wrapped); 64-bit arithmetic is modelled without wrap-around, as in
  GPUVerify's and Faial's default integer logic.
- Loops are one arbitrary iteration: variables the body assigns are havocked (fresh
  unknowns) on entry and after the loop; a `for` variable is `start + k*step` with a fresh
  counter k >= 0 under the loop condition. `break`/`continue`/`exit` end the path;
  `exit` contributes its path and values where its region ends.
- Launch shape: `tid(a) in [0, block_dim(a))`, `bid(a) in [0, grid_dim(a))`; block_dim is the
  constant the kernel was specialized on, else a symbol in [1, 1024]. Axes 1 and 2 whose
  `block_id` the kernel never reads are assumed to have one block (`unit_grid_axes`; the same
  for `thread_id` and an unspecialized block: `unit_block_axes`), and along each axis
  grid_dim*block_dim < 2**31: the launch must guarantee both (they are in the facts).
Booleans are formulas: tuples ("true",), ("false",), ("cmp", op, poly) meaning `poly op 0`
with op in lt/le/eq/ne, ("and", ...), ("or", ...), ("not", f), ("bool", atom). Floats are
not modelled (None).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import types as T
from ..errors import Loc
from ..ir import nodes as N

INF = math.inf
MAX_BLOCK = 1024
MAX_AXIS_THREADS = 2**31 - 1  # launch guarantee: grid_dim(a) * block_dim(a) <= this
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_ELEMENTS = 2**62
AXES = "xyz"


# ----------------------------------------------------------------------------- polynomials


class Poly:
    """An integer polynomial: {monomial (sorted tuple of atom names): coefficient}."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        self.terms = terms  # no zero coefficients

    @classmethod
    def const(cls, value: int) -> "Poly":
        return cls({(): value} if value else {})

    @classmethod
    def atom(cls, name: str) -> "Poly":
        return cls({(name,): 1})

    def __add__(self, other: "Poly") -> "Poly":
        terms = dict(self.terms)
        for mono, coef in other.terms.items():
            total = terms.get(mono, 0) + coef
            if total:
                terms[mono] = total
            else:
                terms.pop(mono, None)
        return Poly(terms)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        result = Poly({})
        for m1, c1 in self.terms.items():
            result = result + Poly({tuple(sorted(m1 + m2)): c1 * c2 for m2, c2 in other.terms.items()})
        return result

    @property
    def value(self):
        """The constant this polynomial is, or None."""
        if any(self.terms.keys() - {()}):
            return None
        return self.terms.get((), 0)

    def atoms(self) -> set:
        return {a for mono in self.terms for a in mono}

    def rename(self, suffix: str) -> "Poly":
        return Poly({tuple(sorted(per_thread(a, suffix) for a in m)): c for m, c in self.terms.items()})

    def __eq__(self, other) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    def __repr__(self) -> str:
        parts = [("*".join([str(c)] * (c != 1 or not m) + list(m))) for m, c in sorted(self.terms.items())]
        return " + ".join(parts) or "0"


def per_thread(name: str, suffix: str) -> str:
    """The atom `name` of thread `suffix` ("1", "2"); shared atoms are unchanged."""
    return name + suffix if name.endswith("@") else name


# ----------------------------------------------------------------------------- formulas

TRUE, FALSE = ("true",), ("false",)
_NEGATED = {"lt": ("le", -1), "le": ("lt", -1), "gt": ("lt", -1), "ge": ("le", -1)}


def compare(op: str, lhs: Poly, rhs: Poly) -> tuple:
    """`lhs op rhs` as ("cmp", op, poly) with op in lt/le/eq/ne (gt/ge flipped)."""
    poly = lhs - rhs
    if op in ("gt", "ge"):
        op, poly = ("lt" if op == "gt" else "le"), -poly
    value = poly.value
    if value is not None:
        holds = {"lt": value < 0, "le": value <= 0, "eq": value == 0, "ne": value != 0}[op]
        return TRUE if holds else FALSE
    return ("cmp", op, poly)


def conj(*parts) -> tuple:
    items = []
    for p in parts:
        if p == FALSE:
            return FALSE
        if p != TRUE:
            items.extend(p[1:] if p[0] == "and" else (p,))
    return TRUE if not items else items[0] if len(items) == 1 else ("and", *items)


def disj(*parts) -> tuple:
    items = []
    for p in parts:
        if p == TRUE:
            return TRUE
        if p != FALSE:
            items.extend(p[1:] if p[0] == "or" else (p,))
    return FALSE if not items else items[0] if len(items) == 1 else ("or", *items)


def neg(f: tuple) -> tuple:
    if f in (TRUE, FALSE):
        return FALSE if f == TRUE else TRUE
    return f[1] if f[0] == "not" else ("not", f)


def formula_atoms(f: tuple, into: set) -> set:
    tag = f[0]
    if tag == "cmp":
        into |= f[2].atoms()
    elif tag == "bool":
        into.add(f[1])
    elif tag in ("and", "or", "not"):
        for sub in f[1:]:
            formula_atoms(sub, into)
    return into


def rename_formula(f: tuple, suffix: str) -> tuple:
    tag = f[0]
    if tag == "cmp":
        return ("cmp", f[1], f[2].rename(suffix))
    if tag == "bool":
        return ("bool", per_thread(f[1], suffix))
    if tag in ("and", "or", "not"):
        return (tag, *(rename_formula(sub, suffix) for sub in f[1:]))
    return f


# ----------------------------------------------------------------------------- atoms


@dataclass
class Atom:
    name: str
    kind: str  # thread size param shape unknown counter ite floordiv mod loopvar bool
    lo: float = -INF
    hi: float = INF
    definition: tuple = ()  # ite: (cond, a, b); floordiv/mod: (x, y); loopvar: (start, k, step)
    label: str = ""  # what a user calls it ("out.shape[0]", "idx[...]")


def _mul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def _imul(x: tuple, y: tuple) -> tuple:
    products = [_mul(a, b) for a in x for b in y]
    return min(products), max(products)


@dataclass
class Space:
    """The atoms of one analysis, and the launch-domain constraints between them."""

    block: tuple | None  # the specialized block shape, or None
    unit_grid_axes: tuple
    unit_block_axes: tuple
    atoms: dict = field(default_factory=dict)
    domain: list = field(default_factory=list)  # per-thread formulas (with @ atoms)
    uniform_domain: list = field(default_factory=list)
    counter: int = 0

    def add(self, atom: Atom) -> Poly:
        self.atoms.setdefault(atom.name, atom)
        return Poly.atom(atom.name)

    def fresh(self, kind: str, lo=-INF, hi=INF, definition=(), label="") -> Poly:
        self.counter += 1
        return self.add(Atom(f"{kind}{self.counter}@", kind, lo, hi, definition, label))

    def fresh_bool(self, label="") -> tuple:
        self.counter += 1
        name = f"b{self.counter}@"
        self.atoms[name] = Atom(name, "bool", label=label)
        return ("bool", name)

    def interval(self, p: Poly) -> tuple:
        lo = hi = 0
        for mono, coef in p.terms.items():
            m = (coef, coef)
            for name in _merge_axis_products(mono):
                m = _imul(m, self.bounds(name))
            lo, hi = lo + m[0], hi + m[1]
        return lo, hi

    def bounds(self, name) -> tuple:
        if isinstance(name, tuple):  # gdim(a) * bdim(a): at most MAX_AXIS_THREADS
            return 1, MAX_AXIS_THREADS
        atom = self.atoms[name]
        return atom.lo, atom.hi

    def shape(self, array: str, axis: int) -> Poly:
        return self.add(Atom(f"shape:{array}:{axis}", "shape", 0, MAX_ELEMENTS,
                             label=f"{array}.shape[{axis}]"))

    # ------------------------------------------------------------ launch registers

    def register(self, kind: str, axis: int) -> Poly:
        block = None if self.block is None else self.block[axis]
        if kind == "block_dim":
            if block is not None or axis in self.unit_block_axes:
                return Poly.const(block or 1)
            return self.add(Atom(f"bdim{axis}", "size", 1, MAX_BLOCK, label=f"block_dim({axis})"))
        if kind == "grid_dim":
            if axis in self.unit_grid_axes:
                return Poly.const(1)
            top = MAX_GRID[axis] if block is None else min(MAX_GRID[axis], MAX_AXIS_THREADS // block)
            name = f"gdim{axis}"
            if name not in self.atoms:
                self.add(Atom(name, "size", 1, top, label=f"grid_dim({axis})"))
                bdim = self.register("block_dim", axis)
                self.uniform_domain.append(compare("le", Poly.atom(name) * bdim, Poly.const(MAX_AXIS_THREADS)))
            return Poly.atom(name)
        if kind == "thread_id":
            extent = self.register("block_dim", axis)
            if extent.value == 1:
                return Poly.const(0)
            name = f"tid{axis}@"
            if name not in self.atoms:
                self.add(Atom(name, "thread", 0, (extent.value or MAX_BLOCK) - 1, label=f"thread_id({axis})"))
                self.domain.append(compare("lt", Poly.atom(name), extent))
            return Poly.atom(name)
        # block_id
        extent = self.register("grid_dim", axis)
        if extent.value == 1:
            return Poly.const(0)
        name = f"bid{axis}@"
        if name not in self.atoms:
            self.add(Atom(name, "thread", 0, self.atoms[f"gdim{axis}"].hi - 1, label=f"block_id({axis})"))
            self.domain.append(compare("lt", Poly.atom(name), extent))
        return Poly.atom(name)

    def identity(self) -> list:
        """The per-thread id atoms that tell two threads apart (tid before bid, by axis)."""
        for axis in range(3):
            for kind in ("thread_id", "block_id"):
                self.register(kind, axis)
        return [n for kind in ("tid", "bid") for n in (f"{kind}{a}@" for a in range(3)) if n in self.atoms]


def _merge_axis_products(mono: tuple) -> list:
    """Factors of a monomial, with each gdim(a)*bdim(a) pair as one bounded factor."""
    factors = list(mono)
    for axis in range(3):
        g, b = f"gdim{axis}", f"bdim{axis}"
        while g in factors and b in factors:
            factors.remove(g)
            factors.remove(b)
            factors.append((g, b))
    return factors


def dtype_range(dtype: T.DType) -> tuple:
    """The values of an integer dtype; 64-bit types are modelled without wrap-around."""
    if dtype.bits == 64:
        return (0 if not dtype.is_signed else -INF), INF
    if dtype.is_signed:
        return -(2 ** (dtype.bits - 1)), 2 ** (dtype.bits - 1) - 1
    return 0, 2**dtype.bits - 1


# ----------------------------------------------------------------------------- accesses


@dataclass
class Access:
    array: str
    kind: str  # "read" | "write" | "atomic"
    indices: tuple  # of Poly, per-thread atoms marked with @
    pc: tuple  # path condition (formula)
    loc: Loc
    unsafe: bool


@dataclass
class Trace:
    space: Space
    accesses: list


# ----------------------------------------------------------------------------- executor


def execute(kernel: N.Kernel) -> Trace:
    used = {(n.kind, n.axis) for n in _walk(kernel.body) if isinstance(n, N.Special)}
    unit_grid = kernel.unit_grid_axes if kernel.unit_grid_axes is not None else \
        tuple(a for a in (1, 2) if ("block_id", a) not in used)
    unit_block = () if kernel.block is not None else \
        tuple(a for a in (1, 2) if ("thread_id", a) not in used)
    space = Space(kernel.block, unit_grid, unit_block)
    run = _Thread(kernel, space)
    run.block(kernel.body)
    return Trace(space, run.accesses)


def _walk(stmts):
    from ..frontend import walk

    return walk(stmts)


class _Thread:
    def __init__(self, kernel: N.Kernel, space: Space):
        self.kernel, self.space = kernel, space
        self.params = {p.name: p for p in kernel.params}
        self.env: dict = {}
        self.pc = TRUE
        self.exits: dict = {}
        self.unsafe = 0
        self.accesses: list = []

    # ---------------------------------------------------------------- values

    def unknown(self, dtype: T.DType, label: str = ""):
        if dtype.is_bool:
            return self.space.fresh_bool(label)
        if dtype.is_int:
            lo, hi = dtype_range(dtype)
            return self.space.fresh("unknown", lo, hi, label=label)
        return None

    def fit(self, p: Poly, dtype: T.DType) -> Poly:
        """`p` if its value surely fits `dtype`, else an unknown (it may have wrapped)."""
        lo, hi = self.space.interval(p)
        rlo, rhi = dtype_range(dtype)
        return p if rlo <= lo and hi <= rhi else self.unknown(dtype, "a wrapped integer")

    def ite(self, cond: tuple, a, b, dtype: T.DType):
        if cond == TRUE or a == b:
            return a
        if cond == FALSE:
            return b
        if dtype.is_bool:
            return disj(conj(cond, a), conj(neg(cond), b))
        if a is None or b is None or not dtype.is_int:
            return None
        (alo, ahi), (blo, bhi) = self.space.interval(a), self.space.interval(b)
        return self.space.fresh("ite", min(alo, blo), max(ahi, bhi), (cond, a, b))

    def as_bool(self, value, dtype: T.DType) -> tuple:
        return value if dtype.is_bool else compare("ne", value, Poly.const(0))

    # ---------------------------------------------------------------- expressions

    def eval(self, e: N.Expr):
        return _EXPR[type(e)](self, e)

    def e_const(self, e: N.Const):
        if e.dtype.is_bool:
            return TRUE if e.value else FALSE
        return Poly.const(int(e.value)) if e.dtype.is_int else None

    def e_var(self, e: N.Var):
        if e.name in self.env:
            return self.env[e.name]
        param = self.params.get(e.name)
        if param is None:  # read before any assignment on this path
            return self.unknown(e.dtype, e.name)
        name = f"param:{e.name}"
        if e.dtype.is_bool:
            self.space.atoms.setdefault(name, Atom(name, "bool", label=e.name))
            return ("bool", name)
        if not e.dtype.is_int:
            return None
        lo, hi = dtype_range(e.dtype)
        return self.space.add(Atom(name, "param", lo, hi, label=e.name))

    def e_special(self, e: N.Special):
        return self.space.register(e.kind, e.axis)

    def e_shape(self, e: N.Shape):
        return self.space.shape(e.array.name, e.axis)

    def e_unary(self, e: N.Unary):
        v = self.eval(e.operand)
        if e.op == "not":
            return neg(v)
        if v is None or not e.dtype.is_int:
            return None
        return self.fit(-v if e.op == "neg" else -v - Poly.const(1), e.dtype)

    def e_binary(self, e: N.Binary):
        a, b = self.eval(e.lhs), self.eval(e.rhs)
        if e.dtype.is_bool:  # and/or/xor on bools
            table = {"and": lambda: conj(a, b), "or": lambda: disj(a, b),
                     "xor": lambda: disj(conj(a, neg(b)), conj(neg(a), b))}
            return table[e.op]() if e.op in table else self.unknown(e.dtype)
        if not e.dtype.is_int or a is None or b is None:
            return None
        handler = _INT_OPS.get(e.op)
        return handler(self, a, b, e.dtype) if handler else self.unknown(e.dtype, f"`{e.op}`")

    def e_compare(self, e: N.Compare):
        a, b = self.eval(e.lhs), self.eval(e.rhs)
        dtype = e.lhs.dtype
        if dtype.is_int:
            return compare(e.op, a, b)
        if dtype.is_bool and e.op in ("eq", "ne"):
            same = disj(conj(a, b), conj(neg(a), neg(b)))
            return same if e.op == "eq" else neg(same)
        return self.space.fresh_bool("a float comparison")

    def e_logical(self, e: N.Logical):
        a = self.eval(e.lhs)
        saved = self.pc
        self.pc = conj(saved, a if e.op == "and" else neg(a))
        b = self.eval(e.rhs)
        self.pc = saved
        return conj(a, b) if e.op == "and" else disj(a, b)

    def e_select(self, e: N.Select):
        c = self.eval(e.cond)
        saved = self.pc
        self.pc = conj(saved, c)
        a = self.eval(e.a)
        self.pc = conj(saved, neg(c))
        b = self.eval(e.b)
        self.pc = saved
        return self.ite(c, a, b, e.dtype)

    def e_cast(self, e: N.Cast):
        v, src = self.eval(e.value), e.value.dtype
        if e.dtype.is_bool:
            return self.as_bool(v, src) if not src.is_float else self.unknown(e.dtype)
        if not e.dtype.is_int:
            return None
        if src.is_bool:
            return self.ite(v, Poly.const(1), Poly.const(0), e.dtype)
        if src.is_int:
            return self.fit(v, e.dtype)
        return self.unknown(e.dtype, "a float converted to an integer")

    def e_load(self, e: N.Load):
        self.access(e.array, "read", e.indices, e.loc)
        return self.unknown(e.dtype, f"{e.array.name}[...]")

    def e_atomic(self, e: N.Atomic):
        self.access(e.array, "atomic", e.indices, e.loc)
        for operand in (e.value, e.compare):
            if operand is not None:
                self.eval(operand)
        return self.unknown(e.dtype, f"atomic_{e.op}({e.array.name}[...])")

    def e_math(self, e: N.MathCall):
        args = [self.eval(a) for a in e.args]
        if e.dtype.is_int and e.func in ("abs", "min", "max") and None not in args:
            a = args[0]
            b = -a if e.func == "abs" else args[1]
            first = compare("ge" if e.func in ("abs", "max") else "le", a, b)
            return self.ite(first, a, b, e.dtype)
        return self.unknown(e.dtype, e.func) if e.dtype.is_bool else None

    def access(self, array: N.ArrayRef, kind: str, indices, loc: Loc) -> None:
        polys = tuple(self.eval(i) for i in indices)
        if array.type.space == "global" and self.pc != FALSE:
            self.accesses.append(Access(array.name, kind, polys, self.pc, loc, self.unsafe > 0))

    # ---------------------------------------------------------------- statements

    def block(self, stmts) -> None:
        for s in stmts:
            if self.pc == FALSE:
                return
            _STMT[type(s)](self, s)

    def s_assign(self, s: N.Assign):
        self.env[s.name] = self.eval(s.value)

    def s_store(self, s: N.Store):
        self.eval(s.value)
        self.access(s.array, "write", s.indices, s.loc)

    def s_if(self, s: N.If):
        c = self.eval(s.cond)
        start_pc, start_env = self.pc, self.env
        self.pc, self.env = conj(start_pc, c), dict(start_env)
        self.block(s.then)
        then_pc, then_env = self.pc, self.env
        self.pc, self.env = conj(start_pc, neg(c)), dict(start_env)
        self.block(s.orelse)
        self.join([(then_pc, then_env)])

    def join(self, others: list) -> None:
        """Continue from this path or any of `others` (pc, env): values by which was taken."""
        live = [(pc, env) for pc, env in others if pc != FALSE]
        if self.pc == FALSE and live:
            self.pc, self.env = live.pop()
        for pc, env in live:
            merged = {}
            for name in env.keys() | self.env.keys():
                a, b = env.get(name), self.env.get(name)
                if name not in self.env or name not in env:
                    merged[name] = a if name in env else b
                else:
                    merged[name] = self.ite(pc, a, b, self.kernel.locals.get(name, T.int64))
            self.pc, self.env = disj(pc, self.pc), merged

    def havoc(self, body) -> None:
        for node in _walk(body):
            name = node.name if isinstance(node, N.Assign) else node.var if isinstance(node, N.For) else None
            if name is not None:
                self.env[name] = self.unknown(self.kernel.locals[name], name)

    def loop(self, body, enter: tuple) -> None:
        saved = self.pc
        self.pc = conj(saved, enter)
        self.block(body)
        self.pc = saved
        self.havoc(body)

    def s_for(self, s: N.For):
        start, stop, step = self.eval(s.start), self.eval(s.stop), self.eval(s.step)
        self.havoc(s.body)
        dtype = self.kernel.locals[s.var]
        k = self.space.fresh("counter", 0, INF, label=f"an iteration of the loop over {s.var}")
        (slo, shi), (tlo, thi), (plo, phi) = map(self.space.interval, (start, stop, step))
        rlo, rhi = dtype_range(dtype)
        lo, hi = (slo, thi - 1) if plo >= 1 else (tlo + 1, shi) if phi <= -1 else (rlo, rhi)
        var = self.space.fresh("loopvar", max(lo, rlo), min(hi, rhi), (start, k, step), s.var)
        up, down = compare("lt", var, stop), compare("gt", var, stop)
        enter = up if plo >= 1 else down if phi <= -1 else disj(
            conj(compare("gt", step, Poly.const(0)), up), conj(compare("lt", step, Poly.const(0)), down))
        self.env[s.var] = var
        self.loop(s.body, enter)
        self.env[s.var] = self.unknown(dtype, s.var)

    def s_while(self, s: N.While):
        self.havoc(s.body)
        self.loop(s.body, self.eval(s.cond))

    def s_stop(self, s):  # break / continue: this iteration's path ends
        self.pc = FALSE

    def s_region(self, s: N.Region):
        self.exits[s.label] = []
        self.block(s.body)
        self.join(self.exits.pop(s.label))

    def s_exit(self, s: N.Exit):
        self.exits[s.label].append((self.pc, dict(self.env)))
        self.pc = FALSE

    def s_unsafe(self, s: N.Unsafe):
        self.unsafe += 1
        self.block(s.body)
        self.unsafe -= 1

    def s_nothing(self, s):
        pass


def _add(t, a, b, dtype):
    return t.fit(a + b, dtype)


def _sub(t, a, b, dtype):
    return t.fit(a - b, dtype)


def _mul_op(t, a, b, dtype):
    return t.fit(a * b, dtype)


def _divmod(op: str):
    def handler(t, a, b, dtype):
        lo, hi = t.space.interval(a)
        d = b.value
        if d is not None and d > 0:
            bounds = (math.floor(lo / d) if lo != -INF else -INF, math.floor(hi / d) if hi != INF else INF) \
                if op == "floordiv" else (0, d - 1)
        else:
            blo, bhi = t.space.interval(b)
            bounds = dtype_range(dtype) if op == "floordiv" or blo < 1 else (0, bhi - 1)
        return t.space.fresh(op, bounds[0], bounds[1], (a, b))
    return handler


def _shift(direction: str):
    def handler(t, a, b, dtype):
        amount = b.value
        if amount is None or not 0 <= amount < dtype.bits:
            return t.unknown(dtype, "a shift")
        if direction == "lshift":
            return t.fit(a * Poly.const(2**amount), dtype)
        return _divmod("floordiv")(t, a, Poly.const(2**amount), dtype)
    return handler


def _bitand(t, a, b, dtype):
    mask = b.value if b.value is not None else a.value
    other = a if b.value is not None else b
    if mask is not None and mask >= 0 and (mask + 1) & mask == 0 and t.space.interval(other)[0] >= 0:
        return _divmod("mod")(t, other, Poly.const(mask + 1), dtype)
    return t.unknown(dtype, "a bitwise and")


_INT_OPS = {"add": _add, "sub": _sub, "mul": _mul_op, "floordiv": _divmod("floordiv"),
            "mod": _divmod("mod"), "lshift": _shift("lshift"), "rshift": _shift("rshift"),
            "and": _bitand}

_EXPR = {N.Const: _Thread.e_const, N.Var: _Thread.e_var, N.Special: _Thread.e_special,
         N.Shape: _Thread.e_shape, N.Unary: _Thread.e_unary, N.Binary: _Thread.e_binary,
         N.Compare: _Thread.e_compare, N.Logical: _Thread.e_logical, N.Select: _Thread.e_select,
         N.Cast: _Thread.e_cast, N.Load: _Thread.e_load, N.Atomic: _Thread.e_atomic,
         N.MathCall: _Thread.e_math}

_STMT = {N.Assign: _Thread.s_assign, N.Store: _Thread.s_store, N.If: _Thread.s_if,
         N.For: _Thread.s_for, N.While: _Thread.s_while, N.Break: _Thread.s_stop,
         N.Continue: _Thread.s_stop, N.Region: _Thread.s_region, N.Exit: _Thread.s_exit,
         N.Unsafe: _Thread.s_unsafe, N.LocalAlloc: _Thread.s_nothing}

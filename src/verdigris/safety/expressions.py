"""How the symbolic thread of `symbolic` evaluates expressions: constants, variables,
thread ids, arithmetic (through `intops`), comparisons, selections, casts, loads, atomics,
math calls and warp operations, each to a `Poly`, a formula or an opaque value.

Takes (as `symbolic._Thread`'s base class): expression nodes of `ir.nodes`, with the
thread's environment, path condition, space of atoms and uniformity scopes. Gives
`Expressions.eval(e)` and the pieces the statements use (`indices`, `shuffle_source`,
`one_lane`). Guarantees: the model `symbolic` states (a sound over-approximation: what the
model does not follow is a fresh unknown within its dtype's range, with the scope of its
inputs).
"""
from __future__ import annotations

from .. import types as T
from ..ir import nodes as N
from ..simt import warp_size
from .algebra import FALSE, TRUE, Atom, Poly, compare, conj, disj, dtype_range, neg
from .intops import INT_OPS
from .uniform import at_least, cap, join, meet

def _within_warp(interval: tuple) -> bool:
    lo, hi = interval
    return 0 <= lo and hi < warp_size


# op -> (thread, its position in its segment, the argument) -> the position it reads
_SHUFFLE_SOURCES = {
    "shfl_down": lambda t, position, d: position + d,
    "shfl_up": lambda t, position, d: position - d,
    "shfl_xor": lambda t, position, m: INT_OPS["xor"](t, position, m, T.int32),
    "shfl_idx": lambda t, position, source: source,
}

# op -> (thread, node, the scope of its value, capped at "block", its argument) -> the scope
# of its result: what every lane gets alike is warp-uniform, what lanes read from one
# another as uniform as the values they read (a vote of a uniform predicate as uniform as it)
_RESULT_SCOPES = {
    **dict.fromkeys(("ballot", "match_all", *N.REDUCTIONS), lambda t, e, scope, arg: "warp"),
    **dict.fromkeys(("any", "all"), lambda t, e, scope, arg: join(scope, "warp")),
    "activemask": lambda t, e, scope, arg: "thread",  # lanes may be missing, some not others
    "match_any": lambda t, e, scope, arg: "warp" if at_least(scope, "warp") else "thread",
    **dict.fromkeys(N.SHUFFLES, lambda t, e, scope, arg: "warp" if t.one_lane(e, arg) else scope),
}


_RING_OPS = ("add", "sub", "mul", "lshift")  # results modulo 2**bits follow from operands modulo 2**bits


class Expressions:
    """Mixed into `symbolic._Thread`, whose state and recording methods it uses."""

    def eval(self, e: N.Expr):
        return _EXPR[type(e)](self, e)

    def e_const(self, e: N.Const):
        if e.dtype.is_bool:
            return TRUE if e.value else FALSE
        return Poly.const(int(e.value)) if e.dtype.is_int else self.floating()

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
            return self.floating()
        lo, hi = dtype_range(e.dtype)
        if param.narrow:  # launched only with values in int32's range (`Param.narrow`)
            lo, hi = max(lo, N.NARROW_RANGE[0]), min(hi, N.NARROW_RANGE[1])
        return self.space.add(Atom(name, "param", lo, hi, label=e.name))

    def e_special(self, e: N.Special):
        return self.space.register(e.kind, e.axis)

    def e_shape(self, e: N.Shape):
        return self.space.shape(e.array.name, e.axis)

    def e_unary(self, e: N.Unary):
        v = self.eval(e.operand)
        if e.op == "not":
            return neg(v)
        if not isinstance(v, Poly) or not e.dtype.is_int:
            return self.floating(v)
        return self.fit(-v if e.op == "neg" else -v - Poly.const(1), e.dtype)

    def e_binary(self, e: N.Binary):
        a, b = self.eval(e.lhs), self.eval(e.rhs)
        if e.dtype.is_bool:  # and/or/xor on bools
            table = {"and": lambda: conj(a, b), "or": lambda: disj(a, b),
                     "xor": lambda: disj(conj(a, neg(b)), conj(neg(a), b))}
            return table[e.op]() if e.op in table else self.scoped(e.dtype, "", a, b)
        if not e.dtype.is_int or not isinstance(a, Poly) or not isinstance(b, Poly):
            return self.floating(a, b)
        handler = INT_OPS.get(e.op)
        if e.op not in _RING_OPS:  # a quotient, a shift, a mask: of the values the hardware holds
            a, b = self.observe(a, e.lhs.dtype), self.observe(b, e.rhs.dtype)
        elif e.op == "lshift":  # a multiplication by 2**b
            b = self.observe(b, e.rhs.dtype)
        return handler(self, a, b, e.dtype) if handler else self.scoped(e.dtype, f"`{e.op}`", a, b)

    def e_compare(self, e: N.Compare):
        a, b = self.eval(e.lhs), self.eval(e.rhs)
        dtype = e.lhs.dtype
        if dtype.is_int:
            return compare(e.op, self.observe(a, dtype), self.observe(b, e.rhs.dtype))
        if dtype.is_bool and e.op in ("eq", "ne"):
            same = disj(conj(a, b), conj(neg(a), neg(b)))
            return same if e.op == "eq" else neg(same)
        return self.scoped(T.bool_, "a float comparison", a, b)

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
            return self.as_bool(v, src) if not src.is_float else self.scoped(e.dtype, "", v)
        if not e.dtype.is_int:
            return self.floating(v)
        if src.is_bool:
            return self.ite(v, Poly.const(1), Poly.const(0), e.dtype)
        if src.is_int:
            return self.fit(v, e.dtype)
        return self.scoped(e.dtype, "a float converted to an integer", v)

    def e_load(self, e: N.Load):
        indices = self.access(e.array, "read", e.indices, e.loc) or ()  # (subclasses give None)
        if e.array.type.ticket_of is not None:
            return self.ticket(e.dtype, e.array.type.ticket_of)
        if e.array.type.values is not None and e.dtype.is_int and isinstance(indices[0], Poly):
            return self.table(e.array.type.values, indices[0], e.array.name)
        # one element, read by the whole block, is one value (a write between two threads'
        # reads races with one of them, and is reported): unless each thread has its own
        # (local arrays), or a write may change it with no race reported (`racy_arrays`; a
        # read inside `vg.unsafe()`, exempt from the race proofs, of an array the kernel writes)
        name = e.array.name
        mine = e.array.type.space == "local" or name in self.racy_arrays or \
            (self.unsafe > 0 and name in self.written_arrays)
        # (a global element is one value for the whole grid, in one grid barrier interval, by
        # the same argument; each block has its own shared array)
        scope = "thread" if mine else "block" if e.array.type.space == "shared" else ""
        return self.scoped(e.dtype, f"{name}[...]", *indices, scope=scope)

    def table(self, values: tuple, index: Poly, name: str) -> Poly:
        """`values[index]` of a tuple constant: a `table` atom the solver knows entry by
        entry, as uniform as its index."""
        value = self.space.fresh("table", min(values), max(values), (index, *map(Poly.const, values)),
                                 label=f"{name.split('.')[0]}[...]")
        if self.cooperative:
            self.space.scopes[next(iter(value.atoms()))] = (cap(meet("launch", self.scopes.of(index))),
                                                            self.counters())
        return value

    def ticket(self, dtype: T.DType, counter: str) -> Poly:
        """A `block_ticket` of `counter`: the same for the whole block (in one iteration of
        the loops around it), and different from any ticket of another block (`order`)."""
        lo, hi = dtype_range(dtype)
        value = self.space.fresh("ticket", lo, hi, label=f"block_ticket({counter})")
        name = next(iter(value.atoms()))
        self.space.tickets[name] = counter
        self.space.scopes[name] = ("block", self.counters())
        return value

    def e_atomic(self, e: N.Atomic):
        indices = self.access(e.array, "atomic", e.indices, e.loc)
        for operand in (e.value, e.compare):
            if operand is not None:
                self.eval(operand)
        label = f"atomic_{e.op}({e.array.name}[...])"
        if e.array.name not in self.ticket_counters:
            return self.unknown(e.dtype, label)
        lo, hi = dtype_range(e.dtype)  # a ticket: distinct from other threads' (`tickets`)
        value = self.space.fresh("claim", lo, hi, label=label)
        self.space.claims[next(iter(value.atoms()))] = (e.array.name, indices, e.array.type.space,
                                                        self.ticket_counters[e.array.name])
        return value

    def e_math(self, e: N.MathCall):
        args = [self.eval(a) for a in e.args]
        if e.func in N.BIT_FUNCS:  # a count is at most the operand's bits
            bits = e.args[0].dtype.bits
            return self.scoped(e.dtype, e.func, *args, bounds=None if e.func == "brev" else (0, bits))
        if e.dtype.is_int and e.func in ("abs", "min", "max") and all(isinstance(a, Poly) for a in args):
            args = [self.observe(v, arg.dtype) for v, arg in zip(args, e.args)]
            a = args[0]
            b = -a if e.func == "abs" else args[1]
            first = compare("ge" if e.func in ("abs", "max") else "le", a, b)
            return self.fit(self.ite(first, a, b, e.dtype), e.dtype)  # abs(INT_MIN) wraps to INT_MIN
        return self.scoped(e.dtype, e.func, *args) if e.dtype.is_bool else self.floating(*args)

    def e_warp(self, e: N.WarpOp):
        value = None if e.value is None else self.eval(e.value)
        arg = None if e.lane is None else self.observe(self.eval(e.lane), e.lane.dtype)
        if e.collective:
            self.checkpoint(N.warp_call(e.op), "warp", e.loc, self.shuffle_source(e, arg))
        scope = _RESULT_SCOPES[e.op](self, e, meet(self.scopes.of(value), "block"), arg)
        return self.scoped(e.dtype, N.warp_call(e.op), scope=scope)

    def one_lane(self, e: N.WarpOp, lane) -> bool:
        """Whether every lane of the warp reads one lane's value: shfl_idx over the whole warp
        from a warp-uniform lane in 0..31 (outside it each lane keeps its own value)."""
        return e.op == "shfl_idx" and e.width == warp_size and at_least(self.scopes.of(lane), "warp") \
            and _within_warp(self.space.interval(lane))

    def indices(self, indices) -> tuple:
        """The values of an access's index expressions, as the hardware holds them."""
        return tuple(self.observe(self.eval(i), i.dtype) for i in indices)

    def shuffle_source(self, e: N.WarpOp, arg):
        """The lane a shuffle reads (one a partial warp may lack: a higher lane than the
        reader's own, `shfl_up` by a negative delta too); None for other warp operations,
        or an argument the checker cannot see."""
        if e.op not in _SHUFFLE_SOURCES or not isinstance(arg, Poly):
            return None
        lane = self.space.register("lane_id", 0)
        if e.width == warp_size:  # a source outside 0..31 is the reader's own lane
            return _SHUFFLE_SOURCES[e.op](self, lane, arg)
        width = Poly.const(e.width)
        position = INT_OPS["mod"](self, lane, width, T.int32)
        wanted = _SHUFFLE_SOURCES[e.op](self, position, arg)
        inside = conj(compare("ge", wanted, Poly.const(0)), compare("lt", wanted, width))
        return self.ite(inside, lane - position + wanted, lane, T.int32)


_EXPR = {N.Const: Expressions.e_const, N.Var: Expressions.e_var, N.Special: Expressions.e_special,
         N.Shape: Expressions.e_shape, N.Unary: Expressions.e_unary, N.Binary: Expressions.e_binary,
         N.Compare: Expressions.e_compare, N.Logical: Expressions.e_logical, N.Select: Expressions.e_select,
         N.Cast: Expressions.e_cast, N.Load: Expressions.e_load, N.Atomic: Expressions.e_atomic,
         N.MathCall: Expressions.e_math, N.WarpOp: Expressions.e_warp}

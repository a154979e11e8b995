"""Loops for the symbolic executor (`symbolic._Thread` runs them through `Loops`).

A loop is one arbitrary iteration: the variables its body assigns are havocked (fresh
unknowns, or closed forms in the iteration counter k where `invariants` finds one) at the
head of iteration k, under the loop condition; the iteration is run again until what it
assumed of its carried variables holds at the back edge. A `for` variable is `start +
k*step` (`progression`), and so is a 64-bit variable a `while` loop steps by a
loop-invariant amount. Where the condition is a constant at each k, or a `for` range is
constant, the loop runs a known number of times n (k < n in the body; constants after the
loop where nothing leaves early). A loop whose body passes a barrier gets a trip count
(`barriers`). `break` and `continue` end their path into the innermost loop's frame.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import nodes as N
from ..ir import tiles as X
from . import barriers, invariants
from .algebra import FALSE, INF, Poly, compare, conj, disj, dtype_range, relative
from .uniform import meet


_READS = (N.Load, X.TileLoad, X.Gather)  # the nodes that read memory


@dataclass
class _Frame:
    """A loop or a region around the statement being executed."""

    label: str  # a region's label, or "" for a loop
    counter: str = ""  # a loop's counter atom
    needs: str = ""  # "grid"/"block"/"warp": who must leave the loop together ("" : anyone may)
    exact: bool = True
    breaks: list = field(default_factory=list)  # of Path
    continues: list = field(default_factory=list)


def _walk(stmts):
    from ..frontend import walk

    return walk(stmts)


def _loop_info(body) -> tuple:
    """(epoch kinds the body's barriers change, who must leave the loop together ("block",
    "warp" or ""), whether it has no early exit, the variables it assigns)."""
    nodes = list(_walk(body))
    scopes = {n.scope for n in nodes if isinstance(n, N.Barrier)}
    widest = next((scope for scope in N.BARRIER_SCOPES if scope in scopes), None)
    kinds = frozenset(barriers.narrower(widest)) if widest else frozenset()
    needs = widest or ("warp" if any(isinstance(n, N.WarpOp) and n.collective for n in nodes) else "")
    assigned = tuple(n.name if isinstance(n, N.Assign) else n.var
                     for n in nodes if isinstance(n, (N.Assign, N.For)))
    return kinds, needs, not any(isinstance(n, (N.Break, N.Exit)) for n in nodes), assigned


def _inductions(body) -> dict:
    """Variable -> its step, for each variable of a while loop's body that the body assigns
    once, unconditionally and at its top level, as `v = v + step` (or `v - step`), with a
    step the body does not change; none when a `continue` could skip the assignment."""
    nodes = list(_walk(body))
    if any(isinstance(n, N.Continue) for n in nodes):
        return {}
    counts: dict = {}
    for n in nodes:
        if isinstance(n, (N.Assign, N.For)):
            name = n.name if isinstance(n, N.Assign) else n.var
            counts[name] = counts.get(name, 0) + 1
    steps = {}
    for stmt in body:
        v = stmt.value if isinstance(stmt, N.Assign) else None
        if not (isinstance(v, N.Binary) and v.op in ("add", "sub") and counts[stmt.name] == 1):
            continue
        for own, step in [(v.lhs, v.rhs)] + [(v.rhs, v.lhs)] * (v.op == "add"):
            if isinstance(own, N.Var) and own.name == stmt.name and not any(
                    isinstance(n, N.Var) and n.name in counts for n in _walk([step])):
                steps[stmt.name] = step if v.op == "add" else \
                    N.Unary(step.loc, "neg", step, step.dtype)
                break
    return steps


class Loops:
    """The loop statements of `symbolic._Thread`, which has the rest."""

    def havoc(self, names, assumed: dict, entry: dict = None, k: Poly = None,
              labels: dict | None = None) -> set:
        """Values for `names` (`assumed`: name -> `invariants.Assumed`) at iteration `k` of a
        loop entered with `entry` (a closed form where one is assumed), else fresh ones
        (named by `labels` where given); gives their atoms."""
        atoms = set()
        for name in names:
            a, dtype = assumed[name], self.kernel.locals[name]
            value = None if not a.form or k is None else invariants.closed_form(
                a.form, entry.get(name), k, a.lo, a.hi, self.space, name)
            if value is None:
                value = self.scoped(dtype, (labels or {}).get(name, name), scope=a.scope)
                if isinstance(value, Poly):
                    atom = self.space.atoms[next(iter(value.atoms()))]
                    atom.lo, atom.hi = max(atom.lo, a.lo), min(atom.hi, a.hi)
            if isinstance(value, Poly):
                atoms |= value.atoms()
            self.env[name] = value
        return atoms

    def mark(self) -> tuple:
        return len(self.accesses), len(self.checkpoints), {k: len(v) for k, v in self.exits.items()}

    def rollback(self, mark: tuple) -> None:
        del self.accesses[mark[0]:]
        del self.checkpoints[mark[1]:]
        for label, count in mark[2].items():
            del self.exits[label][count:]

    def loop(self, body, enter, label: str, carried: tuple = (), count: int | None = None,
             once: bool | None = None, labels: dict | None = None, span: tuple | None = None) -> None:
        """Run one arbitrary iteration of a loop (`enter(k)` sets up iteration k and gives
        its condition; `carried`: the variables it sets there, a `for` loop's; `count`: its
        trip count, where its range gives it; `once`: iteration 0 surely runs, as a `for`
        loop's range says, or None: as the condition says at entry, for a `while` loop,
        whose variables' intervals hold at the head of every iteration, not only in the
        body as a `for` loop's does) until what it assumes of the variables it carries
        holds at the back edge (`invariants`; cooperative kernels only), then continue
        after the loop. `labels`: how a refusal names a variable that comes out unknown.
        `span`: a `for` loop's (start, stop, constant step), which give its trip count
        where nothing leaves it early (`Space.ranged`)."""
        kinds, needs, exact, assigned = _loop_info(body)
        names = tuple(dict.fromkeys(carried + assigned))
        # what the variables it carries start from, as the hardware holds them (their
        # intervals and signs decide the invariants)
        self.env.update({n: self.observe(self.env[n], self.kernel.locals[n]) for n in names if n in self.env})
        outer = self.path()
        dtypes = {n: self.kernel.locals[n] for n in names}
        start = {n: invariants.entry(outer.env.get(n), n in outer.env, dtypes[n], self.scopes, self.space)
                 for n in names} if self.cooperative else {n: invariants.Assumed("thread") for n in names}
        assumed, dropped = start, set()
        while True:
            mark = self.mark()
            counter = next(iter(self.space.fresh("counter", 0, INF, label=label).atoms()))
            frame = _Frame("", counter, needs, exact)
            self.frames.append(frame)
            self.env = dict(outer.env)
            fresh = self.havoc(names, assumed, outer.env, Poly.atom(counter), labels)
            current = {n: self.env[n] for n in names}
            self.epochs = barriers.iteration(outer.epochs, kinds, counter)  # (the condition's too)
            cond = enter(Poly.atom(counter))
            heads = {n: self.env.get(n) for n in names}
            runs = count if count is not None else invariants.trip_count(cond, counter, self.space)
            surely = once if once is not None else invariants.entered(cond, heads, outer.env, self.space)
            settled = self.settled(heads, counter, runs, exact, carried)
            if runs is not None:
                cond = invariants.bound(cond, counter, runs, heads.values(), self.space)
            # and this iteration's own progressions (a while loop's `t < rows * cols`)
            invariants.refine(cond, fresh | self.progressions_of(counter), self.space)
            exit_cond = cond
            if kinds:
                trips = self.trip_count(runs, exact, label, surely)
                if exact and span is not None:
                    self.space.ranged(trips, *span)
                cond = conj(cond, compare("lt", Poly.atom(counter), trips))
            self.pc = base = conj(outer.pc, cond)
            self.block(body)
            self.frames.pop()
            self.join(frame.continues, base)
            back = self.path()
            if not self.cooperative:
                break
            # what an iteration hands the next, as the hardware holds it: `offset *= 2` in
            # int64 is no progression past 2**62 (it wraps to -2**63, then 0)
            again = {n: self.observe(back.env.get(n), dtypes[n]) for n in names}
            found = {}
            for n in names:
                form = invariants.progression(again[n], current[n], self.space)
                if assumed[n].form and form != assumed[n].form or n in dropped:
                    form = ()
                    dropped.add(n)  # it did not hold: never tried again (no oscillation)
                widened = invariants.widen(assumed[n], again[n], dtypes[n], start[n], self.scopes,
                                           self.space)
                found[n] = widened._replace(form=form if n in outer.env else ())
            if found == assumed:
                break
            self.rollback(mark)
            assumed = found
        if kinds:
            self.loop_ends[counter] = barriers.Loop(len(self.counters()), outer.epochs, back.epochs)
            leaves = [exit_cond] + [relative(b.pc, base) for b in frame.breaks]
            if trips.value is None and not any(isinstance(n, N.Exit) for n in _walk(body)) \
                    and all(self.scopes.of(c) == "launch" for c in leaves):
                # every thread leaves at the same iteration (of the loops around): the trip
                # count is the launch's, which a grid barrier's divergence proof needs
                name = next(iter(trips.atoms()))
                self.space.scopes[name] = ("launch", self.space.scopes[name][1])
        leaving = meet(self.scopes.of(cond), *(self.scopes.of(relative(b.pc, base)) for b in frame.breaks))
        self.pc, self.env = outer.pc, dict(outer.env)
        if kinds:
            self.epochs = barriers.after(outer.epochs, kinds, counter, trips, [b.epochs for b in frame.breaks],
                                         surely)
        self.havoc(names, {n: invariants.hull(assumed[n]._replace(scope=meet(assumed[n].scope, leaving)),
                                              [self.observe(b.env.get(n), dtypes[n]) for b in frame.breaks],
                                              self.scopes, self.space)
                           for n in names}, labels=labels)
        self.env.update(settled)

    def settled(self, heads: dict, counter: str, runs: int | None, exact: bool, carried: tuple) -> dict:
        """The variables' values after a loop that runs `runs` times and is left only where
        its condition fails: their values at the head of iteration `runs`, where these are
        constants (`offset` after `while d > 0: ...; offset *= 2; d >>= 1`). Not the
        variables `carried` (a `for` loop's keeps the value of its last iteration)."""
        if runs is None or not exact:
            return {}
        values = {n: invariants.value_at(v, {counter: runs}, self.space) for n, v in heads.items()
                  if n not in carried and isinstance(v, Poly)}
        return {n: Poly.const(v) for n, v in values.items() if v is not None}

    def trip_count(self, runs: int | None, exact: bool, label: str, once: bool) -> Poly:
        """The trip count of a loop that passes barriers: `runs` where the loop runs exactly
        that many times (it has no early exit), else a block-uniform atom (`Space.trip_count`)
        up to it, at least 1 if it surely runs `once`."""
        if runs is not None and exact:
            return Poly.const(runs)
        return self.space.trip_count(self.counters()[:-1], once, f"the trip count of {label}",
                                     INF if runs is None else runs)

    def s_for(self, s: N.For):
        start, stop, step = (self.observe(self.eval(e), e.dtype) for e in (s.start, s.stop, s.step))
        (slo, shi), (tlo, thi), (plo, phi) = map(self.space.interval, (start, stop, step))
        bounds = (slo, thi - 1) if plo >= 1 else (tlo + 1, shi) if phi <= -1 else None

        def enter(k: Poly) -> tuple:
            var = self.progression(s.var, start, step, k, bounds)
            self.env[s.var] = var
            up, down = compare("lt", var, stop), compare("gt", var, stop)
            cond = up if plo >= 1 else down if phi <= -1 else disj(
                conj(compare("gt", step, Poly.const(0)), up), conj(compare("lt", step, Poly.const(0)), down))
            self.origin(cond, s.loc)
            return cond

        steps = (start.value, stop.value, step.value)
        count = len(range(*steps)) if None not in steps and steps[2] != 0 else None
        once = shi < tlo if plo >= 1 else thi < slo if phi <= -1 else False
        span = (start, stop, step.value) if step.value else None
        self.loop(s.body, enter, f"an iteration of the loop over {s.var}", (s.var,), count, once, span=span)

    def s_while(self, s: N.While):
        # `while i < n: ...; i += step` steps i as a `for` over a range does: at the head of
        # iteration k, i is its value before the loop plus k * step. Only a 64-bit i: a
        # narrower one may wrap between iterations (uint32 i += 2**31 comes back to i), which
        # a progression cannot say; a 64-bit one is taken not to wrap (`progression`).
        stepped = {name: step for name, step in _inductions(s.body).items() if name in self.env}
        steps = {name: (self.env.get(name), self.observe(self.eval(step), step.dtype))
                 for name, step in stepped.items() if self.kernel.locals[name].bits == 64}
        labels = {name: f"{name} ({self.kernel.locals[name].name}, stepped by the loop: it may "
                        f"wrap; make it 64-bit, e.g. from simt.global_id)"
                  for name in stepped if name not in steps}

        def enter(k: Poly) -> tuple:
            for name, (start, step) in steps.items():
                if isinstance(start, Poly) and isinstance(step, Poly):
                    self.env[name] = self.progression(name, start, step, k)
            cond = self.eval(s.cond)
            self.origin(cond, s.cond.loc)
            return cond

        self.loop(s.body, enter, "an iteration of the while loop", labels=labels)
        # the last, failing check reads too, with what the loop leaves (the checks inside the
        # loop see only values that pass: `refine` and a known trip count narrow them)
        if any(isinstance(n, _READS) for n in _walk([s.cond])):
            self.eval(s.cond)

    # Whether a loop variable stepped past its dtype wraps around in the model (the bounds
    # prover's) or is taken to stay within it (the race checker's: see `progression`).
    inductions_wrap = False

    def progression(self, name: str, start: Poly, step: Poly, k: Poly,
                    bounds: tuple | None = None) -> Poly:
        """`start + k * step`, the loop variable `name` at the head of iteration k, within
        `bounds` (a `for` loop's from its stop) or those its start and step's sign give.
        Where that may leave its dtype: a `wrap` atom of it if `inductions_wrap`, else the
        progression is taken to stay within the dtype's range, an assumption the race
        checker makes for 64-bit `while` inductions only (a narrower one is no progression,
        `s_while`): stepping one past 2**63 - 1 by a grid's stride takes more than 2**32
        iterations, and the wrapped value, near -2**63, is outside every array."""
        dtype = self.kernel.locals[name]
        rlo, rhi = dtype_range(dtype)
        if bounds is None:
            (slo, shi), (plo, phi) = self.space.interval(start), self.space.interval(step)
            bounds = (slo, INF) if plo >= 0 else (-INF, shi) if phi <= 0 else (-INF, INF)
        lo, hi = bounds
        if self.inductions_wrap:
            return self.observe(self.space.fresh("loopvar", lo, hi, (start, k, step), name), dtype)
        return self.space.fresh("loopvar", max(lo, rlo), min(hi, rhi), (start, k, step), name)

    def progressions_of(self, counter: str) -> set:
        """The atoms of the loop variables at the head of iteration `counter` (made for it
        alone, so the loop condition narrows them in the body)."""
        k = Poly.atom(counter)
        return {n for n, a in self.space.atoms.items() if a.kind == "loopvar" and a.definition[1] == k}

    def innermost_loop(self) -> _Frame:
        return next(f for f in reversed(self.frames) if f.counter)

    def s_break(self, s: N.Break):
        frame = self.innermost_loop()
        if frame.needs:
            self.checkpoint("break", frame.needs, s.loc)
        frame.breaks.append(self.path())
        self.pc = FALSE

    def s_continue(self, s: N.Continue):
        self.innermost_loop().continues.append(self.path())
        self.pc = FALSE

"""Which loops stream their product operands, and what: the matching for `pipeline`.

Takes: a tile kernel, the target and its `mma_plan.Plan`. Gives `find(kernel, target, plan)
-> [Pipeline]`: the loops whose operand tiles can stream (the plan then sizes their stages,
`matmul.plan`), with the TMA descriptors they take (`plan.tensor_maps`); on sm_90a, loops
of wgmma products, elsewhere of mma.sync products (`cpasync`: 16-bit operands only, as fp8
is converted to float16 on its way to shared memory there). `pipeline`'s docstring says
which loads stream.

Guarantees: a streamed load reads an array the kernel never writes, at an index that reads,
of what the loop body assigns, only the loop variable and the scalars of the body's index
prefix (`_index_prefix`: its first statements, computed from the loop variable, loop
invariants and arrays the kernel never writes), so a copy made iterations ahead reads what
the body would read at its own iteration.
"""
from __future__ import annotations

from ..ir import nodes as N
from ..ir import tiles as X
from ..types import from_name
from . import operand
from .layout import padded
from .pipeline import MAX_TMA_RANK, TMA_TYPES, Invariant, Pipeline, Streamed, TensorMap


def _names(e) -> set:
    from ..frontend import walk

    return {n.name for n in walk([e]) if isinstance(n, (N.Var, X.TileVar))}


def _assigned(stmts) -> set:
    from ..frontend import walk

    return {n.name for n in walk(stmts) if isinstance(n, N.Assign)} | \
        {n.var for n in walk(stmts) if isinstance(n, N.For)}


def _resolve(e, assigned: dict):
    """(load, transposed, variable or None) of an operand that is a loaded tile, or None."""
    transposed, var = False, None
    while True:
        if isinstance(e, X.TileVar) and var is None and e.name in assigned:
            var, e = e.name, assigned[e.name]
        elif isinstance(e, X.Permute) and e.perm == (1, 0):
            transposed, e = not transposed, e.value
        elif isinstance(e, X.Reshape) and _unit_prefixed(tuple(e.value.shape), tuple(e.shape)):
            e = e.value
        elif isinstance(e, X.TileLoad):
            return e, transposed, var
        else:
            return None


def _unit_prefixed(shape: tuple, matrix: tuple) -> bool:
    """Whether `shape` is `matrix` after axes of extent 1 (a (1, 1, R, C) load of a 4-d
    array seen as an (R, C) operand)."""
    lead = len(shape) - len(matrix)
    return lead >= 0 and shape[lead:] == matrix and all(n == 1 for n in shape[:lead])


def _streamable(load: X.TileLoad, body_names: set, allowed: set, engine: str, writes) -> bool:
    """Whether `load` can stream; its index may read, of the names the body assigns, only
    those in `allowed` (the loop variable and the index prefix's)."""
    t = load.array.type
    if load.array.name in writes:  # a copy running ahead would pass the block's own writes
        return False
    shape = tuple(load.shape)
    if engine == "mma.sync" and not (t.aligned16 and shape[-1] * load.array.dtype.itemsize % 16 == 0):
        return False  # cp.async moves 16-byte chunks
    return (load.array.dtype.name in TMA_TYPES and 2 <= t.ndim <= MAX_TMA_RANK and t.unit_inner_stride
            and _unit_prefixed(shape, shape[-2:]) and shape == padded(shape)
            and isinstance(load.padding, N.Const) and load.padding.value == 0
            and max(shape[-2:]) <= 256
            and not any(_names(i) & (body_names - allowed) for i in load.index))


_SCALAR_NODES = (N.Const, N.Var, N.ArrayRef, N.Load, N.Shape, N.Unary, N.Binary, N.Compare, N.Logical, N.Select,
                 N.Cast)


def _scalar(s: N.Stmt) -> bool:
    """Whether `s` only assigns scalars computed by plain arithmetic and array reads: an
    assignment, or an `if` of them (the frontend's form of `tile.load(..., shape=())`)."""
    from ..frontend import walk

    if isinstance(s, N.If):
        return all(_scalar(t) for t in (*s.then, *s.orelse)) and \
            all(isinstance(n, _SCALAR_NODES) for n in walk([s.cond]))
    return isinstance(s, N.Assign) and all(isinstance(n, _SCALAR_NODES) for n in walk([s.value]))


def _index_prefix(body: list, loop_var: str, body_names: set, writes) -> tuple:
    """(statements, names): the scalar statements at the top of a loop body that read only
    the loop variable, loop invariants, each other's results and arrays the kernel never
    writes (a page number read from a block table: `page = tile.load(table, (b, t),
    shape=())`), and the names they assign, assigned nowhere else in the body. A streamed
    load's index may read those names: the stream runs the statements again for the
    iteration it copies ahead (`StreamLoop.at_iteration`), and the body runs them for its
    own, after the copies it issued."""
    from ..frontend import walk

    prefix, names = [], set()
    for s in body:
        read = {n.name for n in walk([s]) if isinstance(n, N.Var)}
        if not _scalar(s) or read & (body_names - names - {loop_var}) \
                or any(isinstance(n, N.Load) and n.array.name in writes for n in walk([s])):
            break
        prefix.append(s)
        names |= _assigned([s])
    if names & _assigned(body[len(prefix):]) or loop_var in names:
        return (), set()
    return tuple(prefix), names


def find(kernel: N.Kernel, target: str, plan) -> list:
    """The loops to stream (unplaced: `matmul.plan` gives them stages and offsets)."""
    from ..frontend import walk

    if not plan.tma:
        return []
    engine = "wgmma" if target == "sm_90a" else "mma.sync"
    reads: dict = {}
    for node in walk(kernel.body):
        if isinstance(node, X.TileVar):
            reads[node.name] = reads.get(node.name, 0) + 1
    found = []
    for loop in (n for n in walk(kernel.body) if isinstance(n, N.For)):
        p = _match(loop, plan, reads, engine, kernel.writes)
        if p is not None:
            found.append(p)
    return found


def _match(loop: N.For, plan, reads: dict, engine: str, writes):
    from ..frontend import walk

    if not (isinstance(loop.step, N.Const) and loop.step.value > 0):
        return None
    body = loop.body
    nested = _assigned([s for s in body if not isinstance(s, N.Assign)])
    where = {}  # variable assigned once, at the top of the body -> (position, value)
    for position, s in enumerate(body):
        if isinstance(s, N.Assign) and s.name not in nested:
            where[s.name] = None if s.name in where else (position, s.value)
    body_names = _assigned(body)
    prefix, computed = _index_prefix(body, loop.var, body_names, writes)
    dots = [(position, n) for position, s in enumerate(body) if isinstance(s, N.Assign)
            for n in walk([s.value]) if isinstance(n, X.TileDot) and plan.dots[id(n)].engine == engine]
    candidates, invariants = [], []  # (dot, which, load, k_major, variable or None, streamable)
    for position, dot in dots:
        kind, staged = plan.dots[id(dot)].kind, plan.dots[id(dot)].staged
        # loads assigned earlier in the body (a later one would be the next pass's tile)
        earlier = {k: v[1] for k, v in where.items() if v is not None and v[0] < position}
        for which, e in enumerate((dot.a, dot.b)):
            got = _resolve(e, earlier)
            if got is not None:
                load, transposed, var = got
                # The stored matrix is the load's tile (its columns contiguous); K runs
                # along its columns when A is not transposed, or B is.
                k_major = transposed == (which == 1)
                if not _streamable(load, body_names, {loop.var} | computed, engine, writes) \
                        or load.array.dtype.name != kind \
                        or staged != kind \
                        or (not k_major and load.array.dtype.itemsize == 1):
                    # a conversion on the way to shared memory; fp8 wgmma reads K-major
                    # operands only
                    got = None if var is None else (load, k_major, var, False)
                else:
                    got = (load, k_major, var, True)
            if got is None:
                if isinstance(e, X.TileVar) and e.name not in body_names:
                    invariants.append((dot, which, e))
                continue
            candidates.append((dot, which, *got))
    # a loaded variable streams when every read of it is a product's operand that can take
    # it from shared memory: then one copy serves them all
    uses: dict = {}
    for dot, which, load, k_major, var, ok in candidates:
        if var is not None:
            uses.setdefault(var, []).append(ok)
    shared = {var for var, oks in uses.items() if all(oks) and len(oks) == reads.get(var, 0)}
    streamed, skipped, copied = [], set(), set()
    for dot, which, load, k_major, var, ok in candidates:
        if not ok or (var is not None and var not in shared):
            continue
        rows, cols = load.shape[-2:]
        streamed.append(Streamed(load, dot, which, operand.Stored(rows, cols, load.array.dtype.itemsize),
                                 k_major, -1, copied=id(load) not in copied))
        if var is not None and id(load) not in copied:
            skipped.add(next(id(s) for s in body if isinstance(s, N.Assign) and s.name == var))
        copied.add(id(load))
    if not streamed:
        return None
    fed = {id(op.dot) for op in streamed}
    invariants = [Invariant(dot, which, node, _stored_bytes(node, plan.dots[id(dot)]))
                  for dot, which, node in invariants if id(dot) in fed]
    last, dot = body[-1], dots[0][1]
    accumulating = (len(streamed) == 2 and len(dots) == 1 and isinstance(last, N.Assign)
                    and last.value is dot and isinstance(dot.acc, X.TileVar)
                    and dot.acc.name == last.name and reads.get(last.name, 0) >= 1
                    and all(id(s) in skipped for s in body[:-1]))
    stage = 0
    for op in (op for op in streamed if op.copied):
        if engine == "wgmma":
            box = (1,) * (op.load.array.type.ndim - 2) + (op.stored.rows, op.stored.panel_cols)
            plan.tensor_maps.append(TensorMap(op.load.array.name, op.load.array.dtype.name,
                                              op.stored.size, box, op.stored.panel_bytes))
            op.map_index = len(plan.tensor_maps) - 1
        op.offset = stage
        stage += operand.aligned(op.stored.nbytes)
    copies = {id(op.load): op for op in streamed if op.copied}
    for op in (op for op in streamed if not op.copied):  # the same bytes as the tile's copy
        op.map_index, op.offset = copies[id(op.load)].map_index, copies[id(op.load)].offset
    read = set().union(*(_names(i) for op in streamed for i in op.load.index))
    return Pipeline(loop, tuple(streamed), tuple(invariants), frozenset(skipped), accumulating, stage,
                    engine=engine, index_prefix=prefix if read & computed else ())


def _stored_bytes(node: X.TileExpr, dot) -> int:
    rows, cols = padded(node.shape)
    return operand.aligned(rows * cols * from_name(dot.staged).itemsize)

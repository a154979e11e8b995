"""How much work each z3 query may do, in z3's own steps (its `rlimit`), not in seconds.

A budget in steps gives the same verdict for the same kernel on any machine, however loaded,
and whatever else the process checked before (each query also gets a z3 context of its
own: `solver._Encoder`). With a wall-clock limit, a grouped GEMM ordering was proven in
0.2 s after other kernels and refused alone. Budgets are sized in milliseconds of the CI
machine, where z3 takes 3,000-9,000 steps a millisecond; `BACKSTOP_MS` only stops a query on
a machine many times slower than that.
"""
STEPS_PER_MS = 5000

RACE = 8000 * STEPS_PER_MS  # a race query; slow proofs are rare, and a spent budget refuses a correct kernel
READ = 1000 * STEPS_PER_MS  # a VG213 proof that needs more is left to the cpu backend
BOUNDS = 200 * STEPS_PER_MS  # a bounds proof that needs more keeps its check
READABLE = 200 * STEPS_PER_MS  # each refinement of a counterexample towards a readable one
BACKSTOP_MS = 120_000
ORDER = 200 * STEPS_PER_MS  # a block order's injectivity (`injective`); past it, the general query

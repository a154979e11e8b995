"""The long forms of the codes of threads that meet (`explain`): races (VG201-VG205) and
barriers and shared memory (VG210-VG214).

Takes nothing. Gives `THREADS` (code -> `explanation.Explanation`). Guarantees: as
`explain`'s (snippets that parse, messages pointing into their racy snippets).
"""
from __future__ import annotations

from .diagnose import HINTS
from .explanation import Explanation, snippet

THREADS = {
    "VG201": Explanation(
        rule="""An array that the kernel writes must not overlap any other array argument
            of the same launch: not the same array passed twice, and not two views of one
            buffer that share elements (x[1:] and x[:-1], or x and x[::2]). Disjoint views
            (x[:n] and x[n:]) are fine, and arrays that are only read may alias each
            other. Checked at every launch before anything is enqueued, and by `verdigris
            check` at launch sites it can read.""",
        why="""Every race proof assumes that distinct parameters are distinct memory, and
            the compiler uses that fact: it marks pointers noalias and loads read-only
            arrays through the non-coherent cache (ld.global.nc). With an output that is
            also an input, one thread's write changes what another thread reads, and a
            read-only load may even return stale data: the result depends on the order
            in which threads happen to run.""",
        racy=snippet("""
            @simt.kernel
            def axpy(alpha, x, y, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    out[i] = alpha * x[i] + y[i]


            x = vg.asarray(np.ones(1024, np.float32))
            y = vg.asarray(np.ones(1024, np.float32))
            axpy[4, 256](2.0, x, y, x)  # out is x
            """),
        message="""kernel.py:5:9: VG201: axpy writes 'out', which is the same memory as
            'x': the result would depend on the order threads run in (launched at
            kernel.py:10:1)""",
        hint="pass a separate output array for 'out' (e.g. vg.empty_like), or, to update it in "
             "place, a kernel that takes it once",
        fixed=snippet("""
            @simt.kernel
            def axpy(alpha, x, y, out):
                i = simt.global_id(0)
                if i < out.shape[0]:
                    out[i] = alpha * x[i] + y[i]


            x = vg.asarray(np.ones(1024, np.float32))
            y = vg.asarray(np.ones(1024, np.float32))
            out = vg.empty_like(x)  # a separate output
            axpy[4, 256](2.0, x, y, out)
            """),
    ),
    "VG202": Explanation(
        rule="""No two threads may write the same array element with plain stores, in any
            launch the kernel could be given (different blocks are ordered only by
            grid_barrier()). The
            checker proves the write index is one-to-one over the threads that reach the
            store, with the block size known and the array sizes symbolic.""",
        why="""When two threads store to one element, which value survives depends on
            scheduling: the output changes from run to run and from GPU to GPU. The usual
            causes are an index that forgets the block offset (thread_id instead of
            global_id), a stride that is too small, an index that folds threads together
            (i // 2, i % 32), or an index read from memory (a scatter through an index
            array, a histogram without atomics): loaded values may be equal.""",
        racy=snippet("""
            @simt.kernel
            def scale(x, out):
                i = simt.thread_id(0)  # the same in every block
                if i < out.shape[0]:
                    out[i] = 2.0 * x[i]


            def run(x, out):
                scale[vg.cdiv(out.shape[0], 256), 256](x, out)
            """),
        message="""kernel.py:5:9: VG202: two threads may write the same element: thread
            (block 0, thread 0) and thread (block 1, thread 0) both write out[0] (with
            out.shape[0] = 1, 2 blocks of 256 threads)""",
        hint=HINTS["VG202"],
        fixed=snippet("""
            @simt.kernel
            def scale(x, out):
                i = simt.global_id(0)  # block_id * block_dim + thread_id
                if i < out.shape[0]:
                    out[i] = 2.0 * x[i]


            def run(x, out):
                scale[vg.cdiv(out.shape[0], 256), 256](x, out)
            """),
    ),
    "VG203": Explanation(
        rule="""A thread must not read an array element that another thread writes in the
            same kernel (threads of different blocks are ordered only by grid_barrier(),
            and within a block also by barrier()). Reading and writing one's own element is fine,
            as in y[i] = a * x[i] + y[i].""",
        why="""The reader may see the old value or the new one, depending on which thread
            ran first. In-place stencils, shifts and reversals are the classic case: they
            give the right answer in a sequential loop and a different one on a GPU.""",
        racy=snippet("""
            @simt.kernel
            def smooth(x):
                i = simt.global_id(0)
                if 0 < i < x.shape[0] - 1:
                    x[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0  # x[i - 1] is a neighbour's


            def run(x):
                smooth[vg.cdiv(x.shape[0], 256), 256](x)
            """),
        message="""kernel.py:5:17: VG203: a thread may read an element that another thread
            writes: thread (block 0, thread 255) writes x[255] while thread (block 1, thread
            0) reads it (with x.shape[0] = 258, 2 blocks of 256 threads)""",
        hint=HINTS["VG203"],
        fixed=snippet("""
            @simt.kernel
            def smooth(x, out):
                i = simt.global_id(0)
                if 0 < i < x.shape[0] - 1:
                    out[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0  # write a separate array


            def run(x, out):
                smooth[vg.cdiv(x.shape[0], 256), 256](x, out)
            """),
    ),
    "VG204": Explanation(
        rule="""An array that a kernel updates with atomics must not also be read or
            written with plain loads and stores in the same kernel.""",
        why="""Atomics order only against other atomics. A plain store can land between an
            atomic's read and its write and be lost, and a plain load sees a count that is
            still being built. Initialise such arrays before the launch (vg.zeros) and read
            them after it.""",
        racy=snippet("""
            @simt.kernel
            def count_positive(x, total):
                i = simt.global_id(0)
                if i == 0:
                    total[0] = 0.0  # a plain store to an atomically updated array
                if i < x.shape[0] and x[i] > 0.0:
                    simt.atomic_add(total, 0, 1.0)


            def run(x, total):
                count_positive[vg.cdiv(x.shape[0], 256), 256](x, total)
            """),
        message="""kernel.py:5:9: VG204: an array is accessed both atomically and with plain
            reads or writes: thread (block 1, thread 1) updates total[0] atomically while
            thread (block 0, thread 0) writes it without an atomic (with total.shape[0] = 1,
            x.shape[0] = 258, 2 blocks of 256 threads); the other access is at line 7""",
        hint=HINTS["VG204"].format(array="total"),
        fixed=snippet("""
            @simt.kernel
            def count_positive(x, total):
                i = simt.global_id(0)
                if i < x.shape[0] and x[i] > 0.0:
                    simt.atomic_add(total, 0, 1.0)


            def run(x):
                total = vg.zeros(1, vg.float32)  # zeroed before the launch
                count_positive[vg.cdiv(x.shape[0], 256), 256](x, total)
                return total
            """),
    ),
    "VG205": Explanation(
        rule="""Every plain write must be proven disjoint between threads. When the proof
            cannot be finished (the index depends on values the checker cannot see, such as
            data loaded from an array, or the solver gives up within its time limit) the
            write is refused: an unknown result never passes.""",
        why="""A checker that passed what it could not prove would guarantee nothing.
            Usually the index can be written in a form the checker decides at once (affine
            in the thread index, with guards such as `c < W`); when the index really comes
            from data, use an atomic, or, when you know better than the checker (the
            indices form a permutation), say so with `with vg.unsafe():`, which
            `verdigris check` lists.""",
        racy=snippet("""
            @simt.kernel
            def scatter(idx, x, out):
                i = simt.global_id(0)
                if i < x.shape[0]:
                    out[idx[i]] = x[i]  # distinct only if idx is a permutation


            def run(idx, x, out):
                scatter[vg.cdiv(x.shape[0], 256), 256](idx, x, out)
            """),
        message="""kernel.py:5:9: VG205: a write index could not be proven disjoint between
            threads: could not prove that threads write distinct elements of out: the
            index depends on idx[...], which the checker cannot see; thread (block 0,
            thread 0) writes out[0] and thread (block 1, thread 1) writes it if those
            values allow (with out.shape[0] = 1, x.shape[0] = 258, 2 blocks of 256
            threads)""",
        hint=HINTS["VG205"],
        fixed=snippet("""
            @simt.kernel
            def scatter(idx, x, out):
                i = simt.global_id(0)
                if i < x.shape[0]:
                    with vg.unsafe():  # idx is a permutation; check lists this line
                        out[idx[i]] = x[i]


            def run(idx, x, out):
                scatter[vg.cdiv(x.shape[0], 256), 256](idx, x, out)
            """),
    ),
    "VG210": Explanation(
        rule="""barrier() must be reached by all threads of a block or by none: it may not
            sit under a condition that differs between threads of one block (a thread
            index, a bounds guard, data), nor inside a loop whose trip count does. The
            same holds of grid_barrier() for all threads of the grid: its condition may
            not differ between blocks either (a block id, shared memory).""",
        why="""A barrier waits for every thread of the block. If some never arrive, the
            block hangs or, on newer GPUs, the barrier silently stops ordering anything,
            and the shared-memory accesses it was meant to separate race.""",
        racy=snippet("""
            @simt.kernel
            def block_sum(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                if i < x.shape[0]:
                    tile[t] = x[i]
                    simt.barrier()  # threads past the end never get here
                if t == 0:
                    total = 0.0
                    for j in range(256):
                        total += tile[j]
                    out[simt.block_id(0)] = total
            """),
        message="""kernel.py:8:9: VG210: a barrier may be reached by some threads of a block
            and not others: barrier() is under `i < x.shape[0]` (line 6), which differs
            between threads of one block: thread (block 0, thread 0) reaches it and
            thread (block 0, thread 1) does not (with x.shape[0] = 1, 1 block of 2
            threads)""",
        hint=HINTS["VG210"],
        fixed=snippet("""
            @simt.kernel
            def block_sum(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                tile[t] = x[i] if i < x.shape[0] else 0.0
                simt.barrier()  # every thread of the block reaches it
                if t == 0:
                    total = 0.0
                    for j in range(256):
                        total += tile[j]
                    out[simt.block_id(0)] = total
            """),
    ),
    "VG211": Explanation(
        rule="""Between two barriers, threads of one block must not touch the same shared
            memory element when at least one of them writes it. Put a barrier() between
            the writes and the reads of other threads' elements.""",
        why="""Threads of a block run in warps that the scheduler interleaves freely: a
            thread reading a neighbour's slot of shared memory without a barrier reads
            whatever is there, usually the previous value.""",
        racy=snippet("""
            @simt.kernel
            def reverse_blocks(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                tile[t] = x[i]
                out[i] = tile[255 - t]  # written by another thread, no barrier between
            """),
        message="""kernel.py:7:14: VG211: threads of one block access the same shared element
            between two barriers: thread (block 0, thread 127) writes tile[127] while
            thread (block 0, thread 128) reads it, with no barrier() between them (with
            1 block of 129 threads); the other access is at line 6""",
        hint=HINTS["VG211"],
        fixed=snippet("""
            @simt.kernel
            def reverse_blocks(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                tile[t] = x[i]
                simt.barrier()
                out[i] = tile[255 - t]
            """),
    ),
    "VG212": Explanation(
        rule="""Threads of one warp that exchange values through shared memory need
            syncwarp() between the write and the other lane's read (or barrier()). Code
            that relies on the lanes of a warp running in lock step is refused.""",
        why="""Since Volta, lanes of a warp are scheduled independently and may diverge
            and reconverge anywhere: the old warp-synchronous idiom (the unrolled last
            warp of a reduction) reads stale values. Warp shuffles (shfl_down) avoid
            shared memory altogether.""",
        racy=snippet("""
            @simt.kernel
            def rotate_warp(x, out):
                buf = simt.shared.array(32, vg.float32)
                lane = simt.thread_id(0) % 32
                i = simt.global_id(0)
                if simt.thread_id(0) < 32:
                    buf[lane] = x[i]
                    out[i] = buf[(lane + 1) % 32]  # lanes are not in lock step
            """),
        message="""kernel.py:8:18: VG212: warp-synchronous shared memory accesses without
            syncwarp(): thread (block 0, thread 3) writes buf[3] while thread (block 0,
            thread 2) reads it, two lanes of one warp with no syncwarp() between them
            (with 1 block of 4 threads); the other access is at line 7""",
        hint=HINTS["VG212"],
        fixed=snippet("""
            @simt.kernel
            def rotate_warp(x, out):
                buf = simt.shared.array(32, vg.float32)
                lane = simt.thread_id(0) % 32
                i = simt.global_id(0)
                if simt.thread_id(0) < 32:
                    buf[lane] = x[i]
                    simt.syncwarp()
                    out[i] = buf[(lane + 1) % 32]
            """),
    ),
    "VG213": Explanation(
        rule="""A kernel must not read a shared memory element that no thread of the block
            wrote before the read (shared memory starts with whatever the previous block
            on that multiprocessor left there). Where the block shape is known, the
            checker refuses a read of an element no write before it can write (a thread
            that "may read" it where loaded values or a loop decide whether the read
            runs); a read it neither proves written nor refuses is listed in the facts
            and checked only on the cpu backend.""",
        why="""Uninitialised shared memory holds garbage that differs between runs and
            GPUs; reading it is the shared-memory form of an uninitialised variable,
            and it often hides behind a guard that writes only part of a tile.""",
        racy=snippet("""
            @simt.kernel
            def copy_through_shared(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                if t < 128:
                    tile[t] = x[i]  # only half the tile is written
                simt.barrier()
                out[i] = tile[t]


            x = vg.asarray(np.ones(1024, np.float32))
            out = vg.empty_like(x)
            copy_through_shared[4, 256](x, out)
            """),
        message="""kernel.py:9:14: VG213: shared memory is read before anything wrote it:
            thread (block 0, thread 128) reads tile[128], which no thread of its block
            writes before (with 1 block of 256 threads)""",
        hint=HINTS["VG213"],
        fixed=snippet("""
            @simt.kernel
            def copy_through_shared(x, out):
                tile = simt.shared.array(256, vg.float32)
                t = simt.thread_id(0)
                i = simt.global_id(0)
                tile[t] = x[i]
                simt.barrier()
                out[i] = tile[t]


            x = vg.asarray(np.ones(1024, np.float32))
            out = vg.empty_like(x)
            copy_through_shared[4, 256](x, out)
            """),
    ),
    "VG214": Explanation(
        rule="""A warp shuffle, vote (ballot, any_, all_), match (match_any, match_all),
            reduction (reduce_add, ...) or syncwarp() must be reached by all 32 lanes of
            the warp together (activemask() is the one warp operation that is not shared:
            it may be called anywhere): it may not sit under a condition that
            differs between lanes of one warp (a bounds guard, a lane index, data), nor
            inside a loop whose trip count does. Conditions the same for a whole warp
            (warp index, block index, arguments) are fine. A block whose thread count is
            not a multiple of 32 ends with a partial warp (a block of 40 threads: a warp of
            8 lanes): votes, matches, reductions and syncwarp() count only the lanes it
            has, but a shuffle of it may not read a lane it lacks (lane + 16 in a warp of
            8). Launch blocks of a multiple of 32 threads, keep the shuffle inside
            segments the partial warp has (`width=8`), or keep the partial warp out of
            such a shuffle with a condition (`if simt.thread_id(0) < 32:`).""",
        why="""These operations exchange values between the lanes named in their mask (all
            32): a lane that never arrives leaves the others waiting, or hands them an
            undefined value. The sum comes out wrong only for some inputs, typically at
            the end of the array, or only for some block sizes.""",
        racy=snippet("""
            @simt.kernel
            def warp_sums(x, out):
                i = simt.global_id(0)
                v = x[i] if i < x.shape[0] else 0.0
                if i < x.shape[0]:
                    for k in range(5):
                        v += simt.shfl_down(v, 16 >> k)  # lanes past the end never get here
                if simt.lane_id() == 0:
                    out[i // 32] = v


            x = vg.asarray(np.ones(1000, np.float32))
            out = vg.empty(32, vg.float32)
            warp_sums[4, 256](x, out)
            """),
        message="""kernel.py:7:18: VG214: a warp operation may be reached by some lanes of a
            warp and not others: shfl_down() is under `i < x.shape[0]` (line 5), which
            differs between lanes of one warp: thread (block 0, thread 0) reaches it and
            thread (block 0, thread 1) does not (with x.shape[0] = 1, 1 block of 256
            threads)""",
        hint=HINTS["VG214"],
        fixed=snippet("""
            @simt.kernel
            def warp_sums(x, out):
                i = simt.global_id(0)
                v = x[i] if i < x.shape[0] else 0.0  # lanes past the end add zeros
                for k in range(5):
                    v += simt.shfl_down(v, 16 >> k)
                if simt.lane_id() == 0:
                    out[i // 32] = v


            x = vg.asarray(np.ones(1000, np.float32))
            out = vg.empty(32, vg.float32)
            warp_sums[4, 256](x, out)
            """),
    ),
}

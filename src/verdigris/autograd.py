"""A forward and a backward that launch verdigris kernels, paired into one differentiable
torch operation.

Takes: the op's name ("namespace::name"), `forward` and `backward`, two functions that
launch verdigris kernels on torch tensors and return new tensors, each with torch.library's
type annotations (`(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]`):

- `forward(*inputs)` returns the op's `outputs` results first, then any residuals, tensors
  the backward needs besides the inputs (a norm's mean and rstd);
- `backward(*grads, *inputs, *residuals)` takes one gradient per result (torch gives zeros
  for a result nothing used) and the same inputs and residuals, and returns one gradient
  per tensor input, in order (non-tensor inputs, such as `eps`, get none). With
  `saves_outputs=True` it takes the results themselves too, between the inputs and the
  residuals: `backward(*grads, *inputs, *results, *residuals)` (attention's backward
  needs its output O; a custom op may not return one tensor twice, as result and residual).
  With `passes_gradient` naming inputs the forward adds into its first result unchanged (a
  residual stream), those inputs' gradient is that result's gradient itself: the backward
  neither takes them nor returns a gradient for them, and they are not saved. (The
  backward op could not return it: a custom op's outputs may not alias its inputs.)

Gives: `differentiable_op(name, forward, backward, outputs=1, saves_outputs=False,
passes_gradient=())`, a
function called with the inputs that returns the results (one tensor when `outputs` is 1,
else a tuple); its `.forward_op` and `.backward_op` are the torch custom ops `name` and
`name + "_backward"`. `forward_only_op(name, forward, what)`: the custom op `name` of a
forward that has no backward, whose gradient is the op `name + "_backward"`, which raises
NotImplementedError naming `what` when it runs. `traced_or_eager(custom_op, forward,
setup_context, gradient, outputs)`: how such an op is applied (also for ops made by hand,
`verdigris.ops.losses`).

Guarantees: both halves are torch custom ops (`vg.torch_op`: their fake implementations
are the functions run with every verdigris launch skipped, so their outputs must come from
torch's allocators), and the forward's autograd formula is registered with
`register_autograd`, so the op traces under `torch.compile(fullgraph=True)` without a graph
break, forward and backward. Outside tracing the function applies a
`torch.autograd.Function` of the same two halves and the same saved values instead
(`traced_or_eager`). The same code runs on the cuda backend with CUDA tensors and on the
cpu backend with CPU tensors. torch is imported when this function is called, not
when verdigris is. Gradients of gradients are not provided (the backward op has no
autograd formula of its own: torch says so if one is asked for). Signatures that do not fit
together (a backward taking or returning the wrong number of values for the forward's) are
a `vg.Error` at the backward's definition when the op is made, not at its first backward.
A forward-only op never gives a gradient, zero or other: a backward through it raises, in
eager mode and in a compiled graph alike; tracing one (torch.compile with inputs that need
gradients) does not raise, so its forward compiles and runs.
"""
from __future__ import annotations

import functools
import inspect
import typing

from .errors import Error, Loc


def differentiable_op(name: str, forward, backward, *, outputs: int = 1, saves_outputs: bool = False,
                      passes_gradient: tuple[str, ...] = ()):
    """Register `forward` and `backward` as the custom ops `name` and `name`_backward, the
    second as the first's gradient; return the function that applies the op. With
    `saves_outputs`, the backward also takes the op's results, after its inputs; the
    inputs named in `passes_gradient` get the first result's gradient as theirs, and the
    backward does not see them."""
    import torch

    from .runtime.torch_ops import torch_op

    passed = _check_signatures(name, forward, backward, outputs, saves_outputs, passes_gradient, torch.Tensor)
    forward_op = torch_op(name)(forward)
    backward_op = torch_op(f"{name}_backward")(backward)

    def setup_context(ctx, inputs, output):
        results = output if isinstance(output, tuple) else (output,)
        is_tensor = [isinstance(v, torch.Tensor) for v in inputs]
        ctx.is_tensor = is_tensor
        ctx.constants = [None if t else v for v, t in zip(inputs, is_tensor)]
        ctx.save_for_backward(*(v for i, (v, t) in enumerate(zip(inputs, is_tensor)) if t and i not in passed),
                              *results[0 if saves_outputs else outputs:])

    def gradient_by(run_backward):
        def gradient(ctx, *grads):
            saved = iter(ctx.saved_tensors)
            inputs = [next(saved) if t else c for i, (c, t) in enumerate(zip(ctx.constants, ctx.is_tensor))
                      if i not in passed]
            result = run_backward(*grads[:outputs], *inputs, *saved)
            tensor_grads = iter(result if isinstance(result, (tuple, list)) else (result,))
            return tuple(grads[0] if i in passed else next(tensor_grads) if t else None
                         for i, t in enumerate(ctx.is_tensor))
        return gradient

    forward_op.register_autograd(gradient_by(backward_op), setup_context=setup_context)
    applied = traced_or_eager(forward_op, forward, setup_context, gradient_by(backward), outputs)

    @functools.wraps(forward)
    def apply(*inputs):
        results = applied(*inputs)
        if not isinstance(results, tuple):
            return results
        return results[0] if outputs == 1 else results[:outputs]

    apply.forward_op, apply.backward_op = forward_op, backward_op
    return apply


def traced_or_eager(custom_op, forward, setup_context, gradient, outputs: int = 1):
    """A function that applies `custom_op` (whose autograd formula is `setup_context` and
    `gradient`, as `register_autograd` takes them) where torch traces (under torch.compile,
    or any dispatch mode such as fake tensors'), and else a `torch.autograd.Function` of
    `forward` (the op's own function) and the same two: a custom op's dispatch costs ~20 us
    of host time a call, forward and backward, where this costs ~5 (a separate
    `setup_context` staticmethod would bind each call's arguments by signature, ~15 us
    more). The results past the first `outputs` are residuals, no results of the op's
    users: they are marked non-differentiable and get no gradient (autograd would fill
    each with zeros every backward: the linear cross-entropy's logits, 0.8 GB at GPT-2's
    batch); `gradient` sees None for them, and zeros for a result nothing used."""
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    class Eager(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            output = forward(*inputs)
            setup_context(ctx, inputs, output)
            results = output if isinstance(output, tuple) else (output,)
            ctx.mark_non_differentiable(*results[outputs:])
            ctx.set_materialize_grads(False)
            ctx.result_meta = [(r.shape, r.dtype, r.device) for r in results[:outputs]]
            return output

        @staticmethod
        def backward(ctx, *grads):
            made = [torch.zeros(shape, dtype=dtype, device=device) if g is None else g
                    for g, (shape, dtype, device) in zip(grads, ctx.result_meta)]
            return gradient(ctx, *made, *grads[outputs:])

    def apply(*inputs):
        if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
            return custom_op(*inputs)
        return Eager.apply(*inputs)

    return apply


def _check_signatures(name, forward, backward, outputs, saves_outputs, passes_gradient, tensor) -> set:
    """backward's parameters are the gradients of the forward's results, then its
    parameters but those in `passes_gradient`, then (`saves_outputs`) its results, then its
    residuals; its results are one per tensor parameter of the forward not passed. Gives
    the passed parameters' positions."""
    params = list(inspect.signature(forward, eval_str=True).parameters.values())
    results = _arity(inspect.signature(forward, eval_str=True).return_annotation)
    backward_signature = inspect.signature(backward, eval_str=True)
    passed = {i for i, p in enumerate(params) if p.name in passes_gradient}
    taken = len(params) - len(passed)
    tensor_inputs = sum(p.annotation is tensor for p in params) - len(passed)
    saved = outputs if saves_outputs else 0
    want_params = outputs + taken + saved + (results - outputs)
    got_params, got_results = len(backward_signature.parameters), _arity(backward_signature.return_annotation)
    unknown = sorted(set(passes_gradient) - {p.name for p in params if p.annotation is tensor})
    if outputs < 1 or results < outputs:
        problem = f"outputs={outputs}, but the forward returns {results} values"
    elif unknown:
        problem = f"passes_gradient names {', '.join(unknown)}, which the forward takes as no tensor"
    elif got_params != want_params:
        problem = (f"the backward takes {got_params} parameters; it must take {want_params}: "
                   f"{outputs} gradients, the forward's {taken} inputs"
                   + (f" (not {', '.join(passes_gradient)}, whose gradient passes)" if passed else "") + ", "
                   + (f"its {saved} results, " if saves_outputs else "")
                   + f"and its {results - outputs} residuals")
    elif got_results != tensor_inputs:
        problem = (f"the backward returns {got_results} value(s); it must return {tensor_inputs}, "
                   f"one gradient per tensor input of the forward"
                   + (" whose gradient does not pass" if passed else ""))
    else:
        return passed
    code = inspect.unwrap(backward).__code__
    raise Error(f"differentiable op {name!r}: {problem}",
                Loc(code.co_filename, code.co_firstlineno, 0, code.co_name),
                hint="forward(*inputs) -> (results..., residuals...); backward(*grads of the "
                     "results, *inputs, *residuals) -> one gradient per tensor input")


def _arity(annotation) -> int:
    """How many values a return annotation names: a tuple's entries, else one."""
    return len(typing.get_args(annotation)) if typing.get_origin(annotation) is tuple else 1


def forward_only_op(name: str, forward, what: str):
    """Register `forward` as the custom op `name`, whose gradient is the custom op
    `name`_backward: it raises NotImplementedError naming `what` when it runs, and its fake
    implementation gives each input's gradient's shape. The error is an op of the graph,
    not raised by the autograd formula, so that torch.compile can trace the formula
    (it does whenever an input needs a gradient) and the error comes at the backward."""
    import torch

    from .runtime.torch_ops import torch_op

    forward_op = torch_op(name)(forward)

    def no_gradient(grads, inputs):
        raise NotImplementedError(f"{what} is forward only: it has no gradient (detach its "
                                  f"inputs, or compute what needs gradients with an op that has one)")

    # real annotations, not strings: torch.library reads them, and torch is imported here
    no_gradient.__annotations__ = {"grads": list[torch.Tensor], "inputs": list[torch.Tensor],
                                   "return": list[torch.Tensor]}
    backward_op = torch_op(f"{name}_backward",
                           fake=lambda grads, inputs: [torch.empty_like(t) for t in inputs])(no_gradient)

    def setup_context(ctx, inputs, output):  # None in place of each non-tensor input
        ctx.save_for_backward(*(v if isinstance(v, torch.Tensor) else None for v in inputs))

    def gradient(ctx, *grads):
        needed = [t for t, needs in zip(ctx.saved_tensors, ctx.needs_input_grad) if needs]
        input_grads = iter(backward_op(list(grads), needed))
        return tuple(next(input_grads) if needs else None for needs in ctx.needs_input_grad)

    forward_op.register_autograd(gradient, setup_context=setup_context)
    return forward_op

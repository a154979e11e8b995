"""`verdigris.ops`: torch operations made of verdigris kernels, differentiable and
traceable by torch.compile (`verdigris.autograd.differentiable_op`). Each module imports
torch and registers its ops when it is imported; `import verdigris` imports none of them."""

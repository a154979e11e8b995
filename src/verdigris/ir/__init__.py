"""The typed kernel IR (nodes), its calling convention (abi), printer and verifier."""
from .nodes import *  # noqa: F401,F403
from .abi import AbiParam, abi_params  # noqa: F401

"""`import verdigris` loads no heavy module: ml_dtypes, z3, llvmlite, cuda.bindings and torch
load when first needed (a bfloat16 array, a proof, a compile, a launch, a tensor)."""
import json
import os
import subprocess
import sys

import pytest

HEAVY = ("ml_dtypes", "z3", "llvmlite", "cuda.bindings", "torch")


def _loaded_after(statement: str) -> list:
    code = (f"import sys\n{statement}\nimport json\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m in {HEAVY!r} "
            f"or m.startswith(tuple(h + '.' for h in {HEAVY!r})))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=dict(os.environ))
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_module():
    assert _loaded_after("import verdigris") == []


def test_bfloat16_loads_ml_dtypes_on_first_need():
    pytest.importorskip("ml_dtypes")
    loaded = _loaded_after("import numpy as np, verdigris as vg\n"
                           "assert np.zeros(3, vg.bf16).dtype.name == 'bfloat16'")
    assert "ml_dtypes" in loaded


def test_ml_dtypes_array_is_known_without_a_verdigris_dtype_first():
    pytest.importorskip("ml_dtypes")
    code = ("import ml_dtypes, numpy as np, verdigris as vg\n"
            "from verdigris import types\n"
            "assert types.from_numpy(np.zeros(2, ml_dtypes.float8_e5m2).dtype) is vg.float8_e5m2")
    subprocess.run([sys.executable, "-c", code], check=True)

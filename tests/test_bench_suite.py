"""`verdigris bench`'s plumbing, without a GPU: discovery of the cases that bench scripts
register, --filter, the two passes (selection, then the chosen ones re-timed with an A-vs-A
control) and the noise they show, the table, JSON and Markdown from a fake timer, the
commit and clocks a run records, the checks of the norm cases and of kernels that add into
their output, a first-call script on the fake driver, the plots (where matplotlib is
installed), the progress bar and the message on a machine without a GPU."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verdigris.benchsuite import (ROOFLINE, Impl, case, checked, command, machine, plots,
                                  registry, report, returning, runner)
from verdigris.benchsuite import timing
from verdigris.benchsuite.progress import bar
from verdigris.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_registry():
    """Each test starts with no cases and leaves none behind."""
    saved = dict(registry.REGISTRY)
    modules = set(sys.modules)
    registry.REGISTRY.clear()
    yield
    registry.REGISTRY.clear()
    registry.REGISTRY.update(saved)
    for name in set(sys.modules) - modules:
        if name.startswith("_verdigris_bench_"):
            del sys.modules[name]


class Fake:
    """A stand-in for a kernel launch: the fake timer reads how long it 'takes'."""

    def __init__(self, seconds=None, value=None, fail=None):
        self.seconds, self.value, self.fail, self.calls = seconds, value, fail, 0

    def __call__(self):
        self.calls += 1
        if self.fail:
            raise self.fail
        return self.value


class FakeTimer:
    """Every round of every callable takes the Fake's `seconds` (`first_call_ms`: what it
    returns): no noise, so the A-vs-A control shows none."""
    rounds = 3

    def synchronize(self):
        pass

    def device_seconds(self, fn):
        fn()
        return fn.seconds

    def device_seconds_in_turn(self, fns, final):
        return self._each(fns, self.device_seconds)

    def host_us_per_call(self, fns, final):
        return self._each(fns, lambda fn: self.device_seconds(fn) * 1e6)

    def first_call_ms(self, fns, final):
        return self._each(fns, lambda fn: float(fn()))

    def _each(self, fns, measure):
        out = {}
        for key, fn in fns.items():
            try:
                out[key] = [measure(fn) for _ in range(self.rounds)]
            except Exception as exc:
                out[key] = exc
        return out


def fake_env(copy_tbs=4.0, dense_tflops=1000.0):
    def measure(memory, compute):
        return {"copy_tbs": copy_tbs if memory else None,
                "dense_tflops": dense_tflops if compute else None,
                "dense_fp8_tflops": 2 * dense_tflops if compute else None,
                "fp32_tflops": dense_tflops / 16 if compute else None,
                "dense_tflops_source": "a test figure", "cublas_bf16_tflops": None}

    clocks = iter([{"clocks.sm": 1980}, {"clocks.sm": 1755}])  # the run's start, its end
    return command.Environment("Fake GPU 9000", FakeTimer(), measure, {"arch": "sm_90"},
                               clocks=lambda: next(clocks))


SCRIPT = '''
"""A bench script as helpers write them: cases registered at import, main() standalone."""
from verdigris.benchsuite import ROOFLINE, Impl, case

GB = 1e9


@case("copy-ish add", kind="memory", sizes=[1 << 20, 1 << 22], quick=[1 << 20],
      work=lambda n: 12 * n)
def add(n):
    from test_bench_suite import Fake
    return {{"verdigris": {{"BLOCK=1024": Fake(12 * n / (3.0e12)), "BLOCK=4096": Fake(12 * n / (3.6e12))}},
             "torch": Fake(12 * n / (3.2e12)), "triton": Fake(12 * n / (4.0e12))}}


@case("gemm bf16", kind="compute", sizes=[4096], work=lambda n: 2 * n**3, plot="gemm")
def gemm(n):
    from test_bench_suite import Fake
    return {{"verdigris": Fake(2 * n**3 / 700e12), "torch": Fake(2 * n**3 / 730e12)}}


@case("launch", kind="launch", sizes=[256], size_label=lambda n: f"{{n}} elements")
def launch(n):
    from test_bench_suite import Fake
    return {{ROOFLINE: Fake(5e-6), "verdigris": Fake(6e-6), "torch": Fake(8e-6), "triton": Fake(20e-6)}}


@case("first call", kind="compile", sizes=["cold"], size_label=str)
def first_call(which):
    from test_bench_suite import Fake
    return {{"verdigris": Fake(value=60.0), "triton": Fake(value=1300.0)}}


@case("broken", kind="memory", sizes=[1], work=lambda n: 1.0)
def broken(n):
    from test_bench_suite import Fake
    return {{"verdigris": Impl(Fake(1.0), check=lambda: "relative error 1.0e+00 > 1e-05"),
             "torch": Fake(1.0, fail=RuntimeError("out of memory\\nsecond line")),
             "triton": Fake(1e-12)}}


@case("needs a peer", kind="launch", sizes=[1], requires=["{missing}"])
def needs(n):
    raise AssertionError("never set up")


@case("setup fails", kind="launch", sizes=[1])
def setup_fails(n):
    raise ValueError("no such size")


if __name__ == "__main__":
    print("standalone")
'''


def bench_dir(tmp_path, missing="cutile"):
    directory = tmp_path / "bench"
    directory.mkdir()
    (directory / "cases.py").write_text(SCRIPT.format(missing=missing))
    (directory / "needs_module.py").write_text("from verdigris.benchsuite import case\n"
                                               "import no_such_module_for_vg_tests\n")
    (directory / "_helper.py").write_text("raise AssertionError('private scripts are not run')\n")
    (directory / "standalone.py").write_text(  # registers nothing: never imported
        "import no_such_module_either\nraise AssertionError('standalone scripts are not run')\n")
    return directory


def run_cli(capsys, monkeypatch, *argv, env=None):
    monkeypatch.setattr(command, "gpu_environment", lambda quick: (env, "a test machine")
                        if env is None else (env, None))
    status = main(["bench", "--plain-progress", *argv])
    out, err = capsys.readouterr()
    return status, out, err


# ----------------------------------------------------------------------------- registration


def test_discovery_imports_scripts_and_reports_the_ones_it_cannot(tmp_path):
    problems = registry.discover(bench_dir(tmp_path))
    assert problems == {"needs_module.py": "needs no_such_module_for_vg_tests, which is not "
                                           "installed"}
    assert list(registry.REGISTRY) == ["copy-ish add", "gemm bf16", "launch", "first call",
                                       "broken", "needs a peer", "setup fails"]
    add = registry.REGISTRY["copy-ish add"]
    assert add.kind == "memory" and add.unit == "TB/s" and add.sizes == (1 << 20, 1 << 22)
    assert add.quick_sizes == (1 << 20,)
    assert registry.REGISTRY["gemm bf16"].quick_sizes == (4096,)  # default: the largest
    assert Path(add.source).name == "cases.py"


def test_a_script_imported_twice_replaces_its_cases(tmp_path):
    directory = bench_dir(tmp_path)
    registry.discover(directory)
    for name in [n for n in sys.modules if n.startswith("_verdigris_bench_")]:
        del sys.modules[name]
    registry.discover(directory)
    assert len(registry.REGISTRY) == 7


def test_the_same_name_from_two_files_is_refused(tmp_path):
    directory = bench_dir(tmp_path)
    (directory / "copy.py").write_text(
        "from verdigris.benchsuite import case\n"
        "@case('launch', kind='launch', sizes=[1])\ndef other(n):\n    return {}\n")
    problems = registry.discover(directory)
    assert "registered by both" in problems["copy.py"] and "give one a new name" in problems["copy.py"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="speed", sizes=[1]), "kind must be one of memory, compute, launch, compile"),
    (dict(kind="memory", sizes=[1]), "needs work="),
    (dict(kind="launch", sizes=[]), "at least one size"),
    (dict(kind="launch", sizes=[1], roofline="copy_tbs"), "a launch case has no roofline="),
    (dict(kind="compute", sizes=[1], work=float, roofline="tensor"),
     "roofline must be one of copy_tbs, dense_tflops, dense_fp8_tflops, fp32_tflops, not 'tensor'"),
])
def test_bad_registrations_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        case("x", **kwargs)


def test_size_labels():
    label = registry.default_size_label
    assert [label(1 << 28), label(1 << 16), label(4096), label(1000), label((4096, 1 << 20))] == \
        ["2^28", "2^16", "4096", "1000", "4096x1048576"]


def test_filter_is_a_regex_on_names_or_a_kind(tmp_path):
    registry.discover(bench_dir(tmp_path))
    names = lambda pattern: [c.name for c in registry.select(pattern)]  # noqa: E731
    assert names("ADD|gemm") == ["copy-ish add", "gemm bf16"]
    assert names("compute") == ["gemm bf16"]
    assert names("launch") == ["launch", "needs a peer", "setup fails"]
    assert names("gemm") == ["gemm bf16"]  # the plot group
    assert len(names(None)) == 7
    with pytest.raises(ValueError, match="not a regular expression"):
        registry.select("(")


def test_a_script_borrowed_by_another_is_imported_once_and_its_main_never_runs(tmp_path):
    directory = tmp_path / "bench"
    directory.mkdir()
    (directory / "peer_kernels.py").write_text(textwrap.dedent('''
        """Standalone: registers nothing, so discovery leaves it alone."""
        def triton_add():
            return "their add"

        if __name__ == "__main__":
            raise AssertionError("main() ran")
    '''))
    (directory / "suite.py").write_text(textwrap.dedent('''
        from pathlib import Path
        from verdigris.benchsuite import case, load_script

        PEERS = load_script(Path(__file__).with_name("peer_kernels.py"))

        @case("borrowing", kind="launch", sizes=[1])
        def borrowing(n):
            return {"triton": PEERS.triton_add}
    '''))
    (directory / "broken_peer.py").write_text("import no_such_module_for_vg_tests\n")
    assert registry.discover(directory) == {}
    peers = registry.load_script(directory / "peer_kernels.py")
    assert peers is sys.modules["_verdigris_bench_suite"].PEERS
    assert registry.REGISTRY["borrowing"].setup(1) == {"triton": peers.triton_add}
    for _ in range(2):  # a failed import is not kept: the second try fails the same way
        with pytest.raises(ModuleNotFoundError, match="no_such_module_for_vg_tests"):
            registry.load_script(directory / "broken_peer.py")
    assert "_verdigris_bench_broken_peer" not in sys.modules


# The cases of bench/suite_*.py: every case of bench/tile_bench.py, simt_coop.py, matmul.py
# and runtime.py (issue 8: the whole suite in one run).
SUITE_CASES = {
    "suite_tile.py": ["vector add (tile) f32", "vector add (tile) bf16", "softmax f32",
                      "softmax bf16", "LayerNorm bf16", "RMSNorm bf16", "row sum f32",
                      "transpose (tile) f32"],
    "suite_simt.py": ["sum (SIMT) f32", "histogram (SIMT) u8, 256 bins", "scan (SIMT) f32",
                      "transpose (SIMT) f32", "SGEMM (SIMT) f32", "SpMV CSR (SIMT) f32"],
    "suite_matmul.py": ["GEMM bf16", "GEMM fp16", "GEMM fp8 e4m3", "GEMM+bias+GELU bf16",
                        "attention fwd bf16", "attention fwd causal bf16", "attention bwd bf16",
                        "attention bwd causal bf16"],
    "suite_attention_variants.py": ["attention fwd GQA bf16", "attention fwd GQA causal bf16",
                                    "attention fwd varlen bf16", "attention fwd varlen causal bf16",
                                    "attention fwd head dims bf16", "attention fwd fp8 e4m3"],
    "suite_shapes.py": ["Llama-3 8B linear bf16", "Llama-3 70B linear bf16",
                        "Llama-3 linear fp8 per-row scales", "Llama-3 linear fp8 per-128-block scales",
                        "grouped GEMM bf16 (MoE)"],
    "suite_runtime.py": ["launch overhead, axpy (4 args)", "launch overhead, 16 args",
                         "first call: vector add (SIMT)", "first call: softmax (tile)",
                         "first call: GEMM 1024^3 bf16 (tile)"],
}


def test_the_real_bench_scripts_register_without_any_peer_installed():
    problems = registry.discover(ROOT / "bench")
    assert problems == {}, "a bench script must import without torch, Triton or CuPy"
    for script, names in SUITE_CASES.items():
        assert [c.name for c in registry.REGISTRY.values()
                if Path(c.source).name == script] == names
    for c in registry.REGISTRY.values():
        assert Path(c.source).parent == ROOT / "bench"
        assert set(c.quick_sizes) <= set(c.sizes), c.name
        assert len({c.size_label(s) for s in c.sizes}) == len(c.sizes), c.name
        if c.work is not None:
            assert all(c.work(size) > 0 for size in c.sizes), c.name
        if c.kind != "compile":  # first calls run in fresh processes, each peer where it is
            assert "torch" in c.requires, f"{c.name} is set up with torch tensors"


def test_the_suite_compares_each_product_with_its_own_peak():
    registry.discover(ROOT / "bench")
    rooflines = {c.name: c.roofline for c in registry.REGISTRY.values()}
    assert rooflines["GEMM fp8 e4m3"] == "dense_fp8_tflops"
    assert rooflines["SGEMM (SIMT) f32"] == "fp32_tflops"
    assert rooflines["GEMM bf16"] == "dense_tflops" and rooflines["softmax f32"] == "copy_tbs"


def test_listing_the_real_suite_here(capsys):
    status = main(["bench", "--list", "--bench-dir", str(ROOT / "bench")])
    out, _ = capsys.readouterr()
    assert status == 0 and "not loaded" not in out
    for name in (n for names in SUITE_CASES.values() for n in names):
        assert re.search(rf"^{re.escape(name)} ", out, re.M), name


# ----------------------------------------------------------------------------- the command


def test_without_a_gpu_it_says_so_and_runs_nothing(capsys, monkeypatch, tmp_path):
    directory = bench_dir(tmp_path)
    status, out, err = run_cli(capsys, monkeypatch, "--bench-dir", str(directory))
    assert status == command.NO_GPU == 3
    assert "no NVIDIA GPU here (a test machine)" in err and "nothing was run" in err
    assert out == "" and not registry.REGISTRY  # the scripts were not even imported


def test_on_this_machine_without_a_gpu(capsys):
    from verdigris.runtime import driver

    if driver.is_available():
        pytest.skip("this machine has a GPU")
    status = main(["bench", "--bench-dir", str(ROOT / "bench")])
    _, err = capsys.readouterr()
    assert status == 3 and "verdigris bench: no NVIDIA GPU here (" in err


def test_list_works_without_a_gpu(capsys, monkeypatch, tmp_path):
    status, out, _ = run_cli(capsys, monkeypatch, "--bench-dir", str(bench_dir(tmp_path)),
                             "--list", "--quick")
    assert status == 0
    assert re.search(r"^copy-ish add +memory +2\^20  \(cases\.py\)$", out, re.M), out
    assert "7 case(s), 7 size(s) to measure (1 case(s) need peers that are not installed " \
        "here)" in out
    assert re.search(r"^needs a peer +launch +1  \(cases\.py\)  \[needs cutile: not installed "
                     r"here\]$", out, re.M), out
    assert "note: bench/needs_module.py not loaded: needs no_such_module_for_vg_tests" in out
    assert "standalone.py" not in out  # registers nothing: not imported, not reported


@pytest.mark.parametrize("argv, message", [
    (["--filter", "nothing-like-this"], "no benchmark case matches --filter 'nothing-like-this'"),
    (["--filter", "("], "is not a regular expression"),
])
def test_usage_errors(capsys, monkeypatch, tmp_path, argv, message):
    status, _, err = run_cli(capsys, monkeypatch, "--bench-dir", str(bench_dir(tmp_path)),
                             *argv, env=fake_env())
    assert status == 2 and message in err


def test_a_missing_bench_dir_is_a_usage_error(capsys, monkeypatch, tmp_path):
    status, _, err = run_cli(capsys, monkeypatch, "--bench-dir", str(tmp_path / "nope"))
    assert status == 2 and "no such directory" in err


def full_run(capsys, monkeypatch, tmp_path, *argv, drawn=False):
    """A `verdigris bench` run over the test cases; its plots drawn only where `drawn` (a
    test about them: drawing takes most of a run's time)."""
    if not drawn:
        monkeypatch.setattr(plots, "write_plots", lambda results, out_dir: [])
    out_dir = tmp_path / "results"
    status, out, err = run_cli(capsys, monkeypatch, "--bench-dir", str(bench_dir(tmp_path)),
                               "--out", str(out_dir), *argv, env=fake_env())
    return status, out, err, out_dir


def table_row(out, case, size):
    """The cells after the size in the table's row for `case` at `size`."""
    line = next(line for line in out.splitlines() if line.startswith(f"{case} ")
                and f" {size} " in line)
    return line.split(f" {size} ", 1)[1].split()


def test_a_run_prints_the_table_with_ratios(capsys, monkeypatch, tmp_path):
    status, out, err, _ = full_run(capsys, monkeypatch, tmp_path)
    assert status == 0, err
    assert "verdigris bench: Fake GPU 9000" in out
    assert "memory roofline: device copy 4.00 TB/s" in out
    assert "compute roofline: 1000 TFLOP/s (a test figure)" in out
    header = next(line for line in out.splitlines() if line.startswith("case "))
    assert header.split()[:7] == ["case", "size", "unit", "verdigris", "torch", "triton", "roofline"]
    # ours: best of 3.0 and 3.6 TB/s; the best peer is Triton's 4.0; the copy is 4.0
    assert table_row(out, "copy-ish add", "2^22") == [
        "TB/s", "3.60", "3.20", "4.00", "-", "0.900", "0.900", "±0.0%", "BLOCK=4096"]
    assert table_row(out, "gemm bf16", "4096") == ["TFLOP/s", "700", "730", "-", "-", "0.959",
                                                   "0.700", "±0.0%"]
    # times: theirs / ours, and the raw launch is the roofline
    assert table_row(out, "launch", "256 elements") == ["us/call", "6.00", "8.00", "20.00",
                                                        "5.00", "1.333", "0.833", "±0.0%"]
    assert table_row(out, "first call", "cold") == ["ms", "60", "-", "1300", "-", "21.667", "-",
                                                    "±0.0%"]


def test_a_case_is_compared_with_the_roofline_it_names(capsys, monkeypatch, tmp_path):
    directory = tmp_path / "bench"
    directory.mkdir()
    (directory / "peaks.py").write_text(textwrap.dedent('''
        from verdigris.benchsuite import case

        @case("gemm fp8", kind="compute", sizes=[4096], work=lambda n: 2 * n**3,
              roofline="dense_fp8_tflops", plot="gemm")
        def fp8(n):
            from test_bench_suite import Fake
            return {"verdigris": Fake(2 * n**3 / 1200e12), "torch": Fake(2 * n**3 / 1000e12)}

        @case("sgemm", kind="compute", sizes=[4096], work=lambda n: 2 * n**3,
              roofline="fp32_tflops", plot="gemm")
        def sgemm(n):
            from test_bench_suite import Fake
            return {"verdigris": Fake(2 * n**3 / 40e12), "torch": Fake(2 * n**3 / 50e12)}
    '''))
    out_dir = tmp_path / "out"
    status, out, _ = run_cli(capsys, monkeypatch, "--bench-dir", str(directory), "--out",
                             str(out_dir), env=fake_env(dense_tflops=1000.0))
    assert status == 0
    assert table_row(out, "gemm fp8", "4096") == ["TFLOP/s", "1200", "1000", "1.200", "0.600",
                                                  "±0.0%"]
    assert table_row(out, "sgemm", "4096") == ["TFLOP/s", "40", "50", "0.800", "0.640", "±0.0%"]
    assert "dense fp8 peak roofline: 2000 TFLOP/s (datasheet)" in out
    assert "fp32 CUDA-core peak roofline: 62 TFLOP/s (datasheet)" in out
    cases = json.loads((out_dir / "results.json").read_text())["cases"]
    assert [c["roofline"] for c in cases] == ["dense_fp8_tflops", "fp32_tflops"]


def test_failures_are_notes_and_never_figures(capsys, monkeypatch, tmp_path):
    status, out, _, _ = full_run(capsys, monkeypatch, tmp_path)
    assert status == 0
    assert table_row(out, "broken", "1") == ["TB/s", "WRONG", "error", "1.00", "-",
                                             "-", "-", "-"]
    notes = out[out.index("notes:"):]
    assert "broken 1 verdigris: wrong: relative error 1.0e+00 > 1e-05" in notes
    assert "broken 1 torch: RuntimeError: out of memory\n" in notes  # first line only
    assert "needs a peer: skipped (needs cutile, not installed)" in notes
    assert "setup fails 1: setup: ValueError: no such size" in notes


def test_a_run_writes_json_markdown_and_the_table(capsys, monkeypatch, tmp_path):
    status, out, _, out_dir = full_run(capsys, monkeypatch, tmp_path, "--filter", "add|launch")
    assert status == 0
    data = json.loads((out_dir / "results.json").read_text())
    assert data["meta"]["card"] == "Fake GPU 9000" and data["meta"]["arch"] == "sm_90"
    assert data["meta"]["filter"] == "add|launch" and data["meta"]["quick"] is False
    assert data["meta"]["clocks"] == {"start": {"clocks.sm": 1980}, "end": {"clocks.sm": 1755}}
    assert data["meta"]["commit"] == machine.commit()["commit"] != ""
    assert [c["name"] for c in data["cases"]] == ["copy-ish add", "launch", "needs a peer", "setup fails"]
    assert data["ceilings"]["copy_tbs"] == 4.0 and data["ceilings"]["dense_tflops"] is None
    row = next(r for r in data["rows"] if r["case"] == "copy-ish add" and r["size"] == "2^20")
    assert row["values"]["verdigris"] == pytest.approx(3.6)
    assert row["configs"]["verdigris"] == "BLOCK=4096" and row["best_peer"] == "triton"
    assert row["vs_best_peer"] == pytest.approx(0.9) and row["vs_roofline"] == pytest.approx(0.9)
    # per size: both configurations of ours in the first pass, each peer in the second
    # (torch and Triton have one configuration: nothing to choose), and ours' twin
    add = [(m["size"], m["peer"], m["config"], m["stage"], m["value"], len(m["rounds"]))
           for m in data["measurements"] if m["case"] == "copy-ish add"]
    assert add[:8] == [
        ("2^20", "verdigris", "BLOCK=1024", "select", pytest.approx(3.0), 3),
        ("2^20", "verdigris", "BLOCK=4096", "select", pytest.approx(3.6), 3),
        ("2^20", "torch", "", "select", None, 0), ("2^20", "triton", "", "select", None, 0),
        ("2^20", "verdigris", "BLOCK=4096", "final", pytest.approx(3.6), 3),
        ("2^20", "torch", "", "final", pytest.approx(3.2), 3),
        ("2^20", "triton", "", "final", pytest.approx(4.0), 3),
        ("2^20", "verdigris", "BLOCK=4096", "control", pytest.approx(3.6), 3)]
    assert len(add) == 16
    assert row["spreads"]["torch"] == [pytest.approx(3.2)] * 2
    assert row["a_vs_a"] == 1.0 and row["noise"] == 0.0 and row["level"] is False
    markdown = (out_dir / "index.md").read_text()
    assert markdown.startswith("# verdigris bench: Fake GPU 9000, ")
    assert "| copy-ish add | 2^20 | TB/s | 3.60 | 3.20 | 4.00 |" in markdown
    assert (out_dir / "table.txt").read_text() in out
    assert f"wrote {out_dir / 'results.json'}" in out


def test_quick_runs_the_quick_sizes(capsys, monkeypatch, tmp_path):
    status, out, err, out_dir = full_run(capsys, monkeypatch, tmp_path, "--quick", "--filter", "add")
    assert status == 0
    sizes = {m["size"] for m in json.loads((out_dir / "results.json").read_text())["measurements"]}
    assert sizes == {"2^20"}
    assert "(quick)" in out
    assert re.findall(r"\] (\d+)/(\d+) ", err)[-1] == ("2", "2")  # the rooflines, one size


def test_the_default_out_dir_is_under_docs_with_date_and_card(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench").mkdir()
    path = command.default_out_dir(tmp_path / "bench", "2026-12-01", "NVIDIA H200", False)
    assert path == (tmp_path / "docs" / "bench" / "2026-12-01-nvidia-h200").resolve()
    quick = command.default_out_dir(tmp_path / "bench", "2026-12-01", "NVIDIA H200", True)
    assert quick.name == "2026-12-01-nvidia-h200-quick"


def test_an_interrupted_run_keeps_what_it_measured(capsys, monkeypatch, tmp_path):
    directory = bench_dir(tmp_path)
    (directory / "stop.py").write_text(textwrap.dedent('''
        from verdigris.benchsuite import case

        @case("zz interrupted", kind="compile", sizes=["cold"], size_label=str)
        def stop(size):
            raise KeyboardInterrupt
    '''))
    out_dir = tmp_path / "out"
    status, out, _ = run_cli(capsys, monkeypatch, "--bench-dir", str(directory), "--out",
                             str(out_dir), "--filter", "add|interrupted", env=fake_env())
    assert status == 130
    data = json.loads((out_dir / "results.json").read_text())
    assert data["meta"]["interrupted"] is True
    assert {m["case"] for m in data["measurements"]} == {"copy-ish add"}


def test_the_commit_is_heads_or_said_to_be_unknown(monkeypatch, tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    head = head.strip()
    monkeypatch.setattr(machine, "_checkout", lambda: tmp_path)
    assert machine.commit() == {"commit": head, "changed": False}
    (tmp_path / "a.py").write_text("x = 2\n")
    assert machine.commit() == {"commit": head, "changed": True}
    monkeypatch.setattr(machine, "_checkout", lambda: tmp_path / "no-checkout")
    monkeypatch.delenv("VERDIGRIS_BENCH_COMMIT", raising=False)
    assert machine.commit() == {"commit": "unknown", "changed": None}
    monkeypatch.setenv("VERDIGRIS_BENCH_COMMIT", "abc123")  # a copy of a tree, without .git
    assert machine.commit() == {"commit": "abc123", "changed": None}


def test_the_clocks_from_nvidia_smi_or_pynvml_or_said_to_be_unavailable(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    smi.write_text("#!/bin/sh\necho '1980, 2619, 1980, 2619, 45, 120.52, P0'\n")
    smi.chmod(0o755)
    assert machine.clocks() == {"source": "nvidia-smi", "clocks.sm": 1980, "clocks.mem": 2619,
                                "clocks.max.sm": 1980, "clocks.max.mem": 2619,
                                "temperature.gpu": 45, "power.draw": 120.52, "pstate": "P0"}
    smi.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    assert machine.clocks() == {"unavailable": "nvidia-smi: No devices were found; pynvml is "
                                               "not installed"}
    smi.unlink()
    assert machine.clocks()["unavailable"].startswith("nvidia-smi: [Errno 2]")

    class FakeNvml:
        NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = "sm", "mem", "t"
        nvmlInit = nvmlShutdown = staticmethod(lambda: None)
        nvmlDeviceGetHandleByIndex = staticmethod(lambda i: i)
        nvmlDeviceGetClockInfo = staticmethod(lambda gpu, kind: {"sm": 1500, "mem": 2600}[kind])
        nvmlDeviceGetMaxClockInfo = staticmethod(lambda gpu, kind: {"sm": 1980, "mem": 2619}[kind])
        nvmlDeviceGetTemperature = staticmethod(lambda gpu, which: 60)

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml)
    assert machine.clocks() == {"source": "pynvml", "clocks.sm": 1500, "clocks.mem": 2600,
                                "clocks.max.sm": 1980, "clocks.max.mem": 2619,
                                "temperature.gpu": 60}


def test_a_first_call_script_makes_its_inputs_before_the_clock_and_the_switch_reaches_it(
        monkeypatch, tmp_path):
    """bench/runtime.py's first call of ours, on the fake driver, with the warm-up off: it
    runs, defines its kernels after its inputs, and no warm-up ran beside it."""
    from tests import fakecuda

    if fakecuda.library_dir() is None:
        pytest.skip("needs a C compiler")
    runtime = registry.load_script(ROOT / "bench" / "runtime.py")
    script = runtime.FIRST_CALL["ours"]
    assert script.index("vg.asarray(") < script.index("perf_counter()") < \
        script.index("from vg_runtime_kernels import")
    for name, value in fakecuda.environment().items():
        monkeypatch.setenv(name, value)
    runtime._module(str(tmp_path), "vg_runtime_kernels", runtime.OURS)
    ms, log = runtime.first_call("ours", "vector_add", str(tmp_path), str(tmp_path / "cache"),
                                 warmup=False)
    assert ms > 0 and log[0].startswith("verdigris: compiled vector_add")
    assert not any("warmed up" in line for line in log)


def test_the_norm_checks_fail_a_kernel_that_forgets_the_mean(monkeypatch):
    """bench/suite_tile.py's LayerNorm and RMSNorm inputs and tolerance, on the CPU: a right
    kernel (float32 math, a bfloat16 output) passes; a LayerNorm that forgets the mean, in
    the variance or in both places, and an RMSNorm that subtracts it, fail. Their twins on
    zero-mean rows (the inputs before) miss the mean by only the rows' sample means, about
    1/sqrt(8192) = 0.011 of the output: near the old 1e-2, passed or failed by chance."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    suite = registry.load_script(ROOT / "bench" / "suite_tile.py")
    rng, eps = np.random.default_rng(), suite.EPS

    def bf16(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float32)

    def layernorm_ref(x, w, b):  # float64, as F.layer_norm(x.double(), ...)
        x = x.astype(np.float64)
        centred = x - x.mean(-1, keepdims=True)
        return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps) * w + b

    def rmsnorm_ref(x, w):
        x = x.astype(np.float64)
        return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w

    def normed(x, mean, spread):  # float32 math, as a kernel does: (x - mean) / rms(spread)
        return (x - mean) / np.sqrt((spread * spread).mean(-1, keepdims=True) + np.float32(eps))

    def errors(offset):
        monkeypatch.setattr(suite, "ROW_OFFSET", offset)
        x, w, b = (bf16(a) for a in suite.norm_inputs(32, 8192, rng))
        out = np.empty_like(x)
        mean = x.mean(-1, keepdims=True, dtype=np.float32)
        kernels = {
            "layernorm": (lambda: normed(x, mean, x - mean) * w + b, layernorm_ref(x, w, b)),
            "layernorm, no mean": (lambda: normed(x, 0, x) * w + b, layernorm_ref(x, w, b)),
            "layernorm, no mean in the variance": (lambda: normed(x, mean, x) * w + b,
                                                   layernorm_ref(x, w, b)),
            "rmsnorm": (lambda: normed(x, 0, x) * w, rmsnorm_ref(x, w)),
            "rmsnorm, mean subtracted": (lambda: normed(x, mean, x - mean) * w,
                                         rmsnorm_ref(x, w))}
        return {name: checked(lambda f=f: np.copyto(out, bf16(f())), out, want,
                              suite.NORM_RTOL).check() or "right"
                for name, (f, want) in kernels.items()}, {
                name: float(np.linalg.norm(bf16(f()) - want) / np.linalg.norm(want))
                for name, (f, want) in kernels.items()}

    verdicts, _ = errors(suite.ROW_OFFSET)
    assert verdicts["layernorm"] == verdicts["rmsnorm"] == "right"
    for wrong in ("layernorm, no mean", "layernorm, no mean in the variance",
                  "rmsnorm, mean subtracted"):
        assert verdicts[wrong].startswith("relative error"), wrong
    _, zero_mean = errors(0.0)
    assert zero_mean["layernorm, no mean"] < 2e-2 and zero_mean["rmsnorm, mean subtracted"] < 2e-2


# ----------------------------------------------------------------------------- two passes


class ScriptedTimer(FakeTimer):
    """Device seconds per round by pass, key and callable, from `script`; the passes it was
    asked for."""

    def __init__(self, script):
        self.script, self.passes = script, []

    def device_seconds_in_turn(self, fns, final):
        self.passes.append((final, list(fns)))
        return {key: self.script(final, key, fn) for key, fn in fns.items()}


class Steps:
    def step(self, label):
        pass


def two_pass_run(script, torch_seconds):
    """A memory case of 1e12 bytes (TB/s = 1 / seconds) at one size per torch figure: ours
    in two configurations, torch in one, timed by a ScriptedTimer running `script`."""
    @case("two passes", kind="memory", sizes=list(torch_seconds), work=lambda n: 1e12)
    def setup(torch_s):
        return {"verdigris": {"lucky": Fake(), "steady": Fake()}, "torch": Fake(torch_s)}

    timer = ScriptedTimer(script)
    results = runner.run(registry.select("two passes"), timer=timer, quick=False, bar=Steps())
    return timer, results


def test_the_chosen_configuration_is_re_timed_and_its_luck_left_behind():
    """Pass 1 times only the peers with several configurations; pass 2 re-times each peer's
    choice with ours' twin, last; the figures are pass 2's, every round kept."""
    def script(final, key, _):
        if not final:  # 'lucky' drew a fast first pass: 4 TB/s against 2.5
            return {"lucky": [0.25, 0.3, 0.2], "steady": [0.4, 0.4, 0.4]}[key[1]]
        return [0.5, 0.5, 0.5] if key[0] == "verdigris" else [0.8, 0.8, 0.8]

    timer, results = two_pass_run(script, [0.8])
    assert timer.passes == [
        (False, [("verdigris", "lucky"), ("verdigris", "steady")]),
        (True, [("verdigris", "lucky", "final"), ("torch", "", "final"),
                ("verdigris", "lucky", "control")])]
    [row] = report.rows(results)
    assert row.configs["verdigris"] == "lucky"
    assert row.values["verdigris"] == pytest.approx(2.0)  # not the first pass's 4.0
    assert row.vs_best_peer == pytest.approx(1.6) and row.noise == 0
    select = [m for m in results.measurements if m.stage == runner.SELECT]
    assert [m.value for m in select] == [pytest.approx(4.0), pytest.approx(2.5), None]
    assert select[0].rounds == [pytest.approx(4.0), pytest.approx(1 / 0.3), pytest.approx(5.0)]


def test_no_ratio_is_printed_finer_than_the_a_vs_a_noise():
    """Ours against its twin moves 2% from round to round: ratios get two decimals (the
    noise's first significant digit), and one within 2% of 1 reads 'level' (its twin, 40%
    apart, does not)."""
    def script(final, key, fn):
        if key[0] == "torch":
            return [fn.seconds] * 3
        if key[-1] == "control":
            return [0.5 * 0.98, 0.5, 0.5 * 1.02]
        return [0.5, 0.5, 0.5]

    _, results = two_pass_run(script, [0.505, 0.7])
    level, apart = report.rows(results)
    assert level.a_vs_a == pytest.approx(1.0) and level.noise == pytest.approx(0.02)
    assert level.level and not apart.level and apart.vs_best_peer == pytest.approx(1.4)
    table = report.format_table(results)
    assert table_row(table, "two passes", "0.505") == ["TB/s", "2.00", "1.98", "level", "-",
                                                      "±2.0%", "lucky"]
    assert table_row(table, "two passes", "0.7") == ["TB/s", "2.00", "1.43", "1.40", "-",
                                                    "±2.0%", "lucky"]
    assert [report.decimals(n) for n in (None, 0.0, 0.0004, 0.005, 0.02, 0.1, 0.3, 2.0)] == \
        [3, 3, 3, 3, 2, 1, 1, 0]


# ----------------------------------------------------------------------------- pieces


def test_checked_poisons_runs_and_compares():
    import numpy as np

    rng = np.random.default_rng()
    want = rng.random(100)
    out = np.zeros(100, np.float32)
    good = checked(lambda: np.copyto(out, want, casting="unsafe"), out, want, 1e-6)
    assert good.check() is None
    lazy = checked(lambda: None, out, want, 1e-6)  # writes nothing: the poison shows
    assert "relative error nan" in lazy.check()
    counts = np.zeros(8, np.int32)
    assert "relative error" in checked(lambda: None, counts, np.arange(1, 9)).check()


def test_returning_checks_what_a_call_returns():
    import numpy as np

    rng = np.random.default_rng()
    want = rng.random(50)
    assert returning(lambda: want.astype(np.float32), want, 1e-6).check() is None
    assert "relative error" in returning(lambda: want[::-1].copy(), want, 1e-6).check()


def test_a_kernel_that_adds_into_its_output_is_checked_with_its_zeroing():
    """The zeroing is part of the timed call: a kernel that forgets it fails its check."""
    import numpy as np

    rng = np.random.default_rng()
    want = rng.random(50)
    total = np.zeros(1)

    def add_into_total():  # a kernel that adds into its output, as a sum with atomics
        total[0] += want.sum()

    def zeroed():
        total.fill(0)
        add_into_total()

    assert checked(zeroed, total, [want.sum()], 1e-12).check() is None
    assert "relative error nan" in checked(add_into_total, total, [want.sum()], 1e-12).check()


def test_the_plain_progress_bar_counts_steps(tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as stream, bar(3, stream, plain=True) as progress:
        for label in ("a", "b", "c"):
            progress.step(label)
    lines = log.read_text().splitlines()
    assert lines[0].startswith("[") and lines[0].endswith("] 1/3 a")
    assert lines[-1] == "[" + "#" * 24 + "] 3/3 c"


def test_plots_from_a_run(capsys, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib")
    status, out, _, out_dir = full_run(capsys, monkeypatch, tmp_path, drawn=True)
    assert status == 0
    names = sorted(p.name for p in out_dir.glob("*.png"))
    assert names == ["compile.png", "gemm.png", "launch.png", "memory.png"]
    for path in out_dir.glob("*.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert "![memory](memory.png)" in (out_dir / "index.md").read_text()
    assert "memory.png" in out


def test_without_matplotlib_the_run_says_how_to_get_plots(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(plots, "available", lambda: False)
    status, out, _, out_dir = full_run(capsys, monkeypatch, tmp_path, drawn=True)
    assert status == 0 and not list(out_dir.glob("*.png"))
    assert "pip install 'verdigris[bench]'" in out


def test_launch_timing_takes_turns_and_reports_failures(monkeypatch):
    """The launch timer runs a case's callables batch by batch in turn (the host's drift
    then falls on all of them alike), keeps their order, gives every batch's figure, and
    gives a callable that raises, at its warm-up or later, its exception in their place."""
    timer = timing.GpuTimer(quick=True)
    monkeypatch.setattr(timer, "synchronize", lambda: None)
    calls = []

    def launcher(name, fail_after=None):
        def launch():
            calls.append(name)
            if fail_after is not None and len(calls) > fail_after:
                raise RuntimeError(f"{name} failed")
        return launch

    figures = timer.host_us_per_call({"raw": launcher("raw"), "ours": launcher("ours"),
                                      "late": launcher("late", fail_after=2000),
                                      "never": lambda: 1 / 0}, final=True)
    rounds = timer.host_rounds[True]
    assert list(figures) == ["raw", "ours", "late", "never"]
    assert all(len(figures[k]) == rounds and min(figures[k]) > 0 for k in ("raw", "ours"))
    assert isinstance(figures["late"], RuntimeError) and isinstance(figures["never"], ZeroDivisionError)
    batches = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]
    timed = batches[3:]  # after the warm-ups of raw, ours and late
    assert timed[:4] == ["raw", "ours", "late", "ours"]  # the second round starts one on
    assert calls.count("raw") == calls.count("ours") == 200 + rounds * timer.batch


@pytest.mark.parametrize("final", [False, True])
def test_device_timing_takes_turns_over_rounds(monkeypatch, final):
    """The implementations timed together get an equal share of the time in each round, in
    turn, and every round's figure; one that fails leaves the rounds."""
    timer = timing.GpuTimer()
    rounds = timer.device_rounds[final]
    seen = []

    def device_seconds(fn, share=1.0):
        seen.append((fn(), share))
        return {"a": 1.0, "b": 2.0}[fn()] + len(seen)

    monkeypatch.setattr(timer, "device_seconds", device_seconds)

    def broken():
        raise RuntimeError("no such kernel")

    figures = timer.device_seconds_in_turn({"a": lambda: "a", "b": lambda: "b", "c": broken},
                                           final)
    order = [n for n, _ in seen]
    assert order[:4] == ["a", "b", "b", "a"] and len(order) == 2 * rounds
    assert figures["a"] == [1.0 + i + 1 for i, n in enumerate(order) if n == "a"]
    assert len(figures["b"]) == rounds and isinstance(figures["c"], RuntimeError)
    assert {share for _, share in seen} == {1 / rounds}

"""What a run reports: one row per case and size, as a text table, Markdown and JSON.

Takes: `runner.Results`. Gives: `rows(results)` (per case and size: each peer's figure from
the runner's second pass, its configuration and the spread of its rounds, errors,
verdigris's ratios and the A-vs-A noise), `format_table(results)` (the text the command
prints), `to_json(results)`, `to_markdown(results, plots)` (the page written beside the
plots) and `write(results, out_dir, plots)`.

Guarantees: both ratios read "higher is better for verdigris": against the best other
peer, ours / theirs for throughput and theirs / ours for times; against the roofline, the
fraction of the ceiling reached (the copy bandwidth for memory cases, the dense bf16 peak
for compute cases unless the case names another, e.g. the fp8 or fp32 peak; the raw driver
launch for launch cases; none for compile times). A figure that is missing or failed is
never used in a ratio. No ratio is printed finer than the noise: the A-vs-A control (ours'
chosen configuration timed twice in the second pass) gives the noise, the largest
deviation from 1 of ours against itself, round by round or in medians; a ratio's last
digit is where the noise's first significant one is, and a ratio to the best peer within
the noise reads "level".
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .peers import PEERS
from .registry import KINDS, OURS, ROOFLINE, ROOFLINES
from .runner import CONTROL, FINAL
FORMATS = {"memory": "{:.2f}", "compute": "{:.0f}", "launch": "{:.2f}", "compile": "{:.0f}"}
assert set(FORMATS) == set(KINDS)


@dataclass
class Row:
    case: str
    kind: str
    unit: str
    size: str
    values: dict = field(default_factory=dict)  # peer -> its figure (the second pass's median)
    configs: dict = field(default_factory=dict)  # peer -> the configuration that gave it
    spreads: dict = field(default_factory=dict)  # peer -> [lowest, highest] of its rounds
    errors: dict = field(default_factory=dict)  # peer (or "*" for the setup) -> first error
    roofline: float | None = None
    best_peer: str | None = None  # the best of the others
    vs_best_peer: float | None = None
    vs_roofline: float | None = None
    a_vs_a: float | None = None  # ours against its twin, oriented as vs_best_peer
    noise: float | None = None  # the largest deviation from 1 of ours against its twin
    level: bool = False  # vs_best_peer is within the noise


LEGEND = ("Figures: each peer's chosen configuration re-timed in a second pass, in turn "
          "with the others (the median of its rounds). Ratios: higher is better for "
          "verdigris (throughput ours/theirs, times theirs/ours; vs roofline: the fraction "
          "of the ceiling reached), printed to about the A-vs-A noise (ours against itself, "
          "its largest deviation from 1); within it, 'level'.")


def _better(kind: str):
    return max if KINDS[kind].higher_is_better else min


def _oriented(kind: str, ours: float, theirs: float) -> float:
    """ours against theirs, higher is better for ours."""
    return ours / theirs if KINDS[kind].higher_is_better else theirs / ours


def rows(results) -> list:
    by_key = {}
    for case in results.cases:
        by_key.update({(case.name, m.size): None for m in results.measurements
                       if m.case == case.name})
    cases = {c.name: c for c in results.cases}
    table = []
    for case_name, size in by_key:
        kind = cases[case_name].kind
        row = Row(case_name, kind, KINDS[kind].unit, size)
        twin = None
        for m in results.measurements:
            if (m.case, m.size) != (case_name, size):
                continue
            if m.error:
                row.errors.setdefault(m.peer, m.error)
            elif m.stage == FINAL:
                row.values[m.peer], row.configs[m.peer] = m.value, m.config
                row.spreads[m.peer] = [min(m.rounds), max(m.rounds)]
            elif m.stage == CONTROL:
                twin = m
        ours = next((m for m in results.measurements if (m.case, m.size, m.peer, m.stage)
                     == (case_name, size, OURS, FINAL) and not m.error), None)
        if ours is not None and twin is not None:
            _control(row, ours, twin)
        _ratios(row, results.ceilings, cases[case_name].roofline)
        table.append(row)
    return table


def _control(row: Row, ours, twin) -> None:
    """The A-vs-A ratio and the noise it shows: the largest deviation from 1 of ours against
    its twin, in medians or in any round (the rounds of one pass take turns, so round i of
    each is the same moment of the run)."""
    row.a_vs_a = _oriented(row.kind, ours.value, twin.value)
    per_round = [_oriented(row.kind, a, b) for a, b in zip(ours.rounds, twin.rounds)]
    row.noise = max(abs(r - 1) for r in [row.a_vs_a, *per_round])


def _ratios(row: Row, ceilings: dict, ceiling_key: str | None) -> None:
    row.roofline = ceilings.get(ceiling_key) if ceiling_key else row.values.get(ROOFLINE)
    others = {p: v for p, v in row.values.items() if p not in (OURS, ROOFLINE)}
    ours = row.values.get(OURS)
    if others:
        row.best_peer = _better(row.kind)(others, key=others.get)
    if ours is None:
        return
    if row.best_peer is not None:
        row.vs_best_peer = _oriented(row.kind, ours, others[row.best_peer])
        row.level = row.noise is not None and abs(row.vs_best_peer - 1) <= row.noise
    if row.roofline and row.kind != "compile":
        row.vs_roofline = _oriented(row.kind, ours, row.roofline)


def _peer_columns(table) -> list:
    present = {p for row in table for p in (*row.values, *row.errors)}
    return [p for p in (*PEERS, ROOFLINE) if p in present] + sorted(
        present - set(PEERS) - {ROOFLINE, "*"})


def _cell(row: Row, peer: str) -> str:
    if peer in row.values:
        return FORMATS[row.kind].format(row.values[peer])
    if peer in row.errors:
        return "WRONG" if row.errors[peer].startswith("wrong") else "error"
    return "-"


def decimals(noise: float | None) -> int:
    """The decimals of a ratio whose noise is `noise`: its last digit where the noise's
    first significant one is, as a measurement is rounded to its uncertainty (at most 3,
    where there is no noise or none was measured)."""
    if not noise:
        return 3
    return max(0, min(3, -math.floor(math.log10(noise))))


def _ratio(value, noise) -> str:
    return "-" if value is None else f"{value:.{decimals(noise)}f}"


def _noise(row: Row) -> str:
    return "-" if row.noise is None else f"±{row.noise * 100:.1f}%"


def _grid(results):
    """Header and cells of the table, shared by the text and Markdown forms."""
    table = rows(results)
    peers = _peer_columns(table)
    header = ["case", "size", "unit", *peers, "vs best peer", "vs roofline", "A-vs-A",
              "our best config"]
    cells = []
    for row in table:
        failed = "setup failed" if "*" in row.errors else ""
        cells.append([row.case, row.size, row.unit, *(_cell(row, p) for p in peers),
                      "level" if row.level else _ratio(row.vs_best_peer, row.noise),
                      _ratio(row.vs_roofline, row.noise), _noise(row),
                      row.configs.get(OURS, failed)])
    return table, header, cells


def _notes(results, table) -> list:
    notes = [f"{case}: skipped ({why})" for case, why in results.skipped.items()]
    for row in table:
        notes += [f"{row.case} {row.size}{'' if peer == '*' else ' ' + peer}: {error}"
                  for peer, error in row.errors.items()]
    return notes


def _ceiling_lines(results) -> list:
    c = results.ceilings
    lines = []
    if c.get("copy_tbs"):
        lines.append(f"memory roofline: device copy {c['copy_tbs']:.2f} TB/s (read + write)")
    if c.get("dense_tflops"):
        lines.append(f"compute roofline: {c['dense_tflops']:.0f} TFLOP/s "
                     f"({c['dense_tflops_source']})")
    used = {case.roofline for case in results.cases}
    for key in ("dense_fp8_tflops", "fp32_tflops"):
        if c.get(key) and key in used:
            lines.append(f"{ROOFLINES[key]} roofline: {c[key]:.0f} TFLOP/s (datasheet)")
    if c.get("cublas_bf16_tflops"):
        lines.append(f"cuBLAS bf16 GEMM as measured: {c['cublas_bf16_tflops']:.0f} TFLOP/s")
    return lines


def _title(results) -> str:
    meta = results.meta
    versions = ", ".join(f"{p} {v}" for p, v in meta.get("peers", {}).items())
    return (f"verdigris bench: {meta.get('card', '?')}, {meta.get('date', '?')}"
            + (" (quick)" if meta.get("quick") else "") + (f"; {versions}" if versions else ""))


def format_table(results) -> str:
    table, header, cells = _grid(results)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *cells)]
    numeric = set(range(3, len(header) - 1))

    def line(items):
        return "  ".join(str(x).rjust(w) if i in numeric else str(x).ljust(w)
                         for i, (x, w) in enumerate(zip(items, widths))).rstrip()

    out = [_title(results), *_ceiling_lines(results), "", line(header),
           line(["-" * w for w in widths]), *map(line, cells)]
    notes = _notes(results, table)
    if notes:
        out += ["", "notes:", *(f"  {n}" for n in notes)]
    out.append("")
    out.append(LEGEND)
    return "\n".join(out) + "\n"


def to_json(results) -> dict:
    return {
        "meta": results.meta,
        "ceilings": results.ceilings,
        "kinds": {k: asdict(v) for k, v in KINDS.items()},
        "cases": [{"name": c.name, "kind": c.kind, "unit": c.unit, "plot": c.plot,
                   "roofline": c.roofline, "requires": list(c.requires), "source": c.source,
                   "sizes": [c.size_label(s) for s in c.sizes]}
                  for c in results.cases],
        "skipped": results.skipped,
        "rows": [asdict(r) for r in rows(results)],
        "measurements": [asdict(m) for m in results.measurements],
    }


def to_markdown(results, plots) -> str:
    table, header, cells = _grid(results)
    out = [f"# {_title(results)}", "", *(f"- {line}" for line in _ceiling_lines(results)), "",
           "| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i < 3 or i == len(header) - 1 else "---:"
                          for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in cells]
    out += ["", LEGEND, ""]
    notes = _notes(results, table)
    if notes:
        out += ["Notes:", "", *(f"- {n}" for n in notes), ""]
    out += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(out) + "\n"


def write(results, out_dir, plots=()) -> dict:
    """results.json, index.md (table and plots) and table.txt in `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "index.md",
             "table": out_dir / "table.txt"}
    paths["json"].write_text(json.dumps(to_json(results), indent=1) + "\n")
    paths["markdown"].write_text(to_markdown(results, plots))
    paths["table"].write_text(format_table(results))
    return paths

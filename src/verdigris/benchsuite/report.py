"""What a run reports: one row per case and size, as a text table, Markdown and JSON.

Takes: `runner.Results`. Gives: `rows(results)` (per case and size: each peer's best figure
and configuration, errors, and verdigris's ratios), `format_table(results)` (the text the
command prints), `to_json(results)`, `to_markdown(results, plots)` (the page written beside
the plots) and `write(results, out_dir, plots)`.

Guarantees: both ratios read "higher is better for verdigris": against the best other
peer, ours / theirs for throughput and theirs / ours for times; against the roofline, the
fraction of the ceiling reached (the copy bandwidth for memory cases, the dense bf16 peak
for compute cases unless the case names another, e.g. the fp8 or fp32 peak; the raw driver
launch for launch cases; none for compile times). A figure that is missing or failed is
never used in a ratio.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .peers import PEERS
from .registry import KINDS, ROOFLINE, ROOFLINES

OURS = "verdigris"
FORMATS = {"memory": "{:.2f}", "compute": "{:.0f}", "launch": "{:.2f}", "compile": "{:.0f}"}
assert set(FORMATS) == set(KINDS)


@dataclass
class Row:
    case: str
    kind: str
    unit: str
    size: str
    values: dict = field(default_factory=dict)  # peer -> best figure
    configs: dict = field(default_factory=dict)  # peer -> the configuration that gave it
    errors: dict = field(default_factory=dict)  # peer (or "*" for the setup) -> first error
    roofline: float | None = None
    best_peer: str | None = None  # the best of the others
    vs_best_peer: float | None = None
    vs_roofline: float | None = None


def _better(kind: str):
    return max if KINDS[kind].higher_is_better else min


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
        better = _better(kind)
        for m in results.measurements:
            if (m.case, m.size) != (case_name, size):
                continue
            if m.value is None:
                row.errors.setdefault(m.peer, m.error or "failed")
            elif m.peer not in row.values or better(m.value, row.values[m.peer]) != row.values[m.peer]:
                row.values[m.peer], row.configs[m.peer] = m.value, m.config
        _ratios(row, results.ceilings, cases[case_name].roofline)
        table.append(row)
    return table


def _ratios(row: Row, ceilings: dict, ceiling_key: str | None) -> None:
    higher = KINDS[row.kind].higher_is_better
    row.roofline = ceilings.get(ceiling_key) if ceiling_key else row.values.get(ROOFLINE)
    others = {p: v for p, v in row.values.items() if p not in (OURS, ROOFLINE)}
    ours = row.values.get(OURS)
    if others:
        row.best_peer = _better(row.kind)(others, key=others.get)
    if ours is None:
        return
    if row.best_peer is not None:
        theirs = others[row.best_peer]
        row.vs_best_peer = ours / theirs if higher else theirs / ours
    if row.roofline and row.kind != "compile":
        row.vs_roofline = ours / row.roofline if higher else row.roofline / ours


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


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _grid(results):
    """Header and cells of the table, shared by the text and Markdown forms."""
    table = rows(results)
    peers = _peer_columns(table)
    header = ["case", "size", "unit", *peers, "vs best peer", "vs roofline", "our best config"]
    cells = []
    for row in table:
        failed = "setup failed" if "*" in row.errors else ""
        cells.append([row.case, row.size, row.unit, *(_cell(row, p) for p in peers),
                      _ratio(row.vs_best_peer), _ratio(row.vs_roofline),
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
    out.append("ratios: higher is better for verdigris (throughput ours/theirs, times "
               "theirs/ours; vs roofline: the fraction of the ceiling reached)")
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
    out += ["", "Ratios: higher is better for verdigris (throughput ours/theirs, times "
            "theirs/ours; vs roofline: the fraction of the ceiling reached).", ""]
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

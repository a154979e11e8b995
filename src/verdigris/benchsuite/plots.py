"""PNG plots of a run (matplotlib, the optional `bench` extra).

Takes: `runner.Results` and an output directory. Gives: `available()` and
`write_plots(results, out_dir)` -> the paths written: one figure per plot group
(`Case.plot`), `<group>.png`. Memory and compute cases are drawn as lines, throughput
against size with one line per peer and the roofline dashed; launch overhead and compile
times as grouped bars, one group per case and size. Guarantees: the figures are drawn
off-screen (the Agg backend, no display needed); titles carry the card and the date;
failed figures are left out of the lines, never drawn as zero.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .registry import KINDS, ROOFLINE, ROOFLINES
from .report import rows

# One colour per peer in every figure (verdigris in its own colour), others from the cycle.
COLORS = {"verdigris": "#2a9d8f", "torch": "#ee4c2c", "triton": "#5b4bc4", "cupy": "#1f77b4",
          "cutile": "#76b900", "flash_attn": "#e9a23b", ROOFLINE: "#9a9a9a"}


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _lines(plt, group: str, cases, table, results):
    columns = min(3, len(cases))
    height = -(-len(cases) // columns)
    fig, axes = plt.subplots(height, columns, figsize=(5.2 * columns, 3.8 * height),
                             squeeze=False)
    for ax, case in zip(axes.flat, cases):
        case_rows = [r for r in table if r.case == case.name]
        sizes = [r.size for r in case_rows]
        peers = [p for p in dict.fromkeys(p for r in case_rows for p in r.values) if p != ROOFLINE]
        for peer in peers:
            points = [(i, r.values[peer]) for i, r in enumerate(case_rows) if peer in r.values]
            ax.plot(*zip(*points), marker="o", label=peer, color=COLORS.get(peer),
                    linewidth=2.5 if peer == "verdigris" else 1.5)
        ceiling = results.ceilings.get(case.roofline)
        if ceiling:
            ax.axhline(ceiling, color="gray", linestyle="--",
                       label=f"{ROOFLINES[case.roofline]} {ceiling:.2f} {case.unit}")
        ax.set_xticks(range(len(sizes)), sizes, rotation=30, fontsize=8)
        ax.set_title(case.name, fontsize=10)
        ax.set_ylabel(case.unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(cases):]:
        ax.set_visible(False)
    return fig


def _bars(plt, group: str, cases, table, results):
    names = {c.name for c in cases}
    groups = [r for r in table if r.case in names]
    peers = list(dict.fromkeys(p for r in groups for p in r.values))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) * max(1, len(peers)) / 2), 4.2))
    width = 0.8 / max(1, len(peers))
    for k, peer in enumerate(peers):
        points = [(i + k * width, r.values[peer]) for i, r in enumerate(groups) if peer in r.values]
        bars = ax.bar(*zip(*points), width=width, label=peer, color=COLORS.get(peer))
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    labels = [r.case if len({g.size for g in groups if g.case == r.case}) == 1
              else f"{r.case}\n{r.size}" for r in groups]
    ax.set_xticks([i + width * (len(peers) - 1) / 2 for i in range(len(groups))], labels,
                  fontsize=8)
    ax.set_ylabel(f"{groups[0].unit} (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


STYLES = {"memory": _lines, "compute": _lines, "launch": _bars, "compile": _bars}
assert set(STYLES) == set(KINDS)


def write_plots(results, out_dir) -> list:
    plt = _pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = rows(results)
    measured = {r.case for r in table if r.values}
    groups = {}
    for case in results.cases:
        if case.name in measured:
            groups.setdefault(case.plot, []).append(case)
    meta = results.meta
    written = []
    for group, cases in groups.items():
        fig = STYLES[cases[0].kind](plt, group, cases, table, results)
        fig.suptitle(f"verdigris bench: {group} — {meta.get('card', '?')}, "
                     f"{meta.get('date', '?')}", fontsize=11)
        fig.tight_layout()
        path = out_dir / f"{group}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written

"""The figures of ``docs/torch.md``: ``examples/torch_digits.py``'s JSON for each way it is run
(:data:`SOURCES`), the table of the runs (:data:`BLOCKS`) and the figures quoted in the text
(:data:`FIGURES`). :mod:`bench.figures` adds them to its own."""

__all__ = ["BLOCKS", "FIGURES", "SOURCES"]

_EXAMPLE = "python examples/torch_digits.py"

#: The runs of the example, in the table's order: ``JSON name: the options``.
RUNS = {
    "torch_digits": "--json",
    "torch_digits_systems2": "--systems 2 --json",
    "torch_digits_bf16": "--format bf16 --json",
    "torch_digits_rtl": "--backend verilator --steps 3 --check-golden --json",
    "torch_digits_steps3": "--steps 3 --json",
}

SOURCES = {name: f"{_EXAMPLE} {options}" for name, options in RUNS.items()}


def _other(r, name):
    """The last column: what each run shows beyond the accuracies."""
    run = r[name]
    if name == "torch_digits":
        return (f"{run['steps']} steps, `module_agreement` {run['module_agreement']:g}, digest "
                f"`{run['weights_digest'][:8]}…`")
    if name == "torch_digits_systems2":
        same = run["weights_digest"] == r["torch_digits"]["weights_digest"]
        return "the same digest as one system" if same else "**another digest than one system**"
    if name == "torch_digits_rtl":
        golden = r["torch_digits_steps3"]
        same = run["weights_digest"] == golden["weights_digest"]
        return (f"{run['checked_results']} mesh results compared, {run['mismatches']} "
                f"mismatches; {run['mesh_cycles']:,} mesh cycles measured on the RTL, the cycle "
                f"model's {golden['mesh_cycles']:,} (`--steps 3` on golden); digest "
                f"`{run['weights_digest'][:8]}…`, "
                f"{'the golden run' if same else '**not the golden run**'}'s")
    return f"`module_agreement` {run['module_agreement']:g}"


def _torch_table(r):
    rows = []
    for name, options in RUNS.items():
        if name == "torch_digits_steps3":
            continue                      # the golden reference of the RTL run, in its row
        run = r[name]
        rows.append((f"`{_EXAMPLE} {options}`", f"{run['test_accuracy']:.3f}",
                     f"{run['torch_test_accuracy']:.3f}",
                     f"{run['speedup_vs_dense']:.2f}x ({run['ideal_speedup']:.2f}x)",
                     f"{run['logit_difference']:.2g} / {run['logit_bound']:.2g}, "
                     f"{100 * run['bound_guarantees']:.1f} %", _other(r, name)))
    header = ("command", "`test_accuracy`", "`torch_test_accuracy`",
              "`speedup_vs_dense` (ideal)",
              "`logit_difference` / `logit_bound`, `bound_guarantees`", "other figures")
    return [f"| {' | '.join(header)} |", f"|{'|'.join(['---'] * len(header))}|",
            *(f"| {' | '.join(row)} |" for row in rows)]


BLOCKS = {"torch.table": _torch_table}

FIGURES = {
    "torch.systems2_share": (lambda r: r["torch_digits_systems2"]["mesh_cycles"]
                             / r["torch_digits"]["mesh_cycles"], "{:.0%}"),
}

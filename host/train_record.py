"""A training run's record in a checkpoint: the fields :class:`~host.train.Trainer` saves beside
MemoryX's state, checked before anything is restored (``docs/host.md``, "Checkpoints")."""

from wse.rtl.validate import integer, number

from .checkpoint import CheckpointError
from .swarmx import SwarmX

__all__ = ["check_run", "step_record", "DATA_SETTINGS", "PASSES", "BY_PASS", "FIGURES",
           "STEP_TOTALS"]

#: The settings that decide which samples a step trains on (the split and the batch order): a
#: checkpoint records them and a resume must use the same.
DATA_SETTINGS = ("seed", "batch")

#: A count's largest value (``int64``'s): what no run reaches, and what the report and the
#: figures can hold.
COUNT_MAX = 2**63 - 1

#: The passes of a training step on the mesh, as the figures name them.
PASSES = ("forward", "delta", "gradient")
#: A worker's figures of a pass (:class:`~host.worker.PassFigures`), in the order the trainer
#: gathers them.
FIGURES = ("cycles", "dense_cycles", "io_cycles", "compute_cycles", "useful_macs",
           "dense_macs", "blocks")
#: A step record's figures by pass.
BY_PASS = ("cycles_by_pass", "dense_cycles_by_pass", "io_cycles_by_pass")
#: A step record's totals that a run adds up: the slowest system's cycles (``mesh_cycles`` is
#: ``io_cycles + compute_cycles``), the dense equivalent's, and the MACs of every system.
STEP_TOTALS = ("mesh_cycles", "dense_cycles", "io_cycles", "compute_cycles", "useful_macs",
               "dense_macs")
#: Step records written before the edge transfers were counted hold only these.
_EARLIER = ("cycles_by_pass", "dense_cycles_by_pass")


def step_record(step, loss, accuracy, cycles):
    """A step's record from its figures: ``cycles[pass]`` is an array with a row per name of
    :data:`FIGURES` and a column per system. The step waits for its slowest system (the most
    cycles in all: ``mesh_cycles``, and that system's ``io_cycles`` and ``compute_cycles``);
    ``dense_cycles`` is the slowest dense equivalent's; the MACs are every system's."""
    row = {name: k for k, name in enumerate(FIGURES)}
    total = sum(cycles.values())
    slowest = int(total[row["cycles"]].argmax())
    return {"step": step, "loss": loss, "accuracy": accuracy,
            "mesh_cycles": int(total[row["cycles"], slowest]),
            "dense_cycles": int(total[row["dense_cycles"]].max()),
            "io_cycles": int(total[row["io_cycles"], slowest]),
            "compute_cycles": int(total[row["compute_cycles"], slowest]),
            "useful_macs": int(total[row["useful_macs"]].sum()),
            "dense_macs": int(total[row["dense_macs"]].sum()),
            **{f"{key}_by_pass": {name: int(v[row[key]].max()) for name, v in cycles.items()}
               for key in ("cycles", "dense_cycles", "io_cycles")}}


def check_run(path, extra, t, *, total_steps, counts, settings):
    """The trainer's fields of a checkpoint's ``extra``, checked against this run (its
    ``total_steps``, the names of its ``counts``, its ``settings``; MemoryX's ``t``: its
    optimizer steps, one a training step); returns them as :class:`~host.train.Trainer` keeps
    them, or raises ``CheckpointError`` naming the first bad one."""
    def field(check, name, value, *bounds):
        try:
            return check(name, value, *bounds)
        except ValueError as error:
            raise CheckpointError(f"checkpoint {path}: {error}") from None

    def table(name, value, keys):
        if not isinstance(value, dict) or set(value) != set(keys):
            raise CheckpointError(f"checkpoint {path}: {name} must be a table of "
                                  f"{', '.join(keys)}, not {value!r:.80}")
        return dict(value)

    def listing(name, value):
        if not isinstance(value, list):
            raise CheckpointError(f"checkpoint {path}: {name} must be a list, not "
                                  f"{value!r:.80}")
        return value

    if not isinstance(extra, dict):
        raise CheckpointError(f"checkpoint {path} holds no training run (extra is "
                              f"{extra!r:.80})")
    _check_data(path, extra.get("data"), settings)
    step = field(integer, "step", extra.get("step"), 0)
    if step > total_steps:
        raise CheckpointError(f"checkpoint {path} is at step {step}, beyond this run's "
                              f"{total_steps} steps: resume with the steps or epochs "
                              f"of the run that wrote it")
    if step != t:
        raise CheckpointError(f"checkpoint {path}: step {step} does not match its optimizer "
                              f"step count t = {t}")
    history = listing("history", extra.get("history"))
    if len(history) != step:
        raise CheckpointError(f"checkpoint {path}: history must hold one record per step "
                              f"({step}), not {len(history)}")
    run = {"step": step, "history": [], "evaluations": []}
    keys = ("step", "loss", "accuracy", "mesh_cycles", "dense_cycles")
    for k, record in enumerate(history):
        # records before the gradient pass ran on the mesh have no figures by pass, and those
        # before the edge transfers were counted no io figures
        by_pass = BY_PASS if isinstance(record, dict) and "io_cycles" in record else \
            _EARLIER if isinstance(record, dict) and "cycles_by_pass" in record else ()
        totals = STEP_TOTALS[2:] if by_pass == BY_PASS else ()
        record = table(f"history[{k}]", record, keys + totals + by_pass)
        field(integer, f"history[{k}].step", record["step"], k, k)
        record["loss"] = field(number, f"history[{k}].loss", record["loss"], 0.0)
        record["accuracy"] = field(number, f"history[{k}].accuracy", record["accuracy"],
                                   0.0, 1.0)
        for name in ("mesh_cycles", "dense_cycles") + totals:
            field(integer, f"history[{k}].{name}", record[name], 0)
        for name in by_pass:
            record[name] = {p: field(integer, f"history[{k}].{name}.{p}", v, 0) for p, v in
                            table(f"history[{k}].{name}", record[name], PASSES).items()}
        run["history"].append(record)
    for k, record in enumerate(listing("evaluations", extra.get("evaluations"))):
        record = table(f"evaluations[{k}]", record, ("step", "test_accuracy"))
        field(integer, f"evaluations[{k}].step", record["step"], 1, step)
        record["test_accuracy"] = field(number, f"evaluations[{k}].test_accuracy",
                                        record["test_accuracy"], 0.0, 1.0)
        run["evaluations"].append(record)
    stored = extra.get("counts")
    if isinstance(stored, dict) and set(stored) == {"gradients_beyond_32_bits",
                                                    "mesh_overflows"}:
        # before the gradient pass ran on the mesh: its totals beyond 32 bits were counted
        stored = {"gradient_overflows": stored["gradients_beyond_32_bits"],
                  "mesh_overflows": stored["mesh_overflows"], "mismatches": 0}
    for name, keys, value in (("counts", counts, stored),
                              ("link_bytes", SwarmX.LINKS, extra.get("link_bytes"))):
        run[name] = {key: field(integer, f"{name}.{key}", v, 0)
                     for key, v in table(name, value, tuple(keys)).items()}
    run["golden_checks"] = field(integer, "golden_checks", extra.get("golden_checks"), 0)
    for name, value in [*((f"counts.{k}", v) for k, v in run["counts"].items()),
                        *((f"link_bytes.{k}", v) for k, v in run["link_bytes"].items()),
                        ("golden_checks", run["golden_checks"])]:
        if value > COUNT_MAX:
            raise CheckpointError(f"checkpoint {path}: {name} is {value}, beyond what any run "
                                  f"counts (at most 2**63 - 1)")
    if run["counts"]["mismatches"] and not run["golden_checks"]:
        raise CheckpointError(f"checkpoint {path}: counts.mismatches is "
                              f"{run['counts']['mismatches']} but golden_checks is 0: no mesh "
                              f"result was compared, so none can have differed")
    return run

def _check_data(path, data, settings):
    """``CheckpointError`` unless the checkpoint's data settings are this run's."""
    if not isinstance(data, dict) or set(data) != set(DATA_SETTINGS):
        raise CheckpointError(f"checkpoint {path} does not record its data settings "
                              f"({', '.join(DATA_SETTINGS)}): cannot tell which samples it "
                              f"trained on")
    for name in DATA_SETTINGS:
        if not isinstance(data[name], int) or isinstance(data[name], bool):
            raise CheckpointError(f"checkpoint {path}: data.{name} must be an integer, not "
                                  f"{data[name]!r:.80}")
        if data[name] != getattr(settings, name):
            raise CheckpointError(
                f"checkpoint {path} was trained with {name} {data[name]!r}, this run has "
                f"{name} {getattr(settings, name)!r}: resume with --{name} {data[name]!r} "
                f"({' and '.join(DATA_SETTINGS)} decide the data split and order)")

"""One PyTorch model trained twice from the same initial weights: in plain PyTorch on the CPU,
and on the mesh through ``wse.torch`` (``docs/torch.md``); both test accuracies in one JSON
object.

    python examples/torch_digits.py --json                        # golden, 10 epochs
    python examples/torch_digits.py --systems 2 --json            # the batch over two meshes
    python examples/torch_digits.py --backend verilator --steps 3 --check-golden --json

The model is ``64-64-64-10`` with ReLU (``--hidden``), its two hidden layers pruned to 90 %
by gradual magnitude pruning (``--sparsity``, ``--algorithm``), trained with Adam on
scikit-learn's digits (the split ``wse train`` uses), batch 32. Both runs are the same lines of
PyTorch: only the backend differs (``cpu`` for the first).
"""

import argparse
import copy
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import wse.torch as wtorch
from wse.host.train import load_digits_split
from wse.torch.bounds import logit_bound


class Net(nn.Module):
    """A plain PyTorch MLP: ``Linear`` layers with a ReLU between each two."""

    def __init__(self, widths):
        super().__init__()
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:-1]))
        self.out = nn.Linear(widths[-2], widths[-1])

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


def train(model, backend, data, args):
    """Train ``model`` on ``backend`` (the same code whatever it is); returns the compiled
    model and the seconds the steps took."""
    x_train, y_train = data
    compiled = wtorch.compile(model, backend)
    optimizer = wtorch.optim.Adam(model.parameters(), lr=args.lr)
    model.apply(wtorch.sparse.configure({"algorithm": args.algorithm,
                                         "sparsity": args.sparsity,
                                         "param_filter": "hidden.*.weight"}))

    @wtorch.trace
    def training_step(x, y):
        loss = F.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    dataset = torch.utils.data.TensorDataset(x_train, y_train)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                         drop_last=True,
                                         generator=torch.Generator().manual_seed(args.seed))
    start = time.monotonic()
    for x, y in wtorch.DataExecutor(loader, num_steps=args.steps):
        training_step(x, y)
    return compiled, time.monotonic() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="golden",
                        choices=[b for b in wtorch.BACKENDS if b != "cpu"])
    parser.add_argument("--systems", type=int, default=1)
    parser.add_argument("--mesh", default="4x4")
    parser.add_argument("--format", default="int16", choices=("int16", "bf16"))
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps (default: 10 epochs, 440 steps)")
    parser.add_argument("--hidden", default="64,64", help="hidden widths")
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--algorithm", default="gmp", choices=("static", "gmp", "set"))
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-golden", action="store_true",
                        help="compare every mesh result of an RTL backend with the golden model")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)        # a small model: torch's threads only contend with the mesh's

    xtr, ytr, xte, yte = load_digits_split(args.seed)
    data = torch.tensor(xtr, dtype=torch.float32), torch.tensor(ytr)
    x_test, y_test = torch.tensor(xte, dtype=torch.float32), torch.tensor(yte)
    if args.steps is None:
        args.steps = 10 * (len(ytr) // args.batch)
    widths = [64, *(int(w) for w in args.hidden.split(",")), 10]

    torch.manual_seed(args.seed)
    model = Net(widths)
    on_mesh = copy.deepcopy(model)              # the same initial weights for both runs

    wtorch.backend("cpu", seed=args.seed)
    _, torch_seconds = train(model, wtorch.current_backend(), data, args)
    with torch.no_grad():
        torch_predictions = model(x_test).argmax(1)

    backend = wtorch.backend(args.backend, mesh=args.mesh, systems=args.systems,
                             format=args.format, check_golden=args.check_golden,
                             seed=args.seed)
    compiled, seconds = train(on_mesh, backend, data, args)
    try:
        mesh_logits = compiled(x_test)
        summary = compiled.summary()
    finally:
        compiled.close()
    mesh_predictions = mesh_logits.argmax(1)
    module_logits, bound, guaranteed = logit_bound(compiled, x_test)
    module_predictions = torch.from_numpy(module_logits.argmax(1))   # in plain PyTorch

    report = {
        "test_accuracy": float((mesh_predictions == y_test).float().mean()),
        "torch_test_accuracy": float((torch_predictions == y_test).float().mean()),
        "steps": summary["steps"], "backend": args.backend, "systems": args.systems,
        "format": args.format, "model": summary["model"],
        "speedup_vs_dense": summary["speedup_vs_dense"],
        "ideal_speedup": summary["ideal_speedup"],
        "weight_sparsity": summary["weight_sparsity"],
        "module_test_accuracy": float((module_predictions == y_test).float().mean()),
        "module_agreement": float((module_predictions == mesh_predictions).float().mean()),
        "logit_difference": float(abs(mesh_logits.double().numpy() - module_logits).max()),
        "logit_bound": float(bound.max()), "bound_guarantees": float(guaranteed.mean()),
        "mesh_cycles": summary["mesh_cycles"], "dense_cycles": summary["dense_cycles"],
        "cycles_source": summary["cycles_source"],
        "checked_results": summary["checked_results"], "mismatches": summary["mismatches"],
        "weights_digest": summary["weights_digest"],
        "seconds": round(seconds, 2), "torch_seconds": round(torch_seconds, 2),
    }
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>20}  {value}")
    return 1 if report["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Router saturation throughput under uniform random traffic, against queues and depth.

    python -m wse.bench.router_queues [--sim verilator] [--count 4000] [--seed 1] [--json]

Every input sends ``count`` wavelets, each to a uniformly random output, as fast as the router
takes them; no backpressure. One queue per input suffers head-of-line blocking (a wavelet for a
busy output holds up the one behind it for an idle output); spreading colors over more queues
and deepening them recovers throughput. Each configuration is a separate RTL build.

``--json`` prints one JSON object (``bench/results/router_queues.json``): ``simulator``,
``count``, ``seed`` and ``configs``, one entry per configuration with ``n_queues``, ``depth``
and the figures of :func:`~wse.bench.router.bench_uniform_load`
(``uniform_throughput_per_port``, ``uniform_cycles``, ...).
"""

import argparse
import json

from wse.bench.router import bench_uniform_load

CONFIGS = [(1, 2), (1, 4), (1, 8), (2, 4), (5, 4)]      # (n_queues, depth)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not args.json:
        print(f"{'queues':>6} {'depth':>5} {'throughput/port':>15} {'cycles':>7}")
    configs = []
    for n_queues, depth in CONFIGS:
        figures = bench_uniform_load(sim=args.sim, count=args.count, seed=args.seed,
                                     n_queues=n_queues, depth=depth)
        configs.append({"n_queues": n_queues, "depth": depth, **figures})
        if not args.json:
            print(f"{n_queues:>6} {depth:>5} {figures['uniform_throughput_per_port']:>15.3f} "
                  f"{figures['uniform_cycles']:>7}", flush=True)
    if args.json:
        print(json.dumps({"simulator": args.sim, "count": args.count, "seed": args.seed,
                          "configs": configs}))


if __name__ == "__main__":
    main()

"""``python -m tests.formal`` (``make formal``): every check, every cover, every mutation.

Prints one line each: a check ``proven`` (k-induction) or ``bounded to depth N`` (BMC), a cover
``reached``, a mutation ``caught`` (its check fails with a counterexample). The exit status is
non-zero when a check fails, a cover is not reached, or a mutation is not caught.
"""

import argparse
import pathlib
import re
import sys
import time

from .checks import CHECKS, COVERS, MUTATIONS, module_for, mutation_run
from .sby import run

TIMEOUT = 600


def check_line(check, result):
    if result.passed:
        verdict = {"prove": "proven", "bmc": f"bounded to depth {check.depth}",
                   "cover": f"reached within depth {check.depth}"}[check.mode]
    else:
        verdict = f"NOT {check.mode} ({result.status})"
    return f"{check.name:28} {verdict:28} {result.seconds:6.1f} s  {check.what}"


def failed_assertions(log):
    """The spec lines of the assertions a counterexample breaks (from sby's log)."""
    lines = []
    for path, number in re.findall(r"Assert failed in \S+: (\S+?\.py):(\d+)", log):
        try:
            text = pathlib.Path(path).read_text().splitlines()[int(number) - 1].strip()
        except (OSError, IndexError):
            text = ""
        line = f"{pathlib.Path(path).name}:{number}  {text}"
        if line not in lines:
            lines.append(line)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.formal", description=__doc__)
    parser.add_argument("--only", action="append", default=[],
                        help="run only the checks, covers and mutations of these names")
    parser.add_argument("--no-mutations", action="store_true")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per sby run")
    args = parser.parse_args(argv)

    def wanted(name):
        return not args.only or name in args.only

    start = time.monotonic()
    failures = []
    for title, checks in (("properties", CHECKS), ("covers", COVERS)):
        print(f"== {title}", flush=True)
        for check in checks:
            if not wanted(check.name):
                continue
            result = run(check.build(module_for(check)), check.name, mode=check.mode,
                         depth=check.depth, timeout=args.timeout, **check.options)
            print(check_line(check, result), flush=True)
            if not result.passed:
                failures.append(check.name)
    if not args.no_mutations:
        print("== mutations (each must fail its check)", flush=True)
        by_name = {check.name: check for check in CHECKS}
        for mutation in MUTATIONS:
            if not wanted(mutation.name):
                continue
            check = by_name[mutation.check]
            spec, mode, depth = mutation_run(check, mutation)
            result = run(spec, f"mutant_{mutation.name}", mode=mode, depth=depth,
                         timeout=args.timeout, **check.options)
            caught = result.status == "FAIL"
            verdict = f"caught by {check.name}" if caught else f"NOT caught ({result.status})"
            print(f"{mutation.name:28} {verdict:36} {result.seconds:6.1f} s  {mutation.what}",
                  flush=True)
            for line in failed_assertions(result.log):
                print(f"{'':30}failed: {line}", flush=True)
            if not caught:
                failures.append(mutation.name)
    print(f"== {'all passed' if not failures else 'FAILED: ' + ', '.join(failures)} "
          f"in {time.monotonic() - start:.0f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""``wse``: the one command line of wse-mini, one module per command.

``wse gemm`` runs ``Y = W @ X`` on a mesh (:mod:`.gemm`), ``wse sim`` runs cocotb testbenches
(:mod:`.sim`), ``wse bench`` measures (:mod:`.bench`), ``wse export`` writes Verilog
(:mod:`.export`), ``wse train`` trains a network by weight streaming (:mod:`.train`),
``wse build`` makes a bitstream (:mod:`.build`). Shared options live in :mod:`.options`.

Ctrl-C ends any command with one line and exit code 130, whenever it comes: while the commands
are being imported (a fraction of a second at start), or while one runs; ``SIGTERM`` while one
runs ends it the same way (exit code 143), after it closed what it holds.
"""

import signal
import sys
import threading


def _interrupted(signum, frame):
    """SIGINT while the command line is still being imported: one line, no traceback."""
    sys.stderr.write("Error: interrupted\n")
    sys.stderr.flush()
    raise SystemExit(130)


# (only where Python's own handler is in place: a SIGINT ignored by the caller stays ignored)
_HANDLE = (threading.current_thread() is threading.main_thread()
           and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
if _HANDLE:
    _previous = signal.signal(signal.SIGINT, _interrupted)
try:
    import click

    from .bench import bench
    from .build import build
    from .export import export
    from .gemm import gemm
    from .sim import sim
    from .train import train
finally:
    if _HANDLE:
        signal.signal(signal.SIGINT, _previous)

__all__ = ["Interrupted", "main"]


class Interrupted(click.ClickException):
    """Ctrl-C (``SIGINT``) or ``SIGTERM`` while a command runs."""

    exit_code = 130


class _Terminated(BaseException):
    """``SIGTERM``, raised where the command is (a ``BaseException``: nothing on the way
    swallows it), so that every folder and process it holds is closed on the way out."""


def _terminated(signum, frame):
    raise _Terminated


class _Main(click.Group):
    """The ``wse`` group: Ctrl-C or ``SIGTERM`` while a command runs ends it as an exception,
    closing what it holds (simulators, their sockets' and sessions' folders, system
    processes), then :class:`Interrupted`: one line, exit code 130 (143 for ``SIGTERM``)."""

    def invoke(self, ctx):
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None
        except _Terminated:
            error = Interrupted("terminated (SIGTERM)")
            error.exit_code = 128 + signal.SIGTERM
            raise error from None
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


@click.group(cls=_Main)
@click.version_option(package_name="wse-mini")
def main():
    """wse-mini: a wafer-scale engine in miniature (Amaranth RTL, cocotb, numpy)."""


for command in (gemm, sim, bench, export, train, build):
    main.add_command(command)


if __name__ == "__main__":
    main()

"""``wse``: the one command line of wse-mini, one module per command.

``wse gemm`` runs ``Y = W @ X`` on a mesh (:mod:`.gemm`), ``wse sim`` runs cocotb testbenches
(:mod:`.sim`), ``wse bench`` measures (:mod:`.bench`), ``wse export`` writes Verilog
(:mod:`.export`), ``wse train`` trains a network by weight streaming (:mod:`.train`),
``wse build`` makes a bitstream (:mod:`.build`). Shared options live in :mod:`.options`.
"""

import click

from .bench import bench
from .build import build
from .export import export
from .gemm import gemm
from .sim import sim
from .train import train

__all__ = ["main"]


@click.group()
@click.version_option(package_name="wse-mini")
def main():
    """wse-mini: a wafer-scale engine in miniature (Amaranth RTL, cocotb, numpy)."""


for command in (gemm, sim, bench, export, train, build):
    main.add_command(command)


if __name__ == "__main__":
    main()

"""FPGA board tops, the serial bridge and bitstream builds."""

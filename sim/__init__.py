"""Running hardware: toolchain set-up, Verilog export, the cocotb runner and its uses."""

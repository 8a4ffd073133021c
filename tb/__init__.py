"""cocotb testbenches: stream models, reference models, scoreboards and the tests."""

"""The mesh: tile composition, color and route planning, GEMM programs, golden and cycle models."""

"""Tests of the FL loop, the batched step, CUDA."""

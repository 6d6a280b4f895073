"""The benchmarks' smoke runs."""

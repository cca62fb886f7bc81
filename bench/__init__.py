"""Benchmarks (`make bench`). Each `bench/bench_*.py` module exposes
`run(ctx: BenchContext) -> str`, returning a Markdown section; `python -m bench`
runs them in order and writes `bench/results.md`.
"""

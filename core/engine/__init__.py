"""The engine: the speculative loop, acceptance rules, sampling, the pair, drafters, loading, CPU kernels (torch)."""

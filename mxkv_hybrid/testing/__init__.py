"""Tools for testing and measuring the product on one machine: an emulated cluster of hosts
(`cluster`: network namespaces on a bridge, their own addresses, hostnames and shaped links,
an ssh stand-in for Hydra, cut and heal).

Uses nothing else of the package; the tests and the benchmarks import it.
"""

"""End-to-end benchmarks: the controller as a subprocess against a real kube-apiserver.

See bench/e2e/README.md for what each script measures and the commands.
"""

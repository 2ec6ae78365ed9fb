"""The test cluster: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
Tekton on loopback, and what tests, benchmarks, the soak and `make dev` do to it."""

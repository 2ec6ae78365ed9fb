"""The test cluster's processes: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok and Tekton on loopback; the helper every owner of child processes
uses; and what tests, benchmarks, the soak and `make dev` share to use the cluster."""

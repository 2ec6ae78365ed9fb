"""Tools for tests and local runs, one folder for each of their users:

- `cluster/`: the test cluster (a real etcd and kube-apiserver, the whole stack with real
  Tekton and kwok, pods' fates, webhooks, a misbehaving proxy, the shared fixtures);
- `dev/`: `make dev` (the sample story, its screen, Tekton's log, the keyboard);
- `dashboard/`: the dashboard's picture in docs/, drawn from a scripted run scraped by a
  real Prometheus;
- `crds/`: the generator of our CRDs, their listed differences from Shipwright's, and
  what we do with each of Shipwright's fields;
- `shipwright/`: Shipwright itself as the reference: its source in the Go module cache
  and the client of the oracle built on its own code (hack/oracle).

Nothing in the controller's production path imports this package.
"""

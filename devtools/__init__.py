"""Tools for tests and local runs, one folder for each job:

- `cluster/`: the test cluster's processes on loopback (a real etcd and kube-apiserver,
  the whole stack with kube-controller-manager, kube-scheduler, kwok and real Tekton),
  the one helper every owner of child processes uses, and what every user of the
  cluster shares (certificates, polling, the Build and BuildStrategy fixtures);
- `node/`: the real node beside kwok's (containerd and a kubelet in a mount namespace of
  their own, its images and registry, the Git server, Shipwright's samples built there);
- `fakes/`: what stands in for a part of a cluster or misbehaves on purpose (the pods'
  fates kwok plays out, a flaky admission webhook, the Tekton stand-in, a misbehaving
  proxy);
- `dev/`: `make dev` (the sample story, its screen, Tekton's log, the keyboard);
- `dashboard/`: the dashboard's picture in docs/, drawn from a scripted run scraped by a
  real Prometheus;
- `crds/`: the generator of our CRDs, their listed differences from Shipwright's, and
  what we do with each of Shipwright's fields;
- `shipwright/`: Shipwright itself: its source in the Go module cache, the client of the
  oracle built on its own code (hack/oracle), and its own controller as a process.

Beside them, `hack.py`: what hack/ built, as every one of them asks for it, and
StackError, the one line naming a component that cannot be had.

Nothing in the controller's production path imports this package.
"""

"""The real node beside kwok's: containerd and a kubelet that really run the pods sent to
them (`realnode.py`), in a mount namespace of their own under a supervisor (`nodens.py`),
with the images hack/node-images/build made and the registry that serves them
(`images.py`), a Git server (`gitserver.py`), and Shipwright's sample Builds pointed at
them (`realbuilds.py`)."""

"""What stands in for a part of a cluster, or misbehaves on purpose: the pods' fates kwok
plays out (`fates.py`), a flaky TaskRun admission webhook (`webhook.py`), the Tekton
stand-in where no Tekton runs (`tekton.py`) and a loopback proxy that stalls or drops
connections (`proxy.py`). Never part of the controller."""

"""The dashboard's picture, drawn panel by panel from a real Prometheus's query results:
a real Prometheus and the panels' evaluation (`prometheus.py`), the drawing and a scripted
run of two local replicas (`render.py`); docs/dashboard.png is drawn from the in-cluster
rollout (tests/cluster/test_in_cluster.py)."""

"""The dashboard's picture, docs/dashboard.png: a scripted run of two replicas scraped by a
real Prometheus, drawn panel by panel (`python -m devtools.dashboard.render`)."""

"""Our CRDs for Shipwright's API: the generator (`python -m devtools.crds.crdgen`), the listed
differences from Shipwright's CRDs, and the table of what we do with each field."""

"""Shipwright itself, the reference for drop-in: its source at the pinned version in the Go
module cache (`source.py`), the client of the oracle on its own code (`oracle.py`), and its
own controller as a local process with its CRDs (`controller.py`)."""

"""The Build controller: validates Builds and reports it on their status, as Shipwright's does."""

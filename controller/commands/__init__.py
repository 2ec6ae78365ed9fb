"""The CLI's commands besides running the controller (controller/cli.py wires them as
subcommands): `history NAMESPACE/NAME` (`history.py`) and `migrate-storage`
(`migrate.py`), each a coroutine of its parsed arguments and an output stream, run by
`runner.py`, the one place that connects them to the API server and turns a failure
into one line and an exit code."""

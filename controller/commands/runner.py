"""How a command reaches the API server and fails: `with_kube` connects with the
command's --kubeconfig and --context, awaits the command's body, closes the connection
whatever happens, and turns each failure into one line on stderr, `PROG: why`, and an
exit code:

| failure                                                        | exit        |
|----------------------------------------------------------------|-------------|
| the body's CommandError (no such BuildRun, a CRD that cannot be migrated) | its code, 1 |
| no usable connection settings (ConfigError)                    | 2           |
| any other API answer (ApiError)                                | 2           |
| no API server (a refused or lost connection, a timeout)        | 2           |

Anything else is a bug and ends in a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TextIO

import aiohttp

from controller.runtime.kube import ApiError, ConfigError, Kube, load_api_client

# A command: its parsed arguments and where its output goes, to its exit code.
Command = Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, int]]


class CommandError(Exception):
    """An outcome the command knows, said in one line, with its exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def fail(prog: str, message: str, code: int) -> int:
    """Says why on stderr in one line; the exit code."""
    print(f"{prog}: {message}", file=sys.stderr)
    return code


async def with_kube(prog: str, args: argparse.Namespace,
                    body: Callable[[Kube], Awaitable[int]]) -> int:
    """`body` on a connection made from args.kubeconfig and args.context (either may be
    absent: a subcommand leaves an option unset unless given), to its exit code."""
    try:
        kube = Kube(await load_api_client(getattr(args, "kubeconfig", None),
                                          getattr(args, "context", None)))
    except ConfigError as exc:
        return fail(prog, str(exc), 2)
    try:
        return await body(kube)
    except CommandError as exc:
        return fail(prog, exc.message, exc.code)
    except ApiError as exc:
        return fail(prog, str(exc), 2)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return fail(prog, f"cannot reach the API server: {exc}", 2)
    finally:
        await kube.close()


def run(command: Command, args: argparse.Namespace) -> int:
    """The command on stdout, from the CLI (or a command's own `python -m`)."""
    return asyncio.run(command(args, sys.stdout))

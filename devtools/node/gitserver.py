"""A Git server on loopback that stands in for GitHub in real builds: Git's own smart
HTTP protocol (git-http-backend, as a CGI program, protocol v0 to v2, shallow clones),
serving every bare repository under one folder, read-only, without authentication.

`python -m devtools.node.gitserver ROOT PORT` serves ROOT/<name>.git as
http://127.0.0.1:PORT/<name>.git until SIGTERM; devtools.node.realnode starts it as
a child of the stack. `create_repository` makes a bare repository there from files,
with one commit, and returns that commit's sha and time, which is what Shipwright's git
step reports for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BACKEND = "/usr/lib/git-core/git-http-backend"
# The headers git-http-backend reads as CGI variables.
_FORWARDED = ("Content-Type", "Content-Encoding", "Git-Protocol", "Accept")


@dataclass(frozen=True)
class Commit:
    sha: str
    timestamp: int  # seconds since the epoch (the committer date)
    author: str


def git(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def create_repository(root: Path, name: str, files: Mapping[str, str], *,
                      message: str = "The sample", author: str = "Sample Author",
                      email: str = "author@example.com", branch: str = "main") -> Commit:
    """ROOT/`name`.git, a bare repository whose `branch` is one commit of `files`
    (relative path -> text; a path ending in .sh is made executable)."""
    identity = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": author, "GIT_COMMITTER_EMAIL": email,
                "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    bare = root / f"{name}.git"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for path, text in files.items():
            target = work / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            if path.endswith(".sh"):
                target.chmod(0o755)
        git("init", "-q", "-b", branch, cwd=work, env=identity)
        git("add", "-A", cwd=work, env=identity)
        git("commit", "-q", "-m", message, cwd=work, env=identity)
        git("clone", "-q", "--bare", str(work), str(bare), env=identity)
    sha = git("--git-dir", str(bare), "rev-parse", branch, env=identity)
    when = git("--git-dir", str(bare), "log", "-1", "--format=%ct", branch, env=identity)
    return Commit(sha, int(when), author)


class _Handler(BaseHTTPRequestHandler):
    root: Path
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write(f"gitserver: {self.address_string()} {fmt % args}\n")

    def do_GET(self) -> None:
        self._cgi(b"")

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._cgi(body)

    def _cgi(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_LENGTH": str(len(body)),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        for header in _FORWARDED:
            value = self.headers.get(header)
            if value is not None:
                name = header.upper().replace("-", "_")
                env[name if header == "Content-Type" else f"HTTP_{name}"] = value
        proc = subprocess.run([BACKEND], input=body, env=env, capture_output=True)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status = 200 if proc.returncode == 0 else 500
        headers = []
        for line in head.decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        if proc.returncode != 0 and not head:
            payload = proc.stderr
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve(root: Path, port: int) -> None:
    handler = type("Handler", (_Handler,), {"root": root})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))

"""A real TLS-terminating nginx (Debian's) round-robin in front of agent replicas, for tests."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess

from tests.services import free_port, require, stop_process, traversable_tmpdir, wait_until

CONFIG = """\
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
{user}
events {{ worker_connections 256; }}
http {{
    log_format upstream '$remote_addr "$request" $status $upstream_addr';
    access_log {root}/access.log upstream;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    upstream agents {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {root}/cert.pem;
        ssl_certificate_key {root}/key.pem;
        location / {{
            proxy_pass http://agents;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
        }}
    }}
}}
"""


class TLSProxy:
    """nginx on ``https://127.0.0.1:<port>`` with a self-signed certificate made by openssl."""

    def __init__(self, upstreams: list[int]):
        nginx, openssl = shutil.which("nginx") or "/usr/sbin/nginx", shutil.which("openssl")
        require(os.path.exists(nginx), "Debian's nginx")
        require(openssl is not None, "openssl")
        self.root = traversable_tmpdir("rag-monitor-nginx-")
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(self.root / "key.pem"),
                        "-out", str(self.root / "cert.pem")], check=True, capture_output=True)
        servers = "\n".join(f"        server 127.0.0.1:{p};" for p in upstreams)
        user = "user root root;" if os.geteuid() == 0 else ""
        config = self.root / "nginx.conf"
        config.write_text(CONFIG.format(root=self.root, port=self.port, servers=servers, user=user))
        self.proc = subprocess.Popen([nginx, "-p", str(self.root), "-c", str(config), "-e", str(self.root / "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_until(self._listening, timeout=20, what="nginx to listen")

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"nginx exited: {(self.root / 'error.log').read_text()[-2000:]}")
        context = ssl.create_default_context(cafile=str(self.root / "cert.pem"))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return True
        except OSError:
            return False

    def upstreams_used(self) -> set[str]:
        """The replicas nginx sent requests to (from its access log)."""
        lines = (self.root / "access.log").read_text().splitlines()
        return {line.rsplit(" ", 1)[-1] for line in lines if line.rsplit(" ", 1)[-1].startswith("127.")}

    def stop(self) -> None:
        stop_process(self.proc, timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


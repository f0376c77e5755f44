"""The web server: `python -m fleet.runtime.web_serve --host H --port P`, or `--fd N` to serve a
listening socket inherited from `manage.py up`'s supervisor (several web processes on one
port). uvicorn with uvloop and httptools: on the per-token SSE path it measured 15-26 % less
web CPU per request than daphne (`inference.bench.serving_web --rounds 64 --per-round 1
--api openai`, side by side), and it serves Channels' websockets the same (`websockets`).

Settings kept as daphne had them: no X-Forwarded-* trusted (`--proxy-headers` off), an access
log of every request (path and query string: no secret ever rides in a URL, the wall's token
included; tests/console/test_wall_access_log.py). An open SSE stream must not hold a stop:
graceful shutdown waits at most `SHUTDOWN_S` for open connections.
"""

from __future__ import annotations

import argparse
import socket

APP = "fleet.asgi:application"
SHUTDOWN_S = 5
KEEP_ALIVE_S = 5  # body reads are bounded in fleet.runtime.web_gate (BODY_READ_TIMEOUT_S)


def config(**where):
    import uvicorn

    return uvicorn.Config(
        APP,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        lifespan="off",
        access_log=True,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_S,
        timeout_keep_alive=KEEP_ALIVE_S,  # an idle connection between requests
        **where,
    )


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m fleet.runtime.web_serve")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--fd", type=int, default=None, help="an inherited listening socket")
    args = parser.parse_args(argv)
    if args.fd is None:
        uvicorn.Server(config(host=args.host, port=args.port)).run()
        return
    sock = socket.socket(fileno=args.fd)  # family and type read from the descriptor
    uvicorn.Server(config()).run(sockets=[sock])


if __name__ == "__main__":
    main()

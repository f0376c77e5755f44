"""The control plane's runtime: how Tandem's processes are started, supervised and served,
beside the Django apps that hold the domain.

- `launcher`: the supervisor behind `manage.py up` (children, restarts with backoff, stop);
  `children`: what it runs (the ChildSpecs of the web server, control worker and the rest).
- `supervision`: the supervisor's state file, read by the console banner and the API.
- `embedded_redis`: the Redis `up` starts when no REDIS_URL is given.
- `web_serve`: the ASGI web server (uvicorn); `web_handler`: Django's ASGI handler with sync
  lanes; `web_gate`: bounds on what a request may send; `web_middleware`: the middleware
  without a thread hop per hook.

Nothing here imports an app's models: apps import the runtime (their `launch.py` gives the
launcher their children), never the other way round.
"""

"""The walls of DESIGN.md ("Rooms and walls") and issues 11 and 25, guarded by imports.

Two kinds of check:

- static: every `import` of a package's files, at module level or inside a function (a lazy
  import crosses a wall as surely as a top-level one), resolved to absolute dotted names;
- runtime: a fresh interpreter imports a whole process's modules and looks at `sys.modules`
  (what a module drags in through others).

A wall that does not hold yet is `xfail(strict=True)` with the issue that closes it: the day it
holds, the test reports XPASS as a failure, so the marker is removed and the wall stays shut.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TORCH_SIDE = ("torch", "inference.engine", "inference.training", "inference.worker")
DATABASE = ("django.db", "django.contrib.auth", "django.contrib.sessions")


# -- static: what a file imports -------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(*places: str, commands: bool = True) -> list[Path]:
    """The .py files of packages or single modules given as repo paths (missing ones: none)."""
    files: list[Path] = []
    for place in places:
        path = ROOT / place
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p
                for p in sorted(path.rglob("*.py"))
                if "migrations" not in p.parts
                and "__pycache__" not in p.parts
                and (commands or "management" not in p.parts)
            )
    return files


def imported_names(path: Path) -> dict[str, int]:
    """{absolute dotted name: first line} for every import of a file; `from a import b` gives
    both `a` and `a.b` (b may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.setdefault(base, node.lineno)
            for alias in node.names:
                found.setdefault(f"{base}.{alias.name}", node.lineno)
    return found


def matches(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def crossings(files: list[Path], forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()):
    """'path:line imports name' for each import of a forbidden name (unless allowed)."""
    out = []
    for path in files:
        for name, line in imported_names(path).items():
            if matches(name, forbidden) and not matches(name, allowed):
                out.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(out))


# -- runtime: what a process drags in -------------------------------------------------------

# Imports every module given (packages: all their modules, commands and migrations left out),
# after Django is set up the way the process sets it up, and prints the top-level names found.
PROBE = """
import importlib, json, os, pkgutil, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleet.settings")
setup, names = sys.argv[1], sys.argv[2:]
if setup == "asgi":
    from fleet.asgi import application  # noqa: F401  (django.setup(), the websocket routes)
    from django.urls import get_resolver
    get_resolver().url_patterns  # every URLconf and the views behind it
for name in names:
    module = importlib.import_module(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        if ".management." not in info.name and ".migrations" not in info.name:
            importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_after_import(setup: str, *names: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "fleet.settings"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, setup, *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


# The web side of inference: the serving package, and the modules at inference/'s root that
# the web and control processes import (the node workers' own are inference/worker/).
SHARED_INFERENCE = ["inference.models", "inference.services", "inference.selectors"]
SHARED_INFERENCE += ["inference.router", "inference.wire", "inference.warmup", "inference.text"]


def web_inference_modules() -> list[str]:
    return ["inference.serving", *SHARED_INFERENCE]


def web_side_files() -> list[Path]:
    """Every file the web and control processes run: fleet/ (commands aside), serving, the
    text room, and the modules at inference/'s root (the control side of the data plane)."""
    root = sorted(p for p in (ROOT / "inference").glob("*.py"))
    return (
        source_files("fleet", commands=False)
        + source_files("inference/serving", "inference/text")
        + root
    )


# -- the walls -------------------------------------------------------------------------------


def test_engine_imports_neither_django_nor_celery():
    files = source_files("inference/engine")
    assert files
    assert crossings(files, ("django", "celery", "fleet", "channels", "rest_framework")) == []
    loaded = loaded_after_import("none", "inference.engine")
    assert not {m for m in loaded if m.split(".")[0] in ("django", "celery")}


def test_the_web_process_never_imports_torch():
    """The ASGI application, every URLconf and view, every fleet module (commands aside) and
    the web side of inference, imported in one fresh interpreter: torch is not among them."""
    loaded = loaded_after_import("asgi", "fleet", *web_inference_modules())
    assert "fleet.nodes.api" in loaded and "inference.models" in loaded  # the probe ran
    assert "torch" not in loaded
    assert not {m for m in loaded if matches(m, ("inference.engine", "inference.training"))}


def test_fleet_and_serving_import_nothing_of_the_torch_side():
    """Direct imports, lazy ones included: a lazy import is torch on the web process's path."""
    files = source_files("fleet", commands=False) + source_files("inference/serving")
    assert crossings(files, TORCH_SIDE) == []


def test_the_web_side_never_imports_the_worker():
    """Control plane, serving and inference/'s root modules: no node worker, engine, training
    or torch. (A node's Celery task lives in inference/worker/tasks.py; the local pipelines
    are data in inference/local_pipelines.py.)"""
    files = web_side_files()
    assert module_name(ROOT / "inference/local_nodes.py") in {module_name(p) for p in files}
    assert crossings(files, TORCH_SIDE) == []


def test_the_planner_never_imports_the_engine_or_training():
    files = source_files("fleet/planner")
    assert crossings(files, ("torch", "inference.engine", "inference.training")) == []


def test_telemetry_never_imports_console():
    assert crossings(source_files("fleet/telemetry"), ("fleet.console",)) == []


def test_the_console_is_the_top_floor():
    """Pages and the wall sit on top: below them, nothing imports fleet.console."""
    files = [
        p
        for p in source_files("fleet", "inference")
        if module_name(p).split(".")[:2] != ["fleet", "console"]
        and module_name(p) not in ("fleet.urls", "fleet.routing", "fleet.asgi")
    ]
    assert crossings(files, ("fleet.console",)) == []


def test_nodes_pipelines_and_accounts_never_reach_up():
    """Telemetry reads pipelines and nodes; pipelines and nodes never read telemetry back."""
    files = source_files("fleet/pipelines", "fleet/nodes", "fleet/accounts")
    assert crossings(files, ("fleet.telemetry", "fleet.console", "fleet.planner")) == []


def test_no_import_error_fallbacks_around_our_own_modules():
    """A first-party module is always there: a fallback only hides a broken import."""
    found = []
    for path in source_files("fleet", "inference"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Try):
                continue
            caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None} & {
                "ImportError",
                "ModuleNotFoundError",
            }
            ours = [
                n
                for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                if isinstance(n, ast.ImportFrom | ast.Import)
                and any(
                    matches(a, ("fleet", "inference"))
                    for a in ([n.module or ""] if isinstance(n, ast.ImportFrom) else [])
                    + ([a.name for a in n.names] if isinstance(n, ast.Import) else [])
                )
            ]
            if caught and ours:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_no_module_imports_another_modules_private_name():
    found = []
    for path in source_files("fleet", "inference"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("fleet", "inference")
            ):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{private}")
    assert found == []


NODE_SIDE = ("inference/worker", "inference/wire.py", "inference/warmup.py")


def test_node_processes_need_no_database_credentials():
    """A node speaks Redis and the node-token API: no ORM, no app models, services, selectors."""
    models = ("inference.models", "inference.services", "inference.selectors")
    files = source_files(*NODE_SIDE)
    found = crossings(files, DATABASE + models)
    for path in files:
        for name, line in imported_names(path).items():
            last = name.rsplit(".", 1)[-1]
            if name.startswith("fleet.") and last in ("models", "services", "selectors"):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert sorted(set(found)) == []


def test_compose_gives_node_workers_no_database_and_no_secret_key():
    """The deployment holds the wall too: a node service has REDIS_URL, TANDEM_API_URL and its
    token, never DATABASE_URL or the control plane's SECRET_KEY."""
    import yaml

    compose = yaml.safe_load((ROOT / "compose/docker-compose.yml").read_text())
    services = compose["services"]
    nodes = [n for n, s in services.items() if "run_node" in " ".join(s.get("command") or [])]
    assert {"drafter", "verifier", "smollm2-verifier", "demo-drafter"} <= set(nodes)
    control_key = compose["x-tandem"]["environment"]["SECRET_KEY"]
    for name in nodes:
        env = services[name]["environment"]
        assert "DATABASE_URL" not in env and env["SECRET_KEY"] != control_key, name
        assert env["REDIS_URL"] and env["TANDEM_API_URL"], name
    assert "run_ledger" in services["ledger"]["command"]
    assert services["ledger"]["restart"] == "unless-stopped"


def test_wire_is_torch_free_and_database_free():
    shared = source_files("inference/wire.py", "inference/warmup.py")
    assert len(shared) == 2
    assert crossings(shared, TORCH_SIDE + DATABASE) == []
    loaded = loaded_after_import("none", "inference.wire", "inference.warmup")
    assert "torch" not in loaded and "django.db.models" not in loaded


def test_serving_is_the_web_side_only():
    files = source_files("inference/serving")
    assert crossings(files, TORCH_SIDE) == []
    # The worker never reaches up into serving either.
    assert crossings(source_files(*NODE_SIDE), ("inference.serving",)) == []


AGGREGATION_CORE = (
    "fleet/telemetry/aggregation.py",
    "fleet/telemetry/rollup_buckets.py",
    "fleet/telemetry/node_live.py",
)


def test_the_aggregators_core_is_synchronous_and_pure():
    """Parsing, windows, message building and rollup figures: no event loop, Redis, channels
    or database, so it is tested with plain function calls."""
    paths = source_files(*AGGREGATION_CORE)
    assert len(paths) == len(AGGREGATION_CORE)
    forbidden = ("asyncio", "redis", "channels", "django.db", "fleet.nodes", "fleet.pipelines")
    assert crossings(paths, forbidden) == []
    for path in paths:
        tree = ast.parse(path.read_text())
        assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)]


@pytest.mark.parametrize("benchmark", ["engine", "serving", "planner"])
def test_every_benchmark_of_the_data_plane_lives_in_inference_bench(benchmark):
    assert (ROOT / f"inference/bench/{benchmark}.py").is_file()


# -- issue 25: the domain apps' walls, the text room, the runtime --------------------------


def test_pipelines_never_import_the_data_plane():
    """Configuration pushes reach the data plane by a signal it receives
    (`signals.config_committed`, `inference.receivers`), never by an import."""
    assert crossings(source_files("fleet/pipelines"), ("inference",)) == []


def test_nodes_never_import_pipelines_or_the_data_plane():
    """Nodes sit below pipelines: the node Redis keys are named here (`redis_keys`), the data
    plane's wire builds on them."""
    assert crossings(source_files("fleet/nodes"), ("fleet.pipelines", "inference")) == []


def test_accounts_never_import_pipelines():
    """Wall links are audited through the audit app's one door (`fleet.audit.services`)."""
    assert crossings(source_files("fleet/accounts"), ("fleet.pipelines",)) == []


def test_the_text_room_is_torch_free_and_django_free():
    """Tokenizer and chat prompts: the engine, the workers and the web side all use them."""
    files = source_files("inference/text")
    assert len(files) >= 3
    forbidden = ("torch", "django", "celery", "fleet", "inference.engine", "inference.worker")
    assert crossings(files, forbidden + ("inference.serving", "inference.training")) == []
    engine_and_serving = source_files("inference/engine", "inference/serving", "inference/worker")
    assert (
        crossings(engine_and_serving, ("inference.chat_prompts", "inference.engine.tokenizer"))
        == []
    )


def test_the_runtime_imports_no_app():
    """fleet/runtime/ (supervisor, web server, embedded Redis) knows no domain: the apps give
    it their children (`launch.py`), it never reaches into them."""
    files = source_files("fleet/runtime")
    assert files
    apps = [f"fleet.{p.name}" for p in (ROOT / "fleet").iterdir() if (p / "apps.py").exists()]
    assert apps
    assert crossings(files, (*apps, "inference")) == []


def test_the_audit_log_has_one_door():
    """Only `fleet.audit.services` creates AuditEvent rows; the audit app imports no domain
    app (its foreign keys are by name)."""
    writers = []
    for path in source_files("fleet", "inference"):
        if "AuditEvent.objects.create" in path.read_text():
            writers.append(str(path.relative_to(ROOT)))
    assert writers == ["fleet/audit/services.py"]
    domain = ("fleet.accounts", "fleet.nodes", "fleet.pipelines", "fleet.planner")
    assert crossings(source_files("fleet/audit"), (*domain, "fleet.telemetry", "inference")) == []

"""End-to-end fixtures: a real daphne + aggregator on the test database, Debian's Chromium
driven by Playwright (never `playwright install`), screenshots under artifacts/screenshots/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.core.management import call_command

from fleet.testing.ports import free_port

ROOT = Path(settings.BASE_DIR)
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def _stop(proc: subprocess.Popen | None, sig=signal.SIGTERM) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Stack:
    """daphne + run_aggregator as subprocesses on the test database."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        db = settings.DATABASES["default"]
        self.env = {**os.environ, "REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1"}
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the servers keep Django's guard
        if db["ENGINE"].endswith("sqlite3"):
            self.env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
        else:  # PostgreSQL test database
            user, password = (
                quote(db.get("USER") or "", safe=""),
                quote(db.get("PASSWORD") or "", safe=""),
            )
            host, port = db.get("HOST") or "localhost", db.get("PORT") or 5432
            self.env["DATABASE_URL"] = f"postgres://{user}:{password}@{host}:{port}/{db['NAME']}"
        self.web: subprocess.Popen | None = None
        self.aggregator: subprocess.Popen | None = None
        self.logs = Path(settings.DATA_DIR) / "browser-logs"
        self.logs.mkdir(exist_ok=True)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the child)
        return subprocess.Popen(
            argv,
            env=self.env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start_aggregator(self) -> None:
        self.aggregator = self._spawn(
            "aggregator", [sys.executable, str(ROOT / "manage.py"), "run_aggregator"]
        )

    def start_web(self, timeout: float = 30.0) -> None:
        self.web = self._spawn(
            "daphne",
            [sys.executable, "-m", "fleet.runtime.web_serve", "--host", "127.0.0.1"]
            + ["--port", str(self.port)],
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.web.poll() is None, (self.logs / "daphne.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("daphne did not start")

    def kill_aggregator(self) -> None:
        _stop(self.aggregator, signal.SIGKILL)

    def kill_web(self) -> None:
        _stop(self.web, signal.SIGKILL)  # an abrupt death, as in a crash or power cut

    def stop(self) -> None:
        _stop(self.web)
        _stop(self.aggregator)


@pytest.fixture(autouse=True)
def _real_passwords(settings):
    """The stack's web server is another process, with the project's hashers: users these
    tests log in with are hashed as it would (the suite's fast hasher is in-process only)."""
    from django.conf import global_settings

    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS


@pytest.fixture(scope="session")
def collected_static():
    """WhiteNoise serves what collectstatic gathered (gzipped copies included)."""
    call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture
def stack(transactional_db, collected_static):
    s = Stack()
    s.start_aggregator()
    s.start_web()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still synchronous and single-threaded, so Django's async-safety guard may stand down.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SCREENSHOTS}")
    return SCREENSHOTS

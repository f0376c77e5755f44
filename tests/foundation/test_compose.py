"""The deployment shape validates (`config` needs the compose client, not a Docker engine)."""

import shutil
import subprocess

import pytest

from tests.foundation.helpers import REPO

COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"


def _compose_command() -> list[str]:
    if not shutil.which("docker"):
        pytest.skip("no docker client on PATH")
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("docker is on PATH but has no compose plugin, and docker-compose is missing")


@pytest.mark.parametrize("env_file", [None, "compose/.env.example"])
def test_compose_file_validates(env_file):
    command = _compose_command()
    if env_file:
        command += ["--env-file", str(REPO / env_file)]
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    config = result.stdout
    for service in (
        "postgres:",
        "redis:",
        "migrate:",
        "web:",
        "worker:",
        "beat:",
        "drafter:",
        "verifier:",
    ):
        assert f"\n  {service}" in config
    assert "TANDEM_PRODUCTION: '1'" in config or 'TANDEM_PRODUCTION: "1"' in config


def test_every_tandem_process_comes_back_after_a_crash():
    """Compose is the fleet's supervisor: every long-running Tandem service restarts, and
    beat (the generations watchdog re-routing work of lost nodes) runs."""
    import yaml

    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]  # resolves `<<` merges
    for name in ("web", "worker", "beat", "aggregator", "drafter", "verifier"):
        assert services[name].get("restart") in ("always", "unless-stopped"), name
    assert "beat" in services["beat"]["command"]

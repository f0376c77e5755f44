"""The test plumbing's ports (fleet/testing/ports.py): never where bind(0) lands, and one
slice per pytest-xdist worker."""

import socket

from fleet.testing import ports


def test_a_free_port_is_below_the_range_bind_0_draws_from():
    port = ports.free_port()
    assert port < ports._ephemeral_low()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # and free


def test_the_ports_handed_out_in_a_row_differ():
    assert len({ports.free_port() for _ in range(20)}) == 20


def test_each_xdist_worker_has_its_own_slice(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(ports._worker_slice()))
    assert all(slices) and not (
        slices[0] & slices[1] or slices[1] & slices[2] or slices[0] & slices[2]
    )
    assert max(max(s) for s in slices) < ports._ephemeral_low()

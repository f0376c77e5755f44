import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "demo_train: trains the full demo pair (~9 min on 2 CPU cores)"
    )


@pytest.fixture(scope="session")
def small_corpus():
    """A few stdlib packages: same code path as the full corpus, read in a fraction of a second."""
    from inference.training.corpus import load_corpus, stdlib_root

    return load_corpus(stdlib_root() / "email", heldout_every=3)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory, small_corpus):
    """The tiny preset, trained through train_demo_pair (the full command's code path)."""
    from inference.training.demo_pair import train_demo_pair

    out = tmp_path_factory.mktemp("models")
    manifest = train_demo_pair(out, seed=3, preset="tiny", threads=1, corpus=small_corpus)
    return out, manifest

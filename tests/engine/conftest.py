import pytest
import torch

from tests.engine.helpers import word_tokenizer


@pytest.fixture(autouse=True, scope="package")
def _one_thread():
    """Tiny models on a shared 2-core box: intra-op threading only adds sync overhead."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tokenizer():
    return word_tokenizer()

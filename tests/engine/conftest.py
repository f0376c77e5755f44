import pytest

from tests.engine.helpers import word_tokenizer


@pytest.fixture
def tokenizer():
    return word_tokenizer()

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where a CUDA GPU is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

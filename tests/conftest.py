"""Suite-wide settings: waveforms of test runs go to a temporary directory, never to the
repository's waves/ (cosim.tb.harness.waves_dir reads NPU_WAVES_DIR)."""

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _waves_in_a_temporary_directory(tmp_path_factory):
    old = os.environ.get("NPU_WAVES_DIR")
    os.environ["NPU_WAVES_DIR"] = str(tmp_path_factory.mktemp("waves"))
    yield
    if old is None:
        os.environ.pop("NPU_WAVES_DIR", None)
    else:
        os.environ["NPU_WAVES_DIR"] = old

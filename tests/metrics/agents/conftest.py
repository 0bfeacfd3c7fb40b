import pytest

from tests.agent_cases import engine_stand_in
from tests.credentials import service_account_adc


@pytest.fixture
def engine_env(tmp_path, monkeypatch):
    """The Agent Engine stand-in behind real credentials (tests.agent_cases.engine_stand_in)."""
    with engine_stand_in(tmp_path, monkeypatch) as engine:
        yield engine


@pytest.fixture
def adc(tmp_path, monkeypatch):
    """Application Default Credentials minting real ID tokens (tests.credentials.service_account_adc): yields
    the local token endpoint."""
    with service_account_adc(tmp_path, monkeypatch) as tokens:
        yield tokens

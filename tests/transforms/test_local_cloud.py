"""transforms/local_cloud.py: the one place that routes the Google Cloud clients to local emulators.

Beam's Cloud Storage and BigQuery IO have no public way to connect anonymously (`--no_auth` reaches only
the Dataflow client), so the routing records Beam's credential cache (`auth._Credentials`, private to
Beam) as answered with none. These tests fail, loudly, when a Beam release changes what that relies on."""
import json
import subprocess
import sys

from tests.helpers import ROOT

CHECK = """
from apache_beam.internal.gcp import auth
from apache_beam.options.pipeline_options import PipelineOptions
import evalbeam.transforms  # routes, on import, when an emulator variable is set
credentials = auth.get_service_credentials(PipelineOptions())
print(json.dumps({"anonymous": credentials is None}))
"""


def beam_credentials(env: dict) -> dict:
    result = subprocess.run([sys.executable, "-c", "import json\n" + CHECK], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_beam_io_connects_anonymously_with_an_emulator_and_with_adc_without_one(tmp_path):
    """With Application Default Credentials present (a user's, loaded without any network call), Beam's
    IO uses them; with STORAGE_EMULATOR_HOST set, the routing makes the same call give none at once."""
    import os

    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "x", "client_secret": "y",
                               "refresh_token": "z"}))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_EMULATOR_HOST")}
    env.update(GOOGLE_APPLICATION_CREDENTIALS=str(adc), PYTHONPATH=str(ROOT))
    assert beam_credentials(env) == {"anonymous": False}  # the check can tell the two apart
    assert beam_credentials({**env, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}) == {"anonymous": True}


def test_beams_private_credential_cache_is_still_what_the_routing_writes():
    """The names the routing writes exist, and get_service_credentials still answers from them: a Beam
    release that moves them fails here (and the routing itself stops with a line naming the module)."""
    from apache_beam.internal.gcp import auth

    cache = auth._Credentials
    for name in ("_credentials_lock", "_credentials", "_credentials_init"):
        assert hasattr(cache, name), f"apache_beam.internal.gcp.auth._Credentials.{name} is gone"
    with cache._credentials_lock:
        saved = cache._credentials, cache._credentials_init
        cache._credentials, cache._credentials_init = "cached", True
    try:
        assert auth.get_service_credentials(None) == "cached"
    finally:
        with cache._credentials_lock:
            cache._credentials, cache._credentials_init = saved

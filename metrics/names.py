"""Names checked before any of them reaches a file name, SQL or an API call: run and eval
names, column names, and BigQuery projects, datasets and tables; and the names of environment
variables holding a secret, which must not be a secret pasted in their place; and the nearest
valid name to a misspelt one."""
import difflib
from typing import Iterable

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
COLUMN_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
PROJECT_RE = r"[a-z][a-z0-9-]{4,28}[a-z0-9]|[a-z0-9.-]+:[a-z][a-z0-9-]{4,28}[a-z0-9]"
DATASET_RE = r"[A-Za-z0-9_]{1,1024}"
TABLE_RE = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,1023}"
BQ_TABLE_URI_RE = rf"^bq://(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})\.(?P<table>{TABLE_RE})$"
BQ_DATASET_RE = rf"^(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})$"


def looks_like_a_secret(name: str) -> bool:
    """A variable 'name' that may be a token pasted in its place: a run of 12 or more characters between
    underscores mixing lower and upper case, or letters and digits (ghp_16C7e42F..., AKIAIOSFODNN7EXAMPLE).
    Conventional names, words between underscores (AGENT_TOKEN, OPENAI_API_KEY_PROD2, GOOGLE_API_KEY_2026,
    agent_token), are not."""
    def mixed(part: str) -> bool:
        return sum(any(test(c) for c in part) for test in (str.islower, str.isupper, str.isdigit)) >= 2

    return any(len(part) >= 12 and mixed(part) for part in name.split("_"))


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """' (did you mean X?)' naming the valid name nearest a misspelt one (difflib's ratio at
    least 0.6), or '' when none is near; two names when the second is nearly as near (`modle`:
    mode or model). `prefix` is put before each name said (`--` of a flag)."""
    choices = list(dict.fromkeys(str(c) for c in choices))
    close = difflib.get_close_matches(name, choices, n=2)
    if not close:
        return ""

    def ratio(choice: str) -> float:
        return difflib.SequenceMatcher(None, name, choice).ratio()

    named = close if len(close) == 2 and ratio(close[0]) - ratio(close[1]) < 0.1 else close[:1]
    return f" (did you mean {' or '.join(prefix + c for c in named)}?)"

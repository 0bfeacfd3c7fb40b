"""Names checked before any of them reaches a file name, SQL or an API call: run and eval
names, column names, and BigQuery projects, datasets and tables; and the names of environment
variables holding a secret, which must not be a secret pasted in their place."""

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
COLUMN_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
PROJECT_RE = r"[a-z][a-z0-9-]{4,28}[a-z0-9]|[a-z0-9.-]+:[a-z][a-z0-9-]{4,28}[a-z0-9]"
DATASET_RE = r"[A-Za-z0-9_]{1,1024}"
TABLE_RE = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,1023}"
BQ_TABLE_URI_RE = rf"^bq://(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})\.(?P<table>{TABLE_RE})$"
BQ_DATASET_RE = rf"^(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})$"


def looks_like_a_secret(name: str) -> bool:
    """A variable 'name' that may be a token pasted in its place: 16 or more characters mixing lower and upper
    case, or letters and digits (ghp_16C7e42F..., AKIAIOSFODNN7EXAMPLE). Conventional names (AGENT_TOKEN,
    MY_API_KEY_2, agent_token) are not."""
    classes = sum(any(test(c) for c in name) for test in (str.islower, str.isupper, str.isdigit))
    return len(name) >= 16 and classes >= 2

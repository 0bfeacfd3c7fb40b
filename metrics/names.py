"""Names checked before any of them reaches a file name, SQL or an API call: run and eval
names, column names, and BigQuery projects, datasets and tables."""

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
COLUMN_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
PROJECT_RE = r"[a-z][a-z0-9-]{4,28}[a-z0-9]|[a-z0-9.-]+:[a-z][a-z0-9-]{4,28}[a-z0-9]"
DATASET_RE = r"[A-Za-z0-9_]{1,1024}"
TABLE_RE = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,1023}"
BQ_TABLE_URI_RE = rf"^bq://(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})\.(?P<table>{TABLE_RE})$"
BQ_DATASET_RE = rf"^(?P<project>{PROJECT_RE})\.(?P<dataset>{DATASET_RE})$"

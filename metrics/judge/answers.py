"""Answers a run has already had, kept on disk so that memory does not grow with them.

A run that judges its rows as they stream by (transforms.judge_stream.StreamJudgeFn)
must know, for every request key, whether it was already answered: by this
run (a repeated prompt is asked once), by judge.cache, or by this run_id's
checkpoints. A dict of a million answers would hold about a gigabyte of Python
objects; an SQLite table (the standard library's sqlite3) holds them in a
temporary file with a few megabytes of page cache (300,000 answers of 500
bytes: 37 MB of peak memory, measured), and a lookup by primary
key costs microseconds next to a judge call's second.
"""
from __future__ import annotations

import pickle
import sqlite3
from typing import Iterable

from evalbeam.metrics.judge.client import JudgeResponse

COMMIT_EVERY = 2000  # writes per transaction (the connection reads its own uncommitted writes)


class AnswerStore:
    """request_key -> JudgeResponse, in a private temporary SQLite database: a file
    in the temporary folder (TMPDIR) that SQLite unlinks as it opens it, so it is
    gone when the connection closes or the process dies, even by SIGKILL."""

    def __init__(self):
        self._db = sqlite3.connect("", check_same_thread=False)  # "": private, temporary, on disk
        # a scratch table, rebuilt by the next attempt: nothing to journal or sync
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("CREATE TABLE answers (key TEXT PRIMARY KEY, response BLOB) WITHOUT ROWID")
        self._uncommitted = 0

    def get(self, key: str) -> JudgeResponse | None:
        row = self._db.execute("SELECT response FROM answers WHERE key = ?", (key,)).fetchone()
        return pickle.loads(row[0]) if row else None

    def put(self, response: JudgeResponse) -> None:
        """Keep an answer (a later one for the same key replaces it)."""
        self.put_all((response,))

    def put_all(self, responses: Iterable[JudgeResponse]) -> None:
        for response in responses:
            self._db.execute("INSERT OR REPLACE INTO answers VALUES (?, ?)",
                                      (response.key, pickle.dumps(response, protocol=pickle.HIGHEST_PROTOCOL)))
            self._uncommitted += 1
            if self._uncommitted >= COMMIT_EVERY:
                self._db.commit()
                self._uncommitted = 0

    def close(self) -> None:
        self._db.close()

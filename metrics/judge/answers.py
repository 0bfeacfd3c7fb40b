"""Answers a run has already had, kept on disk so that memory does not grow with them.

A run that judges its rows as they stream by (transforms.judge.StreamJudgeFn)
must know, for every request key, whether it was already answered: by this
run (a repeated prompt is asked once), by judge.cache, or by this run_id's
checkpoints. A dict of a million answers would hold about a gigabyte of Python
objects; an SQLite table (the standard library's sqlite3) holds them in a
temporary file with a few megabytes of page cache, and a lookup by primary
key costs microseconds next to a judge call's second.
"""
from __future__ import annotations

import os
import pickle
import sqlite3
import tempfile
from typing import Iterable

from metrics.judge.client import JudgeResponse

COMMIT_EVERY = 2000  # writes per transaction (the connection reads its own uncommitted writes)


class AnswerStore:
    """request_key -> JudgeResponse, in a temporary SQLite file removed on close."""

    def __init__(self, folder: str | None = None):
        fd, self._path = tempfile.mkstemp(prefix="evalbeam-answers-", suffix=".sqlite", dir=folder)
        os.close(fd)
        self._db = sqlite3.connect(self._path, check_same_thread=False)
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
        try:
            self._db.close()
        finally:
            try:
                os.remove(self._path)
            except OSError:
                pass

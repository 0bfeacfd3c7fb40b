"""pipelines/results.py reads a local output without Beam: its matching of files against Beam's own."""
import os

import pytest
from apache_beam.io.filesystems import FileSystems

from evalbeam.pipelines.results import join_path, match_files


def beams(pattern):
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


@pytest.fixture
def output(tmp_path):
    """An output folder with what may lie in one: runs, hidden and temporary files, other
    extensions, a file where a folder is expected, symbolic links to files and to folders."""
    out = tmp_path / "out"
    for run in ("r1", "r2", ".hidden-run", "r[3]", "x?y"):
        for table in ("runs", "summary"):
            folder = out / run / table
            folder.mkdir(parents=True)
            for name in ("part-0.parquet", ".part-1.parquet", "part-2.parquet.tmp", "PART-3.PARQUET"):
                (folder / name).write_bytes(b"x")
            (folder / "nested").mkdir()
            (folder / "nested" / "deep.parquet").write_bytes(b"x")
    (out / "r1" / "runs" / "dir.parquet").mkdir()
    (out / "not-a-run").write_bytes(b"x")
    (out / "r2" / "runs" / "link.parquet").symlink_to(out / "r1" / "runs" / "part-0.parquet")
    (out / "r2" / "runs" / "broken.parquet").symlink_to(out / "gone.parquet")
    (out / "r2" / "runs" / "folder-link.parquet").symlink_to(out / "r1" / "runs" / "nested")
    (out / "linked-run").symlink_to(out / "r1", target_is_directory=True)
    (out / "r2" / "linked-table").symlink_to(out / "r1" / "runs", target_is_directory=True)
    (tmp_path / "linked-out").symlink_to(out, target_is_directory=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("base", ["out", "out/", "linked-out", "./out", "missing", "out/not-a-run"])
@pytest.mark.parametrize("parts", [("*", "runs", "*.parquet"), ("r1", "runs", "*.parquet"), ("*", "*", "*.parquet"),
                                   ("r?", "summary", "part-?.parquet"), ("r[12]", "runs", "*"),
                                   ("*", "linked-table", "*.parquet"), ("r1", "runs", "nested", "*")])
def test_a_local_pattern_matches_the_files_beams_local_filesystem_matches(output, monkeypatch, base, parts):
    monkeypatch.chdir(output.parent)
    for folder in (base, str(output.parent / base)):  # relative and absolute
        pattern = join_path(folder, *parts)
        assert pattern == FileSystems.join(folder, *parts)
        assert match_files(pattern) == beams(pattern), pattern


def test_a_url_is_matched_by_beam(tmp_path):
    assert join_path("gs://bucket/out", "r1", "runs") == "gs://bucket/out/r1/runs"
    assert os.sep == "/"  # the local matching splits patterns on the separator Beam's patterns use

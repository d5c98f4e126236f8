import hashlib
import shutil
import subprocess

import pytest

from memworker.hashing import (
    HashMismatch,
    canonical_json,
    read_jsonl,
    read_sha256sums,
    sha256_file,
    sha256_json,
    verify_sha256sums,
    write_jsonl,
    write_sha256sums,
)


def test_canonical_json_is_sorted_compact_utf8():
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": "é"}]}) == (
        '{"a":[1,{"c":"é","d":null}],"b":1}'.encode()
    )
    assert canonical_json({"x": 1, "y": 2}) == canonical_json({"y": 2, "x": 1})


def test_canonical_json_refuses_nan():
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_sha256_json_matches_hashlib_of_canonical_bytes():
    row = {"task": "extract", "id": "r1"}
    assert sha256_json(row) == hashlib.sha256(b'{"id":"r1","task":"extract"}').hexdigest()


def test_jsonl_round_trip_and_file_hash(tmp_path):
    rows = [{"b": 2, "a": "ü"}, {"a": [1, 2]}]
    digest = write_jsonl(tmp_path / "x.jsonl", rows)
    assert digest == sha256_file(tmp_path / "x.jsonl")
    assert (tmp_path / "x.jsonl").read_bytes() == '{"a":"ü","b":2}\n{"a":[1,2]}\n'.encode()
    assert read_jsonl(tmp_path / "x.jsonl") == rows


def test_read_jsonl_names_the_bad_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"a":1}\n{"a":\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_jsonl(tmp_path / "bad.jsonl")


def _tree(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"\x00\x01")
    (tmp_path / "sub" / "b.txt").write_text("hello\n")
    return [tmp_path / "a.bin", tmp_path / "sub" / "b.txt"]


def test_sha256sums_round_trip_and_sha256sum_accepts_it(tmp_path):
    sums = write_sha256sums(tmp_path, _tree(tmp_path))
    text = sums.read_text()
    assert text.splitlines()[1] == f"{hashlib.sha256(b'hello' + bytes([10])).hexdigest()}  sub/b.txt"
    assert verify_sha256sums(sums) == read_sha256sums(sums)
    if shutil.which("sha256sum"):
        done = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_verify_reports_changed_and_missing_files(tmp_path):
    sums = write_sha256sums(tmp_path, _tree(tmp_path))
    (tmp_path / "a.bin").write_bytes(b"\x00\x02")
    (tmp_path / "sub" / "b.txt").unlink()
    with pytest.raises(HashMismatch) as info:
        verify_sha256sums(sums)
    assert [p[0] for p in info.value.problems] == ["a.bin", "sub/b.txt"]
    assert info.value.problems[1][2] is None
    assert "file is missing" in str(info.value)


def test_read_sha256sums_rejects_garbage(tmp_path):
    (tmp_path / "SHA256SUMS").write_text("not a checksum line\n")
    with pytest.raises(ValueError, match="not a sha256sum line"):
        read_sha256sums(tmp_path / "SHA256SUMS")


def test_sha256_parts_is_the_digest_of_the_joined_text():
    import hashlib

    from memworker.hashing import sha256_parts

    assert sha256_parts("fam", 3, "x") == hashlib.sha256(b"fam\x1f3\x1fx").digest()
    assert sha256_parts("a", "b") != sha256_parts("ab")

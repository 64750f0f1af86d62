"""An S3 endpoint written with ``user:password@`` is refused before anything is written, and the
password is never shown: the resolved config goes into config.json and results.json.

In this process (``emu.refused``), no server: the refusal comes before any request. It was a system
test against a real server that passed whatever the run did, a crash included, so long as the
password was nowhere; the outcome is one: exit 2, one line naming the key.
"""
from __future__ import annotations

from emu import refused, small_config

PASSWORD = "EndpointPw0rdDoNotLog"


def test_an_endpoint_with_userinfo_is_refused_and_its_password_never_written(tmp_path, capsys):
    url = f"http://ckptuser:{PASSWORD}@127.0.0.1:9"
    cfg = small_config(tmp_path, ranks=1, checkpoint={"saves": 1, "loads": 0, "modes": ["sync"]},
                       tiers={"global": {"backend": "s3", "bucket": "b", "endpoint_url": url}})
    line = refused(capsys, "run", cfg, "--quiet")
    assert "endpoint_url: must not carry user:password@" in line and PASSWORD not in line, line
    assert not (tmp_path / "out").exists()
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and p != cfg and PASSWORD.encode() in p.read_bytes()]
    assert leaks == []

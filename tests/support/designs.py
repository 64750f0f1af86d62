"""Designs several test files share, as config data (what a user would write in YAML)."""

LLAMA3 = {  # 405B on 16,384 GPUs: NVMe per node, a 2 TB/s global store, 25 GiB/s NICs
    "extends": "llama3-405b",
    "tiers": {"local": {"backend": "dir", "path": "/nonexistent/nvme",
                        "emulate": {"write_gib_s": 6.0, "read_gib_s": 7.0, "shared_by": "node"}},
              "global": {"backend": "dir", "path": "/nonexistent/global",
                         "emulate": {"write_gib_s": 1862.6, "read_gib_s": 1862.6, "latency_ms": 1,
                                     "shared_by": "job"}}}}

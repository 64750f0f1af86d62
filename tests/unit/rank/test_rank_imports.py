"""What a rank process loads: its imports are resident in every rank (peak_rss counts them against
state + staging), so a rank whose engine is not DCP never loads DCP (with DTensor and sympy, about
50 MB per rank: issue 58)."""
import subprocess
import sys

CODE = ("import sys, emulator.rank.run, emulator.checkpoint.restore, emulator.checkpoint.checkpointer\n"
        "print(','.join(m for m in ('torch.distributed.checkpoint', 'sympy') if m in sys.modules))")


def test_a_rank_of_the_default_engine_never_imports_dcp():
    loaded = subprocess.run([sys.executable, "-c", CODE], check=True, capture_output=True, text=True).stdout.strip()
    assert loaded == "", f"a torch_save rank imported {loaded}"

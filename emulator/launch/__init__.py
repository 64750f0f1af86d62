"""The CLI process's side of a run: it never imports torch.

- ``runner``    preflight of every tier, claiming the results folder, launching (``run`` and ``tune``)
- ``launcher``  torchrun, Ctrl-C and SIGTERM, the first error of a failed run
- ``progress``  progress with an ETA: a live bar on a terminal, a plain line every 10 s in a log (runs, sweeps, the bench)
"""

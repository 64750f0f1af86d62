"""MLPerf Storage's checkpoint workload (``checkpoint.protocol: mlperf``), scored as DLIO scores it.

- ``protocol``  on a rank: DLIO's files, timed writes with fsync, rank-shifted reads, the cache rule
- ``figures``   DLIO-exact (rank 0) and corrected (slowest rank) figures
- ``report``    results.json, report.txt, the 30 s rule of a separate read phase
- ``dlio``      the DLIO-compatible folder (summary.json, per-rank stats, dlio.log)
- ``compare``   our runs and DLIO's side by side
"""

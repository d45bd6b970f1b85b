"""What graphserve's benchmark scripts (deploy/bench/*.py) and its Python tests share.

  server      graphserve as a child process (GraphserveProcess), and the benchmarks' one-model server
  metrics     reading /metrics (the Prometheus text format) and what a server did between two scrapes
  repository  model configs and the repositories the benchmarks serve
  loadgen     graphserve-loadgen runs
  report      the numbers and markdown tables of the reports
  common      the repository root, progress lines, failing with a message

Scripts in deploy/bench/ import it as they are; a test puts deploy/bench/ on sys.path first.
Only the standard library is needed. Python 3.9+.
"""

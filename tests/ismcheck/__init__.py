"""The suite's checkers: what the host and the guests recorded, held to what the kernel
and the device should have done. Each module is also a command line, run as
`python3 -m ismcheck.<module>` with tests/ on PYTHONPATH (scripts/lib.sh's `ismcheck`):

  check_e2e       an end-to-end run: the guests' reports, the CLC handshakes, the host's
                  DMB observations against the kernel variant's zeroing
  check_topology  a topology case: SMC version, CHIDs offered and accepted, mode, decline
  reuse_verdict   the host's verdict on reused DMBs, and which known bug explains a stale one
  kernel_reports  the kernel's own bug reports on a guest's console (WARN, oops, KASAN, ...)
  guest_where     where a guest's vCPUs are, sampled through the QEMU monitor
  wait_stream     waits until a stream's bytes reach the device
  results         a run's test points as KTAP and JUnit XML, and read back by real parsers
  check_links     the Markdown's links stay in the repository and resolve

Their tests are tests/ismcheck/tests/ (pytest; `make unit`).
"""

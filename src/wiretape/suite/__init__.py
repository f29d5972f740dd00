"""Replaying a whole folder of runs, as ``wiretape check`` does in CI.

    discover   the run files under the given files and folders
    schedule   which waiting run may start next (pure): runs that share a
               recorded port never replay at the same time
    runner     each replay as its own ``wiretape replay`` process on a copy
               of the run, at most N at once, with a timeout
    junit      the results as JUnit XML (pure)

Must not print: the command line renders what these return.
"""

#: Seconds a replay may take before it is stopped (SIGTERM, then SIGKILL).
DEFAULT_TIMEOUT_S = 300.0

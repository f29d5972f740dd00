"""The defaults a user can change on the command line, in a module that
imports nothing, so ``wiretape --help`` can show them without loading the
engine."""

#: The largest request body a proxy accepts unless told otherwise (bytes);
#: a larger one gets 413.
DEFAULT_MAX_BODY = 64 * 1024 * 1024

#: The most a snapshot of the working directory may hold unless told
#: otherwise (bytes of file content).
DEFAULT_SNAPSHOT_MAX_BYTES = 256 * 1024 * 1024

"""The runtime: driver, arrays and interop, launches on both backends, streams, disk cache."""

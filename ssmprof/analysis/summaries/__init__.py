"""Every analysis of one page at once: a run's summary, a suite's overview, a sweep's regime tables."""

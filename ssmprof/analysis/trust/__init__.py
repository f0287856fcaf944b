"""Can these numbers be believed: counters checked against known work, calibration, noise, provenance."""

"""Figures and reports drawn from analysis frames."""

"""Shared by every subpackage of analysis/: the typed frames (`Sections`) that analyses hand to reports."""

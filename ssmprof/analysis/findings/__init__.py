"""What it says: each page's findings as typed rows (kind, status, impact, evidence) and their sentences."""

"""What each launch is: its category, its derived work and rates, the analysis frame every analysis reads."""

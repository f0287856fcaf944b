"""Where the step goes and who holds it up: categories, the host, the profiled iteration, ranks, communication."""

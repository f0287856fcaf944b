"""Models, presets and synthetic batches of the suite; `registry.WORKLOADS` lists them."""
